// The body of a generation request to `ddo-host serve`, parsed and checked before anything is queued: the native job
// API (POST /v1/jobs: the run settings of the CLI as JSON) and the OpenAI-compatible one (POST
// /v1/images/generations: prompt, n, size, response_format + extension fields). Untrusted input: every field is
// named, typed and bounded; an unknown field, a wrong type or a value out of bounds is a RequestError naming the
// field (HTTP 400, or 413 for what is too large), never a crash (tests/fuzz/serve_request_fuzz.cpp). No field names a
// path: outputs go to the job's directory, which the server owns (Note [Serving] in docs/architecture.md).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::host::serve {

// A refused request: its HTTP status (400, 413), the field it names ("" for the body as a whole) and why.
class RequestError : public std::runtime_error {
public:
    RequestError(int status, std::string field, const std::string & message)
        : std::runtime_error(message), status_(status), field_(std::move(field)) {}
    int status() const { return status_; }
    const std::string & field() const { return field_; }

private:
    int status_;
    std::string field_;
};

// The bounds a request is held to (ddo-host serve's options; defaults sized for the models ddo runs).
struct RequestLimits {
    std::size_t max_body_bytes = 1 << 20;  // the whole body (413 "body")
    std::size_t max_prompt_bytes = 8192;   // prompt, negative_prompt (413)
    long long max_side = 4096;             // width, height (each)
    long long max_pixels = 4096LL * 4096;  // width x height x frames... per image or frame
    long long max_frames = 1025;           // frames (video plugins)
    long long max_steps = 1000;
    long long max_images = 8;              // n, num_images
    std::size_t max_sets = 64;             // entries of `set` / `ddo`
    std::size_t max_condition_images = 16; // `images` (a plugin refuses more than its model takes, naming its limit)
};

// A condition image sent with a job (`images`): the file's bytes (base64 in the request) and, for the video plugins'
// keyframes, the pixel frame it conditions (--image FILE@FRAME). The server writes it into the job's directory under a
// name it makes; the run decodes and checks it as it does a --image file.
struct JobImage {
    std::string bytes;
    std::optional<long long> frame;
};

// One generation, as the job runner turns it into a run (host/serve/job_runner.cpp): the CLI's shorthands and
// --set key=value pairs (value as --set text).
struct JobSpec {
    std::optional<std::string> prompt, negative_prompt;
    std::optional<long long> width, height, steps, seed, num_images, frames;
    std::optional<double> guidance_scale, fps, strength;
    std::vector<std::pair<std::string, std::string>> sets;
    std::vector<JobImage> images;  // POST /v1/jobs "images", in order (workload.images)
    bool openai = false;  // from /v1/images/generations: the response is the OpenAI images object
    nlohmann::json request = nlohmann::json::object();  // the body as given (recorded in the job)
};

// POST /v1/jobs: {"prompt", "negative_prompt", "width", "height", "steps", "seed", "guidance_scale", "num_images",
// "frames", "fps", "strength", "images": ["<base64>" | "data:image/…;base64,<base64>" | {"b64_json", "frame"}],
// "set": {"key": value}}. The recorded request keeps each image's size, not its bytes.
JobSpec parse_job_request(std::string_view body, const RequestLimits & limits);

// POST /v1/images/generations: {"prompt", "model", "n", "size": "WxH", "response_format": "b64_json", "user",
// "negative_prompt", "seed", "steps", "guidance_scale", "ddo": {"key": value}}.
JobSpec parse_openai_request(std::string_view body, const RequestLimits & limits);

// A job id and an output name as they appear in a URL: [A-Za-z0-9._-], 1..128 bytes, not "." or ".."; false for any
// other (a path separator, "..", a NUL): the caller answers 400 and never opens a file by it.
bool safe_name(std::string_view name);

}  // namespace ddo::host::serve
