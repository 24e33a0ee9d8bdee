// The ltx2_image run (reference: the composed image pipeline of tools/reference/ltx2_image_fixtures.py, following
// DEVAIEXP/ltx2-image-diffusers modular_blocks_ltx2_image.py): resolve_request -> open_checkpoint -> plan_run (size,
// guidance, prompt embeddings, schedule, plans) -> encode_prompt (Gemma-3 on the engine, as
// LTX2ImageTextEncoderStep: LTX2Pipeline's _get_gemma_prompt_embeds, max_sequence_length 1024, negative prompt ""
// under guidance; `ddo-host encode` ends here and writes the embeddings) -> encode_text (image connectors; a dry run
// ends here) -> [img2img: encode_image (the condition image resized with PIL's LANCZOS to the run's size, the video
// VAE's encoder, the posterior sampled and normalised, noised at the strength's first sigma; Note [LTX-2 image
// img2img])] -> denoise_image (the audio-less DiT) -> decode_image (LTX-2.3 video VAE, frame 0) -> PNG.
#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/media/image_resize.hpp"
#include "ddo/model/condition_image.hpp"
#include "ddo/model/run_request.hpp"
#include "image_connectors.hpp"
#include "image_memory_model.hpp"
#include "image_pipeline.hpp"
#include "image_transformer.hpp"
#include "original_names.hpp"
#include "prompt_encoder.hpp"
#include "run_stages.hpp"
#include "video_denoise.hpp"
#include "video_vae_choice.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_encoder.hpp"
#include "video_vae_tiling.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {
namespace {

constexpr const char * kPlugin = "ltx2_image";

// The modular block's defaults (544 x 960) and the distilled runner's 8 steps, guidance 1.
constexpr model::WorkloadDefaults kDefaults{.width = 960, .height = 544, .steps = 8, .seed = 0};

// Img2img's default strength: the distilled runner's (run_distilled_img2img.py --strength 0.20, paired with its 8
// steps, the plugin's default steps); the modular block's own default is 0.55 with 30 steps (Note [LTX-2 image
// img2img]).
constexpr double kDefaultStrength = 0.2;

// What was asked, checked before anything is read.
struct Request {
    model::Workload w;
    model::PromptSource prompt;
    int64_t max_sequence_length = 1024;  // LTX2ImageTextEncoderStep's default
    std::optional<double> strength;      // img2img (one workload.images entry): the effective strength
};

Request resolve_request(model::ModelRun & run) {
    run.accept_step_cache();  // the denoising loop runs through run.step_cache (cache.*)
    Request r{run.workload(kDefaults), {}, 0, std::nullopt};
    run.require_model_dir();
    run.check_class("transformer/config.json", {"LTX2ImageTransformer2DModel"});
    run.check_class("connectors/config.json", {"LTX2ImageTextConnectors"});
    run.check_class("vae/config.json", {"AutoencoderKLLTX2Video"});
    run.refuse_if_set("workload.frames", "ltx2_image makes one image (one latent frame); use ltx2_video for clips");
    run.refuse_if_set("workload.fps", "ltx2_image makes one image (its time coordinates are one frame at 24 fps); "
                                      "use ltx2_video for clips");
    // Img2img: one image (@FRAME is a video's keyframe: refused) and a strength in (0, 1].
    if (r.w.images.size() > 1)
        throw UsageError(std::string(kPlugin) + ": " + std::to_string(r.w.images.size()) + " images in workload.images "
                         "(--image): img2img refines one image; give one --image FILE");
    if (r.w.images.empty() && r.w.strength)
        throw UsageError(std::string(kPlugin) + ": workload.strength (--strength) is img2img's: give --image FILE "
                         "with it, or drop it for text-to-image");
    if (!r.w.images.empty()) {
        if (model::parse_condition_image(r.w.images[0], "workload.images[0]").frame != 0)
            throw UsageError(std::string(kPlugin) + ": workload.images[0] = '" + r.w.images[0] + "': a frame index "
                             "(@FRAME) places a keyframe in a video (ltx2_video); ltx2_image refines one image: give "
                             "the file alone");
        run.refuse_if_set("workload.sigmas", "img2img slices the linspace(1, 1/steps, steps) grid by the strength "
                                             "(the original's get_strength_sigmas): give workload.steps and "
                                             "workload.strength");
        r.strength = r.w.strength.value_or(kDefaultStrength);
        strength_sigmas(r.w.steps, *r.strength, "workload.strength");  // UsageError outside (0, 1]
    }
    // Where the prompt comes from: text (the checkpoint's Gemma-3 encodes it) or a --prompt-embeds file.
    r.prompt = model::PromptSource::of(run, r.w);
    if (r.prompt.encode_only)
        for (const char * k : {"workload.width", "workload.height", "workload.steps", "workload.sigmas",
                               "workload.images", "workload.strength", "cache.kind"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
    r.max_sequence_length = max_sequence_length(run, "the image pipeline");
    if (r.w.num_images != 1)
        throw UsageError(std::string(kPlugin) + ": workload.num_images = " + std::to_string(r.w.num_images) +
                         ": one image per run is implemented; run again with another seed");
    r.prompt.require(run, std::string(kPlugin) + ": no prompt: give -p/--prompt TEXT (the checkpoint's Gemma-3 text "
                          "encoder encodes it) or --prompt-embeds FILE (the stacked Gemma-3 hidden states; ddo-host "
                          "encode writes one)");
    if (!run.latents_file().empty())
        throw UsageError(std::string(kPlugin) + ": --latents is not implemented; the noise is drawn from workload.seed");
    if (r.prompt.from_text) run.check_class("text_encoder/config.json", {"Gemma3ForConditionalGeneration"});
    return r;
}

// The checkpoint opened and cross-checked (ImageModel::open), with the prompt encoder when the prompt is text.
struct Checkpoint {
    ImageModel m;
    std::optional<Ltx2PromptEncoder> encoder;
};

Checkpoint open_checkpoint(model::ModelRun & run, const Request & r) {
    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "connectors", "vae", "scheduler"};
    if (r.prompt.from_text) components.insert(components.begin(), {"text_encoder", "tokenizer"});
    run.set_original_names("transformer", original_name_renames());  // Lightricks' LoRAs use them
    run.record_checkpoint(components);
    Checkpoint c{ImageModel::open(run.model_dir(), with_original_names(run.component("transformer"), "transformer")), std::nullopt};
    if (r.prompt.from_text) c.encoder = open_prompt_encoder(run, c.m.connectors_config);
    const auto & tc = c.m.transformer_config;
    uint64_t block_bytes = 0;
    for (const auto & [name, shape] : image_block_specs(tc, 0)) block_bytes += c.m.transformer.nbytes_of(name);
    run.add_checkpoint_facts({{"transformer_blocks", tc.num_layers}, {"block_payload_bytes", block_bytes}});
    return c;
}

// Guidance: CFG scale and rescale, PAG scale and blocks (the denoise step's default: [28] when the transformer has
// more than 28 blocks, else [num_blocks // 2]); blocks that do not exist are refused.
ImageGuidance resolve_guidance(model::ModelRun & run, const model::Workload & w, const TransformerConfig & tc) {
    ImageGuidance g;
    g.cfg = w.guidance_scale.value_or(1.0);
    g.rescale = run.option<double>("guidance_rescale", 0.7);
    g.pag = run.option<double>("pag_scale", 0.0);
    const bool pag_layers_set = !run.option<nlohmann::json>("pag_applied_layers", nullptr).is_null();
    g.pag_blocks = run.option<std::vector<int64_t>>("pag_applied_layers",
                                                    {tc.num_layers > 28 ? int64_t(28) : tc.num_layers / 2});
    for (int64_t b : g.pag_blocks)
        if (b < 0 || b >= tc.num_layers)
            throw UsageError("plugin.ltx2_image.pag_applied_layers: block " + std::to_string(b) + " does not exist (the "
                             "transformer has " + std::to_string(tc.num_layers) + " blocks, 0.." +
                             std::to_string(tc.num_layers - 1) + ")" + (pag_layers_set ? "" : " (default)"));
    return g;
}

// The --prompt-embeds file's embeddings; without negative embeddings classifier-free guidance is off.
PromptEmbeds load_prompt_file(model::ModelRun & run, const Request & r, const ImageModel & m, ImageGuidance & g) {
    PromptEmbeds embeds;
    if (r.prompt.have_embeds) {
        run.not_used("text_encoder", "the prompt embeddings were read from --prompt-embeds " + run.prompt_embeds().string());
        run.record_input("prompt_embeds", run.prompt_embeds());
        embeds = load_prompt_embeds(run.prompt_embeds(), m.connectors_config);
        if (g.cfg > 1.0 && !embeds.neg_embeds) {
            // LTX2ImageTextEncoderStep would encode negative_prompt ("") here; a run from embeddings does not load
            // the text encoder, so there is no unconditional branch to guide against.
            run.adjust("workload.guidance_scale", g.cfg, 1.0,
                       "the prompt embeddings carry no negative_prompt_embeds (a run from --prompt-embeds does not load "
                       "the text encoder): classifier-free guidance is off; put negative_prompt_embeds in the file "
                       "(ddo-host encode -n '' writes them) or give -p to guide");
            g.cfg = 1.0;
        }
    }
    if (r.prompt.from_text && g.cfg <= 1.0 && r.w.negative_prompt)
        run.adjust("workload.negative_prompt", *r.w.negative_prompt, "unused",
                   "guidance_scale <= 1: no classifier-free guidance, as in LTX2ImageTextEncoderStep");
    return embeds;
}

// Everything decided before a weight loads: the size (multiples of the VAE's spatial compression: the modular block
// refuses others; ddo floors and says so), guidance, prompt embeddings from a file, the schedule (mu as the
// reference reads it from scheduler_config.json; `ddo-host encode` samples nothing), the outputs, each component's
// plan and the VAE strategy.
struct RunPlan {
    model::ImageSize size;
    ImageGeometry geo;
    ImageGuidance guidance;
    PromptEmbeds embeds;
    std::vector<float> sigmas;
    model::FlowMatchSchedule schedule;
    double mu = 0.0;
    model::ComponentPlan connectors, transformer, vae;
    at::Device device = at::kCPU;
    VideoVaeChoice vae_choice;
    // img2img: the strength's slice of the grid and the condition image as the VAE takes it ([1, 3, H, W] in
    // [-1, 1], CPU float32).
    std::optional<StrengthSigmas> slice;
    at::Tensor pixels;
    // cache.* (Note [Step caching]): the denoising loop's steps (img2img: the strength's kept steps) run through it.
    model::StepCache * step_cache = nullptr;
};

// The condition image (read and recorded by run.condition_images before any weight loads), as the original
// prepares it (preprocess_refinement_image + VaeImageProcessor.preprocess): RGB (alpha dropped, as convert("RGB")),
// PIL's LANCZOS resize to the run's size (aspect not kept, no crop), x / 255 * 2 - 1.
at::Tensor read_condition_image(model::ModelRun & run, const model::ImageSize & size) {
    const auto images = run.condition_images();
    const auto & im = images.at(0);
    const auto rgb = model::rgb_of(im.image);
    const auto resized = media::resize_like_pil(rgb, int(size.width), int(size.height), media::ResampleFilter::lanczos);
    run.record_image_preprocess(0, {{"convert", "RGB (alpha dropped)"},
                                    {"resize", "PIL LANCZOS to the run's size, aspect not kept"},
                                    {"filter", "lanczos"},
                                    {"source_width", rgb.width},
                                    {"source_height", rgb.height},
                                    {"width", size.width},
                                    {"height", size.height},
                                    {"aspect_changed", rgb.width * size.height != rgb.height * size.width}});
    return model::image_to_tensor(resized);
}

// The components' plans and the VAE's strategy, from the run's settings (again under fit.policy = auto: Note [Fitting a
// run]).
void plan_components(model::ModelRun & run, const Request & r, const ImageModel & m, RunPlan & p) {
    p.connectors = run.plan("connectors");
    p.transformer = run.plan("transformer");
    p.vae = run.plan("vae");
    p.device = p.transformer.placement.device();
    p.vae_choice = choose_video_vae_strategy(p.vae, m.vae, m.vae_config, 1, 1, p.size.width, p.size.height, r.w.dtype,
                                             p.vae.vae_tiles.temporal_frames);
}

RunPlan plan_run(model::ModelRun & run, const Request & r, const ImageModel & m) {
    RunPlan p;
    const int64_t s = m.vae_config.spatial_compression_ratio;
    p.size = model::floor_size(run, r.w, s, "(the VAE's spatial compression)",
                               "LTX-2 image sizes are multiples of the VAE's spatial compression " + std::to_string(s));
    p.geo = image_geometry(m.vae_config, p.size.height, p.size.width);
    p.guidance = resolve_guidance(run, r.w, m.transformer_config);
    p.embeds = load_prompt_file(run, r, m, p.guidance);
    auto asked = model::requested_sigmas(run, r.w, "workload.sigmas sets the grid; its length is the number of steps");
    if (r.strength) p.slice = strength_sigmas(r.w.steps, *r.strength, "workload.strength");
    p.sigmas = p.slice ? p.slice->sigmas : asked ? std::move(*asked) : model::default_sigmas(r.w.steps);
    if (p.slice) {
        // The VAE's encoder is validated now that the run uses it (Note [Components validated when used]).
        m.vae_config.require_encoder("--image with workload.strength (image-to-image)");
        validate_video_vae_encoder_checkpoint(m.vae, m.vae_config);
        p.pixels = read_condition_image(run, p.size);
    }
    if (!r.prompt.encode_only) p.schedule = ltx2_schedule(m.scheduler_config, m.scheduler_json, p.sigmas, p.geo.tokens());
    p.mu = ltx2_mu(m.scheduler_json, p.geo.tokens());
    if (r.prompt.encode_only) run.plan_tensor_file();
    else if (r.prompt.given()) run.plan_images(1);
    // cache.* checked now (a refused setting before anything loads), on the steps the loop denoises.
    if (!r.prompt.encode_only) p.step_cache = run.step_cache(int(p.sigmas.size()));
    if (p.step_cache)  // taylorseer: its module patterns resolved against the modules the image DiT routes
        p.step_cache->bind_modules(image_hookable_module_names(m.transformer_config),
                                   image_diffusers_module_names(m.transformer_config));
    plan_components(run, r, m, p);
    return p;
}

void record_workload(model::ModelRun & run, const Request & r, const RunPlan & p) {
    const auto & g = p.guidance;
    const auto & c = p.vae_choice;
    nlohmann::json img2img = nullptr;
    if (p.slice)
        img2img = {{"strength", *r.strength},
                   {"strength_requested", r.w.strength ? nlohmann::json(*r.w.strength) : nlohmann::json(nullptr)},
                   {"steps_requested", r.w.steps},
                   {"t_start", p.slice->t_start},
                   {"noise_sigma", p.schedule.sigmas.empty() ? nlohmann::json(nullptr)
                                                             : nlohmann::json(p.schedule.sigmas.front())},
                   {"posterior", "sample"}};
    run.record_workload({{"model", kPlugin}, {"width", p.size.width}, {"height", p.size.height},
                         {"latent", {{"height", p.geo.latent_height}, {"width", p.geo.latent_width}, {"tokens", p.geo.tokens()}}},
                         {"steps", int(p.sigmas.size())}, {"sigmas", model::grid_json(p.schedule.sigmas)}, {"mu", p.mu},
                         {"sigmas_source", r.w.sigmas ? "workload.sigmas"
                                           : p.slice ? "linspace(1, 1/steps, steps)[t_start:] (img2img strength)"
                                                     : "linspace(1, 1/steps, steps)"},
                         {"img2img", img2img},
                         {"seed", r.w.seed},
                         {"guidance", {{"guidance_scale", g.cfg}, {"guidance_rescale", g.rescale}, {"pag_scale", g.pag},
                                       {"pag_applied_layers", g.pag > 0.0 ? nlohmann::json(g.pag_blocks) : nlohmann::json()}}},
                         {"transformer_batch", 1 + int(g.cfg > 1.0) + int(g.pag > 0.0)},
                         {"dtype", c10::toString(r.w.dtype)}, {"device", p.device.str()},
                         {"vae_strategy", video_vae_strategy_name(c.strategy)},
                         {"vae_decision", {{"requested", c.requested}, {"reason", c.reason}, {"auto", c.facts},
                                           {"tiling", {{"tile", c.tiling.tile_sample_min_width},
                                                       {"stride", c.tiling.tile_sample_stride_width}}}}},
                         {"prompt", r.prompt.prompt(r.w)},
                         {"negative_prompt", r.prompt.from_text && g.cfg > 1.0 ? nlohmann::json(r.w.negative_prompt.value_or(""))
                                                                               : nlohmann::json(nullptr)},
                         {"prompt_embeddings", r.prompt.embeddings("Gemma-3")},
                         {"max_sequence_length", r.max_sequence_length}});
}

// Text: Gemma-3 on the engine (its layers are execution groups of component text_encoder), unloaded before the
// connectors run; its stacked hidden states are what --prompt-embeds would have supplied. False when the run ends
// here (`ddo-host encode`: written, or validated in a dry run).
bool encode_prompt(model::ModelRun & run, const Request & r, const Checkpoint & c, RunPlan & p) {
    if (!r.prompt.from_text) return true;
    const auto text = run_text_stage(run, *c.encoder, {kPlugin, *r.w.prompt, r.w.negative_prompt, p.guidance.cfg > 1.0,
                                                       r.prompt.encode_only, r.max_sequence_length, r.w.dtype, p.device});
    if (!text) return false;
    p.embeds = *text;
    return true;
}

// The image connectors on the guidance batch (image_text_batch), unloaded before the DiT's weights are opened.
// nullopt: a dry run, ended here.
std::optional<ImageText> encode_text(model::ModelRun & run, const Request & r, const ImageModel & m, const RunPlan & p) {
    auto conn = open_connectors(run, {p.connectors, image_connector_groups(m.connectors_config)},
                                {p.transformer, image_transformer_groups(m.transformer_config)}, r.w.dtype, r.prompt);
    if (!conn) return std::nullopt;
    const auto & e = p.embeds;
    const auto [text_in, mask_in] = image_text_batch(p.guidance, e.embeds, e.mask, e.neg_embeds.value_or(e.embeds),
                                                     e.neg_mask.value_or(e.mask));
    auto text = image_connectors_forward(m.connectors_config, *conn->view, text_in.to(p.device, r.w.dtype),
                                         mask_in.to(p.device));
    unload(run, *conn);
    return text;
}

// Phase "encode_image" (img2img): the video VAE's encoder on the vae plan (its leaf groups; reported as component
// "vae_encoder"), the posterior sampled with the run's generator (its first draw), normalised, and noised with the
// generator's second draw at the strength's first sigma (scale_noise): the packed start of the denoise, on the
// DiT's device. Note [LTX-2 image img2img].
at::Tensor encode_image(model::ModelRun & run, const model::Workload & w, const ImageModel & m, const RunPlan & p) {
    run.begin_phase("encode_image");
    model::ComponentPlan plan = video_vae_plan(p.vae, p.vae_choice);
    plan.component = "vae_encoder";  // its own counters in the report; the decoder's stay "vae"
    auto enc = open_engine_component(run, plan, "vae", video_vae_encoder_leaf_groups(m.vae_config), w.dtype);
    VideoVaeEncoder encoder(m.vae_config, *enc.view);
    encoder.set_stage_check([&](const std::string & stage) { run.check_interrupted("encoding (" + stage + ")"); });
    const auto moments = encoder.encode_moments(p.pixels.to(w.dtype).unsqueeze(2));
    unload(run, enc);
    const auto draws = draw_img2img_noise(m.transformer_config.in_channels, p.geo, 1, w.seed, moments.scalar_type());
    const auto x0 = normalize_image_latents(posterior_sample(moments, draws.posterior_eps.to(moments.device())), m.vae,
                                            m.vae_config);
    return img2img_start(x0, draws.noise.to(x0.device()), p.schedule).to(p.device);
}

// Phase "denoise": the seeded noise (img2img: `start`, the noised image latents) through the DiT on its plan,
// unloaded after the last step.
at::Tensor denoise_image(model::ModelRun & run, const model::Workload & w, const ImageModel & m, const RunPlan & p,
                         const ImageText & text, const std::optional<at::Tensor> & start) {
    const auto & tc = m.transformer_config;
    auto dit = open_engine_component(run, p.transformer, "transformer", image_transformer_groups(tc), w.dtype);
    run.begin_phase("denoise");
    ImageDenoiseSettings ds;
    ds.guidance = p.guidance;
    ds.dtype = w.dtype;
    ds.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step + 1)); };
    ds.on_step = [&](int step, int total) { run.step(step, total); };
    ds.step_cache = p.step_cache;
    const auto noise = start ? *start : draw_image_noise(tc.in_channels, p.geo, 1, w.seed, p.device);
    auto latents = image_denoise(tc, *dit.view, text, p.geo, noise, p.schedule, ds);
    run.finish_step_cache();
    unload(run, dit);
    return latents;
}

