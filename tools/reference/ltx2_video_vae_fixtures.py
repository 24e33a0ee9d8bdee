#!/usr/bin/env python3
"""Parity fixtures for the LTX-2 video VAE decoder (models.md §5.9, parity ladder §7.3 rung 6).

Usage: ltx2_video_vae_fixtures.py OUT_DIR

The reference is diffusers' AutoencoderKLLTX2Video (decode, tiled_decode, _temporal_tiled_decode) and
LTX2Pipeline._denormalize_latents. Three tiny random fp32 VAEs are built with diffusers' class after
torch.manual_seed(0), given random latents_mean / latents_std buffers, and saved with save_pretrained (genuine
diffusers-layout component folders: config.json + diffusion_pytorch_model.safetensors):

  v20    2.0-like: 3 spatiotemporal upsamplers with upsample_residual, reflect padding, non-causal, patch 2
         (16x space, 8x time)
  v23    2.3-like: up types (spatiotemporal, spatiotemporal, temporal, spatial), factors (2, 2, 1, 2), residual off,
         zeros padding, patch 4 (32x space, 8x time); the upscale-factor-1 block changes width (conv_in resnet with
         norm3 + conv_shortcut)
  tcond  timestep-conditioned (time embedders, scale_shift_tables, timestep_scale_multiplier), causal decoder,
         zeros padding, patch 1, scaling_factor 0.5

Tiles and windows are set on the reference exactly as the C++ plan maps vae.tile_size / vae.tile_overlap /
vae.temporal_frames: tile_sample_min_{height,width} = tile, tile_sample_stride_{height,width} = tile - overlap,
tile_sample_min_num_frames = frames, tile_sample_stride_num_frames = frames - temporal_compression_ratio.

Files written:
  v20/ v23/ tcond/           the tiny VAE checkpoints (fp32)
  decode.safetensors         <case>.z (the decoder input, already de-normalised), <case>.timestep (tcond cases),
                             <case>.video (the reference output); denorm.x / denorm.<vae>.out for the
                             de-normalisation helper
  broken/<name>/             copies of v20/ with one decoder tensor removed (missing), of the wrong shape (shape) or
                             of an integer dtype (dtype), for the checkpoint error messages
  reference.json             reference name + version, torch version, seed, per case: vae, strategy, tile,
                             overlap, temporal_frames, video_shape; and the broken checkpoints with their tensor
                             (written last)
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLLTX2Video
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline

SEED = 0
LATENT = 8

COMMON = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=LATENT,
    block_out_channels=(8, 8, 8, 8),
    layers_per_block=(1, 1, 1, 1, 1),
    downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
    patch_size_t=1,
    encoder_causal=True,
    temporal_compression_ratio=8,
)
CONFIGS = {
    "v20": dict(
        COMMON,
        decoder_block_out_channels=(16, 32, 64),
        decoder_layers_per_block=(1, 1, 2, 1),
        decoder_spatio_temporal_scaling=(True, True, True),
        decoder_inject_noise=(False, False, False, False),
        upsample_type=("spatiotemporal", "spatiotemporal", "spatiotemporal"),
        upsample_residual=(True, True, True),
        upsample_factor=(2, 2, 2),
        timestep_conditioning=False,
        patch_size=2,
        decoder_causal=False,
        decoder_spatial_padding_mode="reflect",
        spatial_compression_ratio=16,
    ),
    "v23": dict(
        COMMON,
        decoder_block_out_channels=(8, 16, 16, 64),
        decoder_layers_per_block=(1, 1, 1, 2, 1),
        decoder_spatio_temporal_scaling=(True, True, True, True),
        decoder_inject_noise=(False, False, False, False, False),
        upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"),
        upsample_residual=(False, False, False, False),
        upsample_factor=(2, 2, 1, 2),
        timestep_conditioning=False,
        patch_size=4,
        decoder_causal=False,
        decoder_spatial_padding_mode="zeros",
        spatial_compression_ratio=32,
    ),
    "tcond": dict(
        COMMON,
        decoder_block_out_channels=(16, 32, 64),
        decoder_layers_per_block=(1, 1, 1, 1),
        decoder_spatio_temporal_scaling=(True, True, True),
        upsample_type=("spatiotemporal", "spatiotemporal", "spatiotemporal"),
        upsample_residual=(True, False, True),
        upsample_factor=(2, 2, 2),
        timestep_conditioning=True,
        patch_size=1,
        decoder_causal=True,
        decoder_spatial_padding_mode="zeros",
        spatial_compression_ratio=8,
        scaling_factor=0.5,
    ),
}

# name, vae, latent shape [B, C, F', H', W'], strategy, tile px, overlap px, temporal frames, timesteps (tcond)
CASES = [
    ("v20_single", "v20", (1, LATENT, 1, 2, 3), "resident", None, None, None),
    ("v20_multi", "v20", (1, LATENT, 3, 2, 2), "resident", None, None, None),
    ("v23_single", "v23", (1, LATENT, 1, 2, 2), "resident", None, None, None),
    ("v23_multi", "v23", (2, LATENT, 3, 1, 2), "resident", None, None, None),
    ("tcond_multi", "tcond", (2, LATENT, 2, 2, 3), "resident", None, None, None),
    ("v20_tiled", "v20", (1, LATENT, 2, 4, 6), "tiled", 48, 16, None),
    ("v23_tiled", "v23", (1, LATENT, 1, 3, 3), "tiled", 64, 32, None),
    ("tcond_tiled", "tcond", (1, LATENT, 2, 5, 4), "tiled", 24, 8, None),
    ("v20_temporal", "v20", (1, LATENT, 6, 2, 2), "temporal_stream", 512, 64, 16),
    ("v20_temporal24", "v20", (1, LATENT, 6, 2, 2), "temporal_stream", 512, 64, 24),
    ("tcond_temporal", "tcond", (1, LATENT, 4, 2, 2), "temporal_stream", 512, 64, 16),
    ("v20_temporal_tiled", "v20", (1, LATENT, 4, 4, 6), "temporal_stream", 48, 16, 16),
    ("v23_temporal_tiled", "v23", (1, LATENT, 3, 3, 3), "temporal_stream", 64, 32, 16),
]
TIMESTEPS = [0.05, 0.3]


def build(name, out):
    torch.manual_seed(SEED)
    vae = AutoencoderKLLTX2Video(**CONFIGS[name]).eval()
    vae.latents_mean.copy_(torch.randn(LATENT))
    vae.latents_std.copy_(torch.rand(LATENT) + 0.5)
    vae.save_pretrained(out / name, safe_serialization=True)
    return vae


def configure(vae, strategy, tile, overlap, frames):
    vae.use_tiling = False
    vae.use_framewise_decoding = False
    if strategy in ("tiled", "temporal_stream"):
        vae.enable_tiling(
            tile_sample_min_height=tile,
            tile_sample_min_width=tile,
            tile_sample_stride_height=tile - overlap,
            tile_sample_stride_width=tile - overlap,
        )
    if strategy == "temporal_stream":
        vae.use_framewise_decoding = True
        vae.tile_sample_min_num_frames = frames
        vae.tile_sample_stride_num_frames = frames - vae.temporal_compression_ratio


BROKEN = [
    ("missing", "decoder.up_blocks.1.resnets.0.conv2.conv.weight"),
    ("shape", "decoder.conv_out.conv.bias"),
    ("dtype", "decoder.mid_block.resnets.0.conv1.conv.bias"),
]


def broken_fixtures(out):
    listed = []
    weights = load_file(str(out / "v20" / "diffusion_pytorch_model.safetensors"))
    for name, tensor in BROKEN:
        d = out / "broken" / name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "v20" / "config.json", d / "config.json")
        sd = dict(weights)
        if name == "missing":
            del sd[tensor]
        elif name == "shape":
            sd[tensor] = torch.zeros(sd[tensor].numel() + 1)
        else:
            sd[tensor] = sd[tensor].to(torch.int32)
        save_file(sd, str(d / "diffusion_pytorch_model.safetensors"))
        listed.append(dict(name=name, tensor=tensor))
    return listed


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    vaes = {name: build(name, out) for name in CONFIGS}

    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(2, LATENT, 2, 2, 3, generator=gen)
    tensors["denorm.x"] = x
    for name, vae in vaes.items():
        tensors[f"denorm.{name}.out"] = LTX2Pipeline._denormalize_latents(
            x, vae.latents_mean, vae.latents_std, vae.config.scaling_factor
        ).contiguous()

    cases = []
    for name, vname, shape, strategy, tile, overlap, frames in CASES:
        vae = vaes[vname]
        configure(vae, strategy, tile, overlap, frames)
        z = torch.randn(*shape, generator=gen)
        timestep = None
        if CONFIGS[vname]["timestep_conditioning"]:
            timestep = torch.tensor(TIMESTEPS[: shape[0]], dtype=torch.float32)
            tensors[f"{name}.timestep"] = timestep
        with torch.no_grad():
            video = vae.decode(z, timestep, return_dict=False)[0]
        tensors[f"{name}.z"] = z.contiguous()
        tensors[f"{name}.video"] = video.contiguous()
        cases.append(
            dict(name=name, vae=vname, strategy=strategy, tile=tile, overlap=overlap, temporal_frames=frames,
                 video_shape=list(video.shape))
        )

    save_file(tensors, str(out / "decode.safetensors"))
    ref = dict(
        reference="diffusers",
        reference_version=diffusers.__version__,
        torch_version=torch.__version__,
        seed=SEED,
        cases=cases,
        broken=broken_fixtures(out),
    )
    (out / "reference.json").write_text(json.dumps(ref, indent=2))


if __name__ == "__main__":
    main()
