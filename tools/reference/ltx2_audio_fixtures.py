#!/usr/bin/env python3
"""Parity fixtures for the LTX-2 audio decode chain (models.md §5.10, §5.11, §5.12 steps 7-8; parity ladder §7.3).

Usage: ltx2_audio_fixtures.py OUT_DIR

The reference is diffusers' own code: AutoencoderKLLTX2Audio (models/autoencoders/autoencoder_kl_ltx2_audio.py),
LTX2Vocoder and LTX2VocoderWithBWE (pipelines/ltx2/vocoder.py), and LTX2Pipeline's static helpers
_denormalize_audio_latents / _unpack_audio_latents (pipelines/ltx2/pipeline_ltx2.py). Tiny random fp32 modules are
built with diffusers' classes after torch.manual_seed(0) (tiny widths, the real structure), saved with
save_pretrained (config.json + diffusion_pytorch_model.safetensors), and run on seeded random inputs.

Buffers: the audio VAE's latents_mean / latents_std (persistent; set to random values here, so the packed
de-normalisation is visible), the anti-aliasing Kaiser-sinc filters (`*.upsample.filter`, `*.downsample.filter`,
persistent, computed by the constructor and saved), the BWE STFT bases `mel_stft.stft_fn.forward_basis` /
`inverse_basis` and `mel_stft.mel_basis` (persistent, zeros at construction: filled here with a Hann-windowed DFT
basis and a random non-negative filterbank, as a converted checkpoint would carry them) are all in the
safetensors. The BWE's Hann-sinc x3 resampler filter (`resampler.filter`) is non-persistent: computed, not saved.
SnakeBeta alpha/beta (zeros at construction, log scale) are perturbed so that alpha and beta differ.

Files written:
  audio_vae/                 tiny audio VAE of the pipeline test (base 4, ch_mult (1,), 1 res block, latent 2,
                             mel_bins 8, pixel norm, causal along height)
  audio_vae_wide/            the model test's audio VAE (base 16, ch_mult (1,2,4), 2 res blocks, latent 4,
                             mel_bins 16): nin shortcuts and two upsamplers
  vocoder/                   tiny LTX2Vocoder of the pipeline test (in 16, hidden 32, kernels [4,4], factors [2,2],
                             one ResBlock kernel 3 dilations [1,3,5], leaky_relu 0.1, tanh)
  vocoder_wide/              LTX2Vocoder with the 2.0 structure (kernels [16,15,8,4,4], factors [6,5,2,2,2], ResBlocks
                             [3,7,11]) at hidden 64
  vocoder_snake/             LTX2Vocoder with act_fn "snake" (alpha only), antialias off in the ResBlocks (act_out is
                             always anti-aliased SnakeBeta), final clamp, no final bias
  vocoder_bwe/               tiny LTX2VocoderWithBWE (2.3 flags: snakebeta, antialias, no final act/bias; stage-1
                             factors [3,2] so that its output needs the pad to a hop multiple; STFT 16/4/16, 8 mels)
  audio_vae.safetensors      <name>.latents -> <name>.mel for cases in reference.json "audio_vae_cases"
  vocoder.safetensors        <name>.mel -> <name>.waveform for cases in "vocoder_cases" (bwe.stage1 / bwe.log_mel:
                             the BWE's stage-1 waveform and the log-mel it computes from it, padded to a hop multiple;
                             bwe.resample_filter: the computed Hann-sinc x3 filter, not part of the checkpoint)
  chain.safetensors          chain.packed (normalised [B, L, C*M]) -> chain.latents (de-normalised, unpacked)
                             -> chain.mel -> chain.waveform (vocoder) and chain.waveform_bwe (vocoder_bwe)
  broken/<name>/             copies of audio_vae/ and vocoder_bwe/ with one tensor removed (missing_*) or
                             truncated (shape_*): the checkpoint errors must name tensor and file
  reference.json             written last: reference name + version, torch version, seed, cases, and the
                             classes' __init__ defaults ("defaults")
"""

