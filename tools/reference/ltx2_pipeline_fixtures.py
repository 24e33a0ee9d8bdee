#!/usr/bin/env python3
"""Parity fixtures for the ltx2_video model plugin: the whole LTX2Pipeline from prompt embeddings (models.md §5.12,
parity ladder §7.3 rung 8). The rungs below it (DiT, connectors, video VAE, audio VAE, vocoders) have their own
scripts (ltx2_dit_fixtures.py, ltx2_video_vae_fixtures.py, ltx2_audio_fixtures.py).

Usage: ltx2_pipeline_fixtures.py OUT_DIR

The reference is diffusers' own LTX2Pipeline with tiny random fp32 components built as diffusers' pipeline tests
build them (tests/pipelines/ltx2/testing_utils.py, each after torch.manual_seed(0)), saved with save_pretrained as
genuine diffusers-layout checkpoints without the Gemma-3 text encoder (the plugin takes the stacked Gemma hidden
states as prompt embeddings; LTX2Pipeline accepts them as prompt_embeds):

  checkpoint_20/                 LTX-2.0 flags: caption projection in the DiT, split RoPE in float32, the 2.0
                                 connectors (shared projection, no registers), HiFi-GAN vocoder, and the real
                                 LTX-2 scheduler config (dynamic exponential shift, shift_terminal 0.1)
  checkpoint_23/                 LTX-2.3 flags: gated attention, cross-attention modulation with prompt AdaLN,
                                 perturbed attention (STG), no caption projection, per-modality connector
                                 projections with registers, the BWE vocoder (16 kHz -> 48 kHz), and the
                                 distilled checkpoints' scheduler (no shift)
  prompt_embeds.safetensors      prompt_embeds / prompt_attention_mask (left padded) and negative_* (CFG), the
                                 --prompt-embeds input: [1, L, caption_channels * (layers + 1)]
  pipeline_20.safetensors        case "plain": 2 steps, no guidance, 32x32, 5 frames at 25 fps, seed 0:
                                 latents (after denoising, packed), audio_latents (packed), frames [F, 3, H, W]
                                 in [0, 1] (output_type="pt"), audio [2, samples]
  pipeline_23.safetensors        case "guided": the distilled sigma list (8 steps), CFG 3 / STG 1 on block 1 /
                                 modality 3 / rescale 0.7 (audio 7 / 1 / 3 / 0.7), use_cross_timestep, the same
                                 outputs
  schedule.safetensors           case<i>.sigmas / case<i>.timesteps: FlowMatchEulerDiscreteScheduler.set_timesteps as
                                 LTX2Pipeline calls it (retrieve_timesteps with mu = calculate_shift(video tokens,
                                 1024, 4096, 0.95, 2.05)) for the real LTX-2 dev scheduler config and the distilled
                                 checkpoints' (no shift), on the default grid and on DISTILLED_SIGMA_VALUES /
                                 STAGE_2_DISTILLED_SIGMA_VALUES (settings in reference.json "schedules")
  reference.json                 reference name and version, torch version, seed, the cases' settings

Initial noise is the pipeline's own draw (torch.Generator().manual_seed(seed) on the CPU: video latents first,
then audio latents), which the plugin reproduces with ATen's CPU generator.
"""

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

import diffusers
from diffusers import (
    AutoencoderKLLTX2Audio,
    AutoencoderKLLTX2Video,
    FlowMatchEulerDiscreteScheduler,
    LTX2Pipeline,
    LTX2VideoTransformer3DModel,
)
from diffusers.pipelines.ltx2 import LTX2TextConnectors
from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift, retrieve_timesteps
from diffusers.pipelines.ltx2.utils import DISTILLED_SIGMA_VALUES, STAGE_2_DISTILLED_SIGMA_VALUES
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

SEED = 0
CAPTION = 32          # the tiny Gemma's hidden size
TEXT_LAYERS = 2       # its decoder layers: caption * (layers + 1) features per token
SEQ = 16              # max_sequence_length
PAD = 5               # left padding of the positive prompt

# The real LTX-2 (dev) scheduler config (scripts/convert_ltx2_to_diffusers.py).
LTX2_SCHEDULER = dict(
    num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
    base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1, time_shift_type="exponential",
)


def video_vae():
    # testing_utils.get_dummy_vae(): x2 space, x2 time in the decoder (3 latent frames -> 5 frames).
    torch.manual_seed(0)
    vae = AutoencoderKLLTX2Video(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,), decoder_block_out_channels=(8,),
        layers_per_block=(1,), decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False), downsample_type=("spatial",),
        upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False, patch_size=1,
        patch_size_t=1, encoder_causal=True, decoder_causal=False)
    # Random statistics so that de-normalisation is exercised (the constructor's are zeros and ones).
    g = torch.Generator().manual_seed(1)
    vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=g) * 0.1)
    vae.latents_std.copy_(1.0 + torch.rand(vae.latents_std.shape, generator=g) * 0.5)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    return vae


