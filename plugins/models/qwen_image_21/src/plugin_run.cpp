#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "pipeline.hpp"

namespace ddo::qwen_image_21 {
namespace {

const char * vae_name(VaeStrategy s) {
    switch (s) {
    case VaeStrategy::resident: return "resident";
    case VaeStrategy::leaf_offload: return "leaf_offload";
    case VaeStrategy::tiled: return "tiled";
    }
    return "resident";
}

// vae.strategy -> what this VAE runs. auto: tiles only pay off above the reference's 256 px tile, so small images
// decode in one piece.
VaeStrategy vae_strategy(const model::ComponentPlan & p, const PipelineOptions & o, VaeTiling & tiling) {
    switch (p.vae_strategy) {
    case VaeStrategyKind::resident: return VaeStrategy::resident;
    case VaeStrategyKind::leaf_offload: return VaeStrategy::leaf_offload;
    case VaeStrategyKind::tiled: {
        const int64_t tile = p.vae_tiles.tile, stride = p.vae_tiles.stride();
        tiling = {tile, tile, stride, stride};
        return VaeStrategy::tiled;
    }
    case VaeStrategyKind::automatic: return (o.width > 512 || o.height > 512) ? VaeStrategy::tiled : VaeStrategy::resident;
    case VaeStrategyKind::temporal_stream: break;
    }
    throw UsageError("qwen_image_21: vae strategy temporal_stream is for video models; use resident, tiled or "
                     "leaf_offload");
}

}  // namespace

void run_qwen_image_21(model::ModelRun & run) {
    const auto w = run.workload({.width = 1024, .height = 1024, .steps = 40, .seed = 0});
    PipelineOptions o;
    o.steps = w.steps;
    // The pipeline floors the size to a multiple of 32 (16x VAE, 2x2 latent patches); say so when it does.
    constexpr int64_t kMultiple = 32;
    o.width = w.width / kMultiple * kMultiple;
    o.height = w.height / kMultiple * kMultiple;
    if (o.width < kMultiple || o.height < kMultiple)
        throw UsageError("qwen_image_21: width and height must be at least " + std::to_string(kMultiple) + " (got " +
                         std::to_string(w.width) + "x" + std::to_string(w.height) + ")");
    for (auto [key, req, eff] : {std::tuple{"workload.width", w.width, o.width}, std::tuple{"workload.height", w.height, o.height}})
        if (req != eff)
            run.adjust(key, req, eff, "Qwen-Image sizes are multiples of " + std::to_string(kMultiple) +
                                          " pixels; floored as QwenImage21Pipeline does");
    o.seed = w.seed;
    o.true_cfg_scale = w.guidance_scale.value_or(1.0);  // the pipeline's true_cfg_scale default
    o.use_kv_cache = run.option<bool>("use_kv_cache", true);
    o.device = run.device().device();
    o.dtype = w.dtype;
    run.refuse_if_set("workload.frames", "Qwen-Image 2.1 makes still images");
    run.refuse_if_set("vae.temporal_frames", "the Qwen-Image 2.1 VAE decodes one frame (temporal windows are for video)");
    if (w.prompt || w.negative_prompt)
        throw UsageError(std::string("qwen_image_21: ") + (w.prompt ? "workload.prompt (-p/--prompt)" : "workload.negative_prompt (-n/--negative-prompt)") +
                         " needs the Qwen3-VL text encoder, which this plugin does not have yet; encode the prompt "
                         "elsewhere and pass --prompt-embeds FILE (tools/reference/qwen_image_21_fixtures.py writes one)");
    if (run.prompt_embeds().empty() && !run.dry_run())
        throw UsageError("qwen_image_21: --prompt-embeds is required (the Qwen3-VL text encoder is not built yet); "
                         "write one with tools/reference/qwen_image_21_fixtures.py");
    // The checkpoint is this plugin's before anything is read: exit 2 naming the class otherwise. (The host already
    // checked model_index.json against the plugin's pipeline classes.)
    run.require_model_dir();
    run.check_class("transformer/config.json", {"QwenImage21Transformer2DModel"});
    run.check_class("vae/config.json", {"AutoencoderKLQwenImage21"});
    const auto transformer_plan = run.plan("transformer");
    const auto vae_plan = run.plan("vae");
    VaeTiling tiling;
    const VaeStrategy vae_strategy_used = vae_strategy(vae_plan, o, tiling);

    run.record_workload({{"model", "qwen_image_21"}, {"width", o.width}, {"height", o.height}, {"steps", o.steps},
                         {"seed", o.seed}, {"guidance_scale", o.true_cfg_scale}, {"use_kv_cache", o.use_kv_cache},
                         {"dtype", c10::toString(o.dtype)}, {"device", o.device.str()},
                         {"prompt_embeddings", "supplied"},  // which file: identity.checkpoint.inputs
                         {"text_encoder", nullptr}});

    run.begin_phase("load");
    const bool have_embeds = !run.prompt_embeds().empty();  // a dry run may plan without them
    if (have_embeds) run.record_input("prompt_embeds", run.prompt_embeds());
    run.record_checkpoint({"transformer", "vae", "scheduler"});
    auto m = ModelFiles::open(run.model_dir());
    run.add_checkpoint_facts({{"transformer_blocks", m.transformer_config.num_layers},
                              {"block_payload_bytes", block_payload_bytes(m.transformer, m.transformer_config, 0)}});
    PromptEmbeds embeds;
    if (have_embeds) {
        embeds = repeat_per_prompt(load_prompt_embeds(run.prompt_embeds(), m.transformer_config.context_in_dim), w.num_images);
        run.plan_images(int(embeds.embeds.size(0)));  // existing outputs refused now, not after denoising
    }
    // Guidance as diffusers: true_cfg_scale > 1 guides only with a negative prompt; without one it is off.
    if (!have_embeds) {
        // A dry run without embeddings plans the weights only; guidance is decided when embeddings are given.
    } else if (o.true_cfg_scale > 1.0 && !embeds.neg_embeds) {
        run.adjust("workload.guidance_scale", o.true_cfg_scale, 1.0,
                   "the prompt embeddings carry no negative_prompt_embeds, so there is nothing to guide against "
                   "(QwenImage21Pipeline: classifier-free guidance is not enabled); add negative embeddings to guide");
        o.true_cfg_scale = 1.0;
    } else if (o.true_cfg_scale <= 1.0 && embeds.neg_embeds) {
        run.adjust("negative_prompt_embeds", "supplied", "unused",
                   "guidance scale " + nlohmann::json(o.true_cfg_scale).dump() + " <= 1: no classifier-free guidance, as in "
                   "QwenImage21Pipeline");
    }
    run.record_workload({{"model", "qwen_image_21"}, {"width", o.width}, {"height", o.height}, {"steps", o.steps},
                         {"seed", o.seed}, {"num_images", w.num_images},
                         {"seed_per_image", "one noise draw for all images from seed " + std::to_string(o.seed) +
                                                " (image i is the i-th sample of it, as diffusers' num_images_per_prompt)"},
                         {"guidance_scale", o.true_cfg_scale}, {"use_kv_cache", o.use_kv_cache},
                         // The prefix KV cache acts on the causal condition prefix (QwenImage21Pipeline: cache_enabled).
                         {"kv_cache_used", o.use_kv_cache && m.transformer_config.causal_condition},
                         {"kv_cache_reason", !o.use_kv_cache ? "plugin.qwen_image_21.use_kv_cache = false"
                                             : m.transformer_config.causal_condition ? "use_kv_cache and a causal condition prefix"
                                                                                      : "the transformer config has causal_condition = false"},
                         {"dtype", c10::toString(o.dtype)}, {"device", o.device.str()},
                         {"prompt_embeddings", have_embeds ? "supplied" : "none (dry run)"},  // the file: identity.checkpoint.inputs
                         {"negative_prompt_embeddings", embeds.neg_embeds ? "supplied" : "none"},
                         {"text_encoder", nullptr}});
    Transformer transformer(m.transformer_config, load_transformer_globals(m.transformer, m.transformer_config, o.dtype));
    auto weights = run.open_weights(transformer_plan, run.model_dir() / "transformer",
                                    transformer_groups(m.transformer_config), o.dtype);
    auto blocks = engine_blocks(*weights, m.transformer_config);
    if (run.dry_run()) {
        run.log(2, have_embeds ? "dry run: checkpoint and embeddings validated; nothing computed"
                               : "dry run: checkpoint validated (no --prompt-embeds given); nothing computed");
        return;
    }

    // runtime.generation_repeats: the transformer's weights stay loaded between generations (the point of a warm
    // run); each generation's VAE decoder is built for its decode phase, as in a single generation.
    const int generations = run.generations();
    for (int g = 1; g <= generations; ++g) {
        run.begin_generation(g);
        run.begin_phase("denoise");
        PipelineCallbacks cb;
        cb.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step)); };
        cb.on_step = [&](int step, int total) { run.step(step, total); };
        auto latents = denoise(m, transformer, *blocks, embeds, o, cb);
        if (g == generations) {
            blocks.reset();
            run.unload(std::move(weights));
        }

        run.begin_phase("decode");
        VaeDecoder vae(m.vae, m.vae_config, o.dtype, o.device, vae_strategy_used, tiling);
        vae.set_tile_progress([&](int done, int total) {  // a long tiled decode shows progress and can be interrupted
            run.check_interrupted("while decoding tile " + std::to_string(done) + " of " + std::to_string(total));
            run.step(done, total);
        });
        auto image = decode_latents(m, vae, latents, o);
        const bool fell_back = vae_strategy_used == VaeStrategy::tiled && !vae.last_decode_tiled();
        run.record_route("vae", vae_name(vae_strategy_used), fell_back ? "resident" : vae_name(vae_strategy_used),
                         fell_back ? "the image fits in one tile: decoded in one piece" : "");
        run.record_counters("vae", {{"strategy", vae_name(vae_strategy_used)}, {"weight_bytes", vae.weight_bytes()},
                                    {"leaf_uploads", vae.uploads()}});

        run.begin_phase("write_output");
        run.write_images(image);
    }
}

}  // namespace ddo::qwen_image_21
