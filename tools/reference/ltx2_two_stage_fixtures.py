#!/usr/bin/env python3
"""Parity fixtures for the ltx2_video two-stage run (issue 28 item 3): diffusers' documented distilled two-stage
composition (docs/source/en/api/pipelines/ltx2.md, "Distilled checkpoint generation"): LTX2Pipeline at half size
on DISTILLED_SIGMA_VALUES (output_type="latent") -> LTX2LatentUpsamplePipeline(vae, latent_upsampler) ->
LTX2Pipeline(latents=upscaled, audio_latents=stage-1 audio, sigmas=STAGE_2_DISTILLED_SIGMA_VALUES,
noise_scale=STAGE_2_DISTILLED_SIGMA_VALUES[0]), one torch.Generator carried through both stages, guidance_scale 1.0
and every other setting the pipeline's default, as the recipe calls it. The image-to-video variant runs
LTX2ImageToVideoPipeline in both stages (stage 2 keeps latent frame 0 of the upscaled latents clean).

Usage: ltx2_two_stage_fixtures.py OUT_DIR

The checkpoint is ltx2_pipeline_fixtures.py's tiny LTX-2.3 one (imported) plus a tiny plain-x2 latent upsampler
(LTX2LatentUpsamplerModel, LTX-2.3's variant, in_channels = the VAE's latent channels) saved as its
latent_upsampler/ component, as the diffusers-layout LTX-2 checkpoints carry it.

Files written:
  checkpoint/                 the tiny LTX-2.3 checkpoint with latent_upsampler/
  prompt_embeds.safetensors   the --prompt-embeds input (with negative embeddings: the default audio guidance runs CFG)
  still.png                   the condition image of the i2v case
  <case>.safetensors          stage1_latents / stage1_audio_latents (de-normalised, output_type="latent"),
                              upscaled (LTX2LatentUpsamplePipeline's output), latents / audio_latents (stage 2,
                              de-normalised), frames [F, 3, H, W] in [0, 1], audio [2, samples]; i2v:
                              image_latents (the still encoded at the stage-1 size, normalised)
  reference.json              reference name + version, torch version, seed, the cases (written last)

Cases: t2v (LTX2Pipeline both stages), i2v (LTX2ImageToVideoPipeline both stages, image_crf 0). Final size 64x64
(stage 1 at 32x32), 5 frames at 25 fps.
"""

import argparse
import json
from pathlib import Path

import PIL.Image
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import LTX2ImageToVideoPipeline, LTX2Pipeline
from diffusers.pipelines.ltx2 import LTX2LatentUpsamplePipeline
from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
from diffusers.pipelines.ltx2.utils import DISTILLED_SIGMA_VALUES, STAGE_2_DISTILLED_SIGMA_VALUES

import ltx2_conditioning_fixtures as cond
import ltx2_pipeline_fixtures as base

SEED = base.SEED
WIDTH, HEIGHT, FRAMES, FPS = 64, 64, 5, 25.0


def upsampler(channels):
    torch.manual_seed(0)
    m = LTX2LatentUpsamplerModel(in_channels=channels, mid_channels=32, num_blocks_per_stage=1,
                                 use_rational_resampler=False).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():  # GroupNorm affines that matter
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(p + 0.1 * torch.randn(p.shape, generator=g))
    return m


def two_stage(pipe, up, embeds, extra, output_type):
    gen = torch.Generator().manual_seed(SEED)
    common = dict(**embeds, frame_rate=FPS, guidance_scale=1.0, max_sequence_length=base.SEQ, **extra)
    video_latent, audio_latent = pipe(width=WIDTH // 2, height=HEIGHT // 2, num_frames=FRAMES,
                                      sigmas=DISTILLED_SIGMA_VALUES, generator=gen, output_type="latent",
                                      return_dict=False, **common)
    upscaled = LTX2LatentUpsamplePipeline(vae=pipe.vae, latent_upsampler=up)(
        latents=video_latent, output_type="latent", return_dict=False)[0]
    video, audio = pipe(latents=upscaled, audio_latents=audio_latent, width=WIDTH, height=HEIGHT, num_frames=FRAMES,
                        num_inference_steps=3, noise_scale=STAGE_2_DISTILLED_SIGMA_VALUES[0],
                        sigmas=STAGE_2_DISTILLED_SIGMA_VALUES, generator=gen, output_type=output_type,
                        return_dict=False, **common)
    return video_latent, audio_latent, upscaled, video, audio


def run_case(pipe, up, embeds, extra):
    s1v, s1a, upscaled, lat, alat = two_stage(pipe, up, embeds, extra, "latent")
    _, _, _, frames, audio = two_stage(pipe, up, embeds, extra, "pt")
    return {"stage1_latents": s1v[0].contiguous(), "stage1_audio_latents": s1a[0].contiguous(),
            "upscaled": upscaled[0].contiguous(), "latents": lat[0].contiguous(), "audio_latents": alat[0].contiguous(),
            "frames": frames[0].contiguous(), "audio": audio[0].float().contiguous()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    pipe = base.pipeline(True)
    up = upsampler(pipe.vae.config.latent_channels)
    pipe.save_pretrained(out / "checkpoint")
    up.save_pretrained(out / "checkpoint" / "latent_upsampler")
    embeds = base.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    still, _ = cond.images(out)

    cases = {}
    t2v = run_case(pipe, up, embeds, {})
    save_file(t2v, out / "t2v.safetensors")
    cases["t2v"] = {"pipeline": "LTX2Pipeline", "shapes": {k: list(v.shape) for k, v in t2v.items()}}
    i2v_pipe = LTX2ImageToVideoPipeline(**cond.components(pipe))
    i2v = run_case(i2v_pipe, up, embeds, {"image": still, "image_crf": 0})
    # The still as stage 1's prepare_latents encodes it (the encoder has its own rung).
    image = i2v_pipe.video_processor.preprocess(still, height=HEIGHT // 2, width=WIDTH // 2)
    enc = i2v_pipe.vae.encode(image.unsqueeze(2)).latent_dist.mode()
    i2v["image_latents"] = i2v_pipe._normalize_latents(enc, pipe.vae.latents_mean, pipe.vae.latents_std).contiguous()
    save_file(i2v, out / "i2v.safetensors")
    cases["i2v"] = {"pipeline": "LTX2ImageToVideoPipeline", "image": "still.png", "image_crf": 0,
                    "shapes": {k: list(v.shape) for k, v in i2v.items()}}

    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "seed": SEED, "width": WIDTH, "height": HEIGHT, "frames": FRAMES, "frame_rate": FPS,
           "stage1_sigmas": list(DISTILLED_SIGMA_VALUES), "stage2_sigmas": list(STAGE_2_DISTILLED_SIGMA_VALUES),
           "guidance_scale": 1.0, "cases": cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
