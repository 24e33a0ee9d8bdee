#!/usr/bin/env python3
"""Parity fixtures for ltx2_image img2img (issue 28 item 4; models.md §6; Note [LTX-2 image img2img] in
docs/architecture.md): the LTX-2.3 image model refining an input image at a strength, on the tiny image checkpoint of
ltx2_image_fixtures.py (imported, not edited: its builders make the same weights).

Usage: ltx2_image_img2img_fixtures.py OUT_DIR

The original is DEVAIEXP's `LTX2ImageImg2ImgPipeline` (DEVAIEXP/diffusers fork, module
diffusers.pipelines.ltx2.pipeline_ltx2_image_img2img, imported by DEVAIEXP/ltx2-image-diffusers
run_distilled_img2img.py). That fork branch is not public in any form reachable here, and nothing of it can be
pip-installed; its logic is public in the same authors' modular blocks, DEVAIEXP/ltx2-image-diffusers
custom_blocks/ltx2_image/modular_blocks_ltx2_image.py (get_strength_sigmas, preprocess_refinement_image,
LTX2ImageVaeEncoderStep, LTX2ImagePrepareLatentsStep), which is what the note cites.

The composed reference (what the C++ is compared with), built from diffusers 0.42.1's modules:
  image     PIL.Image.open(input.png).convert("RGB").resize((W, H), LANCZOS), then
            VaeImageProcessor(vae_scale_factor).preprocess(image, H, W) ([1, 3, H, W] float32 in [-1, 1]); the
            original's optional pixel noise / sharpen / structured noise are off (their pipeline defaults) and not
            composed here
  encode    AutoencoderKLLTX2Video.encode(pixels[:, :, None]).latent_dist .sample(generator) with the ONE
            torch.Generator().manual_seed(SEED) of the run (retrieve_latents(..., "sample") of diffusers'
            LTX-2 image-to-video module), then normalised: (x - mean) * scaling_factor / std
  schedule  diffusers' img2img get_timesteps (QwenImageImg2ImgPipeline.get_timesteps, called unbound): the full
            set_timesteps(sigmas=linspace(1, 1/N, N), mu=calculate_shift(h*w, 1024, 4096, 0.95, 2.05)), then
            timesteps[t_start:] with t_start = int(max(N - min(N * strength, N), 0)) and set_begin_index(t_start)
  noise     randn_tensor(latent shape, generator, float32) from the SAME generator, after the posterior's draw;
            FlowMatchEulerDiscreteScheduler.scale_noise(x0, timesteps[:1], noise) = sigma * noise + (1 - sigma) * x0
  denoise   the remaining steps, no guidance (the distilled run: guidance_scale 1, no PAG), Euler; decode as
            ltx2_image_fixtures.compose_image (x * std / scaling_factor + mean, vae.decode, frame 0, postprocess "pt")

The checking harness (NOT the reference): original_* below restate the original's order of operations
(get_strength_sigmas slices the UNSHIFTED linspace and set_timesteps shifts the slice; the posterior and the latent
noise from one generator; scale_noise at the first kept timestep) and run it on the same weights; the composed
noised latents, schedule and final latents must be bitwise equal to it ("original_check" in reference.json; the
C++ parity test asserts it).

Files written:
  checkpoint/                    the tiny image checkpoint (ltx2_image_fixtures.components(), save_pretrained)
  input.png                      the input image, 8-bit RGB, 30 x 40 (H x W) -- resized to HEIGHT x WIDTH
  img2img_<case>.safetensors     resized_rgb [H, W, 3] uint8 (PIL's LANCZOS resize), pixels [1, 3, H, W]
                                 (preprocessed), moments [1, 2C, 1, h, w] (the encoder's latent_dist.parameters),
                                 posterior_eps and noise [1, C, 1, h, w] (the two draws), image_latents (normalised
                                 x0, [1, C, 1, h, w]), noised (packed [1, h*w, C], the denoise's start), sigmas (the
                                 kept schedule + terminal), timesteps, latents (denoised, packed) and image [3, H, W]
                                 in [0, 1]; cases "s020" (strength 0.2) and "s060" (0.6), 8 steps
  reference.json                 versions, seed, cases (strength, steps, t_start, kept steps), original_check
"""

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift
from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import retrieve_latents
from diffusers.pipelines.qwenimage.pipeline_qwenimage_img2img import QwenImageImg2ImgPipeline
from diffusers.utils.torch_utils import randn_tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_image_fixtures as base  # noqa: E402