def audio_vae():
    torch.manual_seed(0)
    a = AutoencoderKLLTX2Audio(
        base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None, in_channels=2,
        resolution=32, latent_channels=2, norm_type="pixel", causality_axis="height", dropout=0.0,
        mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160, is_causal=True, mel_bins=8)
    g = torch.Generator().manual_seed(2)
    a.latents_mean.copy_(torch.randn(a.latents_mean.shape, generator=g) * 0.1)
    a.latents_std.copy_(1.0 + torch.rand(a.latents_std.shape, generator=g) * 0.5)
    return a


def transformer(v23):
    torch.manual_seed(0)
    flags = {}
    if v23:
        flags = dict(gated_attn=True, cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True,
                     use_prompt_embeddings=False, perturbed_attn=True)
    return LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
        cross_attention_dim=16, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2,
        audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=2, qk_norm="rms_norm_across_heads",
        caption_channels=CAPTION, rope_double_precision=False, rope_type="split", **flags)


def connectors(v23):
    torch.manual_seed(0)
    if v23:
        # Per-modality projections to the DiT's text widths (video 2 x 8, audio 2 x 4), with registers.
        return LTX2TextConnectors(
            caption_channels=CAPTION, text_proj_in_factor=TEXT_LAYERS + 1, video_connector_num_attention_heads=2,
            video_connector_attention_head_dim=8, video_connector_num_layers=1,
            video_connector_num_learnable_registers=8, video_gated_attn=True,
            audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=4,
            audio_connector_num_layers=1, audio_connector_num_learnable_registers=8, audio_gated_attn=True,
            connector_rope_base_seq_len=32, rope_theta=10000.0, rope_double_precision=True,
            causal_temporal_positioning=False, rope_type="split", per_modality_projections=True,
            video_hidden_dim=16, audio_hidden_dim=8, proj_bias=True)
    return LTX2TextConnectors(
        caption_channels=CAPTION, text_proj_in_factor=TEXT_LAYERS + 1, video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8, video_connector_num_layers=1,
        video_connector_num_learnable_registers=None, audio_connector_num_attention_heads=4,
        audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None, connector_rope_base_seq_len=32, rope_theta=10000.0,
        rope_double_precision=False, causal_temporal_positioning=False, rope_type="split")


def vocoder(v23, mel_channels):
    torch.manual_seed(0)
    if v23:
        # The real stage structure (x160 to 16 kHz, then the BWE generator x240 on a hop-80 mel to 48 kHz), tiny widths.
        return LTX2VocoderWithBWE(
            in_channels=mel_channels, hidden_channels=64, out_channels=2,
            upsample_kernel_sizes=[11, 4, 4, 4, 4, 4], upsample_factors=[5, 2, 2, 2, 2, 2], resnet_kernel_sizes=[3],
            resnet_dilations=[[1, 3, 5]], bwe_in_channels=mel_channels, bwe_hidden_channels=32, bwe_out_channels=2,
            bwe_upsample_kernel_sizes=[12, 11, 4, 4, 4], bwe_upsample_factors=[6, 5, 2, 2, 2],
            bwe_resnet_kernel_sizes=[3], bwe_resnet_dilations=[[1, 3, 5]], num_mel_channels=8)
    return LTX2Vocoder(
        in_channels=mel_channels, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4],
        upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
        leaky_relu_negative_slope=0.1, output_sampling_rate=16000)


def pipeline(v23):
    a = audio_vae()
    sched = FlowMatchEulerDiscreteScheduler() if v23 else FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER)
    return LTX2Pipeline(
        scheduler=sched, vae=video_vae(), audio_vae=a, text_encoder=None, tokenizer=None,
        connectors=connectors(v23), transformer=transformer(v23),
        vocoder=vocoder(v23, a.config.output_channels * a.config.mel_bins))


def prompt_embeds():
    g = torch.Generator().manual_seed(3)
    feat = CAPTION * (TEXT_LAYERS + 1)
    pos = torch.randn(1, SEQ, feat, generator=g)
    neg = torch.randn(1, SEQ, feat, generator=g)
    pos_mask = torch.ones(1, SEQ, dtype=torch.int64)
    pos_mask[:, :PAD] = 0
    neg_mask = torch.ones(1, SEQ, dtype=torch.int64)
    neg_mask[:, : SEQ - 2] = 0  # "" encodes to a couple of tokens, left padded
    pos[:, :PAD] = 0.0
    neg[:, : SEQ - 2] = 0.0
    return {"prompt_embeds": pos, "prompt_attention_mask": pos_mask,
            "negative_prompt_embeds": neg, "negative_prompt_attention_mask": neg_mask}


