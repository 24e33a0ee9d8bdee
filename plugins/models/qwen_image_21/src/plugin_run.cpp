#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/tensor_output.hpp"
#include "pipeline.hpp"
#include "prompt_encoder.hpp"
#include "vae_choice.hpp"

namespace ddo::qwen_image_21 {
namespace {

// The sampling grid: workload.sigmas (the pipeline's sigmas=), else model_index.json sample_sigmas (the model
// author's default, which the pipeline uses unless told otherwise), else linspace(1, 1/steps, steps). An explicit
// workload.steps is honoured over sample_sigmas (the pipeline would ignore it; the report says which was used).
struct Grid {
    std::vector<float> sigmas;
    std::string source;
};

Grid sampling_grid(model::ModelRun & run, const model::Workload & w, const ModelFiles & m) {
    if (w.sigmas) {
        if (w.steps_set && w.steps != int(w.sigmas->size()))
            run.adjust("workload.steps", w.steps, int(w.sigmas->size()),
                       "workload.sigmas sets the grid; its length is the number of steps (QwenImage21Pipeline sigmas=)");
        return {sigmas_from(*w.sigmas), "workload.sigmas"};
    }
    if (m.sample_sigmas && !w.steps_set)
        return {sigmas_from(*m.sample_sigmas), "model_index.json sample_sigmas (the checkpoint's default grid)"};
    std::string source = w.steps_set ? "workload.steps" : "the plugin's default steps";
    if (m.sample_sigmas)
        source += " (the checkpoint's sample_sigmas is not used because workload.steps was set; QwenImage21Pipeline "
                  "would ignore num_inference_steps)";
    return {default_sigmas(w.steps), "linspace(1, 1/steps, steps) from " + source};
}

}  // namespace

void run_qwen_image_21(model::ModelRun & run) {
    const auto w = run.workload({.width = 1024, .height = 1024, .steps = 40, .seed = 0});
    PipelineOptions o;
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
    run.refuse_if_set("workload.fps", "Qwen-Image 2.1 makes still images");
    run.refuse_if_set("vae.temporal_frames", "the Qwen-Image 2.1 VAE decodes one frame (temporal windows are for video)");

    // Where the prompt comes from: text (the Qwen3-VL encoder runs here) or a --prompt-embeds file.
    const bool from_text = run.prompt_from_text(w);
    const bool encode_only = run.encode_only();
    if (!from_text && run.prompt_embeds().empty() && !run.dry_run())
        throw UsageError("qwen_image_21: no prompt: give -p/--prompt TEXT (the checkpoint's Qwen3-VL text encoder "
                         "encodes it) or --prompt-embeds FILE (ddo-host encode writes one)");
    if (encode_only) {
        for (const char * k : {"workload.width", "workload.height", "workload.steps", "workload.sigmas", "workload.num_images"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
        if (!run.latents_file().empty()) throw UsageError("ddo-host encode: --latents belongs to a generating run");
    }
    // The checkpoint is this plugin's before anything is read: exit 2 naming the class otherwise. (The host already
    // checked model_index.json against the plugin's pipeline classes.)
    run.require_model_dir();
    run.check_class("transformer/config.json", {"QwenImage21Transformer2DModel"});
    run.check_class("vae/config.json", {"AutoencoderKLQwenImage21"});
    if (from_text) run.check_class("text_encoder/config.json", {"Qwen3VLForConditionalGeneration"});

    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "vae", "scheduler"};
    if (from_text) components.insert(components.begin(), "text_encoder");
    run.record_checkpoint(components);
    auto m = ModelFiles::open(run.model_dir());
    run.add_checkpoint_facts({{"transformer_blocks", m.transformer_config.num_layers},
                              {"block_payload_bytes", block_payload_bytes(m.transformer, m.transformer_config, 0)}});
    const Grid grid = sampling_grid(run, w, m);
    o.sigmas = grid.sigmas;
    o.steps = int(grid.sigmas.size());

    // Guidance as diffusers: true_cfg_scale > 1 guides only with a negative prompt; without one it is off.
    const bool have_embeds = !run.prompt_embeds().empty();
    PromptEmbeds embeds;
    if (have_embeds) {
        run.record_input("prompt_embeds", run.prompt_embeds());
        embeds = load_prompt_embeds(run.prompt_embeds(), m.transformer_config.context_in_dim);
    }
    const bool have_negative = from_text ? w.negative_prompt.has_value() : embeds.neg_embeds.has_value();
    const std::string negative_name = from_text ? "workload.negative_prompt" : "negative_prompt_embeds";
    if (!from_text && !have_embeds) {
        // A dry run without a prompt plans the weights only; guidance is decided when a prompt is given.
    } else if (o.true_cfg_scale > 1.0 && !have_negative && !encode_only) {
        run.adjust("workload.guidance_scale", o.true_cfg_scale, 1.0,
                   std::string(from_text ? "no negative prompt (-n) was given" : "the prompt embeddings carry no "
                                                                               "negative_prompt_embeds") +
                       ", so there is nothing to guide against (QwenImage21Pipeline: classifier-free guidance is not "
                       "enabled); add one to guide");
        o.true_cfg_scale = 1.0;
    } else if (o.true_cfg_scale <= 1.0 && have_negative && !encode_only) {
        run.adjust(negative_name, from_text ? nlohmann::json(*w.negative_prompt) : nlohmann::json("supplied"), "unused",
                   "guidance scale " + nlohmann::json(o.true_cfg_scale).dump() + " <= 1: no classifier-free guidance, "
                   "as in QwenImage21Pipeline");
    }
    const bool guide = o.true_cfg_scale > 1.0 && have_negative;
    if (!run.latents_file().empty()) {
        run.record_input("latents", run.latents_file());
        o.latents = load_initial_latents(run.latents_file(), w.num_images, m.transformer_config.in_channels, o.width,
                                         o.height);
    }
    if (encode_only) run.plan_tensor_file();
    else if (from_text || have_embeds) run.plan_images(w.num_images);  // existing outputs refused now, not after denoising
    const auto transformer_plan = run.plan("transformer");
    const auto vae_plan = run.plan("vae");
    const VaeChoice vae_choice = choose_vae_strategy(vae_plan, m.vae, m.vae_config, w.num_images, o.width, o.height, o.dtype);

    auto record = [&](const nlohmann::json & text_encoder_state) {
        nlohmann::json sig = nlohmann::json::array();
        for (float v : o.sigmas) sig.push_back(double(v));
        run.record_workload({{"model", "qwen_image_21"}, {"width", o.width}, {"height", o.height}, {"steps", o.steps},
                             {"sigmas", sig}, {"sigmas_source", grid.source},
                             {"seed", o.seed}, {"num_images", w.num_images},
                             {"initial_latents", o.latents ? "from --latents (identity.checkpoint.inputs)" : "seeded noise"},
                             {"seed_per_image", "one noise draw for all images from seed " + std::to_string(o.seed) +
                                                    " (image i is the i-th sample of it, as diffusers' num_images_per_prompt)"},
                             {"guidance_scale", o.true_cfg_scale}, {"use_kv_cache", o.use_kv_cache},
                             // The prefix KV cache acts on the causal condition prefix (QwenImage21Pipeline: cache_enabled).
                             {"kv_cache_used", o.use_kv_cache && m.transformer_config.causal_condition},
                             {"kv_cache_reason", !o.use_kv_cache ? "plugin.qwen_image_21.use_kv_cache = false"
                                                 : m.transformer_config.causal_condition ? "use_kv_cache and a causal condition prefix"
                                                                                          : "the transformer config has causal_condition = false"},
                             {"dtype", c10::toString(o.dtype)}, {"device", o.device.str()},
                             {"prompt", from_text ? nlohmann::json(*w.prompt) : nlohmann::json(nullptr)},
                             {"negative_prompt", from_text && w.negative_prompt ? nlohmann::json(*w.negative_prompt) : nlohmann::json(nullptr)},
                             {"prompt_embeddings", from_text ? "encoded by the text encoder" : have_embeds ? "supplied" : "none (dry run)"},
                             {"negative_prompt_embeddings", guide ? (from_text ? "encoded" : "supplied") : "none"},
                             {"vae_strategy", vae_strategy_name(vae_choice.strategy)},
                             {"text_encoder", text_encoder_state}});
    };
    record(from_text ? nlohmann::json("planned") : nlohmann::json(nullptr));

    if (from_text) {
        auto encoder = PromptEncoder::open(run.model_dir());
        if (encoder.config().hidden_size != m.transformer_config.context_in_dim)
            throw RuntimeError((run.model_dir() / "text_encoder" / "config.json").string() + ": hidden_size " +
                               std::to_string(encoder.config().hidden_size) + " contradicts the transformer's "
                               "context_in_dim " + std::to_string(m.transformer_config.context_in_dim));
        run.record_input("tokenizer", encoder.tokenizer_file());
        const auto te_plan = run.plan("text_encoder");
        auto te = run.open_weights(te_plan, encoder.weights_dir(), encoder.groups(), o.dtype);
        run.add_checkpoint_facts({{"text_encoder_layers", encoder.config().num_layers},
                                  {"prompt_template_drop", encoder.drop_index()}});
        if (run.dry_run()) {
            (void)encoder.template_ids(*w.prompt);  // the prompt tokenizes (and has no vision slot)
            run.unload(std::move(te));              // nothing was uploaded; the transformer is validated below
            if (encode_only) {
                run.log(2, "dry run: checkpoint, tokenizer and text encoder validated; nothing computed");
                return;
            }
        } else {
            run.begin_phase("encode");
            text::TextTowerCallbacks tcb;
            tcb.check_interrupted = [&](int layer) { run.check_interrupted("at text encoder layer " + std::to_string(layer)); };
            // One progress count over both prompts' layers (the negative prompt is encoded after the prompt).
            const int prompts = (guide || (encode_only && w.negative_prompt)) ? 2 : 1;
            int done_before = 0;
            tcb.on_layer = [&](int layer, int total) { run.step(done_before + layer, total * prompts); };
            auto pos = encoder.encode(*te, {*w.prompt}, o.dtype, o.device, tcb);
            embeds.embeds = pos.embeds;
            embeds.mask = pos.mask;
            if (prompts == 2) {
                done_before = int(encoder.config().num_layers);
                auto neg = encoder.encode(*te, {*w.negative_prompt}, o.dtype, o.device, tcb);
                embeds.neg_embeds = neg.embeds;
                embeds.neg_mask = neg.mask;
            }
            run.add_checkpoint_facts({{"prompt_tokens", pos.tokens.size()}});
            // Out of memory before the transformer phase: owners checked zero (ModelRun::unload).
            run.unload(std::move(te));
            record("unloaded after encode, before denoise");
            if (encode_only) {
                run.begin_phase("write_output");
                model::NamedTensors t{{"prompt_embeds", embeds.embeds}};
                if (embeds.mask) t.push_back({"prompt_embeds_mask", embeds.mask->to(at::kByte)});
                if (embeds.neg_embeds) t.push_back({"negative_prompt_embeds", *embeds.neg_embeds});
                if (embeds.neg_mask) t.push_back({"negative_prompt_embeds_mask", embeds.neg_mask->to(at::kByte)});
                run.write_tensors(t, {{"producer", "ddo-host encode (qwen_image_21)"}, {"prompt", *w.prompt},
                                      {"negative_prompt", w.negative_prompt.value_or("")}});
                return;
            }
        }
    }
    embeds = repeat_per_prompt(embeds, w.num_images);
    if (!guide) {
        embeds.neg_embeds.reset();
        embeds.neg_mask.reset();
    }

    Transformer transformer(m.transformer_config, load_transformer_globals(m.transformer, m.transformer_config, o.dtype));
    auto weights = run.open_weights(transformer_plan, run.model_dir() / "transformer",
                                    transformer_groups(m.transformer_config), o.dtype);
    auto blocks = engine_blocks(*weights, m.transformer_config);
    if (run.dry_run()) {
        run.log(2, have_embeds ? "dry run: checkpoint and embeddings validated; nothing computed"
                               : "dry run: checkpoint validated (no prompt given); nothing computed");
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
        VaeDecoder vae(m.vae, m.vae_config, o.dtype, o.device, vae_choice.strategy, vae_choice.tiling);
        vae.set_tile_progress(run.decode_piece_progress("tile"));  // a long decode shows progress and can be interrupted
        vae.set_stage_check(run.decode_stage_check());
        auto image = decode_latents(m, vae, latents, o);
        const bool fell_back = vae_choice.strategy == VaeStrategy::tiled && !vae.last_decode_tiled();
        const std::string executed = fell_back ? "resident" : vae_strategy_name(vae_choice.strategy);
        std::string note = vae_choice.reason;
        if (fell_back) note += std::string(note.empty() ? "" : "; ") + "the image fits in one tile: decoded in one piece";
        run.record_route("vae", vae_choice.requested, executed, note);
        nlohmann::json counters = {{"strategy", executed}, {"requested", vae_choice.requested},
                                   {"weight_bytes", vae.weight_bytes()}, {"leaf_uploads", vae.uploads()}};
        if (!vae_choice.reason.empty()) counters["reason"] = vae_choice.reason;
        if (!vae_choice.facts.is_null()) counters["auto"] = vae_choice.facts;
        run.record_counters("vae", counters);

        run.begin_phase("write_output");
        run.write_images(image);
    }
}

}  // namespace ddo::qwen_image_21