SEED = 43
STEPS = 8
INPUT_H, INPUT_W = 30, 40
CASES = {"s020": 0.2, "s060": 0.6}


def input_image(path):
    """A smooth deterministic picture with some texture (so LANCZOS has something to do), saved as 8-bit RGB PNG."""
    g = torch.Generator().manual_seed(5)
    y = torch.linspace(0, 1, INPUT_H).view(-1, 1)
    x = torch.linspace(0, 1, INPUT_W).view(1, -1)
    rgb = torch.stack([x.expand(INPUT_H, INPUT_W), y.expand(INPUT_H, INPUT_W), (x * y).sqrt()], -1)
    rgb = (rgb * 200 + torch.rand(INPUT_H, INPUT_W, 3, generator=g) * 55).round().clamp(0, 255).to(torch.uint8)
    PIL.Image.fromarray(rgb.numpy(), "RGB").save(path)


def resized(path):
    return PIL.Image.open(path).convert("RGB").resize((base.WIDTH, base.HEIGHT), PIL.Image.Resampling.LANCZOS)


def preprocess(path, vae):
    proc = VaeImageProcessor(vae_scale_factor=vae.spatial_compression_ratio)
    return proc.preprocess(resized(path), height=base.HEIGHT, width=base.WIDTH).to(torch.float32)


def normalise(vae, x):
    mean = vae.latents_mean.view(1, -1, 1, 1, 1).to(x.dtype)
    std = vae.latents_std.view(1, -1, 1, 1, 1).to(x.dtype)
    return (x - mean) * vae.config.scaling_factor / std


def mu_of(sched, tokens):
    c = sched.config
    return calculate_shift(tokens, c.get("base_image_seq_len", 1024), c.get("max_image_seq_len", 4096),
                           c.get("base_shift", 0.95), c.get("max_shift", 2.05))


def denoise_decode(tr, conn, vae, sched, embeds, latents, timesteps, sigmas, h, w):
    """The distilled loop of ltx2_image_fixtures.compose_image (no guidance) from given packed latents."""
    C = tr.config.in_channels
    text, text_mask = conn(embeds["prompt_embeds"], embeds["prompt_attention_mask"])
    for i, t in enumerate(timesteps):
        v = tr(latents, text, t.expand(1), text_mask, h, w, set(), None).float()
        latents = sched.step(v, t, latents, return_dict=False)[0]
    z = latents.reshape(1, 1, h, w, C).permute(0, 4, 1, 2, 3)
    z = z * vae.latents_std.view(1, -1, 1, 1, 1) / vae.config.scaling_factor + vae.latents_mean.view(1, -1, 1, 1, 1)
    img = vae.decode(z, None, return_dict=False)[0][:, :, 0]
    img = VaeImageProcessor(vae_scale_factor=vae.spatial_compression_ratio).postprocess(img, output_type="pt")
    return latents, img[0]


def compose_img2img(tr, conn, vae, embeds, png, strength):
    """The composed reference (module docstring)."""
    sched = FlowMatchEulerDiscreteScheduler(**base.LTX2_SCHEDULER)
    gen = torch.Generator().manual_seed(SEED)
    pixels = preprocess(png, vae)
    dist = vae.encode(pixels.unsqueeze(2)).latent_dist
    x0 = normalise(vae, retrieve_latents(SimpleNamespace(latent_dist=dist), gen, "sample"))
    _, C, _, h, w = x0.shape
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / STEPS, STEPS), mu=mu_of(sched, h * w))
    timesteps, kept = QwenImageImg2ImgPipeline.get_timesteps(SimpleNamespace(scheduler=sched), STEPS, strength, "cpu")
    noise = randn_tensor(x0.shape, generator=gen, dtype=torch.float32)
    noised = sched.scale_noise(x0, timesteps[:1], noise)
    packed = noised.permute(0, 2, 3, 4, 1).flatten(1, 3)
    sigmas = sched.sigmas[sched.begin_index:].clone()
    latents, image = denoise_decode(tr, conn, vae, sched, embeds, packed, timesteps, sigmas, h, w)
    # The posterior's draw, replayed (the first draw of the run's generator) for the C++ sampling check.
    eps = torch.randn(x0.shape, generator=torch.Generator().manual_seed(SEED), dtype=torch.float32)
    rgb = torch.from_numpy(np.array(resized(png))).contiguous()
    return {"resized_rgb": rgb, "pixels": pixels, "moments": dist.parameters, "posterior_eps": eps, "noise": noise,
            "image_latents": x0, "noised": packed, "sigmas": sigmas, "timesteps": timesteps.clone(), "latents": latents,
            "image": image}, kept


