// The qwen_image_21 run on the model kit, as QwenImage21Pipeline runs: resolve_workload -> open_checkpoint ->
// resolve_guidance -> plan_run -> encode_prompt (the Qwen3-VL text encoder on its plan, unloaded; `ddo-host encode`
// stops here and writes the embeddings) -> open_transformer -> per generation: denoise -> decode -> write.
#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/model/run_request.hpp"
#include "ddo/model/tensor_output.hpp"
#include "pipeline.hpp"
#include "kv_cache_policy.hpp"
#include "memory_model.hpp"
#include "prompt_encoder.hpp"
#include "reference_stages.hpp"
#include "vae_choice.hpp"

namespace ddo::qwen_image_21 {
namespace {

constexpr const char * kPlugin = "qwen_image_21";
// The pipeline floors the size to a multiple of 32 (16x VAE, 2x2 latent patches).
constexpr int64_t kMultiple = 32;

// What was asked, checked before anything is read: the workload, the pipeline's options (size floored, seed,
// guidance asked for, KV cache, device, dtype; the grid and initial latents follow the checkpoint) and where the
// prompt comes from.
struct Request {
    model::Workload w;
    PipelineOptions o;
    model::PromptSource prompt;
    References refs;  // condition images (--image), prepared; the output size may come from the last one
    std::string kv_cache_placement;  // plugin.qwen_image_21.kv_cache_placement, checked
};

Request resolve_workload(model::ModelRun & run) {
    run.accept_step_cache();  // the denoising loop runs through run.step_cache (cache.*)
    Request r{run.workload({.width = 1024, .height = 1024, .steps = 40, .seed = 0}), {}, {}, {}, {}};
    // Where the prompt comes from: text (the Qwen3-VL encoder runs here) or a --prompt-embeds file.
    r.prompt = model::PromptSource::of(run, r.w);
    r.refs = resolve_references(run, r.w, r.prompt.from_text, r.prompt.encode_only);
    const auto & w = r.w;
    const auto size = model::floor_size(run, w, kMultiple,
                                        "(got " + std::to_string(w.width) + "x" + std::to_string(w.height) + ")",
                                        "Qwen-Image sizes are multiples of " + std::to_string(kMultiple) +
                                            " pixels; floored as QwenImage21Pipeline does");
    r.o.width = size.width;
    r.o.height = size.height;
    r.o.seed = w.seed;
    r.o.true_cfg_scale = w.guidance_scale.value_or(1.0);  // the pipeline's true_cfg_scale default
    r.o.use_kv_cache = run.option<bool>("use_kv_cache", true);
    r.kv_cache_placement = kv_cache_placement_setting(run, run.device().device());
    r.o.device = run.device().device();
    r.o.dtype = w.dtype;
    run.refuse_if_set("workload.frames", "Qwen-Image 2.1 makes still images");
    run.refuse_if_set("workload.fps", "Qwen-Image 2.1 makes still images");
    run.refuse_if_set("vae.temporal_frames", "the Qwen-Image 2.1 VAE decodes one frame (temporal windows are for video)");
    run.refuse_if_set("workload.strength", "Qwen-Image 2.1 conditions on reference images (--image); it has no "
                      "strength img2img");

    r.prompt.require(run, "qwen_image_21: no prompt: give -p/--prompt TEXT (the checkpoint's Qwen3-VL text encoder "
                          "encodes it) or --prompt-embeds FILE (ddo-host encode writes one)");
    if (r.prompt.encode_only) {
        for (const char * k : {"workload.width", "workload.height", "workload.steps", "workload.sigmas", "workload.num_images",
                               "cache.kind"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
        if (!run.latents_file().empty()) throw UsageError("ddo-host encode: --latents belongs to a generating run");
    }
    // The checkpoint is this plugin's before anything is read: exit 2 naming the class otherwise. (The host already
    // checked model_index.json against the plugin's pipeline classes.)
    run.require_model_dir();
    run.check_class("transformer/config.json", {"QwenImage21Transformer2DModel"});
    run.check_class("vae/config.json", {"AutoencoderKLQwenImage21"});
    if (r.prompt.from_text) run.check_class("text_encoder/config.json", {"Qwen3VLForConditionalGeneration"});
    return r;
}

ModelFiles open_checkpoint(model::ModelRun & run, const Request & r) {
    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "vae", "scheduler"};
    if (r.prompt.from_text) components.insert(components.begin(), "text_encoder");
    run.record_checkpoint(components);
    auto m = ModelFiles::open(run.model_dir(), run.component("transformer"));
    run.add_checkpoint_facts({{"transformer_blocks", m.transformer_config.num_layers},
                              {"block_payload_bytes", block_payload_bytes(m.transformer, m.transformer_config, 0)}});
    return m;
}

// The sampling grid: workload.sigmas (the pipeline's sigmas=), else model_index.json sample_sigmas (the model
// author's default, which the pipeline uses unless told otherwise), else linspace(1, 1/steps, steps). An explicit
// workload.steps is honoured over sample_sigmas (the pipeline would ignore it; the report says which was used).
struct Grid {
    std::vector<float> sigmas;
    std::string source;
};

Grid sampling_grid(model::ModelRun & run, const model::Workload & w, const ModelFiles & m) {
    if (auto s = model::requested_sigmas(run, w, "workload.sigmas sets the grid; its length is the number of steps "
                                                 "(QwenImage21Pipeline sigmas=)"))
        return {std::move(*s), "workload.sigmas"};
    if (m.sample_sigmas && !w.steps_set)
        return {sigmas_from(*m.sample_sigmas), "model_index.json sample_sigmas (the checkpoint's default grid)"};
    std::string source = w.steps_set ? "workload.steps" : "the plugin's default steps";
    if (m.sample_sigmas)
        source += " (the checkpoint's sample_sigmas is not used because workload.steps was set; QwenImage21Pipeline "
                  "would ignore num_inference_steps)";
    return {default_sigmas(w.steps), "linspace(1, 1/steps, steps) from " + source};
}

// The prompt embeddings of a --prompt-embeds file (empty from text: encode_prompt fills them) and whether the run
// guides. Guidance as diffusers: true_cfg_scale > 1 guides only with a negative prompt; without one it is off.
struct Conditioning {
    PromptEmbeds embeds;
    bool guide = false;
};

Conditioning resolve_guidance(model::ModelRun & run, Request & r, const ModelFiles & m) {
    Conditioning c;
    const auto & p = r.prompt;
    if (p.have_embeds) {
        run.not_used("text_encoder", "the prompt embeddings were read from --prompt-embeds " + run.prompt_embeds().string());
        run.record_input("prompt_embeds", run.prompt_embeds());
        c.embeds = load_prompt_embeds(run.prompt_embeds(), m.transformer_config.context_in_dim);
    }
    const bool have_negative = p.from_text ? r.w.negative_prompt.has_value() : c.embeds.neg_embeds.has_value();
    double & scale = r.o.true_cfg_scale;
    if (!p.given() || p.encode_only) {
        // A dry run without a prompt plans the weights only; guidance is decided when a prompt is given.
    } else if (scale > 1.0 && !have_negative) {
        run.adjust("workload.guidance_scale", scale, 1.0,
                   std::string(p.from_text ? "no negative prompt (-n) was given"
                                           : "the prompt embeddings carry no negative_prompt_embeds") +
                       ", so there is nothing to guide against (QwenImage21Pipeline: classifier-free guidance is not "
                       "enabled); add one to guide");
        scale = 1.0;
    } else if (scale <= 1.0 && have_negative) {
        run.adjust(p.from_text ? "workload.negative_prompt" : "negative_prompt_embeds",
                   p.from_text ? nlohmann::json(*r.w.negative_prompt) : nlohmann::json("supplied"), "unused",
                   "guidance scale " + nlohmann::json(scale).dump() + " <= 1: no classifier-free guidance, as in "
                   "QwenImage21Pipeline");
    }
    c.guide = scale > 1.0 && have_negative;
    return c;
}

// The grid into the pipeline's options.
Grid resolve_grid(model::ModelRun & run, Request & r, const ModelFiles & m) {
    auto grid = sampling_grid(run, r.w, m);
    r.o.sigmas = grid.sigmas;
    r.o.steps = int(grid.sigmas.size());
    return grid;
}

// What the run will do, decided before any weight loads: the grid, the initial latents, the outputs (existing
// ones refused now, not after denoising), the component plans and the VAE strategy.
struct RunPlan {
    Grid grid;
    model::ComponentPlan transformer, vae, vision;  // vision: the vision tower's, with condition images
    VaeChoice vae_choice;
};

// The components' plans and the VAE's strategy, from the run's settings (again under fit.policy = auto: Note [Fitting a
// run]).
void plan_components(model::ModelRun & run, const Request & r, const ModelFiles & m, RunPlan & p) {
    p.transformer = run.plan("transformer");
    p.vae = run.plan("vae");
    if (r.refs.any()) p.vision = run.plan("vision_tower");
    p.vae_choice = choose_vae_strategy(p.vae, m.vae, m.vae_config, r.w.num_images, r.o.width, r.o.height, r.o.dtype);
}

RunPlan plan_run(model::ModelRun & run, Request & r, const ModelFiles & m, Grid grid) {
    RunPlan p{std::move(grid), {}, {}, {}, {}};
    if (!run.latents_file().empty()) {
        run.record_input("latents", run.latents_file());
        r.o.latents = load_initial_latents(run.latents_file(), r.w.num_images, m.transformer_config.in_channels,
                                           r.o.width, r.o.height);
    }
    if (r.prompt.encode_only) run.plan_tensor_file();
    else if (r.prompt.given()) run.plan_images(r.w.num_images);
    // cache.* checked now (a refused setting before anything loads); the denoising loop runs through it.
    if (!r.prompt.encode_only) r.o.step_cache = run.step_cache(r.o.steps);
    if (r.o.step_cache)  // taylorseer: its module patterns resolved against the modules the block loop can hook
        r.o.step_cache->bind_modules(hookable_module_names(m.transformer_config),
                                     diffusers_module_names(m.transformer_config));
    // taylorseer with the prefix KV cache: step 0 runs the prefix and the target rows, the later steps the target rows
    // only, so a module predicted at step 1 would be extrapolated from outputs of another shape (diffusers' hook fails
    // there the same way). Step 1 must compute.
    if (const auto * cache = r.o.step_cache; cache && cache->settings().kind == model::StepCacheKind::taylorseer &&
                                             r.o.use_kv_cache && m.transformer_config.causal_condition &&
                                             cache->settings().disable_cache_before_step < 2 && r.o.steps > 1)
        throw UsageError("cache.disable_cache_before_step = " + std::to_string(cache->settings().disable_cache_before_step) +
                         " with the prefix KV cache (plugin.qwen_image_21.use_kv_cache = true): step 0 computes the "
                         "prefix and the target together and the later steps the target only, so step 1 cannot be "
                         "predicted from step 0's outputs; set cache.disable_cache_before_step to 2 or more, or "
                         "plugin.qwen_image_21.use_kv_cache = false");
    plan_components(run, r, m, p);
    return p;
}

void record_workload(model::ModelRun & run, const Request & r, const ModelFiles & m, const RunPlan & p, bool guide,
                     const nlohmann::json & text_encoder_state) {
    const auto & o = r.o;
    const bool causal = m.transformer_config.causal_condition;
    run.record_workload({{"model", kPlugin}, {"width", o.width}, {"height", o.height}, {"steps", o.steps},
                         {"sigmas", model::grid_json(o.sigmas)}, {"sigmas_source", p.grid.source},
                         {"seed", o.seed}, {"num_images", r.w.num_images},
                         {"initial_latents", o.latents ? "from --latents (identity.checkpoint.inputs)" : "seeded noise"},
                         {"seed_per_image", "one noise draw for all images from seed " + std::to_string(o.seed) +
                                                " (image i is the i-th sample of it, as diffusers' num_images_per_prompt)"},
                         {"guidance_scale", o.true_cfg_scale}, {"use_kv_cache", o.use_kv_cache},
                         // The prefix KV cache acts on the causal condition prefix (QwenImage21Pipeline: cache_enabled).
                         {"kv_cache_used", o.use_kv_cache && causal},
                         {"kv_cache_reason", !o.use_kv_cache ? "plugin.qwen_image_21.use_kv_cache = false"
                                             : causal ? "use_kv_cache and a causal condition prefix"
                                                      : "the transformer config has causal_condition = false"},
                         {"dtype", c10::toString(o.dtype)}, {"device", o.device.str()},
                         {"prompt", r.prompt.prompt(r.w)},
                         {"negative_prompt", r.prompt.from_text && r.w.negative_prompt ? nlohmann::json(*r.w.negative_prompt)
                                                                                      : nlohmann::json(nullptr)},
                         {"prompt_embeddings", r.prompt.embeddings()},
                         {"negative_prompt_embeddings", guide ? (r.prompt.from_text ? "encoded" : "supplied") : "none"},
                         {"vae_strategy", vae_strategy_name(p.vae_choice.strategy)},
                         {"references", references_json(r.refs)},
                         {"output_resolution", r.refs.any() ? nlohmann::json(r.refs.output_resolution) : nlohmann::json(nullptr)},
                         // The template revision: the references' labels and layout changed across diffusers
                         // revisions (conditioning-serving-peers.md §1.4).
                         {"prompt_template", r.refs.any() ? "prompt_template_ti2i of diffusers 0.42.1 (<imageN> + "
                                                            "vision block per reference, space-joined, before the prompt)"
                                                          : "prompt_template_t2i"},
                         {"text_encoder", text_encoder_state}});
}

// The checkpoint's text encoder, checked against the transformer it feeds; its tokenizer recorded as an input.
PromptEncoder open_prompt_encoder(model::ModelRun & run, const ModelFiles & m) {
    auto encoder = PromptEncoder::open(run.model_dir(), run.component("text_encoder").file);
    if (encoder.config().hidden_size != m.transformer_config.context_in_dim)
        throw RuntimeError((run.model_dir() / "text_encoder" / "config.json").string() + ": hidden_size " +
                           std::to_string(encoder.config().hidden_size) + " contradicts the transformer's "
                           "context_in_dim " + std::to_string(m.transformer_config.context_in_dim));
    run.record_input("tokenizer", encoder.tokenizer_file());
    return encoder;
}

// The prompt (and, when guiding or encoding with -n, the negative prompt) through the text encoder in phase
// "encode": one progress count over both prompts' layers (the negative prompt is encoded after the prompt).
PromptEmbeds encode_text(model::ModelRun & run, const Request & r, const PromptEncoder & encoder,
                         model::ComponentWeights & te, bool guide, const PromptImages * images) {
    run.begin_phase("encode");
    text::TextTowerCallbacks tcb;
    tcb.check_interrupted = [&](int layer) { run.check_interrupted("at text encoder layer " + std::to_string(layer)); };
    const int prompts = (guide || (r.prompt.encode_only && r.w.negative_prompt)) ? 2 : 1;
    int done_before = 0;
    tcb.on_layer = [&](int layer, int total) { run.step(done_before + layer, total * prompts); };
    PromptEmbeds e;
    auto pos = encoder.encode(te, {*r.w.prompt}, r.o.dtype, r.o.device, tcb, images);
    e.embeds = pos.embeds;
    e.mask = pos.mask;
    e.image_pad_mask = pos.image_pad_mask;
    if (prompts == 2) {
        done_before = int(encoder.config().num_layers);
        // The negative prompt sees the same references (the pipeline's encode_prompt(image=input_images, ...)).
        auto neg = encoder.encode(te, {*r.w.negative_prompt}, r.o.dtype, r.o.device, tcb, images);
        e.neg_embeds = neg.embeds;
        e.neg_mask = neg.mask;
        e.neg_image_pad_mask = neg.image_pad_mask;
    }
    run.add_checkpoint_facts({{"prompt_tokens", pos.tokens.size()}});
    return e;
}

// `ddo-host encode`: the embeddings as the --prompt-embeds file a later run reads.
void write_embeddings(model::ModelRun & run, const Request & r, const PromptEmbeds & e) {
    run.begin_phase("write_output");
    model::NamedTensors t{{"prompt_embeds", e.embeds}};
    if (e.mask) t.push_back({"prompt_embeds_mask", e.mask->to(at::kByte)});
    if (e.neg_embeds) t.push_back({"negative_prompt_embeds", *e.neg_embeds});
    if (e.neg_mask) t.push_back({"negative_prompt_embeds_mask", e.neg_mask->to(at::kByte)});
    run.write_tensors(t, {{"producer", "ddo-host encode (qwen_image_21)"}, {"prompt", *r.w.prompt},
                          {"negative_prompt", r.w.negative_prompt.value_or("")}});
}

// What the prompt embeddings of a run without references depend on besides the text encoder's weights (the kit adds
// those): the server's embeddings cache key (ModelRun::kept_embeddings). nullopt: not cached (references: the vision
// tower's tokens are part of the prompt; `ddo-host encode` writes a file and ends).
std::optional<nlohmann::json> embeddings_key(const Request & r, bool guide) {
    if (r.refs.any() || r.prompt.encode_only) return std::nullopt;
    return nlohmann::json{{"prompt", *r.w.prompt},
                          {"negative_prompt", guide ? nlohmann::json(r.w.negative_prompt.value_or("")) : nlohmann::json(nullptr)},
                          {"template", "prompt_template_t2i"},
                          {"dtype", c10::toString(r.o.dtype)},
                          {"device", r.o.device.str()}};
}

model::NamedTensors embeddings_tensors(const PromptEmbeds & e) {
    model::NamedTensors t{{"embeds", e.embeds}};
    if (e.mask) t.emplace_back("mask", *e.mask);
    if (e.neg_embeds) t.emplace_back("neg_embeds", *e.neg_embeds);
    if (e.neg_mask) t.emplace_back("neg_mask", *e.neg_mask);
    return t;
}

PromptEmbeds embeddings_from(const model::NamedTensors & tensors, const c10::Device & device) {
    PromptEmbeds e;
    for (const auto & [name, kept] : tensors) {
        auto t = kept.to(device);
        if (name == "embeds") e.embeds = t;
        else if (name == "mask") e.mask = t;
        else if (name == "neg_embeds") e.neg_embeds = t;
        else if (name == "neg_mask") e.neg_mask = t;
    }
    return e;
}

// The text stage (with -p): the encoder on run.plan("text_encoder"), unloaded (owners checked zero) before the
// transformer phase. False when the run ends here: `ddo-host encode` (written, or validated in a dry run). Under a
// server the embeddings of a prompt it encoded before are taken from its cache: phase "encode" with no step, the
// text encoder not opened. `opened`: the prompt encoder the forecast opened (empty: opened here).
bool encode_prompt(model::ModelRun & run, const Request & r, const ModelFiles & m, const RunPlan & p, Conditioning & c,
                   std::optional<PromptEncoder> & opened) {
    if (!r.prompt.from_text) return true;
    const auto key = run.dry_run() ? std::nullopt : embeddings_key(r, c.guide);
    if (key)
        if (auto kept = run.kept_embeddings("text_encoder", *key, "encode")) {
            c.embeds = embeddings_from(*kept, r.o.device);
            run.not_used("text_encoder", "the server's embeddings cache held this prompt's embeddings");
            record_workload(run, r, m, p, c.guide, "not loaded: the server kept these prompt embeddings (embeddings cache hit)");
            return true;
        }
    if (!opened) opened.emplace(open_prompt_encoder(run, m));
    auto & encoder = *opened;
    // The references through the vision tower first (its own phase and plan, unloaded before the text tower).
    std::optional<PromptImages> images;
    if (r.refs.any()) images = encode_vision(run, p.vision, encoder, r.refs, r.o.dtype, r.o.device);
    auto te = run.open_weights(run.plan("text_encoder"), encoder.weights(), encoder.groups(), r.o.dtype);
    run.add_checkpoint_facts({{"text_encoder_layers", encoder.config().num_layers},
                              {"prompt_template_drop", encoder.drop_index()}});
    if (run.dry_run()) {
        // The prompt tokenizes and holds no vision token of its own.
        (void)encoder.template_ids(*r.w.prompt, images ? images->tokens : std::vector<std::int64_t>{});
        run.unload(std::move(te));                // nothing was uploaded; the transformer is validated next
        if (r.prompt.encode_only) run.log(2, r.prompt.dry_run_summary());
        return !r.prompt.encode_only;
    }
    c.embeds = encode_text(run, r, encoder, *te, c.guide, images ? &*images : nullptr);
    if (key) run.keep_embeddings("text_encoder", *key, embeddings_tensors(c.embeds));
    run.unload(std::move(te));
    record_workload(run, r, m, p, c.guide, "unloaded after encode, before denoise");
    if (!r.prompt.encode_only) return true;
    write_embeddings(run, r, c.embeds);
    return false;
}

// The transformer: its globals resident, its blocks on the engine (transformer_plan's route). Both are freed after the
// last denoise, before decoding (the VAE has their memory: Note [Memory forecast]).
struct LoadedTransformer {
    std::optional<Transformer> transformer;
    std::unique_ptr<model::ComponentWeights> weights;
    std::unique_ptr<BlockSource> blocks;
};

// The transformer's plan: a step cache's always-run blocks resident first on the dynamic route (Note [Step caching]).
model::ComponentPlan transformer_plan(const RunPlan & p, const model::StepCache * step_cache) {
    auto plan = p.transformer;
    if (const auto * cache = step_cache)
        for (const int64_t i : cache->always_run()) plan.resident_first.push_back("transformer_blocks." + std::to_string(i));
    return plan;
}

// Note [Memory forecast]: what the forecast takes from the workload, not from the settings: computed once, before the
// fit ladder plans again for each of its rungs (a text prompt is tokenized here, once).
// `encoder`: the text prompt's (null: prompt embeddings given, or ddo-host encode).
MemoryInputs memory_inputs(const Request & r, const ModelFiles & m, const Conditioning & c, const PromptEncoder * encoder) {
    const auto & tc = m.transformer_config;
    MemoryInputs in;
    in.batch = r.w.num_images;
    in.guide = c.guide;
    in.prompt_tokens_known = c.embeds.embeds.defined();
    in.prompt_tokens = in.prompt_tokens_known ? c.embeds.embeds.size(1) : 256;
    std::vector<std::int64_t> slots;  // each reference's vision slots (2x2 latent tokens each)
    for (const auto & ref : r.refs.items) {
        in.reference_tokens += (ref.width / 16) * (ref.height / 16);
        slots.push_back((ref.width / 16) * (ref.height / 16) / 4);
    }
    if (!in.prompt_tokens_known && encoder) {
        // A text prompt's length: its template tokenized now (the tokenizer only; the pipeline drops the system turn),
        // the longer of the prompt and, when guiding, the negative prompt (Note [Memory forecast]).
        auto length = [&](const std::string & text) { return std::int64_t(encoder->template_ids(text, slots).size()); };
        in.tower_tokens = length(*r.w.prompt);
        if (c.guide && r.w.negative_prompt) in.tower_tokens = std::max(in.tower_tokens, length(*r.w.negative_prompt));
        in.prompt_tokens = in.tower_tokens - encoder->drop_index();
        in.prompt_tokens_known = true;
        // The tower's own phase is stated without references (with them the vision features join it: not yet).
        if (!r.refs.any()) {
            in.text_tower = encoder->config();
            in.prompts = c.guide ? 2 : 1;
        }
    } else if (r.refs.any() && !in.prompt_tokens_known) {
        for (const auto n : slots) in.prompt_tokens += n;  // the vision slots
    }
    in.kv_cache = r.o.use_kv_cache && tc.causal_condition;
    in.kv_cache_on_host = r.kv_cache_placement == "host";
    in.dtype = r.o.dtype;
    in.step_cache = r.o.step_cache;
    return in;
}

// Note [Memory forecast]: every phase's peak under the plans of `p`, known before anything loads (ModelRun::fit decides
// what happens when one does not fit).
void forecast_run(model::ModelRun & run, const Request & r, const ModelFiles & m, const RunPlan & p, MemoryInputs in,
                  PromptEncoder * encoder) {
    if (r.prompt.encode_only) return;
    if (in.text_tower) run.forecast_weights(run.plan("text_encoder"), encoder->weights(), encoder->groups(), r.o.dtype);
    run.forecast_weights(transformer_plan(p, r.o.step_cache), run.component("transformer"),
                         transformer_groups(m.transformer_config), r.o.dtype);
    in.vae = p.vae_choice;
    run.forecast_memory({r.o.width, r.o.height, 1},
                        [&m, in](const model::ForecastShape & s) { return stage_memory(m, in, s); }, kMultiple);
}

LoadedTransformer open_transformer(model::ModelRun & run, const ModelFiles & m, const RunPlan & p, at::ScalarType dtype,
                                   const model::StepCache * step_cache) {
    const auto & tc = m.transformer_config;
    const auto plan = transformer_plan(p, step_cache);
    LoadedTransformer t;
    t.weights = run.open_weights(plan, run.component("transformer"), transformer_groups(tc), dtype);  // nothing allocated yet
    // Phase denoise begins before the globals are read: they are its (Note [Memory forecast]: a phase's measured peak
    // is what was allocated within it); the engine's weights begin their phase with it.
    if (!run.dry_run()) run.begin_phase("denoise");
    t.transformer.emplace(tc, load_transformer_globals(m.transformer, tc, dtype, run.lora("transformer", dtype).get(), run.device().device()));
    t.blocks = engine_blocks(*t.weights, tc);
    return t;
}

// Phase "denoise": the latents of one generation; the transformer's weights unloaded after the last one.
at::Tensor denoise_latents(model::ModelRun & run, const ModelFiles & m, LoadedTransformer & t,
                           const PromptEmbeds & embeds, const PipelineOptions & o, bool last,
                           const ReferenceLatents * refs, const KvCachePlacement & kv) {
    if (run.phase() != "denoise") run.begin_phase("denoise");  // generation 1's began as the transformer's globals were read
    PipelineCallbacks cb;
    cb.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step)); };
    cb.on_step = [&](int step, int total) { run.step(step, total); };
    KvCacheStats stats;
    auto latents = denoise(m, *t.transformer, *t.blocks, embeds, o, cb, refs, &stats);
    run.finish_step_cache();
    run.record_counters("kv_cache", kv_cache_json(kv, stats));
    if (last) {
        t.blocks.reset();
        run.unload(std::move(t.weights));
        t.transformer.reset();  // its globals
    }
    return latents;
}

