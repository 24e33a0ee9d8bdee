#!/usr/bin/env python3
"""Parity fixtures for the LTX-2 video VAE encoder (models.md §5.9).

Usage: ltx2_video_vae_encoder_fixtures.py OUT_DIR

The reference is diffusers' AutoencoderKLLTX2Video.encode (LTX2VideoEncoder3d, tiled_encode) with
retrieve_latents(..., sample_mode="argmax") (the latent distribution's mode), and
LTX2ImageToVideoPipeline._normalize_latents. Three tiny random fp32 VAEs are built with diffusers' class after
torch.manual_seed(0), given random latents_mean / latents_std buffers, and saved with save_pretrained (genuine
diffusers-layout component folders: config.json + diffusion_pytorch_model.safetensors):

  v20   2.0-like encoder: down types (spatial, temporal, spatiotemporal, spatiotemporal), widths doubling per block
        (downsampler group means of 2, 1, 4, 4 channels), causal, zeros padding, patch 2 (16x space, 8x time)
  v23   2.3-like encoder: the same down types, the last block keeping its width (group means of 8 channels, as the
        2.3 VAE's 1024 -> 1024), causal, zeros padding, patch 4 (32x space, 8x time)
  odd   what the class also takes: a stride-2 conv downsampler ("conv"), a block without downsampler, a block of 0
        resnets, non-causal, replicate padding, patch 1, scaling_factor 0.5 (4x space, 4x time)
  tiny  the pipelines' tiny test VAE: one spatial block, layers_per_block (1,) shared with the mid block

Tiles are set on the reference exactly as the C++ plan maps vae.tile_size / vae.tile_overlap:
tile_sample_min_{height,width} = tile, tile_sample_stride_{height,width} = tile - overlap (use_tiling; the temporal
tiled encode, use_framewise_decoding, stays off).

Files written:
  v20/ v23/ odd/ tiny/       the tiny VAE checkpoints (fp32)
  encode.safetensors         <case>.video (the input, pixels in [-1, 1]), <case>.latents (the mode, not normalised),
                             <case>.normalized (the latents normalised with the VAE's latents_mean / latents_std and
                             scaling_factor)
  broken/<name>/             copies of v20/ with one encoder tensor removed (missing), of the wrong shape (shape) or
                             of an integer dtype (dtype), for the checkpoint error messages
  reference.json             reference name + version, torch version, seed, per case: vae, tile, overlap,
                             video_shape, latents_shape; and the broken checkpoints with their tensor (written last)
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLLTX2Video
from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import LTX2ImageToVideoPipeline, retrieve_latents

SEED = 0

# A small valid decoder for every VAE (the encoder is what these fixtures test).
DECODER = dict(
    out_channels=3,
    decoder_block_out_channels=(8,),
    decoder_layers_per_block=(1, 1),
    decoder_spatio_temporal_scaling=(True,),
    decoder_inject_noise=(False, False),
    upsample_type=("spatiotemporal",),
    upsample_residual=(False,),
    upsample_factor=(1,),
    timestep_conditioning=False,
    decoder_causal=False,
)
CONFIGS = {
    "v20": dict(
        DECODER,
        in_channels=3,
        latent_channels=8,
        block_out_channels=(16, 32, 64, 128),
        layers_per_block=(1, 2, 1, 1, 2),
        spatio_temporal_scaling=(True, True, True, True),
        downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
        patch_size=2,
        patch_size_t=1,
        encoder_causal=True,
        encoder_spatial_padding_mode="zeros",
        spatial_compression_ratio=16,
        temporal_compression_ratio=8,
    ),
    "v23": dict(
        DECODER,
        in_channels=3,
        latent_channels=8,
        block_out_channels=(16, 32, 64, 64),
        layers_per_block=(1, 1, 2, 1, 1),
        spatio_temporal_scaling=(True, True, True, True),
        downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
        patch_size=4,
        patch_size_t=1,
        encoder_causal=True,
        encoder_spatial_padding_mode="zeros",
        spatial_compression_ratio=32,
        temporal_compression_ratio=8,
    ),
    "odd": dict(
        DECODER,
        in_channels=3,
        latent_channels=4,
        block_out_channels=(4, 4, 16),
        layers_per_block=(1, 0, 1, 1),
        spatio_temporal_scaling=(True, False, True),
        downsample_type=("conv", "spatial", "spatiotemporal"),
        patch_size=1,
        patch_size_t=1,
        encoder_causal=False,
        encoder_spatial_padding_mode="replicate",
        scaling_factor=0.5,
    ),
    # The pipelines' tiny test VAE (ltx2_pipeline_fixtures.py): one block, layers_per_block of one entry shared by
    # the block and the mid block.
    "tiny": dict(
        DECODER,
        in_channels=3,
        latent_channels=4,
        block_out_channels=(8,),
        layers_per_block=(1,),
        spatio_temporal_scaling=(True,),
        downsample_type=("spatial",),
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
    ),
}

# name, vae, video shape [B, 3, F, H, W], tile px, overlap px
CASES = [
    ("v20_single", "v20", (1, 3, 1, 32, 48), None, None),
    ("v20_multi", "v20", (2, 3, 9, 32, 32), None, None),
    ("v20_multi17", "v20", (1, 3, 17, 16, 32), None, None),
    ("v23_single", "v23", (1, 3, 1, 64, 96), None, None),
    ("v23_multi", "v23", (1, 3, 9, 64, 64), None, None),
    ("odd_single", "odd", (1, 3, 1, 12, 8), None, None),
    ("odd_multi", "odd", (2, 3, 9, 8, 12), None, None),
    ("tiny_single", "tiny", (1, 3, 1, 6, 4), None, None),
    ("tiny_multi", "tiny", (1, 3, 5, 4, 6), None, None),
    ("v20_tiled", "v20", (1, 3, 1, 96, 128), 64, 32),
    ("v20_tiled_multi", "v20", (1, 3, 9, 80, 64), 48, 16),
    ("v23_tiled", "v23", (1, 3, 1, 192, 160), 128, 64),
]


def build(name, out):
    torch.manual_seed(SEED)
    vae = AutoencoderKLLTX2Video(**CONFIGS[name]).eval()
    c = vae.config.latent_channels
    vae.latents_mean.copy_(torch.randn(c))
    vae.latents_std.copy_(torch.rand(c) + 0.5)
    vae.save_pretrained(out / name, safe_serialization=True)
    return vae


def configure(vae, tile, overlap):
    vae.use_tiling = False
    vae.use_framewise_decoding = False
    if tile is not None:
        vae.enable_tiling(
            tile_sample_min_height=tile,
            tile_sample_min_width=tile,
            tile_sample_stride_height=tile - overlap,
            tile_sample_stride_width=tile - overlap,
        )


BROKEN = [
    ("missing", "encoder.down_blocks.1.resnets.1.conv2.conv.weight"),
    ("shape", "encoder.conv_out.conv.bias"),
    ("dtype", "encoder.down_blocks.2.downsamplers.0.conv.conv.bias"),
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
    cases = []
    for name, vname, shape, tile, overlap in CASES:
        vae = vaes[vname]
        configure(vae, tile, overlap)
        video = torch.rand(*shape, generator=gen) * 2 - 1
        with torch.no_grad():
            latents = retrieve_latents(vae.encode(video), sample_mode="argmax")
        normalized = LTX2ImageToVideoPipeline._normalize_latents(
            latents, vae.latents_mean, vae.latents_std, vae.config.scaling_factor
        )
        tensors[f"{name}.video"] = video.contiguous()
        tensors[f"{name}.latents"] = latents.contiguous()
        tensors[f"{name}.normalized"] = normalized.contiguous()
        cases.append(
            dict(name=name, vae=vname, tile=tile, overlap=overlap, video_shape=list(video.shape),
                 latents_shape=list(latents.shape))
        )

    save_file(tensors, str(out / "encode.safetensors"))
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
