#include "memory_model.hpp"

#include <algorithm>

namespace ddo::ltx2 {
namespace {

using model::MemorySide;

// The denoise phase at geometry `g`: `batch` rows in the largest pass (2: the CFG batch), `passes` predictions kept.
model::StageMemory denoise_stage(const std::string & phase, const VideoModel & m, const VideoMemoryInputs & in,
                                 const LatentGeometry & g, bool cfg, int extra_passes, std::int64_t keyframe_tokens) {
    const auto & c = m.transformer_config;
    const auto dt = in.dtype;
    const std::int64_t B = cfg ? 2 : 1, Tv = g.video_tokens() + keyframe_tokens, Ta = std::max<std::int64_t>(1, g.audio_frames);
    const std::int64_t D = c.inner_dim(), Da = c.audio_inner_dim(), L = std::max<std::int64_t>(1, in.text_tokens);
    const std::int64_t Cv = c.in_channels, Ca = c.audio_in_channels;
    const std::int64_t predictions = (cfg ? 2 : 1) + extra_passes;
    model::StageMemory s(phase);
    s.weights("transformer");
    s.tensor("latents", {1, Tv, Cv}, at::kFloat, 2, MemorySide::device, "video latents and the step's update (float32)");
    s.tensor("audio latents", {1, Ta, Ca}, at::kFloat, 2, MemorySide::device, "audio latents and the step's update");
    s.tensor("video predictions", {1, Tv, Cv}, at::kFloat, predictions, MemorySide::device, "one per pass row (float32)");
    s.tensor("audio predictions", {1, Ta, Ca}, at::kFloat, predictions, MemorySide::device, "one per pass row (float32)");
    s.tensor("prompt embeddings", {B, L, c.cross_attention_dim}, dt, 1, MemorySide::device, "the connectors' video output");
    s.tensor("audio prompt embeddings", {B, L, c.audio_cross_attention_dim}, dt, 1, MemorySide::device,
             "the connectors' audio output");
    s.tensor("RoPE tables", {B, Tv, D}, at::kFloat, 1, MemorySide::device, "video cos and sin (float32)");
    s.tensor("cross RoPE tables", {B, Tv, c.audio_cross_attention_dim}, at::kFloat, 1, MemorySide::device,
             "a2v / v2a cos and sin of the video tokens");
    s.tensor("audio RoPE tables", {B, Ta, Da + c.audio_cross_attention_dim}, at::kFloat, 1, MemorySide::device,
             "self and cross tables of the audio tokens");
    s.tensor("hidden states", {B, Tv, D}, dt, 2, MemorySide::device, "the block's input (kept in the state) and output");
    s.tensor("audio hidden states", {B, Ta, Da}, dt, 2, MemorySide::device, "the block's input and output");
    if (in.per_token_timesteps)
        s.tensor("per-token modulation", {B, Tv, D}, dt, 2 * 9 + 1, MemorySide::device,
                 "the timestep embedding per video token (9 rows) and each block's modulation parameters from it");
    // The block's working set: the video feed-forward (the normalised input, the 4 D projection and its GELU in one
    // full-expression, the output), which is larger than the attention's (q, k, v, their norms and the output) at
    // every width of the LTX-2 configurations; the audio stream's is computed after it, with the video's freed.
    s.tensor("block working set (feed-forward)", {B, Tv, D}, dt, 9, MemorySide::device,
             "normalised input, the up projection and its GELU (4 D each)");
    if (const auto * cache = in.step_cache)  // the guidance batch is one branch, each extra pass (batch 1) another
        s.bytes("step cache", cache->kept_bytes({{B, Tv, D}, {B, Ta, Da}}, dt) +
                                  std::uint64_t(extra_passes) * cache->kept_bytes({{1, Tv, D}, {1, Ta, Da}}, dt),
                MemorySide::device, "what cache." + std::string(to_string(cache->settings().kind)) +
                                        " keeps between passes (StepCache::kept_bytes)");
    return s;
}

// A HiFi-GAN generator (LTX2Vocoder; each half of LTX2VocoderWithBWE) on `frames` input frames: the stage whose
// [channels, samples] is the largest (conv_in's, or an upsampler's output), and how many such tensors are live at
// once there: the stage's input, the resblocks' outputs and their stack (2 R + 2), or inside the last resblock the
// outputs before it, its running sum and its activation's working set (leaky ReLU 2; snake 3; anti-aliased snake 7: the
// 2x upsampled input, the snake's temporaries at 2x and the downsampled result).
struct GeneratorPeak {
    std::int64_t channels = 0, samples = 0, count = 0;
};
GeneratorPeak generator_peak(const VocoderConfig & c, std::int64_t frames) {
    GeneratorPeak g{c.hidden_channels, frames, 0};
    std::int64_t t = frames;
    for (std::size_t i = 0; i < c.stages(); ++i) {
        t *= c.upsample_factors[i];
        if (c.stage_channels(i) * t > g.channels * g.samples) g = {c.stage_channels(i), t, 0};
    }
    const std::int64_t R = std::int64_t(c.resnet_kernel_sizes.size());
    const std::int64_t working = !c.snake() ? 2 : c.antialias ? 7 : 3;
    g.count = std::max(2 * R + 2, R + 1 + working);
    return g;
}

void generator_terms(model::StageMemory & s, const std::string & name, const GeneratorPeak & g, at::ScalarType dt) {
    s.tensor(name + " working set", {1, g.channels, g.samples}, dt, g.count, MemorySide::device,
             "its widest stage (" + std::to_string(g.channels) + " channels x " + std::to_string(g.samples) +
                 " samples): the stage's input, the resblocks' outputs and their stack, or the last resblock's "
                 "activation");
}

}  // namespace

void connector_encode_stages(std::vector<model::StageMemory> & out, const ConnectorsConfig & c, const ConnectorEncode & e) {
    const auto dt = e.dtype;
    const std::int64_t B = e.batch, L = std::max<std::int64_t>(1, e.tokens);
    const std::int64_t CF = c.caption_channels * c.text_proj_in_factor;
    const std::int64_t Dv = c.video.inner_dim(), Da = c.per_modality_projections ? c.audio.inner_dim() : Dv;
    const auto base = [&](const std::string & part) {
        model::StageMemory s("encode", part);
        s.weights("connectors");
        s.tensor("text hidden states", {1, L, CF}, e.embeds_dtype, e.prompts, MemorySide::device,
                 "the prompt's (and the negative prompt's) stacked hidden states, as read");
        if (e.batch_copy) s.tensor("guidance batch", {B, L, CF}, e.embeds_dtype, 1, MemorySide::device, "their concatenation");
        if (e.embeds_dtype != dt) s.tensor("input", {B, L, CF}, dt, 1, MemorySide::device, "the batch in the compute dtype");
        return s;
    };
    model::StageMemory norm = base("normalisation");
    norm.tensor("normalised hidden states", {B, L, CF}, dt, c.per_modality_projections ? 3 : 4, MemorySide::device,
                c.per_modality_projections ? "the RMS-normalised states, zeros_like and the masked result (then the "
                                             "scalings)"
                                           : "the masked copy, the centred and divided temporaries and the scaled result");
    out.push_back(norm);
    const bool two_projections = e.audio && c.per_modality_projections;
    const auto connector = [&](const std::string & part, const ConnectorSpec & k, std::int64_t D, bool video_kept) {
        model::StageMemory s = base(part);
        s.tensor("projection", {B, L, Dv}, dt, 1, MemorySide::device, "the video connector's input (kept to the end)");
        if (two_projections) s.tensor("audio projection", {B, L, Da}, dt, 1, MemorySide::device, "the audio connector's input");
        if (video_kept) s.tensor("video output", {B, L, Dv}, dt, 1, MemorySide::device, "the video connector's output");
        // The stream starts as the projection itself; the registers' select and each block's residual make new ones.
        const std::int64_t regs = k.registers ? 1 : 0, stream = (k.registers || k.layers > 0) ? 1 : 0;
        const std::int64_t working = std::max({2 * regs, stream + (k.layers > 0 ? 9 : 0), stream + 1});
        s.tensor("connector working set", {B, L, D}, dt, working, MemorySide::device,
                 "the registers' gather and select, or the stream and a block's feed-forward (norm, the 4 D projection "
                 "and its GELU), or the stream and the final norm");
        if (k.registers) s.tensor("registers", {L, D}, dt, 1, MemorySide::device, "the learnable registers tiled");
        return s;
    };
    out.push_back(connector("video connector", c.video, Dv, false));
    if (e.audio) out.push_back(connector("audio connector", c.audio, Da, true));
}

namespace {

// What the run holds from its earlier phases while it decodes: the connectors' outputs (kept to the run's end) and,
// in the video decode, the waveform (kept for the muxer).
void kept_terms(model::StageMemory & s, const VideoModel & m, const VideoMemoryInputs & in) {
    const auto & c = m.transformer_config;
    const std::int64_t B = in.cfg ? 2 : 1, L = std::max<std::int64_t>(1, in.text_tokens);
    s.tensor("prompt embeddings", {B, L, c.cross_attention_dim}, in.dtype, 1, MemorySide::device,
             "the connectors' video output, held by the run to its end");
    s.tensor("audio prompt embeddings", {B, L, c.audio_cross_attention_dim}, in.dtype, 1, MemorySide::device,
             "the connectors' audio output, held likewise");
}

// The waveform's channels and samples: the vocoder's output (the band extension's at its rate).
std::pair<std::int64_t, std::int64_t> waveform_extent(const VideoModel & m, std::int64_t mel_frames) {
    if (const auto & b = m.vocoder_bwe_config) {
        const std::int64_t s16 = mel_frames * b->vocoder.upsample_factor();
        return {b->bwe.out_channels, s16 * b->output_sampling_rate / b->input_sampling_rate};
    }
    return {m.vocoder_config->out_channels, mel_frames * m.vocoder_config->upsample_factor()};
}

// Phase "decode_audio", in two parts: the audio VAE (latents -> mel), unloaded, then the vocoder (mel -> waveform).
void audio_stages(std::vector<model::StageMemory> & out, const VideoModel & m, const VideoMemoryInputs & in,
                  const LatentGeometry & g) {
    const auto dt = in.dtype;
    const auto & a = m.audio_vae_config;
    const auto video_latents = [&](model::StageMemory & s) {
        s.tensor("video latents", {1, g.video_tokens(), m.transformer_config.in_channels}, at::kFloat, 2, MemorySide::device,
                 "the denoised video latents and their copy for the decode, waiting for it");
    };
    const std::int64_t L = std::max<std::int64_t>(1, g.audio_frames), mel_frames = AudioVaeConfig::mel_frames(L);
    const std::int64_t levels = std::int64_t(a.ch_mult.size());
    model::StageMemory vae("decode_audio", "audio VAE");
    vae.weights("audio_vae");
    kept_terms(vae, m, in);
    video_latents(vae);
    vae.tensor("latents", {1, a.latent_channels, L, a.latent_mel_bins()}, dt, 2, MemorySide::device,
               "the de-normalised latents and their copy on the device");
    // The finest level's extents: each upsample doubles the mel bins and the frames (less the causal first one).
    std::int64_t F = L, M = a.latent_mel_bins();
    for (std::int64_t l = 1; l < levels; ++l) {
        F = 2 * F - 1;
        M = 2 * M;
    }
    const std::int64_t wide = a.level_channels(std::min<std::size_t>(1, a.ch_mult.size() - 1)), fine = a.level_channels(0);
    vae.tensor("upsampled input", {1, wide, F + 1, M + 2}, dt, 4, MemorySide::device,
               "the finest level's first resnet on the last upsample's output: its input, norm, SiLU and causal padding");
    vae.tensor("resnet output", {1, fine, F, M}, dt, 1, MemorySide::device, "its first convolution's output");
    vae.tensor("mel", {1, a.output_channels, mel_frames, a.mel_bins}, dt, 1, MemorySide::device, "the decoded mel");
    out.push_back(vae);

    model::StageMemory voc("decode_audio", "vocoder");
    voc.weights("vocoder");
    kept_terms(voc, m, in);
    video_latents(voc);
    voc.tensor("mel", {1, a.output_channels, mel_frames, a.mel_bins}, dt, 2, MemorySide::device,
               "the mel and its [C*M, T] copy");
    if (m.vocoder_bwe_config) {
        const auto & b = *m.vocoder_bwe_config;
        const std::int64_t s16 = mel_frames * b.vocoder.upsample_factor();
        const std::int64_t stft_frames = (s16 + b.hop_length - 1) / b.hop_length;
        const std::int64_t s48 = stft_frames * b.bwe.upsample_factor();
        // The band extension runs after the first generator: its working set is the larger one, beside the
        // 16 kHz waveform, the residual and the resampled skip path at 48 kHz.
        const auto g1 = generator_peak(b.vocoder, mel_frames), g2 = generator_peak(b.bwe, stft_frames);
        if (g1.channels * g1.samples * g1.count > g2.channels * g2.samples * g2.count)
            generator_terms(voc, "vocoder", g1, dt);
        else
            generator_terms(voc, "band extension", g2, dt);
        voc.tensor("waveform", {1, b.vocoder.out_channels, s16}, dt, 1, MemorySide::device, "the 16 kHz waveform");
        voc.tensor("48 kHz waveforms", {1, b.bwe.out_channels, s48}, dt, 5, MemorySide::device,
                   "the band extension's residual, the skip path's transposed convolution and its scaled copy, their "
                   "sum and its clamp");
    } else {
        const auto & c = *m.vocoder_config;
        generator_terms(voc, "vocoder", generator_peak(c, mel_frames), dt);
        voc.tensor("waveform", {1, c.out_channels, mel_frames * c.upsample_factor()}, dt, 1, MemorySide::device,
                   "the waveform");
    }
    out.push_back(voc);
}

}  // namespace

std::vector<model::StageMemory> video_stage_memory(const VideoModel & m, const VideoMemoryInputs & in,
                                                   const model::ForecastShape & shape) {
    const auto r = m.ratios();
    std::vector<model::StageMemory> out;
    if (in.embeds_given) {
        ConnectorEncode e;
        e.batch = in.cfg ? 2 : 1;
        e.tokens = in.text_tokens;
        e.prompts = int(e.batch);
        e.batch_copy = in.cfg;
        e.embeds_dtype = in.embeds_dtype;
        e.dtype = in.dtype;
        e.audio = true;
        connector_encode_stages(out, m.connectors_config, e);
    }
    const auto full = latent_geometry(r, shape.frames, shape.height, shape.width, in.fps);
    if (in.two_stage) {
        const auto half = latent_geometry(r, shape.frames, shape.height / 2, shape.width / 2, in.fps);
        out.push_back(denoise_stage("denoise", m, in, half, in.cfg, in.extra_passes, in.keyframes * half.latent_height * half.latent_width));
        out.push_back(denoise_stage("denoise_stage2", m, in, full, in.stage2_cfg, in.stage2_extra_passes, 0));
    } else {
        out.push_back(denoise_stage("denoise", m, in, full, in.cfg, in.extra_passes,
                                    in.keyframes * full.latent_height * full.latent_width));
    }
    model::StageMemory decode("decode");
    const auto & vc = m.vae_config;
    decode.weights("vae");
    decode.tensor("latents", {1, vc.latent_channels, full.latent_frames, full.latent_height, full.latent_width}, in.dtype, 2,
                  MemorySide::device, "the de-normalised latents");
    std::int64_t f = full.latent_frames, h = full.latent_height, w = full.latent_width;
    const auto & t = in.vae.tiling;
    if (in.vae.strategy == VideoVaeStrategy::temporal_stream)
        f = std::min<std::int64_t>(f, t.tile_sample_min_num_frames / r.temporal + 1);
    if (in.vae.strategy == VideoVaeStrategy::tiled || in.vae.strategy == VideoVaeStrategy::temporal_stream) {
        h = std::min<std::int64_t>(h, t.tile_sample_min_height / r.spatial);
        w = std::min<std::int64_t>(w, t.tile_sample_min_width / r.spatial);
    }
    decode.bytes("decode activations", estimate_video_decode_activation_bytes(vc, 1, f, h, w, in.dtype, !in.cuda), MemorySide::device,
                 "Note [Video VAE auto]'s estimate of the piece decoded at once (" + std::to_string(f) + " latent frames, " +
                     std::to_string(h) + "x" + std::to_string(w) + " latents)");
    decode.tensor("frames", {1, vc.out_channels, full.frames, shape.height, shape.width}, in.dtype, 1, MemorySide::device,
                  "the decoded frames");
    audio_stages(out, m, in, full);  // decoded before the video (the muxer has the audio at the first frame)
    kept_terms(decode, m, in);
    const auto [channels, samples] = waveform_extent(m, AudioVaeConfig::mel_frames(std::max<std::int64_t>(1, full.audio_frames)));
    decode.tensor("waveform", {1, channels, samples}, in.dtype, 1, MemorySide::device, "the decoded audio, kept for the muxer");
    out.push_back(decode);
    return out;
}

}  // namespace ddo::ltx2