// Phase "decode": the VAE decoder built for it with the strategy decided up front; the route executed (a tiled
// decode of an image that fits one tile runs in one piece) and the VAE's counters recorded.
at::Tensor decode_image(model::ModelRun & run, const ModelFiles & m, const RunPlan & p, const at::Tensor & latents,
                        const PipelineOptions & o) {
    run.begin_phase("decode");
    const auto & choice = p.vae_choice;
    VaeDecoder vae(m.vae, m.vae_config, o.dtype, o.device, choice.strategy, choice.tiling);
    vae.set_tile_progress(run.decode_piece_progress("tile"));  // a long decode shows progress and can be interrupted
    vae.set_stage_check(run.decode_stage_check());
    auto image = decode_latents(m, vae, latents, o);
    const bool fell_back = choice.strategy == VaeStrategy::tiled && !vae.last_decode_tiled();
    const std::string executed = fell_back ? "resident" : vae_strategy_name(choice.strategy);
    // The reason names why the executed strategy is not the requested one, with the sizes that decided it.
    std::string note = choice.reason;
    if (fell_back)
        note += std::string(note.empty() ? "" : "; ") + "the image (" + std::to_string(o.width) + "x" +
                std::to_string(o.height) + ") fits in one tile (" + std::to_string(choice.tiling.tile_sample_min_width) +
                "x" + std::to_string(choice.tiling.tile_sample_min_height) + "): decoded in one piece, as diffusers' "
                "decode does with tiling enabled";
    run.record_route("vae", choice.requested, executed, note);
    nlohmann::json counters = {{"strategy", executed}, {"requested", choice.requested},
                               {"weight_bytes", vae.weight_bytes()}, {"leaf_uploads", vae.uploads()}};
    if (!note.empty()) counters["reason"] = note;
    if (!choice.facts.is_null()) counters["auto"] = choice.facts;
    run.record_counters("vae", counters);
    return image;
}

}  // namespace