PLAIN = dict(num_inference_steps=2, guidance_scale=1.0, stg_scale=0.0, modality_scale=1.0, guidance_rescale=0.0,
             audio_guidance_scale=1.0, audio_stg_scale=0.0, audio_modality_scale=1.0, audio_guidance_rescale=0.0,
             spatio_temporal_guidance_blocks=None, use_cross_timestep=False, height=32, width=32, num_frames=5,
             frame_rate=25.0, max_sequence_length=SEQ)
GUIDED = dict(sigmas=list(DISTILLED_SIGMA_VALUES), guidance_scale=3.0, stg_scale=1.0, modality_scale=3.0,
              guidance_rescale=0.7, audio_guidance_scale=7.0, audio_stg_scale=1.0, audio_modality_scale=3.0,
              audio_guidance_rescale=0.7, spatio_temporal_guidance_blocks=[1], use_cross_timestep=True, height=32,
              width=32, num_frames=5, frame_rate=25.0, max_sequence_length=SEQ)


def run(pipe, embeds, settings, with_negative):
    e = dict(embeds)
    if not with_negative:
        e.pop("negative_prompt_embeds")
        e.pop("negative_prompt_attention_mask")
    out = {}
    lat = pipe(**e, **settings, generator=torch.Generator().manual_seed(SEED), output_type="latent")
    out["latents"] = lat.frames[0].contiguous()        # de-normalised [C, F', H', W'] (output_type="latent")
    out["audio_latents"] = lat.audio[0].contiguous()   # de-normalised, unpacked [C, L, M]
    res = pipe(**e, **settings, generator=torch.Generator().manual_seed(SEED), output_type="pt")
    out["frames"] = res.frames[0].contiguous()         # [F, 3, H, W] in [0, 1]
    out["audio"] = res.audio[0].float().contiguous()   # [2, samples]
    return out


def schedules():
    """set_timesteps as LTX2Pipeline.__call__ runs it, for (scheduler config, steps or sigmas, video tokens)."""
    cases, tensors = [], {}
    grids = [("dev", LTX2_SCHEDULER, 30, None, 16 * 24 * 16), ("dev", LTX2_SCHEDULER, 8, None, 4096 + 512),
             ("dev", LTX2_SCHEDULER, None, DISTILLED_SIGMA_VALUES, 768),
             ("distilled", {}, None, DISTILLED_SIGMA_VALUES, 16 * 24 * 16),
             ("distilled", {}, None, STAGE_2_DISTILLED_SIGMA_VALUES, 16 * 48 * 32), ("distilled", {}, 4, None, 100)]
    for i, (name, cfg, steps, sigmas, tokens) in enumerate(grids):
        sched = FlowMatchEulerDiscreteScheduler(**cfg)
        n = steps if sigmas is None else len(sigmas)
        grid = __import__("numpy").linspace(1.0, 1 / n, n) if sigmas is None else sigmas
        c = sched.config
        mu = calculate_shift(tokens, c.get("base_image_seq_len", 1024), c.get("max_image_seq_len", 4096),
                             c.get("base_shift", 0.95), c.get("max_shift", 2.05))
        ts, _ = retrieve_timesteps(sched, n, "cpu", None, sigmas=grid, mu=mu)
        tensors[f"case{i}.sigmas"] = sched.sigmas.float().contiguous()
        tensors[f"case{i}.timesteps"] = ts.float().contiguous()
        cases.append({"config": dict(sched.config), "name": name, "steps": steps,
                      "sigmas": None if sigmas is None else list(sigmas), "video_tokens": tokens, "mu": mu})
    return cases, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    sched_cases, sched_tensors = schedules()
    save_file(sched_tensors, out / "schedule.safetensors")
    embeds = prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    cases = {}
    for name, v23, settings, neg in (("20", False, PLAIN, False), ("23", True, GUIDED, True)):
        pipe = pipeline(v23)
        pipe.save_pretrained(out / f"checkpoint_{name}")
        tensors = run(pipe, embeds, settings, neg)
        save_file(tensors, out / f"pipeline_{name}.safetensors")
        cases[name] = {"settings": settings, "negative": neg,
                       "audio_sample_rate": pipe.vocoder.config.output_sampling_rate,
                       "shapes": {k: list(v.shape) for k, v in tensors.items()}}

    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "seed": SEED, "cases": cases, "schedules": sched_cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