# ------------------------------------------------------------------------- checking harness (original's order)
def original_strength_sigmas(steps, strength):
    """get_strength_sigmas of modular_blocks_ltx2_image.py, restated: slice the float32 linspace before the shift."""
    if not 0.0 <= strength <= 1.0:
        raise ValueError(strength)
    grid = np.linspace(1.0, 1 / steps, steps, dtype=np.float32)
    t_start = int(max(steps - min(steps * strength, steps), 0))
    return grid[t_start:].tolist(), t_start


def original_img2img(tr, conn, vae, embeds, png, strength):
    """LTX2ImageVaeEncoderStep + LTX2ImagePrepareLatentsStep (img2img branch) + the denoise, in the original's order."""
    sched = FlowMatchEulerDiscreteScheduler(**base.LTX2_SCHEDULER)
    gen = torch.Generator().manual_seed(SEED)
    pixels = preprocess(png, vae)
    x0 = normalise(vae, vae.encode(pixels.unsqueeze(2)).latent_dist.sample(generator=gen)).to(torch.float32)
    _, C, _, h, w = x0.shape
    sigmas, t_start = original_strength_sigmas(STEPS, strength)
    sched.set_timesteps(sigmas=sigmas, mu=mu_of(sched, h * w))
    noise = randn_tensor(x0.shape, generator=gen, dtype=torch.float32)
    noised = sched.scale_noise(x0, sched.timesteps[:1].repeat(1), noise)
    packed = noised.permute(0, 2, 3, 4, 1).flatten(1, 3)
    sched.set_timesteps(sigmas=sigmas, mu=mu_of(sched, packed.shape[1]))
    sched.set_begin_index(0)
    latents, image = denoise_decode(tr, conn, vae, sched, embeds, packed, sched.timesteps, sched.sigmas, h, w)
    return {"noised": packed, "sigmas": sched.sigmas.clone(), "timesteps": sched.timesteps.clone(),
            "latents": latents, "image": image}, t_start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    embeds = base.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    tr, conn, vae, _ = base.components()
    ck = out / "checkpoint"
    tr.save_pretrained(ck / "transformer")
    conn.save_pretrained(ck / "connectors")
    vae.save_pretrained(ck / "vae")
    FlowMatchEulerDiscreteScheduler(**base.LTX2_SCHEDULER).save_pretrained(ck / "scheduler")
    (ck / "model_index.json").write_text(base.model_index(False))
    png = out / "input.png"
    input_image(png)

    cases, check = {}, {}
    with torch.no_grad():
        for name, strength in CASES.items():
            ref, kept = compose_img2img(tr, conn, vae, embeds, png, strength)
            orig, t_start = original_img2img(tr, conn, vae, embeds, png, strength)
            equal = {k: bool(torch.equal(ref[k], orig[k])) for k in orig}
            check[name] = {"t_start": t_start, "equal": equal, "all_equal": all(equal.values())}
            assert kept == STEPS - t_start, (kept, t_start)
            save_file({k: v.contiguous() for k, v in ref.items()}, out / f"img2img_{name}.safetensors")
            cases[name] = {"strength": strength, "steps": STEPS, "t_start": t_start, "kept_steps": kept,
                           "height": base.HEIGHT, "width": base.WIDTH, "input": [INPUT_H, INPUT_W],
                           "sigmas": ref["sigmas"].tolist(), "guidance_scale": 1.0, "pag_scale": 0.0,
                           "shapes": {k: list(v.shape) for k, v in ref.items()}}
    if not all(c["all_equal"] for c in check.values()):
        raise SystemExit(f"the composed reference differs from the original's order: {check}")
    ref = {"reference": "diffusers (composed LTX-2 image img2img)", "reference_version": diffusers.__version__,
           "torch_version": torch.__version__, "pillow_version": PIL.__version__, "seed": SEED, "cases": cases,
           "original_check": check}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
