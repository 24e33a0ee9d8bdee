// The request bodies of ddo-host serve: parsed by nlohmann::json (never by hand), then each field checked by name.
#include "job_request.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include <openssl/evp.h>

namespace ddo::host::serve {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 16;  // nesting a request needs: 3 ({"set": {"k": [..]}})

[[noreturn]] void bad(const std::string & field, const std::string & message, int status = 400) {
    throw RequestError(status, field, message);
}

// Nesting depth outside strings, before nlohmann's recursive parser sees the text (a deep body would overflow it).
void check_depth(std::string_view body) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : body) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '{' || c == '[') {
            if (++depth > kMaxDepth) bad("", "the body nests deeper than " + std::to_string(kMaxDepth) + " levels");
        } else if (c == '}' || c == ']') --depth;
    }
}

json parse_object(std::string_view body, const RequestLimits & limits) {
    if (body.size() > limits.max_body_bytes)
        bad("body", "the body is " + std::to_string(body.size()) + " bytes; at most " + std::to_string(limits.max_body_bytes), 413);
    check_depth(body);
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad("body", "the body is not valid JSON (UTF-8, RFC 8259)");
    if (!j.is_object()) bad("body", "the body must be a JSON object");
    return j;
}

std::string type_of(const json & v) { return v.is_number_integer() ? "integer" : v.type_name(); }