void run_qwen_image_21(model::ModelRun & run) {
    auto r = resolve_workload(run);
    const auto m = open_checkpoint(run, r);
    auto grid = resolve_grid(run, r, m);
    auto c = resolve_guidance(run, r, m);
    auto p = plan_run(run, r, m, std::move(grid));
    const auto text_state = r.prompt.from_text ? nlohmann::json("planned") : nlohmann::json(nullptr);
    record_workload(run, r, m, p, c.guide, text_state);
    if (!r.refs.any())
        run.not_used("vision_tower", "no reference image (--image) was given; the vision tower encodes references only");
    // Note [Memory forecast]: a text prompt's tokens and its tower's shapes and plan (the tokenizer and headers only).
    std::optional<PromptEncoder> encoder;
    if (r.prompt.from_text && !r.prompt.encode_only) encoder.emplace(open_prompt_encoder(run, m));
    const auto in = memory_inputs(r, m, c, encoder ? &*encoder : nullptr);
    if (run.fit([&] { plan_components(run, r, m, p); forecast_run(run, r, m, p, in, encoder ? &*encoder : nullptr); }))
        record_workload(run, r, m, p, c.guide, text_state);  // with the settings fit.policy = auto applied
    const bool go_on = encode_prompt(run, r, m, p, c, encoder);
    encoder.reset();  // its tokenizer is not needed past the text stage
    if (!go_on) {
        run.not_used_except({"text_encoder", "vision_tower"}, "ddo-host encode writes the prompt embeddings only");
        return;
    }

    // prepare_latents: the references' latents (encoded once; every generation reuses them).
    std::optional<ReferenceLatents> ref_latents;
    if (r.refs.any() && !run.dry_run())
        ref_latents = encode_reference_latents(run, m, p.vae, r.refs, r.o.dtype, r.o.device);
    auto transformer = open_transformer(run, m, p, r.o.dtype, r.o.step_cache);  // begins phase denoise
    if (run.dry_run()) {
        run.log(2, r.prompt.dry_run_summary());
        return;
    }
    auto embeds = repeat_per_prompt(c.embeds, r.w.num_images);
    if (!c.guide) {
        embeds.neg_embeds.reset();
        embeds.neg_mask.reset();
    }
    // The prefix KV cache's place, decided with the transformer loaded (its residents already on the device).
    const auto kv = place_kv_cache(r.kv_cache_placement, p.transformer, m.transformer_config, embeds, r.o, c.guide);
    r.o.kv_cache_on_host = kv.on_host;
    r.o.kv_cache_pinned = kv.pinned;
    // runtime.generation_repeats: the transformer's weights stay loaded between generations (the point of a warm
    // run); each generation's VAE decoder is built for its decode phase, as in a single generation.
    const int generations = run.generations();
    for (int g = 1; g <= generations; ++g) {
        run.begin_generation(g);
        if (g > 1 && r.o.step_cache) r.o.step_cache->reset();  // each generation starts with no kept residuals
        const auto latents = denoise_latents(run, m, transformer, embeds, r.o, g == generations,
                                             ref_latents ? &*ref_latents : nullptr, kv);
        const auto image = decode_image(run, m, p, latents, r.o);
        run.begin_phase("write_output");
        run.write_images(image);
    }
}

}  // namespace ddo::qwen_image_21
