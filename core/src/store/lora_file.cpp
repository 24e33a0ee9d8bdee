#include "ddo/store/lora_file.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::store {

namespace {

struct Prefix {
    std::string_view text, component, family;
    bool flattened;
};
// Longest first where one is a prefix of another (model.diffusion_model. before diffusion_model.).
constexpr std::array<Prefix, 9> kPrefixes{{
    {"model.diffusion_model.", "transformer", "ComfyUI", false},
    {"diffusion_model.", "transformer", "ComfyUI", false},
    {"transformer.", "transformer", "diffusers/PEFT", false},
    {"text_encoder.", "text_encoder", "diffusers/PEFT", false},
    {"connectors.", "connectors", "diffusers/PEFT", false},
    {"lora_unet_", "transformer", "kohya", true},
    {"lycoris_", "transformer", "LyCORIS", true},
    {"lora_te1_", "text_encoder", "kohya", true},
    {"lora_te_", "text_encoder", "kohya", true},
}};

enum class Role { down, up, alpha };
struct Suffix {
    std::string_view text;
    Role role;
};
constexpr std::array<Suffix, 15> kSuffixes{{
    {".lora_A.default.weight", Role::down}, {".lora_B.default.weight", Role::up},
    {".lora_linear_layer.down.weight", Role::down}, {".lora_linear_layer.up.weight", Role::up},
    {".lora_A.weight", Role::down}, {".lora_B.weight", Role::up},
    {".lora_down.weight", Role::down}, {".lora_up.weight", Role::up},
    {".lora.down.weight", Role::down}, {".lora.up.weight", Role::up},
    {"_lora.down.weight", Role::down}, {"_lora.up.weight", Role::up},
    {".lora_A", Role::down}, {".lora_B", Role::up},
    {".alpha", Role::alpha},
}};

// Adapter kinds ddo does not apply, by a part of their keys (`suffix`: only at the key's end).
struct Refused {
    std::string_view part, kind;
    bool suffix;
};
constexpr std::array<Refused, 6> kRefused{{
    {"hada_w", "LoHa (LyCORIS Hadamard product)", false},
    {"lokr_w", "LoKr (LyCORIS Kronecker product)", false},
    {"dora_scale", "DoRA (weight-decomposed LoRA)", false},
    {".lora_mid.", "LoCon's mid factor (a convolution LoRA)", false},
    {".diff_b", "a full bias difference", true},
    {".diff", "a full weight difference", true},
}};

bool ends_with(std::string_view s, std::string_view t) { return s.size() >= t.size() && s.substr(s.size() - t.size()) == t; }

float half_bits_to_float(std::uint16_t h) {  // IEEE binary16 -> binary32, exact
    const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    std::uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int e = -1;
        std::uint32_t m = man;
        do {
            ++e;
            m <<= 1;
        } while ((m & 0x400) == 0);
        bits = sign | (std::uint32_t(112 - e) << 23) | ((m & 0x3FF) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// A one-element .alpha tensor's value.
double scalar_value(const SafetensorsFile & f, const TensorInfo & t) {
    if (t.numel() != 1)
        throw UsageError(f.path().string() + ": " + t.name + " has " + std::to_string(t.numel()) +
                         " elements; a LoRA alpha is one number - the file is not a LoRA ddo reads");
    unsigned char b[8] = {};
    f.read_tensor(t, b, ReadMode::pread);
    double v = NAN;
    switch (t.dtype) {
        case DType::f32: { float x; std::memcpy(&x, b, 4); v = x; break; }
        case DType::f64: std::memcpy(&v, b, 8); break;
        case DType::f16: { std::uint16_t h; std::memcpy(&h, b, 2); v = half_bits_to_float(h); break; }
        case DType::bf16: {
            std::uint32_t bits = std::uint32_t(b[0] | (b[1] << 8)) << 16;
            float x;
            std::memcpy(&x, &bits, 4);
            v = x;
            break;
        }
        case DType::i64: { std::int64_t x; std::memcpy(&x, b, 8); v = double(x); break; }
        case DType::i32: { std::int32_t x; std::memcpy(&x, b, 4); v = x; break; }
        default: break;
    }
    if (!std::isfinite(v))
        throw RuntimeError(f.path().string() + ": " + t.name + " (" + std::string(dtype_name(t.dtype)) +
                           ") is not a finite number; re-export the LoRA");
    return v;
}

struct Metadata {
    std::optional<double> alpha;
    bool rslora = false;
};

// peft's LoraConfig, as diffusers' save_lora_weights stores it (metadata key lora_adapter_metadata): each component's
// config under its prefix ("transformer.lora_alpha", "transformer.use_rslora": _pack_dict_with_prefix), or bare keys
// (a file saved by peft itself). component -> its config; "" for the bare one.
std::map<std::string, Metadata> adapter_metadata(const SafetensorsFile & f) {
    std::map<std::string, Metadata> out;
    const auto it = f.metadata().find("lora_adapter_metadata");
    if (it == f.metadata().end()) return out;
    const auto fail = [&](const std::string & what) {
        return UsageError(f.path().string() + ": __metadata__.lora_adapter_metadata " + what);
    };
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (!j.is_object()) throw fail("is not a JSON object; re-save the LoRA");
    for (const auto & [key, value] : j.items()) {
        const auto dot = key.rfind('.');
        const std::string component = dot == std::string::npos ? "" : key.substr(0, dot);
        const std::string field = dot == std::string::npos ? key : key.substr(dot + 1);
        if ((field == "alpha_pattern" || field == "rank_pattern") && !value.is_null() && !value.empty())
            throw fail("has a " + key + ", per-module " + (field[0] == 'a' ? "alphas" : "ranks") +
                       " ddo does not apply yet; fold them into .alpha keys or re-save without");
        if (field == "lora_alpha" && value.is_number()) out[component].alpha = value.get<double>();
        if (field == "use_rslora" && value.is_boolean()) out[component].rslora = value.get<bool>();
    }
    return out;
}

struct Key {
    std::string_view component, module, family;
    bool flattened = false;
    Role role = Role::down;
};

// One key split into its component prefix, module path and role suffix. Throws UsageError naming the file and key
// for an adapter kind ddo does not apply or a key of no LoRA family.
Key parse_key(const std::filesystem::path & path, std::string_view name) {
    for (const auto & r : kRefused)
        if (r.suffix ? ends_with(name, r.part) : name.find(r.part) != std::string_view::npos)
            throw UsageError(path.string() + ": " + std::string(name) + " is " + std::string(r.kind) +
                             ", which ddo does not apply; use a plain LoRA (lora_A/lora_B or lora_down/lora_up)");
    Key k{{}, name, "bare"};
    const auto suffix = std::find_if(kSuffixes.begin(), kSuffixes.end(), [&](const Suffix & s) { return ends_with(name, s.text); });
    if (suffix == kSuffixes.end())
        throw UsageError(path.string() + ": " + std::string(name) + " is not a LoRA key (expected <module>.lora_A.weight / "
                         ".lora_B.weight, .lora_down.weight / .lora_up.weight or .alpha); is this a LoRA file?");
    k.role = suffix->role;
    k.module.remove_suffix(suffix->text.size());
    for (const auto & p : kPrefixes)
        if (k.module.substr(0, p.text.size()) == p.text) {
            k.module.remove_prefix(p.text.size());
            k.component = p.component;
            k.family = p.family;
            k.flattened = p.flattened;
            break;
        }
    return k;
}

std::string flatten(std::string_view s) {
    std::string out(s);
    std::replace(out.begin(), out.end(), '.', '_');
    return out;
}

}  // namespace

double LoraLayer::scale(double strength) const {
    if (!alpha) return strength;
    return strength * *alpha / (rslora ? std::sqrt(double(rank)) : double(rank));
}

LoraFile LoraFile::open(const std::filesystem::path & path) {
    LoraFile out;
    out.path_ = path;
    out.file_ = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
    const auto & f = *out.file_;
    const auto meta = adapter_metadata(f);
    struct Parts {
        LoraLayer layer;
        const TensorInfo * alpha = nullptr;
    };
    std::map<std::pair<std::string, std::string>, Parts> by_module;  // (component, module)
    std::set<std::string> families;
    for (const auto & t : f.tensors()) {
        const auto k = parse_key(path, t.name);
        families.insert(std::string(k.family));
        auto & parts = by_module[{std::string(k.component), std::string(k.module)}];
        parts.layer.component = k.component;
        parts.layer.module = k.module;
        parts.layer.flattened = k.flattened;
        switch (k.role) {
            case Role::down: parts.layer.down = &t; parts.layer.key = t.name; break;
            case Role::up: parts.layer.up = &t; break;
            case Role::alpha: parts.alpha = &t; break;
        }
    }
    for (auto & [id, parts] : by_module) {
        auto & l = parts.layer;
        const std::string name = (l.component.empty() ? "" : l.component + ":") + l.module;
        if (!l.down || !l.up)
            throw UsageError(path.string() + ": module " + name + " has " + (l.down ? "a down (A) factor and no up (B)" :
                             l.up ? "an up (B) factor and no down (A)" : "an alpha and no factors") +
                             "; the file is incomplete - re-export the LoRA");
        if (l.down->shape.size() != 2 || l.up->shape.size() != 2 || l.up->shape[1] != l.down->shape[0])
            throw RuntimeError(path.string() + ": module " + name + ": the factors' shapes do not chain (A " +
                               std::to_string(l.down->shape.size()) + "-D [" + (l.down->shape.empty() ? "" : std::to_string(l.down->shape[0])) +
                               ", ...], B " + std::to_string(l.up->shape.size()) + "-D); a linear LoRA has A [rank, in] and B [out, rank]");
        l.rank = l.down->shape[0];
        // The component's config ("transformer.lora_alpha"), else the file's bare one.
        auto m = meta.find(l.component);
        if (m == meta.end()) m = meta.find("");
        const Metadata config = m == meta.end() ? Metadata{} : m->second;
        if (parts.alpha) l.alpha = scalar_value(f, *parts.alpha);
        else if (config.alpha) l.alpha = config.alpha;
        l.rslora = config.rslora;
        out.layers_.push_back(std::move(l));
    }
    if (out.layers_.empty()) throw UsageError(path.string() + ": no LoRA modules in the file");
    for (const auto & fam : families) out.format_ += (out.format_.empty() ? "" : "+") + fam;
    return out;
}

std::string LoraMatch::describe(std::string_view component, std::size_t first) const {
    const std::size_t total = matched.size() + unmatched.size();
    std::string s = std::to_string(unmatched.size()) + " of " + std::to_string(total) + " modules match nothing in " +
                    std::string(component);
    if (!unmatched.empty()) {
        s += " (first: ";
        for (std::size_t i = 0; i < std::min(first, unmatched.size()); ++i) s += (i ? ", " : "") + unmatched[i];
        s += ")";
    }
    return s + "; " + std::to_string(matched.size()) + " matched";
}

LoraMatch match_lora(const LoraFile & lora, std::string_view component, bool bare_is_component,
                     const std::map<std::string, std::vector<std::int64_t>> & modules,
                     const std::function<std::optional<std::string>(std::string_view)> & rename) {
    std::map<std::string, std::string> by_flat;
    bool any_flat = false;
    for (const auto & l : lora.layers()) any_flat = any_flat || l.flattened;
    if (any_flat)
        for (const auto & [m, shape] : modules) {
            const auto [it, inserted] = by_flat.emplace(flatten(m), m);
            if (!inserted)
                throw UsageError(lora.path().string() + ": kohya names are flattened and " + it->second + " and " + m +
                                 " of " + std::string(component) + " flatten to the same " + it->first +
                                 "; convert the LoRA to diffusers names");
        }
    LoraMatch out;
    for (const auto & l : lora.layers()) {
        if (l.component != component && !(l.component.empty() && bare_is_component)) continue;
        std::optional<std::string> target;
        if (l.flattened) {
            if (const auto it = by_flat.find(l.module); it != by_flat.end()) target = it->second;
        } else if (modules.count(l.module)) {
            target = l.module;
        }
        if (!target && rename && !l.flattened)
            if (auto r = rename(l.module); r && modules.count(*r)) target = *r;
        if (!target) {
            out.unmatched.push_back(l.module);
            continue;
        }
        const auto & w = modules.at(*target);
        if (w.size() != 2 || l.down->shape[1] != w[1] || l.up->shape[0] != w[0])
            throw RuntimeError(lora.path().string() + ": " + l.key + " adapts " + std::string(component) + " module " +
                               *target + " (weight [" + (w.size() == 2 ? std::to_string(w[0]) + ", " + std::to_string(w[1]) : "?") +
                               "]) with A [" + std::to_string(l.down->shape[0]) + ", " + std::to_string(l.down->shape[1]) +
                               "] and B [" + std::to_string(l.up->shape[0]) + ", " + std::to_string(l.up->shape[1]) +
                               "]; the LoRA is for another model or another size of it");
        out.matched.emplace_back(&l, *target);
    }
    return out;
}

}  // namespace ddo::store
