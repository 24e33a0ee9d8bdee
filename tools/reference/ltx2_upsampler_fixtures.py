#!/usr/bin/env python3
"""Parity fixtures for the LTX-2 latent upsampler (issue 28 item 3; conditioning-serving-peers.md §2.3-2.4).

Usage: ltx2_upsampler_fixtures.py OUT_DIR

The reference is diffusers' LTX2LatentUpsamplerModel (pipelines/ltx2/latent_upsampler.py) and the tensor work of
the two-stage composition: LTX2Pipeline(output_type="latent") de-normalises (_unpack_latents, _denormalize_latents)
-> LTX2LatentUpsamplePipeline(latents=..., latents_normalized=False, output_type="latent", adain_factor,
tone_map_compression_ratio) -> LTX2Pipeline(latents=5-D) normalises again (_normalize_latents in prepare_latents).
Tiny random fp32 upsamplers are built with diffusers' class after torch.manual_seed(0) (GroupNorm affines perturbed
so that they matter) and saved with save_pretrained (diffusers layout: config.json +
diffusion_pytorch_model.safetensors, the rational resampler's blur kernel buffer included):

  x2     LTX-2.3-like plain x2: use_rational_resampler False (Conv2d + pixel shuffle), in 16, mid 32, 2 blocks/stage
  r2     LTX-2.0-like rational x2: SpatialRationalResampler(2.0) = (2, 1), in 8, mid 32, 1 block/stage
  r15    rational x1.5: (3, 2), pixel shuffle 3 then BlurDownsample stride 2, in 8, mid 32, 2 blocks/stage
  t2     temporal x2: Conv3d + 1-D shuffle, first frame dropped, in 8, mid 32, 1 block/stage
  st2    spatial + temporal: Conv3d + 3-D shuffle, first frame dropped, in 8, mid 64, 1 block/stage
  r15_nokernel  r15's weights without upsampler.blur_down.kernel (the C++ builds the binomial kernel)

Two tiny video VAEs (AutoencoderKLLTX2Video, only for config + latents_mean/std) give the stats the pipeline reads:
vae8 (latent_channels 8, scaling_factor 0.5) and vae16 (latent_channels 16, scaling_factor 1.0).

Files written:
  x2/ r2/ r15/ t2/ st2/ r15_nokernel/   the upsampler checkpoints (fp32)
  vae8/ vae16/                          the VAEs
  upsample.safetensors   model.<name>.x / model.<name>.out (forward on random latents); chain.<case>.latents (the
                         normalised stage-1 latents, 5-D or packed), chain.<case>.out (the normalised stage-2 initial
                         latents, 5-D, in the upsampler's dtype)
  broken/<name>/         copies of r2/ with one tensor removed (missing) or of the wrong shape (shape)
  reference.json         reference name + version, torch version, seed, models, chain cases (upsampler, vae, packed,
                         latent size, dtype, adain_factor, tone_map_compression_ratio), broken checkpoints with their
                         tensor (written last)
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLLTX2Video
from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline
from diffusers.pipelines.ltx2.pipeline_ltx2_latent_upsample import LTX2LatentUpsamplePipeline

SEED = 0

UPSAMPLERS = {
    "x2": dict(in_channels=16, mid_channels=32, num_blocks_per_stage=2, use_rational_resampler=False),
    "r2": dict(in_channels=8, mid_channels=32, num_blocks_per_stage=1, rational_spatial_scale=2.0,
               use_rational_resampler=True),
    "r15": dict(in_channels=8, mid_channels=32, num_blocks_per_stage=2, rational_spatial_scale=1.5,
                use_rational_resampler=True),
    "t2": dict(in_channels=8, mid_channels=32, num_blocks_per_stage=1, spatial_upsample=False,
               temporal_upsample=True),
    "st2": dict(in_channels=8, mid_channels=64, num_blocks_per_stage=1, spatial_upsample=True,
                temporal_upsample=True),
}

VAE_COMMON = dict(
    in_channels=3,
    out_channels=3,
    block_out_channels=(8, 8, 8, 8),
    layers_per_block=(1, 1, 1, 1, 1),
    downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
    decoder_block_out_channels=(16, 32, 64),
    decoder_layers_per_block=(1, 1, 1, 1),
    decoder_spatio_temporal_scaling=(True, True, True),
    decoder_inject_noise=(False, False, False, False),
    upsample_type=("spatiotemporal", "spatiotemporal", "spatiotemporal"),
    upsample_residual=(True, True, True),
    upsample_factor=(2, 2, 2),
    timestep_conditioning=False,
    patch_size=4,
    patch_size_t=1,
    decoder_causal=False,
    spatial_compression_ratio=32,
    temporal_compression_ratio=8,
)
VAES = {
    "vae8": dict(VAE_COMMON, latent_channels=8, scaling_factor=0.5),
    "vae16": dict(VAE_COMMON, latent_channels=16, scaling_factor=1.0),
}

# Forward cases: upsampler, input shape [B, C, F, H, W].
MODEL_CASES = [
    ("x2", (1, 16, 2, 3, 4)),
    ("r2", (2, 8, 2, 3, 3)),
    ("r15", (1, 8, 2, 4, 5)),
    ("t2", (1, 8, 3, 2, 3)),
    ("st2", (1, 8, 2, 2, 3)),
]

# Chain cases: name, upsampler, vae, (B, F', H', W'), packed input, dtype, adain_factor, tone_map_compression_ratio.
CHAIN_CASES = [
    ("r2", "r2", "vae8", (1, 2, 3, 4), False, torch.float32, 0.0, 0.0),
    ("x2_packed", "x2", "vae16", (2, 2, 2, 3), True, torch.float32, 0.0, 0.0),
    ("r15_filters", "r15", "vae8", (1, 2, 4, 4), False, torch.float32, 0.5, 0.6),
    ("t2", "t2", "vae8", (1, 3, 2, 2), True, torch.float32, 0.0, 0.0),
    ("x2_bf16", "x2", "vae16", (1, 2, 3, 3), False, torch.bfloat16, 0.0, 0.0),
]

BROKEN = [
    ("missing", "res_blocks.0.conv2.weight"),
    ("shape", "final_conv.bias"),
]


def build_upsampler(name, out):
    torch.manual_seed(SEED)
    model = LTX2LatentUpsamplerModel(**UPSAMPLERS[name]).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out / name, safe_serialization=True)
    return model


def build_vae(name, out):
    torch.manual_seed(SEED)
    vae = AutoencoderKLLTX2Video(**VAES[name]).eval()
    c = VAES[name]["latent_channels"]
    vae.latents_mean.copy_(torch.randn(c))
    vae.latents_std.copy_(torch.rand(c) + 0.5)
    vae.save_pretrained(out / name, safe_serialization=True)
    return vae


def copy_without(out, src, dst, edit):
    d = out / dst
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / src / "config.json", d / "config.json")
    sd = load_file(str(out / src / "diffusion_pytorch_model.safetensors"))
    edit(sd)
    save_file(sd, str(d / "diffusion_pytorch_model.safetensors"))


def broken_fixtures(out):
    listed = []
    for name, tensor in BROKEN:
        def edit(sd, name=name, tensor=tensor):
            if name == "missing":
                del sd[tensor]
            else:
                sd[tensor] = torch.zeros(sd[tensor].numel() + 1)
        copy_without(out, "r2", f"broken/{name}", edit)
        listed.append(dict(name=name, tensor=tensor))
    return listed


def chain(upsampler, vae, normalized, packed, fhw, adain, tone):
    """Stage-1 normalised latents -> stage-2 normalised initial latents, as the two-stage composition runs."""
    f, h, w = fhw
    latents = normalized
    if packed:
        latents = LTX2Pipeline._unpack_latents(latents, f, h, w, 1, 1)
    # LTX2Pipeline(output_type="latent")
    latents = LTX2Pipeline._denormalize_latents(latents, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
    pipe = LTX2LatentUpsamplePipeline(vae=vae, latent_upsampler=upsampler)
    up = pipe(
        latents=latents,
        latents_normalized=False,
        height=h * pipe.vae_spatial_compression_ratio,
        width=w * pipe.vae_spatial_compression_ratio,
        num_frames=(f - 1) * pipe.vae_temporal_compression_ratio + 1,
        adain_factor=adain,
        tone_map_compression_ratio=tone,
        output_type="latent",
        return_dict=False,
    )[0]
    # LTX2Pipeline.prepare_latents(latents=5-D): normalised in their dtype.
    return LTX2Pipeline._normalize_latents(up, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ups = {name: build_upsampler(name, out) for name in UPSAMPLERS}
    vaes = {name: build_vae(name, out) for name in VAES}
    copy_without(out, "r15", "r15_nokernel", lambda sd: sd.pop("upsampler.blur_down.kernel"))

    gen = torch.Generator().manual_seed(SEED)
    tensors = {}
    models = []
    for name, shape in MODEL_CASES:
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            y = ups[name](x)
        tensors[f"model.{name}.x"] = x.contiguous()
        tensors[f"model.{name}.out"] = y.contiguous()
        models.append(dict(name=name, config=UPSAMPLERS[name], x_shape=list(x.shape), out_shape=list(y.shape)))

    cases = []
    for name, uname, vname, (b, f, h, w), packed, dtype, adain, tone in CHAIN_CASES:
        vae = vaes[vname]
        c = VAES[vname]["latent_channels"]
        normalized = torch.randn(b, c, f, h, w, generator=gen)
        if packed:
            normalized = LTX2Pipeline._pack_latents(normalized, 1, 1)
        upsampler = ups[uname]
        upsampler.to(dtype)
        with torch.no_grad():
            y = chain(upsampler, vae, normalized, packed, (f, h, w), adain, tone)
        upsampler.to(torch.float32)
        tensors[f"chain.{name}.latents"] = normalized.contiguous()
        tensors[f"chain.{name}.out"] = y.contiguous()
        cases.append(dict(name=name, upsampler=uname, vae=vname, packed=packed, latent_frames=f, latent_height=h,
                          latent_width=w, dtype=str(dtype).replace("torch.", ""), adain_factor=adain,
                          tone_map_compression_ratio=tone, out_shape=list(y.shape), out_dtype=str(y.dtype)))

    save_file(tensors, str(out / "upsample.safetensors"))
    ref = dict(
        reference="diffusers",
        reference_version=diffusers.__version__,
        torch_version=torch.__version__,
        seed=SEED,
        models=models,
        chain=cases,
        broken=broken_fixtures(out),
    )
    (out / "reference.json").write_text(json.dumps(ref, indent=2))


if __name__ == "__main__":
    main()
