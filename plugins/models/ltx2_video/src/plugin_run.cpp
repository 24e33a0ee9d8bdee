#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "audio_vae_decoder.hpp"
#include "connectors.hpp"
#include "ddo/error.hpp"
#include "ddo/media/video_writer.hpp"
#include "ddo/media/wav_writer.hpp"
#include "latents.hpp"
#include "prompt_encoder.hpp"
#include "transformer.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"
#include "video_vae_choice.hpp"
#include "video_vae_decoder.hpp"
#include "vocoder.hpp"
#include "vocoder_bwe.hpp"
#include "run_stages.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {
namespace {

constexpr const char * kPlugin = "ltx2_video";

// LTX2Pipeline's defaults (diffusers 0.42: 768x512, 121 frames at 24 fps, 30 steps, guidance 3 / STG 1 on block 28 /
// modality 3 / rescale 0.7, audio 7 / 1 / 3 / 0.7, use_cross_timestep).
constexpr model::WorkloadDefaults kDefaults{.width = 768, .height = 512, .steps = 30, .seed = 0, .frames = 121, .fps = 24.0};


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

nlohmann::json guidance_json(const GuidanceScales & g) {
    return {{"guidance_scale", g.cfg}, {"stg_scale", g.stg}, {"modality_scale", g.modality}, {"guidance_rescale", g.rescale}};
}


// [B, 3, F, H, W] in [-1, 1] -> uint8 [F, H, W, 3] of sample 0 (postprocess_video's clamp(x / 2 + 0.5, 0, 1), then
// numpy_to_pil's (x * 255).round()).
at::Tensor to_rgb24(const at::Tensor & video) {
    auto x = (video[0].to(at::kFloat) / 2 + 0.5).clamp(0, 1);
    return (x * 255).round().to(at::kByte).permute({1, 2, 3, 0}).contiguous().to(at::kCPU);
}

}  // namespace

