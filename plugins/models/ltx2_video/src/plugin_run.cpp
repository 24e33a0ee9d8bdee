// The ltx2_video run on the model kit, as LTX2Pipeline runs (docs/architecture.md, "The ltx2_video run"):
// resolve_request -> open_checkpoint -> plan_run (clip size, guidance, prompt embeddings, schedule, plans) ->
// encode_prompt (Gemma-3, unloaded; `ddo-host encode` ends here) -> encode_text (connectors; a dry run ends here) ->
// encode_conditions (the condition images through the VAE encoder) -> denoise_clip (stage 1; with an upsampler the
// upsampler and stage 2: clip_stages.hpp) -> decode_video_latents -> decode_audio_latents -> write_outputs (MP4 + WAV).
#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "audio_vae_decoder.hpp"
#include "clip_stages.hpp"
#include "connectors.hpp"
#include "ddo/error.hpp"
#include "ddo/media/video_writer.hpp"
#include "ddo/media/wav_writer.hpp"
#include "ddo/model/run_request.hpp"
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
                               "workload.sigmas", "workload.images"})
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
// latent grid; say so when that changes them).
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
    const int64_t frames = (w.frames - 1) / ratios.temporal * ratios.temporal + 1;
    if (frames != w.frames)
        run.adjust("workload.frames", w.frames, frames,
                   "LTX-2 clips have 1 + " + std::to_string(ratios.temporal) + "k frames (the causal VAE's temporal "
                   "compression); the latent grid floors the count");
    if (!(w.fps > 0)) throw UsageError(std::string(kPlugin) + ": workload.fps must be > 0");
    const auto geo = latent_geometry(ratios, frames, size.height, size.width, w.fps);
    if (geo.audio_frames < 1)
        throw UsageError(std::string(kPlugin) + ": the clip (" + std::to_string(frames) + " frames at " +
                         nlohmann::json(w.fps).dump() + " fps) is shorter than one audio latent frame; ask for more frames");
    return {size.width, size.height, frames, geo};
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

// The denoising settings (guidance scales, STG blocks, cross timestep) and the decode timestep.
struct Guidance {
    DenoiseSettings ds;
    double decode_timestep = 0.0;
};

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
    if (!m.vae_config.timestep_conditioning && g.decode_timestep != 0.0)
        run.adjust("plugin.ltx2_video.decode_timestep", g.decode_timestep, nullptr,
                   "the VAE is not timestep-conditioned (vae/config.json timestep_conditioning = false): LTX2Pipeline "
                   "ignores decode_timestep");
    return g;
}