import inspect
import json
import math
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLLTX2Audio
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, SnakeBeta

SEED = 0

AUDIO_VAE_CONFIG = dict(base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None,
                        in_channels=2, resolution=32, latent_channels=2, norm_type="pixel", causality_axis="height",
                        dropout=0.0, mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160,
                        is_causal=True, mel_bins=8)
AUDIO_VAE_WIDE_CONFIG = dict(base_channels=16, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=2,
                             in_channels=2, latent_channels=4, norm_type="pixel", causality_axis="height",
                             mel_bins=16)
VOCODER_CONFIG = dict(in_channels=16, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4],
                      upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
                      act_fn="leaky_relu", leaky_relu_negative_slope=0.1, antialias=False, final_act_fn="tanh",
                      final_bias=True, output_sampling_rate=16000)
VOCODER_WIDE_CONFIG = dict(in_channels=16, hidden_channels=64, out_channels=2,
                           upsample_kernel_sizes=[16, 15, 8, 4, 4], upsample_factors=[6, 5, 2, 2, 2],
                           resnet_kernel_sizes=[3, 7, 11], resnet_dilations=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                           act_fn="leaky_relu", leaky_relu_negative_slope=0.1, antialias=False,
                           final_act_fn="tanh", final_bias=True, output_sampling_rate=24000)
VOCODER_SNAKE_CONFIG = dict(in_channels=16, hidden_channels=16, out_channels=2, upsample_kernel_sizes=[4, 5],
                            upsample_factors=[2, 3], resnet_kernel_sizes=[3, 5], resnet_dilations=[[1, 2], [1, 3]],
                            act_fn="snake", antialias=False, antialias_ratio=2, antialias_kernel_size=12,
                            final_act_fn="clamp", final_bias=False, output_sampling_rate=12000)
BWE_CONFIG = dict(in_channels=16, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[5, 4],
                  upsample_factors=[3, 2], resnet_kernel_sizes=[3, 7], resnet_dilations=[[1, 3, 5], [1, 3, 5]],
                  act_fn="snakebeta", leaky_relu_negative_slope=0.1, antialias=True, antialias_ratio=2,
                  antialias_kernel_size=12, final_act_fn=None, final_bias=False,
                  bwe_in_channels=16, bwe_hidden_channels=32, bwe_out_channels=2,
                  bwe_upsample_kernel_sizes=[5, 4, 4], bwe_upsample_factors=[3, 2, 2], bwe_resnet_kernel_sizes=[3],
                  bwe_resnet_dilations=[[1, 3, 5]], bwe_act_fn="snakebeta", bwe_leaky_relu_negative_slope=0.1,
                  bwe_antialias=True, bwe_antialias_ratio=2, bwe_antialias_kernel_size=12, bwe_final_act_fn=None,
                  bwe_final_bias=False, filter_length=16, hop_length=4, window_length=16, num_mel_channels=8,
                  input_sampling_rate=16000, output_sampling_rate=48000)


def _save(path, tensors):
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(path), metadata={"reference": "diffusers"})


