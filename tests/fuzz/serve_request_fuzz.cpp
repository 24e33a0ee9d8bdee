// Fuzz target: the request parser of `ddo-host serve` (host/serve/job_request.hpp). The input's first byte picks the
// API (even: POST /v1/jobs, odd: POST /v1/images/generations), the rest is the body. A RequestError (400/413 naming
// the field) is the parser doing its job; anything else escapes and is a crash. An accepted request must hold what
// the job runner relies on: a prompt, sizes and counts within the limits, only preset keys a request may set.
#include "fuzz_support.hpp"
#include "serve/job_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    if (size == 0) return 0;
    using namespace ddo::host::serve;
    RequestLimits limits;
    limits.max_body_bytes = 64 * 1024;
    const std::string_view body = ddo::fuzz::bytes(data + 1, size - 1);
    try {
        const JobSpec s = (data[0] & 1) ? parse_openai_request(body, limits) : parse_job_request(body, limits);
        DDO_FUZZ_CHECK(s.prompt.has_value());
        DDO_FUZZ_CHECK(s.prompt->size() <= limits.max_prompt_bytes);
        DDO_FUZZ_CHECK(!s.width || (*s.width >= 16 && *s.width <= limits.max_side));
        DDO_FUZZ_CHECK(!s.height || (*s.height >= 16 && *s.height <= limits.max_side));
        DDO_FUZZ_CHECK(!s.num_images || (*s.num_images >= 1 && *s.num_images <= limits.max_images));
        DDO_FUZZ_CHECK(!s.steps || (*s.steps >= 1 && *s.steps <= limits.max_steps));
        DDO_FUZZ_CHECK(s.sets.size() <= limits.max_sets);
        for (const auto & [k, v] : s.sets) {
            DDO_FUZZ_CHECK(k != "workload.images" && !k.starts_with("lora.adapters") && !k.ends_with(".upsampler"));
            DDO_FUZZ_CHECK(v.find('\n') == std::string::npos);
        }
        DDO_FUZZ_CHECK(s.images.size() <= limits.max_condition_images);
        for (const auto & im : s.images) {
            DDO_FUZZ_CHECK(!im.bytes.empty());
            DDO_FUZZ_CHECK(!im.frame || (*im.frame >= 0 && *im.frame < limits.max_frames));
        }
        DDO_FUZZ_CHECK(s.request.is_object());
        DDO_FUZZ_CHECK(!s.request.contains("images") || s.request["images"].dump().size() < 64 * (s.images.size() + 1));
    } catch (const RequestError & e) {
        DDO_FUZZ_CHECK(e.status() == 400 || e.status() == 413);
        if (ddo::fuzz::verbose()) std::fprintf(stderr, "ddo fuzz: refused (%d %s): %s\n", e.status(), e.field().c_str(), e.what());
    }
    for (const std::string_view name : {std::string_view(body).substr(0, 130)})
        if (safe_name(name)) DDO_FUZZ_CHECK(name.find('/') == std::string_view::npos && name != ".." && name != ".");
    return 0;
}