// Phase "decode": the strategy decided up front (vae.strategy; auto per seed 003's table: resident -> leaf ->
// tiled); frame 0 as [1, 3, H, W] in [0, 1].
at::Tensor decode_image(model::ModelRun & run, const model::Workload & w, const ImageModel & m, const RunPlan & p,
                        const at::Tensor & latents) {
    run.begin_phase("decode");
    const auto & choice = p.vae_choice;
    auto vae = open_engine_component(run, video_vae_plan(p.vae, choice), "vae", video_vae_leaf_groups(m.vae_config), w.dtype);
    if (m.vae_config.timestep_conditioning)
        throw UsageError(std::string(kPlugin) + ": vae/config.json timestep_conditioning = true: decode noise is not "
                         "implemented for the image pipeline (the LTX-2.3 VAE is not timestep-conditioned)");
    const auto z = image_latents_for_decode(latents, p.geo, m.vae, m.vae_config).to(w.dtype);
    VideoVaeDecoder decoder(m.vae_config, *vae.view);
    decoder.set_stage_check(run.decode_stage_check());
    const auto pixels = decode_video(decoder, z, {}, choice.strategy, choice.tiling, run.decode_piece_progress("piece"));
    auto image = image_of(pixels).unsqueeze(0);
    run.record_route("vae", choice.requested, video_vae_strategy_name(choice.strategy), choice.reason);
    unload(run, vae);
    return image;
}

}  // namespace