def _perturb_snake(module):
    """SnakeBeta parameters start at zero (log scale): give alpha and beta distinct random values."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, SnakeBeta):
                m.alpha.copy_(torch.randn_like(m.alpha) * 0.3)
                if m.use_beta:
                    m.beta.copy_(torch.randn_like(m.beta) * 0.3)


def _fill_stft_buffers(bwe):
    """The converter loads the STFT bases from the checkpoint; here: a Hann-windowed DFT and a random filterbank."""
    stft = bwe.mel_stft.stft_fn
    n = stft.forward_basis.shape[-1]
    n_freqs = n // 2 + 1
    t = torch.arange(n, dtype=torch.float64)
    k = torch.arange(n_freqs, dtype=torch.float64)[:, None]
    window = torch.hann_window(n, periodic=True, dtype=torch.float64)
    real = torch.cos(2 * math.pi * k * t / n) * window
    imag = -torch.sin(2 * math.pi * k * t / n) * window
    basis = torch.cat([real, imag], 0).float()[:, None, :]
    with torch.no_grad():
        stft.forward_basis.copy_(basis)
        stft.inverse_basis.copy_(basis.flip(-1))
        bwe.mel_stft.mel_basis.copy_(torch.rand_like(bwe.mel_stft.mel_basis))


def build(out):
    torch.manual_seed(SEED)
    vae = AutoencoderKLLTX2Audio(**AUDIO_VAE_CONFIG).eval()
    with torch.no_grad():
        vae.latents_mean.copy_(torch.randn_like(vae.latents_mean) * 0.5)
        vae.latents_std.copy_(torch.rand_like(vae.latents_std) + 0.5)
    torch.manual_seed(SEED)
    vae_wide = AutoencoderKLLTX2Audio(**AUDIO_VAE_WIDE_CONFIG).eval()
    torch.manual_seed(SEED)
    vocoder = LTX2Vocoder(**VOCODER_CONFIG).eval()
    torch.manual_seed(SEED)
    vocoder_wide = LTX2Vocoder(**VOCODER_WIDE_CONFIG).eval()
    torch.manual_seed(SEED)
    vocoder_snake = LTX2Vocoder(**VOCODER_SNAKE_CONFIG).eval()
    _perturb_snake(vocoder_snake)
    torch.manual_seed(SEED)
    bwe = LTX2VocoderWithBWE(**BWE_CONFIG).eval()
    _perturb_snake(bwe)
    _fill_stft_buffers(bwe)
    models = dict(audio_vae=vae, audio_vae_wide=vae_wide, vocoder=vocoder, vocoder_wide=vocoder_wide,
                  vocoder_snake=vocoder_snake, vocoder_bwe=bwe)
    for name, m in models.items():
        m.save_pretrained(out / name, safe_serialization=True)
    return models


def audio_vae_fixtures(out, models, meta):
    g = torch.Generator().manual_seed(SEED)
    # (name, checkpoint, latent shape): the pipeline's [B, 2, L, 2]; a single latent frame; latent mel widths whose
    # decoded width is below (pad) and above (crop) mel_bins; the wide VAE.
    cases = [("tiny", "audio_vae", [2, 2, 5, 2]), ("one_frame", "audio_vae", [1, 2, 1, 2]),
             ("pad_mel", "audio_vae", [1, 2, 3, 1]), ("crop_mel", "audio_vae", [1, 2, 3, 3]),
             ("wide", "audio_vae_wide", [2, 4, 3, 4]), ("wide_crop_mel", "audio_vae_wide", [1, 4, 2, 5])]
    tensors, listed = {}, []
    with torch.no_grad():
        for name, ckpt, shape in cases:
            z = torch.randn(shape, generator=g)
            mel = models[ckpt].decode(z, return_dict=False)[0]
            tensors[name + ".latents"] = z
            tensors[name + ".mel"] = mel
            listed.append({"name": name, "checkpoint": ckpt, "latents": shape, "mel": list(mel.shape)})
    _save(out / "audio_vae.safetensors", tensors)
    meta["audio_vae_cases"] = listed


def vocoder_fixtures(out, models, meta):
    g = torch.Generator().manual_seed(SEED + 1)
    cases = [("tiny", "vocoder", [2, 2, 6, 8]), ("wide", "vocoder_wide", [2, 2, 4, 8]),
             ("snake", "vocoder_snake", [2, 2, 5, 8]), ("bwe", "vocoder_bwe", [2, 2, 5, 8])]
    tensors, listed = {}, []
    with torch.no_grad():
        for name, ckpt, shape in cases:
            mel = torch.randn(shape, generator=g)
            wave = models[ckpt](mel)
            tensors[name + ".mel"] = mel
            tensors[name + ".waveform"] = wave
            listed.append({"name": name, "checkpoint": ckpt, "mel": shape, "waveform": list(wave.shape),
                           "output_sampling_rate": models[ckpt].config.output_sampling_rate})
        bwe = models["vocoder_bwe"]
        stage1 = bwe.vocoder(tensors["bwe.mel"])
        hop = bwe.config.hop_length
        padded = torch.nn.functional.pad(stage1, (0, (hop - stage1.shape[-1] % hop) % hop))
        log_mel = bwe.mel_stft(padded.flatten(0, 1))[0].unflatten(0, (-1, stage1.shape[1]))
        tensors["bwe.stage1"] = stage1
        tensors["bwe.log_mel"] = log_mel
        tensors["bwe.resample_filter"] = bwe.resampler.filter
    _save(out / "vocoder.safetensors", tensors)
    meta["vocoder_cases"] = listed


def chain_fixtures(out, models, meta):
    g = torch.Generator().manual_seed(SEED + 2)
    vae = models["audio_vae"]
    latent_mel = vae.config.mel_bins // vae.mel_compression_ratio
    frames = 5
    packed = torch.randn([2, frames, vae.config.latent_channels * latent_mel], generator=g)
    with torch.no_grad():
        latents = LTX2Pipeline._denormalize_audio_latents(packed, vae.latents_mean, vae.latents_std)
        latents = LTX2Pipeline._unpack_audio_latents(latents, frames, num_mel_bins=latent_mel)
        mel = vae.decode(latents, return_dict=False)[0]
        wave = models["vocoder"](mel)
        wave_bwe = models["vocoder_bwe"](mel)
    _save(out / "chain.safetensors", {"chain.packed": packed, "chain.latents": latents, "chain.mel": mel,
                                      "chain.waveform": wave, "chain.waveform_bwe": wave_bwe})
    meta["chain"] = {"packed": list(packed.shape), "latents": list(latents.shape), "mel": list(mel.shape),
                     "waveform": list(wave.shape), "waveform_bwe": list(wave_bwe.shape)}


def broken_fixtures(out, meta):
    """Checkpoints with one tensor missing or of the wrong shape (config.json unchanged)."""
    cases = [("missing_audio_vae", "audio_vae", "decoder.mid.block_2.conv1.conv.weight", None),
             ("shape_audio_vae", "audio_vae", "decoder.conv_out.conv.weight", "truncate"),
             ("missing_vocoder_bwe", "vocoder_bwe", "vocoder.resnets.1.acts2.0.downsample.filter", None),
             ("shape_vocoder_bwe", "vocoder_bwe", "mel_stft.mel_basis", "truncate")]
    listed = []
    for name, source, tensor, how in cases:
        sd = load_file(str(out / source / "diffusion_pytorch_model.safetensors"))
        if how is None:
            del sd[tensor]
        else:
            sd[tensor] = sd[tensor][:-1].clone()
        d = out / "broken" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text((out / source / "config.json").read_text())
        save_file(sd, str(d / "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
        listed.append({"name": name, "source": source, "tensor": tensor, "kind": "missing" if how is None else "shape"})
    meta["broken"] = listed


def class_defaults():
    """__init__ defaults of the three classes: what a config.json without a key means."""
    def of(cls):
        return {k: v.default for k, v in inspect.signature(cls.__init__).parameters.items()
                if v.default is not inspect.Parameter.empty}
    return {c.__name__: of(c) for c in (AutoencoderKLLTX2Audio, LTX2Vocoder, LTX2VocoderWithBWE)}


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    meta = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
            "seed": SEED, "dtype": "float32",
            "classes": ["AutoencoderKLLTX2Audio", "LTX2Vocoder", "LTX2VocoderWithBWE", "LTX2Pipeline"]}
    meta["defaults"] = class_defaults()
    models = build(out)
    audio_vae_fixtures(out, models, meta)
    vocoder_fixtures(out, models, meta)
    chain_fixtures(out, models, meta)
    broken_fixtures(out, meta)
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    print(f"ltx2_audio fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