void run_ltx2_video(model::ModelRun & run) {
    const auto w = run.workload(kDefaults);
    run.require_model_dir();
    run.check_class("transformer/config.json", {"LTX2VideoTransformer3DModel"});
    run.check_class("vae/config.json", {"AutoencoderKLLTX2Video"});
    run.check_class("audio_vae/config.json", {"AutoencoderKLLTX2Audio"});
    run.check_class("connectors/config.json", {"LTX2TextConnectors"});
    run.check_class("vocoder/config.json", {"LTX2Vocoder", "LTX2VocoderWithBWE"});
    // Where the prompt comes from: text (the checkpoint's Gemma-3 encodes it) or a --prompt-embeds file.
    const bool from_text = run.prompt_from_text(w);
    const bool encode_only = run.encode_only();
    if (encode_only)
        for (const char * k : {"workload.width", "workload.height", "workload.frames", "workload.fps", "workload.steps",
                               "workload.sigmas"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
    const int64_t max_sequence_length = run.option<int64_t>("max_sequence_length", 1024);
    if (max_sequence_length < 1)
        throw UsageError("plugin.ltx2_video.max_sequence_length must be >= 1 (LTX2Pipeline's default is 1024)");
    if (w.num_images != 1)
        throw UsageError(std::string(kPlugin) + ": workload.num_images = " + std::to_string(w.num_images) +
                         ": one video per run (num_videos_per_prompt > 1 is not implemented); run again with another seed");
    if (!from_text && run.prompt_embeds().empty() && !run.dry_run())
        throw UsageError(std::string(kPlugin) + ": no prompt: give -p/--prompt TEXT (the checkpoint's Gemma-3 text "
                         "encoder encodes it) or --prompt-embeds FILE (LTX2Pipeline's prompt_embeds; ddo-host encode "
                         "writes one)");
    if (!run.latents_file().empty())
        throw UsageError(std::string(kPlugin) + ": --latents is not implemented for LTX-2 (video and audio latents); the "
                         "noise is drawn from workload.seed");

    if (from_text) run.check_class("text_encoder/config.json", {"Gemma3ForConditionalGeneration"});

    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "connectors", "vae", "audio_vae", "vocoder", "scheduler"};
    if (from_text) components.insert(components.begin(), {"text_encoder", "tokenizer"});
    run.record_checkpoint(components);
    auto m = VideoModel::open(run.model_dir());
    std::optional<Ltx2PromptEncoder> encoder;
    if (from_text) encoder = open_prompt_encoder(run, m.connectors_config);
    const auto & tc = m.transformer_config;
    uint64_t block_bytes = 0;
    for (const auto & [name, shape] : tensor_specs(tc))
        if (name.starts_with("transformer_blocks.0.")) block_bytes += m.transformer.nbytes_of(name);
    run.add_checkpoint_facts({{"transformer_blocks", tc.num_layers}, {"block_payload_bytes", block_bytes},
                              {"vocoder", m.vocoder_bwe_config ? "LTX2VocoderWithBWE" : "LTX2Vocoder"}});

    // The request, in the pipeline's units: sizes are used as given (LTX2Pipeline floors them by integer division
    // of the latent grid; say so when that changes them).
    const auto ratios = m.ratios();
    const int64_t width = w.width / ratios.spatial * ratios.spatial, height = w.height / ratios.spatial * ratios.spatial;
    const int64_t frames = (w.frames - 1) / ratios.temporal * ratios.temporal + 1;
    if (width < ratios.spatial || height < ratios.spatial)
        throw UsageError(std::string(kPlugin) + ": width and height must be at least " + std::to_string(ratios.spatial) +
                         " (the VAE's spatial compression)");
    for (auto [key, req, eff] : {std::tuple{"workload.width", w.width, width}, std::tuple{"workload.height", w.height, height}})
        if (req != eff)
            run.adjust(key, req, eff, "LTX-2 sizes are multiples of the VAE's spatial compression " +
                                          std::to_string(ratios.spatial) + " (the latent grid floors them)");
    if (frames != w.frames)
        run.adjust("workload.frames", w.frames, frames,
                   "LTX-2 clips have 1 + " + std::to_string(ratios.temporal) + "k frames (the causal VAE's temporal "
                   "compression); the latent grid floors the count");
    if (!(w.fps > 0)) throw UsageError(std::string(kPlugin) + ": workload.fps must be > 0");
    const auto geo = latent_geometry(ratios, frames, height, width, w.fps);
    if (geo.audio_frames < 1)
        throw UsageError(std::string(kPlugin) + ": the clip (" + std::to_string(frames) + " frames at " +
                         nlohmann::json(w.fps).dump() + " fps) is shorter than one audio latent frame; ask for more frames");

    DenoiseSettings ds;
    ds.video = video_guidance(run, w);
    ds.audio = audio_guidance(run, ds.video);
    const bool stg_blocks_set = !run.option<nlohmann::json>("stg_blocks", nullptr).is_null();
    ds.stg_blocks = run.option<std::vector<int64_t>>("stg_blocks", {28});
    ds.use_cross_timestep = run.option<bool>("use_cross_timestep", true);
    ds.fps = w.fps;
    ds.dtype = w.dtype;
    const double decode_timestep = run.option<double>("decode_timestep", 0.0);
    // STG blocks that do not exist: refused when asked for; the pipeline's default [28] on a smaller transformer
    // perturbs nothing (LTX2Pipeline tests `i in spatio_temporal_guidance_blocks`), which the report says.
    std::vector<int64_t> existing;
    for (int64_t b : ds.stg_blocks) {
        if (b >= 0 && b < tc.num_layers) existing.push_back(b);
        else if (stg_blocks_set)
            throw UsageError("plugin.ltx2_video.stg_blocks: block " + std::to_string(b) + " does not exist (the transformer "
                             "has " + std::to_string(tc.num_layers) + " blocks, 0.." + std::to_string(tc.num_layers - 1) + ")");
    }
    if (existing.size() != ds.stg_blocks.size() && guidance_passes(ds.video, ds.audio).stg) {
        run.adjust("plugin.ltx2_video.stg_blocks", ds.stg_blocks, existing,
                   "the default STG block does not exist in this " + std::to_string(tc.num_layers) +
                       "-block transformer: the STG pass perturbs no block (as LTX2Pipeline); set stg_blocks");
    }
    ds.stg_blocks = existing;
    if (!m.vae_config.timestep_conditioning && decode_timestep != 0.0)
        run.adjust("plugin.ltx2_video.decode_timestep", decode_timestep, nullptr,
                   "the VAE is not timestep-conditioned (vae/config.json timestep_conditioning = false): LTX2Pipeline "
                   "ignores decode_timestep");

    PromptEmbeds embeds;
    if (!run.prompt_embeds().empty()) {
        run.record_input("prompt_embeds", run.prompt_embeds());
        embeds = load_prompt_embeds(run.prompt_embeds(), m.connectors_config);
    }
    auto passes = guidance_passes(ds.video, ds.audio);
    if (from_text && !passes.cfg && w.negative_prompt)
        run.adjust("workload.negative_prompt", *w.negative_prompt, "unused",
                   "guidance scales <= 1: no classifier-free guidance, as in LTX2Pipeline");
    if (passes.cfg && !embeds.neg_embeds && !run.prompt_embeds().empty()) {
        // LTX2Pipeline encodes negative_prompt ("" by default) with Gemma-3 here; without it there is no
        // unconditional branch to guide against.
        run.adjust("workload.guidance_scale", ds.video.cfg, 1.0,
                   "the prompt embeddings carry no negative_prompt_embeds, so there is no unconditional branch "
                   "(LTX2Pipeline would encode the negative prompt \"\"): classifier-free guidance is off; run from "
                   "-p, or write the file with ddo-host encode -n '' to guide");
        if (ds.audio.cfg != 1.0)
            run.adjust("plugin.ltx2_video.audio_guidance_scale", ds.audio.cfg, 1.0, "as workload.guidance_scale");
        ds.video.cfg = ds.audio.cfg = 1.0;
        passes = guidance_passes(ds.video, ds.audio);
    }

    std::vector<float> sigmas = w.sigmas ? model::sigmas_from(*w.sigmas) : model::default_sigmas(w.steps);
    if (w.sigmas && w.steps_set && w.steps != int(w.sigmas->size()))
        run.adjust("workload.steps", w.steps, int(w.sigmas->size()),
                   "workload.sigmas sets the grid; its length is the number of steps (LTX2Pipeline sigmas=)");
    // `ddo-host encode` samples nothing: its (default) geometry needs no schedule.
    const auto schedule = encode_only ? model::FlowMatchSchedule{}
                                      : ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, geo.video_tokens());
    const double mu = ltx2_mu(m.scheduler_json, geo.video_tokens());

    std::vector<std::filesystem::path> outputs;
    if (encode_only) run.plan_tensor_file();
    else if (from_text || !run.prompt_embeds().empty()) outputs = run.plan_outputs({"video.mp4", "audio.wav"});
    const auto conn_plan = run.plan("connectors");
    const auto dit_plan = run.plan("transformer");
    const auto vae_plan = run.plan("vae");
    const auto avae_plan = run.plan("audio_vae");
    const auto voc_plan = run.plan("vocoder");
    const auto device = dit_plan.placement.device();
    const auto vae_choice = choose_video_vae_strategy(vae_plan, m.vae, m.vae_config, 1, frames, width, height, w.dtype,
                                                      vae_plan.vae_tiles.temporal_frames);

    nlohmann::json sig = nlohmann::json::array();
    for (float v : schedule.sigmas) sig.push_back(double(v));
    run.record_workload({{"model", kPlugin}, {"width", width}, {"height", height}, {"frames", frames}, {"fps", w.fps},
                         {"latent", {{"frames", geo.latent_frames}, {"height", geo.latent_height},
                                     {"width", geo.latent_width}, {"audio_frames", geo.audio_frames},
                                     {"video_tokens", geo.video_tokens()}}},
                         {"steps", int(sigmas.size())}, {"sigmas", encode_only ? nlohmann::json(nullptr) : sig},
                         {"mu", mu},
                         {"sigmas_source", w.sigmas ? "workload.sigmas" : "linspace(1, 1/steps, steps)"},
                         {"seed", w.seed}, {"video_guidance", guidance_json(ds.video)},
                         {"audio_guidance", guidance_json(ds.audio)},
                         {"passes_per_step", 1 + int(passes.stg) + int(passes.isolate)},
                         {"cfg_batch", passes.cfg}, {"stg_blocks", ds.stg_blocks},
                         {"stg_effective", passes.stg && tc.perturbed_attn},
                         {"use_cross_timestep", ds.use_cross_timestep}, {"decode_timestep", decode_timestep},
                         {"dtype", c10::toString(w.dtype)}, {"device", device.str()},
                         {"vae_strategy", video_vae_strategy_name(vae_choice.strategy)},
                         {"vae_decision", {{"requested", vae_choice.requested}, {"reason", vae_choice.reason},
                                           {"auto", vae_choice.facts},
                                           {"tiling", {{"tile", vae_choice.tiling.tile_sample_min_width},
                                                       {"stride", vae_choice.tiling.tile_sample_stride_width},
                                                       {"window_frames", vae_choice.tiling.tile_sample_min_num_frames},
                                                       {"window_stride", vae_choice.tiling.tile_sample_stride_num_frames}}}}},
                         {"audio_sample_rate", m.vocoder_sample_rate()},
                         {"prompt", from_text ? nlohmann::json(*w.prompt) : nlohmann::json(nullptr)},
                         {"negative_prompt", from_text && passes.cfg ? nlohmann::json(w.negative_prompt.value_or(""))
                                                                     : nlohmann::json(nullptr)},
                         {"prompt_embeddings", from_text ? "encoded by the text encoder (Gemma-3)"
                                               : run.prompt_embeds().empty() ? "none (dry run)" : "supplied"},
                         {"max_sequence_length", max_sequence_length}});

    // Text: Gemma-3 on the engine (its layers are execution groups of component text_encoder), unloaded before the
    // connectors run; its stacked hidden states are what --prompt-embeds would have supplied.
    if (from_text) {
        const auto text = run_text_stage(run, *encoder, {kPlugin, *w.prompt, w.negative_prompt, passes.cfg, encode_only,
                                                         max_sequence_length, w.dtype, device});
        if (!text) return;  // ddo-host encode: written (or validated in a dry run)
        embeds = *text;
    }

    // Connectors (the text path after Gemma-3), unloaded before the DiT's weights are opened.
    auto conn = open_engine_component(run, conn_plan, "connectors", connector_groups(m.connectors_config), w.dtype);
    if (run.dry_run()) {
        unload(run, conn);
        auto dit = open_engine_component(run, dit_plan, "transformer", transformer_groups(tc), w.dtype);
        unload(run, dit);
        run.log(2, from_text ? "dry run: checkpoint, tokenizer, text encoder and prompt validated; nothing computed"
                   : run.prompt_embeds().empty() ? "dry run: checkpoint validated (no prompt given); nothing computed"
                                               : "dry run: checkpoint and embeddings validated; nothing computed");
        return;
    }
    if (run.phase() != "encode") run.begin_phase("encode");  // the text encoder's phase, when it ran
    at::Tensor text_in = embeds.embeds, mask_in = embeds.mask;
    if (passes.cfg) {
        text_in = at::cat({*embeds.neg_embeds, embeds.embeds});
        mask_in = at::cat({*embeds.neg_mask, embeds.mask});
    }
    const auto text = connectors_forward(m.connectors_config, *conn.view, text_in.to(device, w.dtype), mask_in.to(device));
    unload(run, conn);

    auto dit = open_engine_component(run, dit_plan, "transformer", transformer_groups(tc), w.dtype);
    run.begin_phase("denoise");
    DenoiseCallbacks cb;
    cb.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step + 1)); };
    cb.on_step = [&](int step, int total) { run.step(step, total); };
    auto noise = draw_noise(ratios, geo, 1, w.seed, device);
    const auto latents = denoise(tc, *dit.view, text, geo, noise, schedule, ds, cb);
    unload(run, dit);

    // Video decode: the strategy decided up front (vae.strategy, auto per seed 003's table).
    run.begin_phase("decode");
    model::ComponentPlan vae_run_plan = vae_plan;
    if (vae_choice.strategy == VideoVaeStrategy::leaf_offload) vae_run_plan.route = engine::Route::dynamic;
    auto vae = open_engine_component(run, vae_run_plan, "vae", video_vae_leaf_groups(m.vae_config), w.dtype);
    at::Tensor pixels;
    {
        auto z = unpack_video(latents.video, geo).to(w.dtype);
        at::Tensor t;
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
        pixels = decode_video(decoder, z, t, vae_choice.strategy, vae_choice.tiling, run.decode_piece_progress("piece"));
    }
    run.record_route("vae", vae_choice.requested, video_vae_strategy_name(vae_choice.strategy), vae_choice.reason);
    unload(run, vae);

    // Audio decode: de-normalise while packed, unpack, audio VAE -> mel -> vocoder -> waveform.
    run.begin_phase("decode_audio");
    at::Tensor waveform;
    {
        auto avae = open_engine_component(run, avae_plan, "audio_vae", audio_vae_decoder_groups(m.audio_vae_config), w.dtype);
        auto packed = denormalize_audio_latents(*avae.view, latents.audio.to(w.dtype));
        const auto mel = AudioVaeDecoder(m.audio_vae_config)
                             .decode(*avae.view, unpack_audio_latents(packed, m.audio_vae_config.latent_mel_bins()));
        unload(run, avae);
        run.check_interrupted("before the vocoder");
        if (m.vocoder_bwe_config) {
            auto voc = open_engine_component(run, voc_plan, "vocoder", vocoder_bwe_groups(*m.vocoder_bwe_config), w.dtype);
            waveform = VocoderWithBwe(*m.vocoder_bwe_config).forward(*voc.view, mel);
            unload(run, voc);
        } else {
            auto voc = open_engine_component(run, voc_plan, "vocoder", vocoder_groups(*m.vocoder_config), w.dtype);
            waveform = Vocoder(*m.vocoder_config).forward(*voc.view, mel);
            unload(run, voc);
        }
    }

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
    const auto mp4 = media::write_mp4(outputs[0], vs, rgb.data_ptr<std::uint8_t>(), rgb.size(0), &clip, overwrite, tags);
    nlohmann::json vf = {{"video_codec", mp4.video_codec}, {"encoder", mp4.video_encoder},
                         {"pixel_format", mp4.pixel_format}, {"width", mp4.width}, {"height", mp4.height},
                         {"frames", mp4.frames}, {"fps", std::to_string(mp4.fps_num) + "/" + std::to_string(mp4.fps_den)},
                         {"video_duration_s", mp4.video_duration_s}, {"video_bit_rate", mp4.video_bit_rate}};
    if (mp4.audio)
        vf["audio"] = {{"codec", mp4.audio->codec}, {"sample_rate", mp4.audio->sample_rate},
                       {"channels", mp4.audio->channels}, {"samples", mp4.audio->samples},
                       {"duration_s", mp4.audio->duration_s}, {"bit_rate", mp4.audio->bit_rate}};
    run.record_output(mp4.file.path, "video/mp4", mp4.file.size, mp4.file.sha256, vf);
    const auto wav = media::write_wav(outputs[1], clip, overwrite, tags);
    run.record_output(wav.file.path, "audio/wav", wav.file.size, wav.file.sha256,
                      {{"codec", wav.codec}, {"sample_rate", wav.sample_rate}, {"channels", wav.channels},
                       {"samples", wav.samples}, {"duration_s", wav.duration_s}});
}

}  // namespace ddo::ltx2