// Note [Memory forecast]: every phase's peak known before anything loads; exit 2 when one does not fit.
void forecast_run(model::ModelRun & run, const Request & r, const ImageModel & m, const RunPlan & p) {
    if (r.prompt.encode_only) return;
    forecast_engine_component(run, p.transformer, "transformer", image_transformer_groups(m.transformer_config), r.w.dtype);
    forecast_engine_component(run, video_vae_plan(p.vae, p.vae_choice), "vae", video_vae_leaf_groups(m.vae_config),
                              r.w.dtype);
    ImageMemoryInputs in;
    in.batch = 1 + (p.guidance.cfg > 1.0 ? 1 : 0) + (p.guidance.pag > 0.0 ? 1 : 0);
    in.text_tokens = p.embeds.embeds.defined() ? p.embeds.embeds.size(1) : r.max_sequence_length;
    in.embeds_given = p.embeds.embeds.defined();
    if (in.embeds_given) {
        in.prompts = 1 + int(p.embeds.neg_embeds.has_value());
        in.embeds_dtype = p.embeds.embeds.scalar_type();
        forecast_engine_component(run, p.connectors, "connectors", image_connector_groups(m.connectors_config), r.w.dtype);
    }
    in.vae = p.vae_choice;
    in.dtype = r.w.dtype;
    in.cuda = p.transformer.placement.cuda;
    in.step_cache = p.step_cache;
    run.forecast_memory({p.size.width, p.size.height, 1},
                        [&m, in](const model::ForecastShape & s) { return image_stage_memory(m, in, s); },
                        m.vae_config.spatial_compression_ratio);
}

void run_ltx2_image(model::ModelRun & run) {
    const auto r = resolve_request(run);
    const auto c = open_checkpoint(run, r);
    const auto & m = c.m;
    auto p = plan_run(run, r, m);
    record_workload(run, r, p);
    if (run.fit([&] { plan_components(run, r, m, p); forecast_run(run, r, m, p); }))
        record_workload(run, r, p);  // with the settings fit.policy = auto applied
    if (!encode_prompt(run, r, c, p)) return;
    const auto text = encode_text(run, r, m, p);
    if (!text) return;
    std::optional<at::Tensor> start;
    if (p.slice) start = encode_image(run, r.w, m, p);
    const auto latents = denoise_image(run, r.w, m, p, *text, start);
    const auto image = decode_image(run, r.w, m, p, latents);
    run.begin_phase("write_output");
    run.write_images(image);
}

}  // namespace ddo::ltx2