// The --prompt-embeds file's embeddings, and the guidance passes they allow: without negative embeddings there is
// no unconditional branch, so classifier-free guidance is off (LTX2Pipeline would encode the negative prompt "").
GuidancePasses load_prompt_file(model::ModelRun & run, const Request & r, const VideoModel & m, DenoiseSettings & ds,
                                PromptEmbeds & embeds) {
    if (r.prompt.have_embeds) {
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
    if (p.two_stage && guidance_passes(p.two_stage->settings.video, p.two_stage->settings.audio).cfg && !p.passes.cfg)
        throw UsageError("plugin.ltx2_video.stage2_guidance_scale = " +
                         nlohmann::json(p.two_stage->settings.video.cfg).dump() + ": stage 2 would run classifier-free "
                         "guidance while stage 1 does not (no negative prompt is encoded); use 1");
    const auto r_ = m.ratios();
    p.conditions = resolve_conditions(run, r_, p.two_stage ? p.two_stage->stage1 : p.clip.geo);
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

RunPlan plan_run(model::ModelRun & run, const Request & r, const VideoModel & m) {
    RunPlan p;
    p.clip = resolve_clip(run, r.w, m);
    p.guidance = resolve_guidance(run, r.w, m);
    p.passes = load_prompt_file(run, r, m, p.guidance.ds, p.embeds);
    p.sampling = resolve_sampling(run, r, m, p.clip.geo);
    if (r.prompt.encode_only) run.plan_tensor_file();
    else if (r.prompt.given()) p.outputs = run.plan_outputs({"video.mp4", "audio.wav"});
    p.connectors = run.plan("connectors");
    p.transformer = run.plan("transformer");
    p.vae = run.plan("vae");
    p.audio_vae = run.plan("audio_vae");
    p.vocoder = run.plan("vocoder");
    p.device = p.transformer.placement.device();
    p.vae_choice = choose_video_vae_strategy(p.vae, m.vae, m.vae_config, 1, p.clip.frames, p.clip.width,
                                             p.clip.height, r.w.dtype, p.vae.vae_tiles.temporal_frames);
    if (!r.prompt.encode_only) plan_stages(run, r, m, p);
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

// Phase "decode": the video latents de-normalised and decoded with the strategy decided up front (vae.strategy,
// auto per seed 003's table; leaf_offload runs the decoder's leaf groups on the engine's dynamic route).
at::Tensor decode_video_latents(model::ModelRun & run, const model::Workload & w, const VideoModel & m,
                                const RunPlan & p, const at::Tensor & latents) {
    run.begin_phase("decode");
    const auto & choice = p.vae_choice;
    model::ComponentPlan vae_plan = p.vae;
    if (choice.strategy == VideoVaeStrategy::leaf_offload) vae_plan.route = engine::Route::dynamic;
    auto vae = open_engine_component(run, vae_plan, "vae", video_vae_leaf_groups(m.vae_config), w.dtype);
    auto z = unpack_video(latents, p.clip.geo).to(w.dtype);
    at::Tensor t;
    const double decode_timestep = p.guidance.decode_timestep;
    if (m.vae_config.timestep_conditioning) {
        // decode_noise_scale defaults to decode_timestep; the noise is drawn after denoising (a new generator
        // is not the reference's: with decode_timestep 0 it has no effect and is not drawn).
        if (decode_timestep != 0.0)
            throw UsageError("plugin.ltx2_video.decode_timestep = " + nlohmann::json(decode_timestep).dump() +
                             ": decode noise (the pipeline's second draw from its generator) is not implemented; use 0");
        t = at::full({1}, decode_timestep, z.options());
    }
    const auto stats = read_video_latent_stats(m.vae, m.vae_config);
    z = denormalize_video_latents(z, stats.mean, stats.std, m.vae_config.scaling_factor);
    VideoVaeDecoder decoder(m.vae_config, *vae.view);
    decoder.set_stage_check(run.decode_stage_check());
    auto pixels = decode_video(decoder, z, t, choice.strategy, choice.tiling, run.decode_piece_progress("piece"));
    run.record_route("vae", choice.requested, video_vae_strategy_name(choice.strategy), choice.reason);
    unload(run, vae);
    return pixels;
}

// Phase "decode_audio": de-normalise while packed, unpack, audio VAE -> mel (unloaded) -> vocoder (HiFi-GAN or BWE,
// unloaded) -> waveform [1, 2, samples].
at::Tensor decode_audio_latents(model::ModelRun & run, const model::Workload & w, const VideoModel & m,
                                const RunPlan & p, const at::Tensor & latents) {
    run.begin_phase("decode_audio");
    auto avae = open_engine_component(run, p.audio_vae, "audio_vae", audio_vae_decoder_groups(m.audio_vae_config), w.dtype);
    auto packed = denormalize_audio_latents(*avae.view, latents.to(w.dtype));
    const auto mel = AudioVaeDecoder(m.audio_vae_config)
                         .decode(*avae.view, unpack_audio_latents(packed, m.audio_vae_config.latent_mel_bins()));
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
// numpy_to_pil's (x * 255).round()).
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

// Phase "write_output": the MP4 (frames + the waveform) and the WAV, each atomically, recorded with its facts.
void write_outputs(model::ModelRun & run, const model::Workload & w, const VideoModel & m, const RunPlan & p,
                   const at::Tensor & pixels, const at::Tensor & waveform) {
    run.begin_phase("write_output");
    const auto rgb = to_rgb24(pixels);
    const auto pcm = waveform[0].to(at::kFloat).to(at::kCPU).contiguous();  // planar [2, samples]
    media::AudioClip clip;
    clip.samples = pcm.data_ptr<float>();
    clip.frames = pcm.size(1);
    clip.spec = {int(m.vocoder_sample_rate()), int(pcm.size(0))};
    clip.layout = media::SampleLayout::planar;
    media::VideoSpec vs;
    vs.width = int(rgb.size(2));
    vs.height = int(rgb.size(1));
    vs.fps = w.fps;
    const auto overwrite = run.overwrite() ? media::Overwrite::replace : media::Overwrite::refuse;
    const media::MediaTags tags{{"comment", std::string("ddo ") + kPlugin}};
    const auto mp4 = media::write_mp4(p.outputs[0], vs, rgb.data_ptr<std::uint8_t>(), rgb.size(0), &clip, overwrite, tags);
    run.record_output(mp4.file.path, "video/mp4", mp4.file.size, mp4.file.sha256, mp4_facts(mp4));
    const auto wav = media::write_wav(p.outputs[1], clip, overwrite, tags);
    run.record_output(wav.file.path, "audio/wav", wav.file.size, wav.file.sha256,
                      {{"codec", wav.codec}, {"sample_rate", wav.sample_rate}, {"channels", wav.channels},
                       {"samples", wav.samples}, {"duration_s", wav.duration_s}});
}

}  // namespace

void run_ltx2_video(model::ModelRun & run) {
    const auto r = resolve_request(run);
    const auto c = open_checkpoint(run, r);
    const auto & m = c.m;
    auto p = plan_run(run, r, m);
    record_workload(run, r, m, p);
    if (!encode_prompt(run, r, c, p)) return;
    const auto text = encode_text(run, r, m, p);
    if (!text) return;
    const auto condition_latents = encode_conditions(run, m, p.vae, p.conditions, r.w.dtype);
    const auto latents = denoise_clip(run, {m, p.transformer, p.clip.geo, p.sampling.schedule, p.guidance.ds,
                                            p.two_stage, p.conditions, condition_latents, r.w.seed,
                                            double(p.sampling.sigmas.front()), r.w.dtype},
                                      *text);
    const auto pixels = decode_video_latents(run, r.w, m, p, latents.video);
    const auto waveform = decode_audio_latents(run, r.w, m, p, latents.audio);
    write_outputs(run, r.w, m, p, pixels, waveform);
}

}  // namespace ddo::ltx2
