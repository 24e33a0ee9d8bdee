#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <vector>

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/torch/torch_memory.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "pipeline.hpp"
#include "png_writer.hpp"

namespace ddo::qwen_image_21 {
namespace {

template <class T>
T option(const std::map<std::string, ResolvedValue> & opts, const std::string & key, T fallback) {
    auto it = opts.find(key);
    if (it == opts.end() || it->second.value.is_null()) return fallback;
    try {
        return it->second.value.get<T>();
    } catch (const std::exception & e) {
        throw UsageError("plugin.qwen_image_21." + key + " (" + it->second.provenance.to_string() +
                         "): wrong type: " + e.what());
    }
}

// A preset value as the string an allocator plugin's ddo_kv carries: strings as they are, booleans true/false,
// numbers in JSON notation, arrays and tables as JSON.
std::string kv_string(const nlohmann::json & v) {
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

// capacities.allocator_backend -> where the run executes. host: the CPU (CPU transport, the allocator's host
// backend) even when CUDA exists; cuda: CUDA or a UsageError (exit 2) naming the key; auto: CUDA when usable.
struct Placement {
    bool cuda = false;
    std::string reason;
};

Placement place(const ResolvedSettings & s, AllocatorBackend requested) {
    std::string why;
    const bool usable = ddo::torch::cuda_available(&why);
    switch (requested) {
    case AllocatorBackend::host:
        return {false, usable ? "capacities.allocator_backend = host: the CPU and host memory although a CUDA device is usable"
                              : "capacities.allocator_backend = host: the CPU and host memory"};
    case AllocatorBackend::cuda:
        if (!usable)
            throw UsageError("capacities.allocator_backend = \"cuda\" (" +
                             s.at("capacities.allocator_backend").provenance.to_string() +
                             ") but no CUDA device is usable: " + why +
                             "; run on a machine with a GPU, or set capacities.allocator_backend = \"auto\" or \"host\" "
                             "(--set capacities.allocator_backend=host) to run on the CPU");
        return {true, "capacities.allocator_backend = cuda: CUDA device 0"};
    case AllocatorBackend::automatic: break;
    }
    if (usable) return {true, "capacities.allocator_backend = auto: a CUDA device is usable"};
    return {false, "capacities.allocator_backend = auto: no usable CUDA device (" + why + "), the CPU and host memory"};
}

}  // namespace

void run_plugin(RunContext & ctx, const LogFn & log) {
    if (!ctx.settings) throw UsageError("qwen_image_21: run without resolved settings");
    const auto & s = *ctx.settings;
    const auto opts = s.plugin_options("qwen_image_21");
    PipelineOptions o;
    // --steps/--width/--height/--seed are workload.* keys; plugin.qwen_image_21.* may set them too.
    auto workload = [&](const char * key, auto fallback) {
        using T = decltype(fallback);
        if (auto v = s.get_optional<T>(std::string("workload.") + key)) return *v;
        return option<T>(opts, key, fallback);
    };
    o.steps = workload("steps", 40);
    o.width = workload("width", int64_t(1024));
    o.height = workload("height", int64_t(1024));
    o.seed = workload("seed", uint64_t(0));
    o.true_cfg_scale = s.get_optional<double>("workload.guidance_scale").value_or(option<double>(opts, "true_cfg_scale", 1.0));
    o.use_kv_cache = option<bool>(opts, "use_kv_cache", true);
    const Capacities caps = s.capacities("transformer");
    const Placement placed = place(s, caps.allocator_backend);
    const bool cuda = placed.cuda;
    o.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    ddo::torch::attach_torch_memory(ctx.tracker, o.device);  // torch_allocated / torch_reserved monitors
    // workload.precision (bf16 | fp16 | fp32); unset = bf16 on CUDA, fp32 on the CPU.
    const auto precision = s.get_optional<std::string>("workload.precision").value_or(cuda ? "bf16" : "fp32");
    if (precision == "fp32") o.dtype = at::kFloat;
    else if (precision == "bf16") o.dtype = at::kBFloat16;
    else if (precision == "fp16") o.dtype = at::kHalf;
    else throw UsageError("workload.precision must be bf16, fp16 or fp32 (got '" + precision + "')");
    if (ctx.prompt_embeds.empty())
        throw UsageError("qwen_image_21: --prompt-embeds is required (the Qwen3-VL text encoder is not built yet); "
                         "write one with tools/reference/qwen_image_21_fixtures.py");

    const Route route = s.route("transformer");
    const auto vs = s.vae_strategy();
    VaeStrategy vae_strategy = VaeStrategy::resident;
    VaeTiling tiling;
    switch (vs.kind) {
    case VaeStrategyKind::resident: vae_strategy = VaeStrategy::resident; break;
    case VaeStrategyKind::leaf_offload: vae_strategy = VaeStrategy::leaf_offload; break;
    case VaeStrategyKind::tiled:
        vae_strategy = VaeStrategy::tiled;
        tiling = {vs.tile_size, vs.tile_size, vs.tile_size - vs.tile_overlap, vs.tile_size - vs.tile_overlap};
        break;
    case VaeStrategyKind::automatic:
        // Tiles only pay off above the reference's 256 px tile; small images decode in one piece.
        vae_strategy = (o.width > 512 || o.height > 512) ? VaeStrategy::tiled : VaeStrategy::resident;
        break;
    case VaeStrategyKind::temporal_stream:
        throw UsageError("qwen_image_21: vae strategy temporal_stream is for video models; use resident, tiled or "
                         "leaf_offload");
    }
    const char * vae_names[] = {"resident", "leaf_offload", "tiled"};

    RunTracker * tr = ctx.tracker;
    if (tr) {
        tr->set_route_intended("transformer", to_string(route), s.at("components.transformer.route").provenance.to_string());
        tr->set_workload({{"model", "qwen_image_21"}, {"width", o.width}, {"height", o.height}, {"steps", o.steps},
                          {"seed", o.seed}, {"true_cfg_scale", o.true_cfg_scale}, {"use_kv_cache", o.use_kv_cache},
                          {"dtype", c10::toString(o.dtype)}, {"device", o.device.str()},
                          {"prompt_embeddings", "supplied (" + ctx.prompt_embeds.string() + ")"},
                          {"text_encoder", nullptr}});
    }
    std::optional<RunTracker::Phase> phase;
    auto begin = [&](const char * name) {
        if (phase) phase->end();
        phase.reset();
        if (tr) phase.emplace(tr->phase(name));
    };

    begin("load");
    auto m = ModelFiles::open(ctx.model_dir);
    auto embeds = load_prompt_embeds(ctx.prompt_embeds, m.transformer_config.context_in_dim);
    Transformer transformer(m.transformer_config, load_transformer_globals(m.transformer, m.transformer_config, o.dtype));
    EngineBlocksOptions eo;
    eo.route = route;
    eo.capacities = caps;
    eo.allocator = ctx.allocator_vtable;
    eo.allocator_name = ctx.allocator_name.empty() ? eo.capacities.allocator : ctx.allocator_name;
    if (!eo.allocator && !ctx.allocator_error.empty())
        throw UsageError("qwen_image_21: the offload engine needs an allocator plugin: " + ctx.allocator_error);
    nlohmann::json alloc_opts = nlohmann::json::object();
    for (const auto & [key, v] : s.plugin_options(eo.allocator_name)) {
        if (v.value.is_null()) continue;
        eo.allocator_options.emplace_back(key, kv_string(v.value));
        alloc_opts[key] = {{"value", eo.allocator_options.back().second}, {"source", v.provenance.to_string()}};
    }
    eo.placement = {
        {"allocator_backend",
         {{"requested", to_string(caps.allocator_backend)},
          {"requested_source", s.at("capacities.allocator_backend").provenance.to_string()},
          {"used", cuda ? "cuda" : "host"},
          {"reason", placed.reason}}},
        {"allocator", {{"requested", caps.allocator}, {"used", eo.allocator_name}}},
        {"allocator_options", alloc_opts},
        {"device", o.device.str()},
        {"transport", cuda ? "cuda" : "cpu"}};
    auto blocks = make_engine_blocks(ctx.model_dir / "transformer", m.transformer_config, o.dtype, o.device, eo);
    if (tr) {
        tr->set_checkpoint({{"path", ctx.model_dir.string()}, {"transformer_blocks", m.transformer_config.num_layers},
                            {"block_payload_bytes", block_payload_bytes(m.transformer, m.transformer_config, 0)}});
        tr->set_route_executed("transformer", blocks->route());
        tr->set_counters("transformer", blocks->report());  // the plan; replaced by the counters after denoise
    }
    if (ctx.dry_run) {
        log(2, "dry run: checkpoint and embeddings validated; nothing computed");
        if (phase) phase->end();
        return;
    }

    begin("denoise");
    PipelineCallbacks cb;
    cb.interrupted = ctx.interrupted;
    auto t0 = std::chrono::steady_clock::now();
    cb.on_step = [&](int step, int total) {
        auto t1 = std::chrono::steady_clock::now();
        if (tr) tr->step("denoise", step - 1, std::chrono::duration<double>(t1 - t0).count());
        t0 = t1;
        log(2, "step " + std::to_string(step) + "/" + std::to_string(total));
    };
    auto latents = denoise(m, transformer, *blocks, embeds, o, cb);
    const uint64_t outstanding = blocks->finish();
    if (tr) tr->set_counters("transformer", blocks->report());
    if (outstanding != 0)
        throw RuntimeError("qwen_image_21: the offload engine ended the denoise phase with " +
                           std::to_string(outstanding) + " outstanding lease(s) or upload(s)");
    blocks.reset();

    begin("decode");
    VaeDecoder vae(m.vae, m.vae_config, o.dtype, o.device, vae_strategy, tiling);
    auto image = decode_latents(m, vae, latents, o);
    if (tr) {
        tr->set_route_intended("vae", vae_names[int(vae_strategy)]);
        const bool fell_back = vae_strategy == VaeStrategy::tiled && !vae.last_decode_tiled();
        tr->set_route_executed("vae", fell_back ? "resident" : vae_names[int(vae_strategy)],
                               fell_back ? "the image fits in one tile: decoded in one piece" : "");
        tr->set_counters("vae", {{"strategy", vae_names[int(vae_strategy)]}, {"weight_bytes", vae.weight_bytes()},
                                 {"leaf_uploads", vae.uploads()}});
    }

    begin("write_output");
    std::filesystem::create_directories(ctx.output_dir);
    auto pixels = (image.to(at::kCPU).to(at::kFloat) * 255).round().to(at::kByte);  // numpy_to_pil rounding
    for (int64_t b = 0; b < pixels.size(0); ++b) {
        auto hwc = pixels[b].permute({1, 2, 0}).contiguous();
        auto path = ctx.output_dir / (pixels.size(0) == 1 ? "image.png" : "image_" + std::to_string(b) + ".png");
        write_png_rgba(path, hwc.data_ptr<uint8_t>(), uint32_t(hwc.size(1)), uint32_t(hwc.size(0)));
        if (tr) tr->add_output(path, "image/png");
        log(2, "wrote " + path.string());
    }
    if (phase) phase->end();
}

}  // namespace ddo::qwen_image_21
