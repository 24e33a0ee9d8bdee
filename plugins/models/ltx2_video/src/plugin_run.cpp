// The ltx2_video run on the model kit, as LTX2Pipeline runs (docs/architecture.md, "The ltx2_video run"):
// resolve_request -> open_checkpoint -> plan_run (clip size, guidance, prompt embeddings, schedule, plans) ->
// encode_prompt (Gemma-3, unloaded; `ddo-host encode` ends here) -> encode_text (connectors; a dry run ends here) ->
// encode_conditions (the condition images through the VAE encoder) -> denoise_clip (stage 1; with an upsampler the
// upsampler and stage 2: clip_stages.hpp) -> decode_inputs (--save-latents writes them) -> decode_audio_latents ->
// decode_video_latents, its frames streamed into the MP4 (and PNG frames) as they become final -> write_output (MP4
// finished, WAV). --decode-latents FILE runs the decode stages alone (run_decode_only). Note [Latents files and
// streamed outputs].
#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "audio_vae_decoder.hpp"
#include "clip_stages.hpp"
#include "memory_model.hpp"
#include "original_names.hpp"
#include "connectors.hpp"
#include "ddo/error.hpp"
#include "ddo/media/video_writer.hpp"
#include "ddo/media/wav_writer.hpp"
#include "ddo/model/image_output.hpp"
#include "ddo/model/run_request.hpp"
#include "ddo/model/tensor_file.hpp"
#include "ddo/util/build_info.hpp"
#include "ddo/util/file_digest.hpp"
#include "latents.hpp"
#include "prompt_encoder.hpp"
#include "run_stages.hpp"
#include "transformer.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"
#include "video_vae_choice.hpp"
#include "video_vae_decoder.hpp"
#include "vocoder.hpp"
#include "vocoder_bwe.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {
namespace {

constexpr const char * kPlugin = "ltx2_video";
constexpr const char * kLatentsFormat = "ddo.ltx2_video.latents";  // a --save-latents file's metadata "format"

// LTX2Pipeline's defaults (diffusers 0.42: 768x512, 121 frames at 24 fps, 30 steps, guidance 3 / STG 1 on block 28 /
// modality 3 / rescale 0.7, audio 7 / 1 / 3 / 0.7, use_cross_timestep).
constexpr model::WorkloadDefaults kDefaults{.width = 768, .height = 512, .steps = 30, .seed = 0, .frames = 121, .fps = 24.0};

// What was asked, checked before anything is read.
struct Request {
    model::Workload w;
    model::PromptSource prompt;
    int64_t max_sequence_length = 1024;
};

Request resolve_request(model::ModelRun & run) {
    run.accept_step_cache();  // denoising runs through run.step_cache (cache.*); keyframe conditions refuse (plan_run)
    Request r{run.workload(kDefaults), {}, 0};
    run.require_model_dir();
    run.check_class("transformer/config.json", {"LTX2VideoTransformer3DModel"});
    run.check_class("vae/config.json", {"AutoencoderKLLTX2Video"});
    run.check_class("audio_vae/config.json", {"AutoencoderKLLTX2Audio"});
    run.check_class("connectors/config.json", {"LTX2TextConnectors"});
    run.check_class("vocoder/config.json", {"LTX2Vocoder", "LTX2VocoderWithBWE"});
    run.refuse_if_set("workload.strength", "ltx2_video conditions on each image at strength 1 (the pipelines' "
                                           "default); --strength is ltx2_image's img2img");
    // Where the prompt comes from: text (the checkpoint's Gemma-3 encodes it) or a --prompt-embeds file.
    r.prompt = model::PromptSource::of(run, r.w);
    if (r.prompt.encode_only)
        for (const char * k : {"workload.width", "workload.height", "workload.frames", "workload.fps", "workload.steps",
                               "workload.sigmas", "workload.images", "cache.kind"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
    r.max_sequence_length = max_sequence_length(run, "LTX2Pipeline");
    if (r.w.num_images != 1)
        throw UsageError(std::string(kPlugin) + ": workload.num_images = " + std::to_string(r.w.num_images) +
                         ": one video per run (num_videos_per_prompt > 1 is not implemented); run again with another seed");
    r.prompt.require(run, std::string(kPlugin) + ": no prompt: give -p/--prompt TEXT (the checkpoint's Gemma-3 text "
                          "encoder encodes it) or --prompt-embeds FILE (LTX2Pipeline's prompt_embeds; ddo-host encode "
                          "writes one)");
    if (!run.latents_file().empty())
        throw UsageError(std::string(kPlugin) + ": --latents is not implemented for LTX-2 (video and audio latents); the "
                         "noise is drawn from workload.seed");
    if (r.prompt.from_text) run.check_class("text_encoder/config.json", {"Gemma3ForConditionalGeneration"});
    return r;
}

// The checkpoint opened and cross-checked (VideoModel::open), with the prompt encoder when the prompt is text.
struct Checkpoint {
    VideoModel m;
    std::optional<Ltx2PromptEncoder> encoder;
};

Checkpoint open_checkpoint(model::ModelRun & run, const Request & r) {
    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "connectors", "vae", "audio_vae", "vocoder", "scheduler"};
    if (r.prompt.from_text) components.insert(components.begin(), {"text_encoder", "tokenizer"});
    run.set_original_names("transformer", original_name_renames());  // Lightricks' LoRAs use them
    run.record_checkpoint(components);
    Checkpoint c{VideoModel::open(run.model_dir(), with_original_names(run.component("transformer"), "transformer")), std::nullopt};
    if (r.prompt.from_text) c.encoder = open_prompt_encoder(run, c.m.connectors_config);
    const auto & tc = c.m.transformer_config;
    uint64_t block_bytes = 0;
    for (const auto & [name, shape] : tensor_specs(tc))
        if (name.starts_with("transformer_blocks.0.")) block_bytes += c.m.transformer.nbytes_of(name);
    run.add_checkpoint_facts({{"transformer_blocks", tc.num_layers}, {"block_payload_bytes", block_bytes},
                              {"vocoder", c.m.vocoder_bwe_config ? "LTX2VocoderWithBWE" : "LTX2Vocoder"}});
    return c;
}

// The clip in the pipeline's units: sizes are used as given (LTX2Pipeline floors them by integer division of the
// latent grid; say so when that changes them). An off-grid frame count floors the video only: the audio lasts the
// frames asked for, as LTX2Pipeline's (latent_geometry).
struct Clip {
    int64_t width = 0, height = 0, frames = 0;
    LatentGeometry geo;
};

Clip resolve_clip(model::ModelRun & run, const model::Workload & w, const VideoModel & m) {
    const auto ratios = m.ratios();
    // A two-stage run's stage 1 is at half the size: the size is a multiple of twice the compression.
    const bool two_stage = !run.option<std::string>("upsampler", "").empty();
    const int64_t multiple = two_stage ? 2 * ratios.spatial : ratios.spatial;
    const auto size = model::floor_size(run, w, multiple,
                                        two_stage ? "(twice the VAE's spatial compression: stage 1 runs at half size)"
                                                  : "(the VAE's spatial compression)",
                                        "LTX-2 sizes are multiples of the VAE's spatial compression " +
                                            std::to_string(ratios.spatial) + (two_stage ? ", times 2 for a two-stage "
                                            "run's half-size stage 1" : "") + " (the latent grid floors them)");
    if (!(w.fps > 0)) throw UsageError(std::string(kPlugin) + ": workload.fps must be > 0");
    const auto geo = latent_geometry(ratios, w.frames, size.height, size.width, w.fps);
    if (geo.frames != w.frames)
        run.adjust("workload.frames", w.frames, geo.frames,
                   "LTX-2 clips have 1 + " + std::to_string(ratios.temporal) + "k frames (the causal VAE's temporal "
                   "compression): the latent grid floors the video to " + std::to_string(geo.frames) + " frames, and "
                   "the audio lasts the " + std::to_string(w.frames) + " frames asked for, as LTX2Pipeline's");
    if (geo.audio_frames < 1)
        throw UsageError(std::string(kPlugin) + ": the clip (" + std::to_string(w.frames) + " frames at " +
                         nlohmann::json(w.fps).dump() + " fps) is shorter than one audio latent frame; ask for more frames");
    return {size.width, size.height, geo.frames, geo};
}

GuidanceScales video_guidance(model::ModelRun & run, const model::Workload & w) {
    return {w.guidance_scale.value_or(3.0), run.option<double>("stg_scale", 1.0), run.option<double>("modality_scale", 3.0),
            run.option<double>("guidance_rescale", 0.7)};
}

// LTX2Pipeline: audio_x = audio_x or x (a 0 falls back to the video value, as Python's `or`).
GuidanceScales audio_guidance(model::ModelRun & run, const GuidanceScales & v) {
    auto pick = [&](const char * key, double fallback, double video) {
        const double a = run.option<double>(key, fallback);
        return a == 0.0 ? video : a;
    };
    return {pick("audio_guidance_scale", 7.0, v.cfg), pick("audio_stg_scale", 1.0, v.stg),
            pick("audio_modality_scale", 3.0, v.modality), pick("audio_guidance_rescale", 0.7, v.rescale)};
}

// STG blocks that do not exist: refused when asked for; the pipeline's default [28] on a smaller transformer
// perturbs nothing (LTX2Pipeline tests `i in spatio_temporal_guidance_blocks`), which the report says.
std::vector<int64_t> existing_stg_blocks(model::ModelRun & run, const DenoiseSettings & ds, int64_t num_layers) {
    const bool stg_blocks_set = !run.option<nlohmann::json>("stg_blocks", nullptr).is_null();
    std::vector<int64_t> existing;
    for (int64_t b : ds.stg_blocks) {
        if (b >= 0 && b < num_layers) existing.push_back(b);
        else if (stg_blocks_set)
            throw UsageError("plugin.ltx2_video.stg_blocks: block " + std::to_string(b) + " does not exist (the transformer "
                             "has " + std::to_string(num_layers) + " blocks, 0.." + std::to_string(num_layers - 1) + ")");
    }
    if (existing.size() != ds.stg_blocks.size() && guidance_passes(ds.video, ds.audio).stg)
        run.adjust("plugin.ltx2_video.stg_blocks", ds.stg_blocks, existing,
                   "the default STG block does not exist in this " + std::to_string(num_layers) +
                       "-block transformer: the STG pass perturbs no block (as LTX2Pipeline); set stg_blocks");
    return existing;
}

// The denoising settings (guidance scales, STG blocks, cross timestep), the decode timestep and the decode noise
// scale (LTX2Pipeline's decode_noise_scale, which defaults to decode_timestep; none without a timestep-conditioned
// VAE, whose decode takes neither).
struct Guidance {
    DenoiseSettings ds;
    double decode_timestep = 0.0;
    std::optional<double> decode_noise_scale;
    bool decode_noise() const { return decode_noise_scale.value_or(0.0) != 0.0; }
};

nlohmann::json optional_json(const std::optional<double> & v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// plugin.ltx2_video.decode_noise_scale: a number, or null / unset for the pipeline's default.
std::optional<double> decode_noise_scale_option(model::ModelRun & run) {
    const auto v = run.option<nlohmann::json>("decode_noise_scale", nullptr);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number())
        throw UsageError("plugin.ltx2_video.decode_noise_scale = " + v.dump() + ": a number (LTX2Pipeline's "
                         "decode_noise_scale; unset, it is decode_timestep)");
    return v.get<double>();
}

Guidance resolve_guidance(model::ModelRun & run, const model::Workload & w, const VideoModel & m) {
    Guidance g;
    auto & ds = g.ds;
    ds.video = video_guidance(run, w);
    ds.audio = audio_guidance(run, ds.video);
    ds.stg_blocks = run.option<std::vector<int64_t>>("stg_blocks", {28});
    ds.use_cross_timestep = run.option<bool>("use_cross_timestep", true);
    ds.fps = w.fps;
    ds.dtype = w.dtype;
    g.decode_timestep = run.option<double>("decode_timestep", 0.0);
    ds.stg_blocks = existing_stg_blocks(run, ds, m.transformer_config.num_layers);
    const auto noise_scale = decode_noise_scale_option(run);
    if (m.vae_config.timestep_conditioning) {
        g.decode_noise_scale = noise_scale.value_or(g.decode_timestep);
        return g;
    }
    if (g.decode_timestep != 0.0)
        run.adjust("plugin.ltx2_video.decode_timestep", g.decode_timestep, nullptr,
                   "the VAE is not timestep-conditioned (vae/config.json timestep_conditioning = false): LTX2Pipeline "
                   "ignores decode_timestep");
    if (noise_scale)
        run.adjust("plugin.ltx2_video.decode_noise_scale", *noise_scale, nullptr,
                   "the VAE is not timestep-conditioned (vae/config.json timestep_conditioning = false): LTX2Pipeline "
                   "ignores decode_noise_scale");
    return g;
}

// The --prompt-embeds file's embeddings, and the guidance passes they allow: without negative embeddings there is
// no unconditional branch, so classifier-free guidance is off (LTX2Pipeline would encode the negative prompt "").
GuidancePasses load_prompt_file(model::ModelRun & run, const Request & r, const VideoModel & m, DenoiseSettings & ds,
                                PromptEmbeds & embeds) {
    if (r.prompt.have_embeds) {
        run.not_used("text_encoder", "the prompt embeddings were read from --prompt-embeds " + run.prompt_embeds().string());
        run.record_input("prompt_embeds", run.prompt_embeds());
        embeds = load_prompt_embeds(run.prompt_embeds(), m.connectors_config);
    }
    auto passes = guidance_passes(ds.video, ds.audio);
    if (r.prompt.from_text && !passes.cfg && r.w.negative_prompt)
        run.adjust("workload.negative_prompt", *r.w.negative_prompt, "unused",
                   "guidance scales <= 1: no classifier-free guidance, as in LTX2Pipeline");
    if (!passes.cfg || embeds.neg_embeds || !r.prompt.have_embeds) return passes;
    run.adjust("workload.guidance_scale", ds.video.cfg, 1.0,
               "the prompt embeddings carry no negative_prompt_embeds, so there is no unconditional branch "
               "(LTX2Pipeline would encode the negative prompt \"\"): classifier-free guidance is off; run from "
               "-p, or write the file with ddo-host encode -n '' to guide");
    if (ds.audio.cfg != 1.0) run.adjust("plugin.ltx2_video.audio_guidance_scale", ds.audio.cfg, 1.0, "as workload.guidance_scale");
    ds.video.cfg = ds.audio.cfg = 1.0;
    return guidance_passes(ds.video, ds.audio);
}

// The sampling grid (workload.sigmas or linspace(1, 1/steps, steps)) and its schedule with LTX2Pipeline's mu;
// `ddo-host encode` samples nothing: its (default) geometry needs no schedule.
struct Sampling {
    std::vector<float> sigmas;
    model::FlowMatchSchedule schedule;
    double mu = 0.0;
};

Sampling resolve_sampling(model::ModelRun & run, const Request & r, const VideoModel & m, const LatentGeometry & geo) {
    Sampling s;
    auto asked = model::requested_sigmas(run, r.w, "workload.sigmas sets the grid; its length is the number of steps "
                                                   "(LTX2Pipeline sigmas=)");
    s.sigmas = asked ? std::move(*asked) : model::default_sigmas(r.w.steps);
    if (!r.prompt.encode_only) s.schedule = ltx2_schedule(m.scheduler_config, m.scheduler_json, s.sigmas, geo.video_tokens());
    s.mu = ltx2_mu(m.scheduler_json, geo.video_tokens());
    return s;
}

// Everything decided before a weight loads: the clip, guidance, prompt embeddings from a file, the schedule, the
// outputs (existing ones refused now), each component's plan and the VAE strategy.
struct RunPlan {
    Clip clip;
    Guidance guidance;
    PromptEmbeds embeds;
    GuidancePasses passes;
    Sampling sampling;
    std::vector<std::filesystem::path> outputs;
    model::ComponentPlan connectors, transformer, vae, audio_vae, vocoder;
    at::Device device = at::kCPU;
    VideoVaeChoice vae_choice;
    std::optional<TwoStage> two_stage;
    ClipConditions conditions;
};

// The two-stage plan and the condition images (decoded and preprocessed now, before anything loads); the
// schedule's mu counts LTX2ConditionPipeline's appended keyframe tokens as the reference does.
void plan_stages(model::ModelRun & run, const Request & r, const VideoModel & m, RunPlan & p) {
    p.two_stage = resolve_two_stage(run, m, p.clip.geo, p.guidance.ds);
    if (!p.two_stage)
        run.not_used("latent_upsampler", "a one-stage run (plugin.ltx2_video.upsampler is not set); the upsampler runs between "
                                         "the two stages only");
    if (p.two_stage && guidance_passes(p.two_stage->settings.video, p.two_stage->settings.audio).cfg && !p.passes.cfg)
        throw UsageError("plugin.ltx2_video.stage2_guidance_scale = " +
                         nlohmann::json(p.two_stage->settings.video.cfg).dump() + ": stage 2 would run classifier-free "
                         "guidance while stage 1 does not (no negative prompt is encoded); use 1");
    const auto r_ = m.ratios();
    p.conditions = resolve_conditions(run, r_, p.two_stage ? p.two_stage->stage1 : p.clip.geo);
    // The VAE's encoder is validated now that the run uses it (Note [Components validated when used]).
    if (p.conditions.any()) m.vae_config.require_encoder("--image " + run.condition_images().front().path.string());
    if (p.two_stage && p.conditions.pipeline == ClipConditions::Pipeline::condition)
        throw UsageError("plugin.ltx2_video.upsampler with keyframe conditions (--image FILE@FRAME past frame 0, or "
                         "several images): a two-stage run takes one still on frame 0 (LTX2ImageToVideoPipeline)");
    int64_t keyframe_tokens = 0;
    const auto & g1 = p.two_stage ? p.two_stage->stage1 : p.clip.geo;
    if (p.conditions.pipeline == ClipConditions::Pipeline::condition)
        for (const auto & i : p.conditions.items)
            if (i.latent_index != 0) keyframe_tokens += g1.latent_height * g1.latent_width;
    if ((p.two_stage || keyframe_tokens) && !r.prompt.encode_only)
        p.sampling.schedule = ltx2_schedule(m.scheduler_config, m.scheduler_json, p.sampling.sigmas,
                                            g1.video_tokens() + keyframe_tokens);
    p.sampling.mu = ltx2_mu(m.scheduler_json, g1.video_tokens() + keyframe_tokens);
}

// The components' plans and the VAE's strategy, from the run's settings (again under fit.policy = auto: Note [Fitting a
// run]).
void plan_components(model::ModelRun & run, const Request & r, const VideoModel & m, RunPlan & p) {
    p.connectors = run.plan("connectors");
    p.transformer = run.plan("transformer");
    p.vae = run.plan("vae");
    p.audio_vae = run.plan("audio_vae");
    p.vocoder = run.plan("vocoder");
    p.device = p.transformer.placement.device();
    p.vae_choice = choose_video_vae_strategy(p.vae, m.vae, m.vae_config, 1, p.clip.frames, p.clip.width,
                                             p.clip.height, r.w.dtype, p.vae.vae_tiles.temporal_frames);
}

RunPlan plan_run(model::ModelRun & run, const Request & r, const VideoModel & m) {
    RunPlan p;
    p.clip = resolve_clip(run, r.w, m);
    p.guidance = resolve_guidance(run, r.w, m);
    p.passes = load_prompt_file(run, r, m, p.guidance.ds, p.embeds);
    p.sampling = resolve_sampling(run, r, m, p.clip.geo);
    if (r.prompt.encode_only) run.plan_tensor_file();
    else if (r.prompt.given()) p.outputs = run.plan_outputs({"video.mp4", "audio.wav"});
    plan_components(run, r, m, p);
    if (!r.prompt.encode_only) plan_stages(run, r, m, p);
    // cache.* checked now (a refused setting before anything loads); the denoising loop runs through it (a two-stage
    // run's stage 2 through run.step_cache_stage: denoise_clip). Keyframe conditions (LTX2ConditionPipeline: appended
    // keyframe tokens) have no hook fixture yet: refused.
    if (!r.prompt.encode_only) {
        if (p.conditions.pipeline == ClipConditions::Pipeline::condition)
            run.refuse_step_cache("keyframe conditions (workload.images: an image past frame 0, or several images; "
                                  "LTX2ConditionPipeline) are not implemented with a step cache; one still on frame 0 "
                                  "(image-to-video) is");
        p.guidance.ds.step_cache = run.step_cache(int(p.sampling.sigmas.size()));
        if (p.guidance.ds.step_cache)  // taylorseer: its module patterns resolved against the modules the DiT routes
            p.guidance.ds.step_cache->bind_modules(hookable_module_names(m.transformer_config),
                                                   diffusers_module_names(m.transformer_config));
    }
    // LTX2Pipeline's decode noise is reproduced where ddo carries the pipeline's generator as the reference does: a
    // text-to-video run (Note [LTX-2 decode noise]).
    if (p.guidance.decode_noise() && (p.conditions.any() || p.two_stage))
        throw UsageError("plugin.ltx2_video.decode_timestep = " + nlohmann::json(p.guidance.decode_timestep).dump() +
                         " with decode_noise_scale " + nlohmann::json(*p.guidance.decode_noise_scale).dump() + ": the "
                         "decode noise of a run with " + (p.two_stage ? "plugin.ltx2_video.upsampler" : "--image") +
                         " is not implemented (ddo draws LTX2Pipeline's decode noise in text-to-video runs); set "
                         "plugin.ltx2_video.decode_noise_scale=0 to decode at the timestep without noise, or "
                         "decode_timestep=0");
    return p;
}

nlohmann::json guidance_json(const GuidanceScales & g) {
    return {{"guidance_scale", g.cfg}, {"stg_scale", g.stg}, {"modality_scale", g.modality}, {"guidance_rescale", g.rescale}};
}

nlohmann::json vae_decision_json(const VideoVaeChoice & c) {
    return {{"requested", c.requested}, {"reason", c.reason}, {"auto", c.facts},
            {"tiling", {{"tile", c.tiling.tile_sample_min_width}, {"stride", c.tiling.tile_sample_stride_width},
                        {"window_frames", c.tiling.tile_sample_min_num_frames},
                        {"window_stride", c.tiling.tile_sample_stride_num_frames}}}};
}

void record_workload(model::ModelRun & run, const Request & r, const VideoModel & m, const RunPlan & p) {
    const auto & [width, height, frames, geo] = p.clip;
    const auto & ds = p.guidance.ds;
    const auto & w = r.w;
    run.record_workload({{"model", kPlugin}, {"width", width}, {"height", height}, {"frames", frames}, {"fps", w.fps},
                         {"duration_frames", geo.duration_frames},
                         {"latent", {{"frames", geo.latent_frames}, {"height", geo.latent_height},
                                     {"width", geo.latent_width}, {"audio_frames", geo.audio_frames},
                                     {"video_tokens", geo.video_tokens()}}},
                         {"steps", int(p.sampling.sigmas.size())},
                         {"sigmas", r.prompt.encode_only ? nlohmann::json(nullptr) : model::grid_json(p.sampling.schedule.sigmas)},
                         {"mu", p.sampling.mu},
                         {"sigmas_source", w.sigmas ? "workload.sigmas" : "linspace(1, 1/steps, steps)"},
                         {"seed", w.seed}, {"video_guidance", guidance_json(ds.video)},
                         {"audio_guidance", guidance_json(ds.audio)},
                         {"passes_per_step", 1 + int(p.passes.stg) + int(p.passes.isolate)},
                         {"cfg_batch", p.passes.cfg}, {"stg_blocks", ds.stg_blocks},
                         {"stg_effective", p.passes.stg && m.transformer_config.perturbed_attn},
                         {"use_cross_timestep", ds.use_cross_timestep}, {"decode_timestep", p.guidance.decode_timestep},
                         {"decode_noise_scale", optional_json(p.guidance.decode_noise_scale)},
                         {"dtype", c10::toString(w.dtype)}, {"device", p.device.str()},
                         {"vae_strategy", video_vae_strategy_name(p.vae_choice.strategy)},
                         {"vae_decision", vae_decision_json(p.vae_choice)},
                         {"audio_sample_rate", m.vocoder_sample_rate()},
                         {"prompt", r.prompt.prompt(w)},
                         {"negative_prompt", r.prompt.from_text && p.passes.cfg ? nlohmann::json(w.negative_prompt.value_or(""))
                                                                                : nlohmann::json(nullptr)},
                         {"prompt_embeddings", r.prompt.embeddings("Gemma-3")},
                         {"max_sequence_length", r.max_sequence_length},
                         {"conditioning", p.conditions.to_json()},
                         {"two_stage", p.two_stage ? p.two_stage->to_json() : nlohmann::json(nullptr)}});
}

// Text: Gemma-3 on the engine (its layers are execution groups of component text_encoder), unloaded before the
// connectors run; its stacked hidden states are what --prompt-embeds would have supplied. False when the run ends
// here (`ddo-host encode`: written, or validated in a dry run).
bool encode_prompt(model::ModelRun & run, const Request & r, const Checkpoint & c, RunPlan & p) {
    if (!r.prompt.from_text) return true;
    const auto text = run_text_stage(run, *c.encoder, {kPlugin, *r.w.prompt, r.w.negative_prompt, p.passes.cfg,
                                                       r.prompt.encode_only, r.max_sequence_length, r.w.dtype, p.device});
    if (!text) return false;
    p.embeds = *text;
    return true;
}

// The connectors (the text path after Gemma-3) on the prompt and, with CFG, the negative prompt in one batch
// (negative first); unloaded before the DiT's weights are opened. nullopt: a dry run, ended here.
std::optional<ConnectorsOutput> encode_text(model::ModelRun & run, const Request & r, const VideoModel & m,
                                            const RunPlan & p) {
    auto conn = open_connectors(run, {p.connectors, connector_groups(m.connectors_config)},
                                {p.transformer, transformer_groups(m.transformer_config)}, r.w.dtype, r.prompt);
    if (!conn) return std::nullopt;
    at::Tensor text_in = p.embeds.embeds, mask_in = p.embeds.mask;
    if (p.passes.cfg) {
        text_in = at::cat({*p.embeds.neg_embeds, p.embeds.embeds});
        mask_in = at::cat({*p.embeds.neg_mask, p.embeds.mask});
    }
    auto text = connectors_forward(m.connectors_config, *conn->view, text_in.to(p.device, r.w.dtype), mask_in.to(p.device));
    unload(run, *conn);
    return text;
}

// What the decode stages take (diffusers' output_type="latent"): the video latents [B, C, F', H', W'] and the audio
// latents [B, C, L, M], both de-normalised, in the compute dtype, the video with the decode noise mixed in when the
// run has some. --save-latents writes exactly these and --decode-latents reads them back, so a decode from the file
// is the one-shot run's decode.
struct DecodeInputs {
    at::Tensor video, audio;
};

// The denoised (packed, normalised) latents unpacked and de-normalised with the VAEs' statistics (read from their
// files; no weights load): the video as LTX2Pipeline unpacks it, mixes in the decode noise ((1 - s) * z + s * noise
// with s = decode_noise_scale, still normalised) and de-normalises it, the audio de-normalised while packed, then
// unpacked.
DecodeInputs decode_inputs(const VideoModel & m, const LatentGeometry & geo, at::ScalarType dtype,
                           const ClipDenoised & denoised, const Guidance & g) {
    const auto & latents = denoised.latents;
    auto z = unpack_video(latents.video, geo).to(dtype);
    if (denoised.decode_noise.defined()) {
        const auto s = at::full({1, 1, 1, 1, 1}, *g.decode_noise_scale, z.options());
        z = (1 - s) * z + s * denoised.decode_noise.to(z.device(), dtype);
    }
    const auto stats = read_video_latent_stats(m.vae, m.vae_config);
    z = denormalize_video_latents(z, stats.mean, stats.std, m.vae_config.scaling_factor);
    const auto & ac = m.audio_vae_config;
    auto packed = latents.audio.to(dtype);
    const auto mean = m.audio_vae.weight("latents_mean", {ac.base_channels}, dtype).to(packed.device());
    const auto std_ = m.audio_vae.weight("latents_std", {ac.base_channels}, dtype).to(packed.device());
    if (packed.dim() != 3 || packed.size(2) != mean.size(0))
        throw RuntimeError("ltx2_video: packed audio latents must be [B, L, " + std::to_string(mean.size(0)) +
                           "] (the length of audio_vae latents_mean), got " + model::shape_str(packed.sizes()));
    return {z, unpack_audio_latents(packed * std_ + mean, ac.latent_mel_bins())};
}

// Phase "decode": the de-normalised video latents decoded with the strategy decided up front (vae.strategy, auto per
// seed 003's table; leaf_offload runs the decoder's leaf groups on the engine's dynamic route), each piece of final
// frames handed to `sink` as it is ready (temporal_stream: window by window; otherwise the whole clip once).
void decode_video_latents(model::ModelRun & run, const model::Workload & w, const VideoModel & m, const RunPlan & p,
                          const at::Tensor & z, const VideoFrameSink & sink) {
    run.begin_phase("decode");
    const auto & choice = p.vae_choice;
    auto vae = open_engine_component(run, video_vae_plan(p.vae, choice), "vae", video_vae_leaf_groups(m.vae_config), w.dtype);
    at::Tensor t;  // the decode noise is in z already (decode_inputs)
    if (m.vae_config.timestep_conditioning) t = at::full({1}, p.guidance.decode_timestep, z.options());
    VideoVaeDecoder decoder(m.vae_config, *vae.view);
    decoder.set_stage_check(run.decode_stage_check());
    decode_video_frames(decoder, z, t, choice.strategy, choice.tiling, sink, run.decode_piece_progress("piece"));
    run.record_route("vae", choice.requested, video_vae_strategy_name(choice.strategy), choice.reason);
    unload(run, vae);
}

// Phase "decode_audio": the de-normalised audio latents [B, C, L, M] -> audio VAE -> mel (unloaded) -> vocoder
// (HiFi-GAN or BWE, unloaded) -> waveform [1, 2, samples]. Decoded before the video, so that the MP4 muxer has the
// audio when the first frame arrives.
at::Tensor decode_audio_latents(model::ModelRun & run, const model::Workload & w, const VideoModel & m,
                                const RunPlan & p, const at::Tensor & latents) {
    run.begin_phase("decode_audio");
    auto avae = open_engine_component(run, p.audio_vae, "audio_vae", audio_vae_decoder_groups(m.audio_vae_config), w.dtype);
    const auto mel = AudioVaeDecoder(m.audio_vae_config).decode(*avae.view, latents);
    unload(run, avae);
    run.check_interrupted("before the vocoder");
    at::Tensor waveform;
    if (m.vocoder_bwe_config) {
        auto voc = open_engine_component(run, p.vocoder, "vocoder", vocoder_bwe_groups(*m.vocoder_bwe_config), w.dtype);
        waveform = VocoderWithBwe(*m.vocoder_bwe_config).forward(*voc.view, mel);
        unload(run, voc);
    } else {
        auto voc = open_engine_component(run, p.vocoder, "vocoder", vocoder_groups(*m.vocoder_config), w.dtype);
        waveform = Vocoder(*m.vocoder_config).forward(*voc.view, mel);
        unload(run, voc);
    }
    return waveform;
}

// [B, 3, F, H, W] in [-1, 1] -> uint8 [F, H, W, 3] of sample 0 (postprocess_video's clamp(x / 2 + 0.5, 0, 1), then
// numpy_to_pil's (x * 255).round()). Per pixel: a piece of the clip gives the clip's bytes for its frames.
at::Tensor to_rgb24(const at::Tensor & video) {
    auto x = (video[0].to(at::kFloat) / 2 + 0.5).clamp(0, 1);
    return (x * 255).round().to(at::kByte).permute({1, 2, 3, 0}).contiguous().to(at::kCPU);
}

nlohmann::json mp4_facts(const media::WrittenVideo & mp4) {
    nlohmann::json f = {{"video_codec", mp4.video_codec}, {"encoder", mp4.video_encoder},
                        {"pixel_format", mp4.pixel_format}, {"width", mp4.width}, {"height", mp4.height},
                        {"frames", mp4.frames}, {"fps", std::to_string(mp4.fps_num) + "/" + std::to_string(mp4.fps_den)},
                        {"video_duration_s", mp4.video_duration_s}, {"video_bit_rate", mp4.video_bit_rate}};
    if (mp4.audio)
        f["audio"] = {{"codec", mp4.audio->codec}, {"sample_rate", mp4.audio->sample_rate},
                      {"channels", mp4.audio->channels}, {"samples", mp4.audio->samples},
                      {"duration_s", mp4.audio->duration_s}, {"bit_rate", mp4.audio->bit_rate}};
    return f;
}

// The outputs beyond the MP4 and WAV, planned before anything loads: --save-latents, and the PNG frames
// (-o frames/%05d.png or plugin.ltx2_video.frames_png).
struct OutputPlan {
    bool save_latents = false;
    std::vector<std::filesystem::path> frames;  // empty: no PNG frames
};

OutputPlan plan_extra_outputs(model::ModelRun & run, const RunPlan & p) {
    OutputPlan o;
    if (p.outputs.empty()) {  // nothing is written (ddo-host encode, no prompt): the flags are refused or unused
        if (!run.save_latents_file().empty())
            throw UsageError("--save-latents " + run.save_latents_file().string() + ": this run writes no video; drop "
                             "the flag");
        return o;
    }
    if (!run.save_latents_file().empty()) {
        run.plan_latents_file();
        o.save_latents = true;
    }
    if (run.frame_pattern() || run.option<bool>("frames_png", false))
        o.frames = run.plan_frame_files(p.clip.frames, p.outputs[0]);
    return o;
}

// The MP4 and the PNG frames written as the decoder hands the frames on (no whole-clip frame buffer): the waveform is
// decoded first, so that media::Mp4Writer interleaves its packets as write_mp4 does (the same bytes). finish() ends
// the MP4 and writes the WAV, each atomically, recorded with its facts; frames are recorded as one output (count,
// first / last file, SHA-256 of the PNG files' bytes in order and of the RGB24 pixels in order).
class ClipOutputs {
public:
    ClipOutputs(model::ModelRun & run, const model::Workload & w, const VideoModel & m, const RunPlan & p,
                const OutputPlan & o, const at::Tensor & waveform)
        : run_(run), p_(p), o_(o), pcm_(waveform[0].to(at::kFloat).to(at::kCPU).contiguous()) {  // planar [2, samples]
        clip_.samples = pcm_.data_ptr<float>();
        clip_.frames = pcm_.size(1);
        clip_.spec = {int(m.vocoder_sample_rate()), int(pcm_.size(0))};
        clip_.layout = media::SampleLayout::planar;
        media::VideoSpec vs;
        vs.width = int(p.clip.width);
        vs.height = int(p.clip.height);
        vs.fps = w.fps;
        mp4_.emplace(p.outputs[0], vs, &clip_, overwrite(), tags());
    }

    // frames: [1, 3, n, H, W] in [-1, 1], the next frames of the clip.
    void add(const at::Tensor & frames) {
        const auto rgb = to_rgb24(frames);
        if (rgb.size(1) != p_.clip.height || rgb.size(2) != p_.clip.width)
            throw RuntimeError("ltx2_video: the VAE decoded " + std::to_string(rgb.size(2)) + "x" +
                               std::to_string(rgb.size(1)) + " frames for a " + std::to_string(p_.clip.width) + "x" +
                               std::to_string(p_.clip.height) + " clip");
        const auto * data = rgb.data_ptr<std::uint8_t>();
        const std::size_t frame_bytes = std::size_t(rgb.size(1) * rgb.size(2) * 3);
        mp4_->add_frames(data, rgb.size(0));
        pixels_.update(data, frame_bytes * std::size_t(rgb.size(0)));
        for (int64_t i = 0; i < rgb.size(0); ++i, ++written_) {
            if (o_.frames.empty()) continue;
            if (std::size_t(written_) >= o_.frames.size())
                throw RuntimeError("ltx2_video: the VAE decoded more frames than the " + std::to_string(o_.frames.size()) +
                                   " planned");
            const auto png = model::write_png(o_.frames[std::size_t(written_)], data + std::size_t(i) * frame_bytes,
                                              std::uint32_t(rgb.size(2)), std::uint32_t(rgb.size(1)), 3,
                                              {{"Software", "ddo"}, {"ddo:plugin", kPlugin},
                                               {"ddo:frame", std::to_string(written_)}});
            png_bytes_ += png.size();
            pngs_.update(png.data(), png.size());
        }
        peak_piece_bytes_ = std::max<std::uint64_t>(peak_piece_bytes_, std::uint64_t(frames.numel()) * frames.element_size() +
                                                                           std::uint64_t(rgb.numel()));
    }

    void finish(model::ModelRun & run) {
        run.begin_phase("write_output");
        const auto mp4 = mp4_->finish();
        auto facts = mp4_facts(mp4);
        facts["streamed"] = {{"largest_piece_bytes", peak_piece_bytes_},
                             {"whole_clip_bytes", whole_clip_bytes()},
                             {"pixels_sha256", pixels_.hex()}};
        run.record_output(mp4.file.path, "video/mp4", mp4.file.size, mp4.file.sha256, facts);
        const auto wav = media::write_wav(p_.outputs[1], clip_, overwrite(), tags());
        run.record_output(wav.file.path, "audio/wav", wav.file.size, wav.file.sha256,
                          {{"codec", wav.codec}, {"sample_rate", wav.sample_rate}, {"channels", wav.channels},
                           {"samples", wav.samples}, {"duration_s", wav.duration_s}});
        if (!o_.frames.empty()) {
            if (written_ != int64_t(o_.frames.size()))
                throw RuntimeError("ltx2_video: " + std::to_string(written_) + " frames decoded of the " +
                                   std::to_string(o_.frames.size()) + " planned");
            run.record_output(o_.frames.front(), "image/png", png_bytes_, pngs_.hex(),
                              {{"sequence", true}, {"frames", written_}, {"first", o_.frames.front().string()},
                               {"last", o_.frames.back().string()}, {"width", p_.clip.width},
                               {"height", p_.clip.height}, {"channels", 3}, {"bit_depth", 8},
                               {"sha256_of", "the PNG files' bytes, in frame order"},
                               {"pixels_sha256", facts["streamed"]["pixels_sha256"]}});
        }
    }

private:
    media::Overwrite overwrite() const { return run_.overwrite() ? media::Overwrite::replace : media::Overwrite::refuse; }
    static media::MediaTags tags() { return {{"comment", std::string("ddo ") + kPlugin}}; }
    // The buffers a whole-clip decode holds: the float [3, F, H, W] frames and the uint8 [F, H, W, 3] copy.
    std::uint64_t whole_clip_bytes() const {
        return std::uint64_t(p_.clip.frames * p_.clip.height * p_.clip.width * 3) * (4 + 1);
    }

    model::ModelRun & run_;
    const RunPlan & p_;
    const OutputPlan & o_;
    at::Tensor pcm_;
    media::AudioClip clip_;
    std::optional<media::Mp4Writer> mp4_;
    Sha256Stream pixels_, pngs_;
    std::uint64_t png_bytes_ = 0, peak_piece_bytes_ = 0;
    int64_t written_ = 0;
};

// --save-latents: the decode inputs and what a decode needs to reproduce this run's outputs, in one safetensors file
// written atomically before the first decoder loads (Note [Latents files and streamed outputs]).
void save_latents(model::ModelRun & run, const DecodeInputs & in) {
    run.begin_phase("save_latents");
    nlohmann::json decoders = nlohmann::json::object();
    for (const char * c : {"vae", "audio_vae", "vocoder"}) decoders[c] = run.component_identity(c);
    const auto & b = build_info();
    const std::map<std::string, std::string> meta{
        {"format", kLatentsFormat},
        {"format_version", "1"},
        {"layout", "video_latents [B, C, F', H', W'] and audio_latents [B, C, L, M], de-normalised: what the video "
                   "and audio VAE decoders take (diffusers LTX2Pipeline output_type=\"latent\"; the video with the "
                   "decode noise of workload.decode_noise_scale mixed in)"},
        {"workload", run.recorded_workload().dump()},
        {"decoders", decoders.dump()},
        {"plugin", kPlugin},
        {"plugin_version", kLtx2VideoVersion},
        {"ddo_version", b.version + " (" + b.git_revision + ")"}};
    run.write_latents_file({{"video_latents", in.video}, {"audio_latents", in.audio}}, meta,
                           {{"video_latents", in.video.sizes().vec()}, {"audio_latents", in.audio.sizes().vec()},
                            {"dtype", c10::toString(in.video.scalar_type())}, {"format", kLatentsFormat}});
}

// After denoising (or from a latents file): the audio decoded, then the video streamed into the outputs.
void decode_and_write(model::ModelRun & run, const model::Workload & w, const VideoModel & m, const RunPlan & p,
                      const OutputPlan & o, const DecodeInputs & in) {
    const auto waveform = decode_audio_latents(run, w, m, p, in.audio);
    ClipOutputs out(run, w, m, p, o, waveform);
    decode_video_latents(run, w, m, p, in.video, [&](const at::Tensor & frames) { out.add(frames); });
    out.finish(run);
}

// A --decode-latents file, read and checked against itself: the format and both tensors. UsageError (exit 2) naming
// the file for anything else (not safetensors, another format, a tensor missing or of another rank).
struct LatentsFile {
    std::filesystem::path path;
    nlohmann::json workload, decoders;
    at::Tensor video, audio;
};

LatentsFile read_latents_file(const std::filesystem::path & path) {
    const std::string what = "--decode-latents " + path.string();
    const std::string fix = "; give a file written by ddo-host --plugin ltx2_video --save-latents";
    std::optional<model::TensorFile> f;
    try {
        f.emplace(model::TensorFile::open_file(path));
    } catch (const Error & e) {
        throw UsageError(what + ": not a readable safetensors file (" + e.what() + ")" + fix);
    }
    const auto & meta = f->metadata();
    const auto get = [&](const std::string & key) {
        const auto it = meta.find(key);
        if (it == meta.end()) throw UsageError(what + ": no '" + key + "' in its metadata: not an LTX-2 latents file" + fix);
        return it->second;
    };
    if (get("format") != kLatentsFormat)
        throw UsageError(what + ": its format is '" + get("format") + "', not " + kLatentsFormat + fix);
    if (get("format_version") != "1")
        throw UsageError(what + ": format_version " + get("format_version") + " (this ltx2_video reads 1)" + fix);
    LatentsFile l;
    l.path = path;
    try {
        l.workload = nlohmann::json::parse(get("workload"));
        l.decoders = nlohmann::json::parse(get("decoders"));
    } catch (const nlohmann::json::exception & e) {
        throw UsageError(what + ": its workload / decoders metadata is not JSON (" + e.what() + ")" + fix);
    }
    for (const auto & [name, rank] : {std::pair{"video_latents", 5}, {"audio_latents", 4}})
        if (!f->contains(name) || f->shape_of(name).size() != std::size_t(rank))
            throw UsageError(what + ": " + (f->contains(name) ? "tensor " + std::string(name) + " is " +
                                                                     model::shape_str(f->shape_of(name)) + ", not rank " +
                                                                     std::to_string(rank)
                                                               : "no tensor " + std::string(name)) + fix);
    try {
        l.video = f->read("video_latents");
        l.audio = f->read("audio_latents");
    } catch (const Error & e) {
        throw UsageError(what + ": " + e.what() + fix);
    }
    for (const char * k : {"width", "height", "frames", "fps", "steps", "seed", "decode_timestep", "latent"})
        if (!l.workload.contains(k)) throw UsageError(what + ": its workload metadata has no '" + std::string(k) + "'" + fix);
    return l;
}

// What differs between the decoder identity a latents file recorded and this checkpoint's ("" when nothing does):
// the config's SHA-256 and each weight file's name, size and header hash (checkpoint.identity).
std::string identity_difference(const std::string & component, const nlohmann::json & was, const nlohmann::json & is) {
    if (was.is_null() || is.is_null()) return "";
    const auto config_sha = [](const nlohmann::json & id) {
        return id.contains("config") && id.at("config").is_object() ? id.at("config").value("sha256", "") : std::string();
    };
    if (config_sha(was) != config_sha(is))
        return component + "/config.json differs (sha256 " + short_digest(config_sha(was)) + " in the file, " +
               short_digest(config_sha(is)) + " in this checkpoint)";
    const auto files = [](const nlohmann::json & id) {
        std::map<std::string, std::string> m;
        if (id.contains("files"))
            for (const auto & f : id.at("files"))
                m[f.value("file", "")] = std::to_string(f.value("size", 0ull)) + "/" + f.value("header_xxh3_128", "");
        return m;
    };
    const auto a = files(was), b = files(is);
    if (a != b) {
        for (const auto & [name, id] : a)
            if (!b.contains(name) || b.at(name) != id)
                return component + "/" + name + " differs (size / header hash " + id + " in the file, " +
                       (b.contains(name) ? b.at(name) : std::string("absent")) + " in this checkpoint)";
        return component + " has other weight files than the file records";
    }
    return "";
}

// A decode-only run's request: the file, read and checked against the flags (its geometry, fps, steps, seed and
// decode_timestep are the run's; a flag that says otherwise is refused, exit 2, naming both values).
struct DecodeOnlyRequest {
    LatentsFile l;
    model::WorkloadDefaults d;
    model::Workload w;
    double decode_timestep = 0;
    std::optional<double> decode_noise_scale;  // mixed into the file's video latents already
};

DecodeOnlyRequest resolve_decode_only(model::ModelRun & run) {
    const auto & file = run.decode_latents_file();
    const std::string what = "--decode-latents " + file.string();
    run.require_model_dir();
    run.check_class("vae/config.json", {"AutoencoderKLLTX2Video"});
    run.check_class("audio_vae/config.json", {"AutoencoderKLLTX2Audio"});
    run.check_class("vocoder/config.json", {"LTX2Vocoder", "LTX2VocoderWithBWE"});
    if (!run.save_latents_file().empty())
        throw UsageError(what + " with --save-latents: a decode-only run writes no latents (the file is " +
                         file.string() + "); drop --save-latents");
    if (!run.prompt_embeds().empty() || !run.latents_file().empty())
        throw UsageError(what + ": a decode-only run takes no " +
                         std::string(run.prompt_embeds().empty() ? "--latents" : "--prompt-embeds") +
                         " (the latents file holds the denoised clip); drop it");
    for (const char * k : {"workload.prompt", "workload.negative_prompt", "workload.sigmas", "workload.guidance_scale",
                           "cache.kind"})
        run.refuse_if_set(k, what + " decodes the file only (its denoising is done); drop it");
    DecodeOnlyRequest r{read_latents_file(file), {}, {}, 0, std::nullopt};
    const auto & lw = r.l.workload;
    auto & d = r.d;
    d.width = lw.at("width").get<int64_t>();
    d.height = lw.at("height").get<int64_t>();
    d.frames = lw.at("frames").get<int64_t>();
    d.fps = lw.at("fps").get<double>();
    d.steps = lw.at("steps").get<int>();
    d.seed = lw.at("seed").get<std::uint64_t>();
    r.w = run.workload(d);
    const auto conflict = [&](const std::string & key, const nlohmann::json & asked, const nlohmann::json & held) {
        if (asked != held)
            throw UsageError(key + " = " + asked.dump() + " but " + what + " holds " + held.dump() + " (" + key.substr(key.find('.') + 1) +
                             " comes from the file in a decode-only run); drop " + key + " or decode another file");
    };
    conflict("workload.width", r.w.width, d.width);
    conflict("workload.height", r.w.height, d.height);
    conflict("workload.frames", r.w.frames, d.frames);
    conflict("workload.fps", r.w.fps, d.fps);
    conflict("workload.steps", r.w.steps, d.steps);
    conflict("workload.seed", r.w.seed, d.seed);
    r.decode_timestep = lw.at("decode_timestep").is_null() ? 0.0 : lw.at("decode_timestep").get<double>();
    conflict("plugin.ltx2_video.decode_timestep", run.option<double>("decode_timestep", r.decode_timestep),
             r.decode_timestep);
    const auto held = lw.value("decode_noise_scale", nlohmann::json(nullptr));
    if (held.is_number()) r.decode_noise_scale = held.get<double>();
    if (const auto asked = decode_noise_scale_option(run))
        conflict("plugin.ltx2_video.decode_noise_scale", *asked, held);
    return r;
}

// The file against this checkpoint's decoders: the identity it recorded (when it recorded one) and the tensors'
// shapes for the clip's geometry. UsageError (exit 2) naming the file and what differs.
void check_latents_fit(model::ModelRun & run, const DecodeOnlyRequest & r, const VideoModel & m, const LatentGeometry & geo) {
    const std::string what = "--decode-latents " + run.decode_latents_file().string();
    for (const char * c : {"vae", "audio_vae", "vocoder"}) {
        const auto diff = identity_difference(c, r.l.decoders.value(c, nlohmann::json(nullptr)), run.component_identity(c));
        if (!diff.empty())
            throw UsageError(what + " was written with other decoders than " + run.model_dir().string() + "'s: " + diff +
                             "; decode it with the checkpoint that denoised it");
    }
    const auto & d = r.d;
    const auto & ac = m.audio_vae_config;
    const std::vector<int64_t> want_video{1, m.vae_config.latent_channels, geo.latent_frames, geo.latent_height, geo.latent_width};
    const std::vector<int64_t> want_audio{1, ac.latent_channels, geo.audio_frames, ac.latent_mel_bins()};
    const auto check_shape = [&](const char * name, const at::Tensor & t, const std::vector<int64_t> & want) {
        if (t.sizes().vec() != want)
            throw UsageError(what + ": tensor " + std::string(name) + " is " + model::shape_str(t.sizes()) + " but a " +
                             std::to_string(d.width) + "x" + std::to_string(d.height) + ", " + std::to_string(d.frames) +
                             "-frame clip at " + nlohmann::json(d.fps).dump() + " fps on " + run.model_dir().string() +
                             "'s decoders takes " + model::shape_str(want) + " (latent channels, latent mel bins: the "
                             "file is from another checkpoint or geometry)");
    };
    check_shape("video_latents", r.l.video, want_video);
    check_shape("audio_latents", r.l.audio, want_audio);
}

// --decode-latents FILE: the decode stages alone on the checkpoint's vae, audio_vae and vocoder (no text encoder,
// no connectors, no DiT): resolve_decode_only -> load + check_latents_fit -> plan -> decode_and_write.
void run_decode_only(model::ModelRun & run) {
    const auto r = resolve_decode_only(run);
    const auto & d = r.d;
    const auto & w = r.w;
    run.begin_phase("load");
    run.record_checkpoint({"vae", "audio_vae", "vocoder"});
    run.not_used_except({"vae", "audio_vae", "vocoder"},
                        "--decode-latents: the denoised latents were read from " + run.decode_latents_file().string() +
                            "; only the decoders run");
    run.record_input("latents", run.decode_latents_file());
    const VideoModel m = VideoModel::open_decoders(run.model_dir());
    // The audio's duration: the frames the denoising run was asked for (files before it recorded none: on-grid).
    const auto geo = latent_geometry(m.ratios(), r.l.workload.value("duration_frames", d.frames), d.height, d.width, d.fps);
    check_latents_fit(run, r, m, geo);

    RunPlan p;
    p.guidance.decode_timestep = r.decode_timestep;
    p.guidance.decode_noise_scale = r.decode_noise_scale;
    p.clip = {d.width, d.height, d.frames, geo};
    p.outputs = run.plan_outputs({"video.mp4", "audio.wav"});
    const OutputPlan o = plan_extra_outputs(run, p);
    p.vae = run.plan("vae");
    p.audio_vae = run.plan("audio_vae");
    p.vocoder = run.plan("vocoder");
    p.device = p.vae.placement.device();
    p.vae_choice = choose_video_vae_strategy(p.vae, m.vae, m.vae_config, 1, d.frames, d.width, d.height, w.dtype,
                                             p.vae.vae_tiles.temporal_frames);
    if (!m.vae_config.timestep_conditioning && p.guidance.decode_timestep != 0.0)
        run.adjust("plugin.ltx2_video.decode_timestep", p.guidance.decode_timestep, nullptr,
                   "the VAE is not timestep-conditioned (vae/config.json timestep_conditioning = false): LTX2Pipeline "
                   "ignores decode_timestep");
    run.record_workload({{"model", kPlugin}, {"mode", "decode_only"}, {"latents_file", run.decode_latents_file().string()},
                         {"width", d.width}, {"height", d.height}, {"frames", d.frames}, {"fps", d.fps},
                         {"duration_frames", geo.duration_frames}, {"latent", r.l.workload.at("latent")}, {"steps", d.steps}, {"seed", d.seed},
                         {"decode_timestep", p.guidance.decode_timestep},
                         {"decode_noise_scale", optional_json(p.guidance.decode_noise_scale)},
                         {"dtype", c10::toString(w.dtype)},
                         {"latents_dtype", c10::toString(r.l.video.scalar_type())}, {"device", p.device.str()},
                         {"vae_strategy", video_vae_strategy_name(p.vae_choice.strategy)},
                         {"vae_decision", vae_decision_json(p.vae_choice)},
                         {"audio_sample_rate", m.vocoder_sample_rate()}, {"denoised_by", r.l.workload}});
    if (run.dry_run()) return;
    const DecodeInputs in{r.l.video.to(p.device, w.dtype), r.l.audio.to(p.device, w.dtype)};
    decode_and_write(run, w, m, p, o, in);
}

}  // namespace

// Note [Memory forecast]: every phase's peak known before anything loads; exit 2 when one does not fit.
void forecast_run(model::ModelRun & run, const Request & r, const VideoModel & m, const RunPlan & p) {
    if (r.prompt.encode_only) return;
    forecast_engine_component(run, p.transformer, "transformer", transformer_groups(m.transformer_config), r.w.dtype);
    forecast_engine_component(run, video_vae_plan(p.vae, p.vae_choice), "vae", video_vae_leaf_groups(m.vae_config),
                              r.w.dtype);
    forecast_engine_component(run, p.audio_vae, "audio_vae", audio_vae_decoder_groups(m.audio_vae_config), r.w.dtype);
    forecast_engine_component(run, p.vocoder, "vocoder",
                              m.vocoder_bwe_config ? vocoder_bwe_groups(*m.vocoder_bwe_config) : vocoder_groups(*m.vocoder_config),
                              r.w.dtype);
    VideoMemoryInputs in;
    in.cfg = p.passes.cfg;
    in.extra_passes = int(p.passes.stg) + int(p.passes.isolate);
    in.text_tokens = p.embeds.embeds.defined() ? p.embeds.embeds.size(1) : r.max_sequence_length;
    in.embeds_given = p.embeds.embeds.defined();
    if (in.embeds_given) {
        in.embeds_dtype = p.embeds.embeds.scalar_type();
        forecast_engine_component(run, p.connectors, "connectors", connector_groups(m.connectors_config), r.w.dtype);
    }
    in.per_token_timesteps = p.conditions.any();
    if (p.conditions.pipeline == ClipConditions::Pipeline::condition)
        for (const auto & i : p.conditions.items) in.keyframes += i.latent_index != 0;
    in.fps = r.w.fps;
    if (p.two_stage) {
        const auto passes2 = guidance_passes(p.two_stage->settings.video, p.two_stage->settings.audio);
        in.two_stage = true;
        in.stage2_cfg = passes2.cfg;
        in.stage2_extra_passes = int(passes2.stg) + int(passes2.isolate);
    }
    in.vae = p.vae_choice;
    in.dtype = r.w.dtype;
    in.cuda = p.transformer.placement.cuda;
    in.step_cache = p.guidance.ds.step_cache;
    const auto ratios = m.ratios();
    run.forecast_memory({p.clip.width, p.clip.height, r.w.frames},
                        [&m, in](const model::ForecastShape & s) { return video_stage_memory(m, in, s); },
                        (p.two_stage ? 2 : 1) * ratios.spatial, ratios.temporal);
}

void run_ltx2_video(model::ModelRun & run) {
    run.accept_latents_files();
    if (!run.decode_latents_file().empty()) return run_decode_only(run);
    const auto r = resolve_request(run);
    const auto c = open_checkpoint(run, r);
    const auto & m = c.m;
    auto p = plan_run(run, r, m);
    const OutputPlan o = plan_extra_outputs(run, p);
    record_workload(run, r, m, p);
    if (run.fit([&] { plan_components(run, r, m, p); forecast_run(run, r, m, p); }))
        record_workload(run, r, m, p);  // with the settings fit.policy = auto applied
    if (!encode_prompt(run, r, c, p)) return;
    const auto text = encode_text(run, r, m, p);
    if (!text) return;
    const auto condition_latents = encode_conditions(run, m, p.vae, p.conditions, r.w.dtype);
    const auto latents = denoise_clip(run, {m, p.transformer, p.clip.geo, p.sampling.schedule, p.guidance.ds,
                                            p.two_stage, p.conditions, condition_latents, r.w.seed,
                                            double(p.sampling.sigmas.front()), r.w.dtype, p.guidance.decode_noise()},
                                      *text);
    const auto in = decode_inputs(m, p.clip.geo, r.w.dtype, latents, p.guidance);
    if (o.save_latents) save_latents(run, in);
    decode_and_write(run, r.w, m, p, o, in);
}

}  // namespace ddo::ltx2