// The text of a string field: no NUL, bounded.
std::string text_field(const json & v, const std::string & field, std::size_t max_bytes) {
    if (!v.is_string()) bad(field, "'" + field + "' must be a string, not " + type_of(v));
    const auto & s = v.get_ref<const std::string &>();
    if (s.size() > max_bytes)
        bad(field, "'" + field + "' is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(max_bytes), 413);
    if (s.find('\0') != std::string::npos) bad(field, "'" + field + "' contains a NUL character");
    return s;
}

long long int_field(const json & v, const std::string & field, long long lo, long long hi) {
    long long x = 0;
    if (v.is_number_integer()) x = v.get<long long>();
    else if (v.is_number_unsigned()) {
        const auto u = v.get<unsigned long long>();
        x = u > static_cast<unsigned long long>(std::numeric_limits<long long>::max()) ? std::numeric_limits<long long>::max()
                                                                                      : static_cast<long long>(u);
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
               std::abs(v.get<double>()) < 9e15)
        x = static_cast<long long>(v.get<double>());
    else bad(field, "'" + field + "' must be an integer, not " + type_of(v));
    if (x < lo || x > hi)
        bad(field, "'" + field + "' is " + std::to_string(x) + "; it must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}

double number_field(const json & v, const std::string & field, double lo, double hi) {
    if (!v.is_number()) bad(field, "'" + field + "' must be a number, not " + type_of(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        bad(field, "'" + field + "' is out of range; it must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
    return x;
}

// Preset keys a request may set. Keys that take a path (condition images, LoRA files, an upsampler) or that the
// request's own fields carry are refused: a request names no file on the server (Note [Serving]).
void check_set_key(const std::string & key, const std::string & field) {
    static constexpr std::array allowed_prefixes{"capacities.", "planner.", "runtime.", "telemetry.", "vae.", "components.", "plugin.", "cache."};
    static constexpr std::array allowed_keys{"workload.steps",     "workload.width",          "workload.height",
                                             "workload.frames",    "workload.fps",            "workload.seed",
                                             "workload.num_images", "workload.precision",     "workload.sigmas",
                                             "workload.guidance_scale", "workload.strength", "lora.apply"};
    if (key.empty() || key.size() > 128 ||
        !std::all_of(key.begin(), key.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'; }))
        bad(field, "'" + field + "' has a key that is not a preset key (letters, digits, '_' and '.')");
    if (key.ends_with(".upsampler") || key == "workload.images" || key.starts_with("lora.adapters"))
        bad(field, "'" + field + "." + key + "' names a file; a request cannot name files on the server");
    if (key == "workload.prompt" || key == "workload.negative_prompt")
        bad(field, "'" + field + "." + key + "': give it as the request's own field '" + key.substr(9) + "'");
    bool ok = std::find(allowed_keys.begin(), allowed_keys.end(), key) != allowed_keys.end();
    for (const char * p : allowed_prefixes) ok = ok || key.starts_with(p);
    if (!ok) bad(field, "'" + field + "." + key + "' cannot be set by a request (docs/presets.md lists the keys; a "
                        "request may set capacities, planner, runtime, telemetry, vae, components, plugin, cache and workload "
                        "keys)");
}

// A --set value's text from a JSON scalar or an array of scalars.
std::string set_text(const json & v, const std::string & name) {
    if (v.is_string()) {
        const auto & s = v.get_ref<const std::string &>();
        if (s.size() > 1024 || s.find_first_of(std::string("\"\n\r\0", 4)) != std::string::npos)
            bad(name, "'" + name + "' must be a string of at most 1024 bytes without quotes or line breaks");
        return "\"" + s + "\"";
    }
    if (v.is_boolean() || v.is_number()) {
        if (v.is_number_float() && !std::isfinite(v.get<double>())) bad(name, "'" + name + "' is not finite");
        return v.dump();
    }
    if (v.is_array()) {
        if (v.size() > 256) bad(name, "'" + name + "' has more than 256 entries");
        for (const auto & e : v)
            if (!e.is_number() && !e.is_boolean()) bad(name, "'" + name + "' must be an array of numbers");
        return v.dump();
    }
    bad(name, "'" + name + "' must be a string, number, boolean or array of numbers, not " + type_of(v));
}

void parse_sets(const json & v, const std::string & field, const RequestLimits & limits, JobSpec & spec) {
    if (!v.is_object()) bad(field, "'" + field + "' must be an object of preset keys and values, not " + type_of(v));
    if (v.size() > limits.max_sets) bad(field, "'" + field + "' has more than " + std::to_string(limits.max_sets) + " keys", 413);
    for (const auto & [k, x] : v.items()) {
        check_set_key(k, field);
        spec.sets.emplace_back(k, set_text(x, field + "." + k));
    }
}

// Standard base64 (RFC 4648, padded, no line breaks) through OpenSSL's decoder; nullopt for anything else.
std::optional<std::string> base64_decode(std::string_view text) {
    if (text.empty() || text.size() % 4 != 0) return std::nullopt;
    std::string out(text.size() / 4 * 3, '\0');
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                                  reinterpret_cast<const unsigned char *>(text.data()), int(text.size()));
    if (n < 0) return std::nullopt;
    std::size_t size = std::size_t(n);
    for (std::size_t i = text.size(); i > 0 && text[i - 1] == '=' && size > 0; --i) --size;  // padding decodes to zeros
    out.resize(size);
    return out;
}

// "images": up to max_condition_images entries, each a base64 string (a data URL's prefix allowed) or
// {"b64_json": base64, "frame": pixel frame}. Each recorded as its byte count.
void parse_images(json & v, const std::string & field, const RequestLimits & limits, JobSpec & spec) {
    if (!v.is_array()) bad(field, "'" + field + "' must be an array of base64 images, not " + type_of(v));
    if (v.size() > limits.max_condition_images)
        bad(field, "'" + field + "' has " + std::to_string(v.size()) + " entries; at most " +
                       std::to_string(limits.max_condition_images));
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string name = field + "[" + std::to_string(i) + "]";
        json & e = v[i];
        const json * data = &e;
        JobImage image;
        if (e.is_object()) {
            for (const auto & [k, x] : e.items())
                if (k == "frame") image.frame = int_field(x, name + ".frame", 0, limits.max_frames - 1);
                else if (k != "b64_json") bad(name, "unknown field '" + k + "' in '" + name + "' (it takes b64_json, frame)");
            if (!e.contains("b64_json")) bad(name, "'" + name + "' needs 'b64_json'");
            data = &e["b64_json"];
        }
        if (!data->is_string()) bad(name, "'" + name + "' must be a base64 string, not " + type_of(*data));
        std::string_view text = data->get_ref<const std::string &>();
        if (text.starts_with("data:")) {
            const auto comma = text.find(',');
            if (comma == std::string_view::npos || text.substr(0, comma).find(";base64") == std::string_view::npos)
                bad(name, "'" + name + "' is a data URL without ';base64,'");
            text.remove_prefix(comma + 1);
        }
        auto bytes = base64_decode(text);
        if (!bytes || bytes->empty()) bad(name, "'" + name + "' is not standard base64 (RFC 4648, padded, no line breaks)");
        image.bytes = std::move(*bytes);
        e = json{{"bytes", image.bytes.size()}, {"frame", image.frame ? json(*image.frame) : json(nullptr)}};
        spec.images.push_back(std::move(image));
    }
}

// The size checks common to both APIs, after the fields are read; `pixels_field` is what a too-large area names
// ("width" in the job API, "size" in OpenAI's).
void check_size(const JobSpec & spec, const RequestLimits & limits, const std::string & pixels_field) {
    const long long w = spec.width.value_or(1), h = spec.height.value_or(1), f = spec.frames.value_or(1);
    if (w * h > limits.max_pixels)
        bad(pixels_field, "width x height is " + std::to_string(w * h) + " pixels; at most " + std::to_string(limits.max_pixels));
    if (w * h * f > limits.max_pixels * 64)
        bad("frames", "width x height x frames is " + std::to_string(w * h * f) + "; at most " + std::to_string(limits.max_pixels * 64));
}

}  // namespace

JobSpec parse_job_request(std::string_view body, const RequestLimits & limits) {
    json j = parse_object(body, limits);
    JobSpec spec;
    for (auto & [k, v] : j.items()) {
        if (v.is_null() && k != "prompt") continue;  // null: not given
        if (k == "prompt") spec.prompt = text_field(v, k, limits.max_prompt_bytes);
        else if (k == "negative_prompt") spec.negative_prompt = text_field(v, k, limits.max_prompt_bytes);
        else if (k == "width") spec.width = int_field(v, k, 16, limits.max_side);
        else if (k == "height") spec.height = int_field(v, k, 16, limits.max_side);
        else if (k == "steps") spec.steps = int_field(v, k, 1, limits.max_steps);
        else if (k == "seed") spec.seed = int_field(v, k, -1, (1LL << 53) - 1);
        else if (k == "num_images") spec.num_images = int_field(v, k, 1, limits.max_images);
        else if (k == "frames") spec.frames = int_field(v, k, 1, limits.max_frames);
        else if (k == "guidance_scale") spec.guidance_scale = number_field(v, k, 0, 100);
        else if (k == "fps") spec.fps = number_field(v, k, 1, 240);
        else if (k == "strength") spec.strength = number_field(v, k, 0, 1);
        else if (k == "set") parse_sets(v, k, limits, spec);
        else if (k == "images") parse_images(v, k, limits, spec);
        else bad(k, "unknown field '" + k + "' (POST /v1/jobs takes prompt, negative_prompt, width, height, steps, seed, "
                    "guidance_scale, num_images, frames, fps, strength, images, set)");
    }
    if (!spec.prompt) bad("prompt", "'prompt' is required");
    check_size(spec, limits, "width");
    spec.request = std::move(j);
    return spec;
}

JobSpec parse_openai_request(std::string_view body, const RequestLimits & limits) {
    json j = parse_object(body, limits);
    JobSpec spec;
    spec.openai = true;
    for (const auto & [k, v] : j.items()) {
        if (v.is_null() && k != "prompt") continue;
        if (k == "prompt") spec.prompt = text_field(v, k, limits.max_prompt_bytes);
        else if (k == "model" || k == "user") text_field(v, k, 256);  // recorded in the request, not used
        else if (k == "n") spec.num_images = int_field(v, k, 1, limits.max_images);
        else if (k == "size") {
            const std::string s = text_field(v, k, 32);
            const auto x = s.find('x');
            const auto digits = [](std::string_view d) {
                return !d.empty() && d.size() <= 6 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
            };
            if (x == std::string::npos || !digits(std::string_view(s).substr(0, x)) || !digits(std::string_view(s).substr(x + 1)))
                bad(k, "'size' must be WIDTHxHEIGHT, e.g. \"256x256\"");
            spec.width = std::stoll(s.substr(0, x));
            spec.height = std::stoll(s.substr(x + 1));
            for (long long side : {*spec.width, *spec.height})
                if (side < 16 || side > limits.max_side)
                    bad(k, "'size' " + s + ": each side must be in [16, " + std::to_string(limits.max_side) + "]");
        } else if (k == "response_format") {
            if (text_field(v, k, 32) != "b64_json")
                bad(k, "'response_format' must be \"b64_json\" (the image in the response; the native API's "
                       "GET /v1/jobs/{id}/outputs/{name} serves files)");
        } else if (k == "negative_prompt") spec.negative_prompt = text_field(v, k, limits.max_prompt_bytes);
        else if (k == "seed") spec.seed = int_field(v, k, -1, (1LL << 53) - 1);
        else if (k == "steps") spec.steps = int_field(v, k, 1, limits.max_steps);
        else if (k == "guidance_scale") spec.guidance_scale = number_field(v, k, 0, 100);
        else if (k == "ddo") parse_sets(v, k, limits, spec);
        else bad(k, "unknown field '" + k + "' (POST /v1/images/generations takes prompt, model, n, size, "
                    "response_format, user, negative_prompt, seed, steps, guidance_scale, ddo)");
    }
    if (!spec.prompt) bad("prompt", "'prompt' is required");
    check_size(spec, limits, "size");
    spec.request = std::move(j);
    return spec;
}

bool safe_name(std::string_view name) {
    if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    });
}

}  // namespace ddo::host::serve
