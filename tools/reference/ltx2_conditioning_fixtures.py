#!/usr/bin/env python3
"""Parity fixtures for LTX-2 image conditioning in the ltx2_video plugin (issue 28): diffusers'
LTX2ImageToVideoPipeline (a still as latent frame 0) and LTX2ConditionPipeline (conditions at latent frame 0 and
keyframes at later frames, appended as tokens), on the tiny checkpoints of ltx2_pipeline_fixtures.py.

Usage: ltx2_conditioning_fixtures.py OUT_DIR

The checkpoints, prompt embeddings and settings are ltx2_pipeline_fixtures.py's (imported, so a change there gives
new fixtures here too). The condition images are PNG files written here and read back with PIL, as a user's file
would be. The H.264 re-compression of condition stills (image_crf / LTX2VideoCondition.crf, 33 by default for
LTX-2.0-2.3) is off in every case (crf 0): its reference needs PyAV's own libx264 build, which the fixture venv does
not have (docs/validation.md, the conditioning rows).

Files written:
  checkpoint_20/ checkpoint_23/   the tiny LTX-2.0 and LTX-2.3 checkpoints (as ltx2_pipeline_fixtures.py)
  prompt_embeds.safetensors       the --prompt-embeds input
  still.png, keyframe.png         the condition images (RGB, sizes that need resizing and cropping)
  <case>.safetensors              per case: latents (de-normalised [C, F', H', W'], output_type="latent"),
                                  audio_latents, frames [F, 3, H, W] in [0, 1], audio [2, samples]; and the
                                  intermediate tensors: i2v cases: image (VideoProcessor.preprocess output
                                  [1, 3, H, W] in [-1, 1]) and image_latents (vae.encode mode, normalised
                                  [1, C, 1, h, w]); condition cases: cond<i>.pixels ([1, 3, 1, H, W] in [-1, 1]
                                  after the interpolate + center crop) and cond<i>.latents (normalised)
  reference.json                  reference name + version, torch version, seed, the cases (written last)

Cases:
  i2v_20     LTX2ImageToVideoPipeline, checkpoint_20, the plain settings (2 steps, no guidance)
  i2v_23     LTX2ImageToVideoPipeline, checkpoint_23, the guided settings (distilled sigmas, CFG, STG, modality)
  cond_23    LTX2ConditionPipeline, checkpoint_23, guided: still.png at latent 0 (strength 1) and keyframe.png at the
             last latent frame (index -1, strength 0.8)
  kf_20      LTX2ConditionPipeline, checkpoint_20, plain: keyframe.png at latent frame 1 alone (strength 1)
"""

import argparse
import json
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import LTX2ConditionPipeline, LTX2ImageToVideoPipeline
from diffusers.pipelines.ltx2.pipeline_ltx2_condition import LTX2VideoCondition

import ltx2_pipeline_fixtures as base

SEED = base.SEED


def images(out: Path):
    """Two smooth RGB images with texture, sizes that are not the target's (so resizing and cropping matter)."""
    g = torch.Generator().manual_seed(7)

    def make(h, w, phase):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        r = 127 + 100 * np.sin(x / 5.0 + phase)
        gch = 127 + 100 * np.cos(y / 4.0 - phase)
        b = 127 + 90 * np.sin((x + y) / 7.0)
        img = np.stack([r, gch, b], axis=-1) + torch.randn(h, w, 3, generator=g).numpy() * 12
        return PIL.Image.fromarray(np.clip(img, 0, 255).round().astype(np.uint8), "RGB")

    make(37, 50, 0.3).save(out / "still.png")
    make(48, 64, 1.1).save(out / "keyframe.png")
    return PIL.Image.open(out / "still.png"), PIL.Image.open(out / "keyframe.png")


def components(pipe):
    return dict(scheduler=pipe.scheduler, vae=pipe.vae, audio_vae=pipe.audio_vae, text_encoder=None, tokenizer=None,
                connectors=pipe.connectors, transformer=pipe.transformer, vocoder=pipe.vocoder)


def embeds_for(embeds, with_negative):
    e = dict(embeds)
    if not with_negative:
        e.pop("negative_prompt_embeds")
        e.pop("negative_prompt_attention_mask")
    return e


def outputs(call):
    """latents / audio_latents (output_type="latent") and frames / audio (output_type="pt") of one seeded call."""
    out = {}
    lat = call(generator=torch.Generator().manual_seed(SEED), output_type="latent")
    out["latents"] = lat.frames[0].contiguous()
    out["audio_latents"] = lat.audio[0].contiguous()
    res = call(generator=torch.Generator().manual_seed(SEED), output_type="pt")
    out["frames"] = res.frames[0].contiguous()
    out["audio"] = res.audio[0].float().contiguous()
    return out


def i2v_case(pipe, still, embeds, settings, neg):
    p = LTX2ImageToVideoPipeline(**components(pipe))
    s = settings
    out = outputs(lambda **kw: p(image=still, image_crf=0, **embeds_for(embeds, neg), **s, **kw))
    # The intermediate tensors, as prepare_latents computes them.
    image = p.video_processor.preprocess(still, height=s["height"], width=s["width"])
    out["image"] = image.contiguous()
    enc = p.vae.encode(image.unsqueeze(2)).latent_dist.mode()
    out["image_latents"] = p._normalize_latents(enc, p.vae.latents_mean, p.vae.latents_std).contiguous()
    return out


def condition_case(pipe, conds, embeds, settings, neg):
    p = LTX2ConditionPipeline(**components(pipe))
    s = settings
    out = outputs(lambda **kw: p(conditions=conds, **embeds_for(embeds, neg), **s, **kw))
    frames, _, _, _ = p.preprocess_conditions(conds, s["height"], s["width"], s["num_frames"], device="cpu")
    for i, px in enumerate(frames):
        out[f"cond{i}.pixels"] = px.contiguous()
        enc = p.vae.encode(px).latent_dist.mode()
        out[f"cond{i}.latents"] = p._normalize_latents(enc, p.vae.latents_mean, p.vae.latents_std).contiguous()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    still, keyframe = images(out)
    embeds = base.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    pipes = {}
    for name, v23 in (("20", False), ("23", True)):
        pipes[name] = base.pipeline(v23)
        pipes[name].save_pretrained(out / f"checkpoint_{name}")

    plain, guided = base.PLAIN, base.GUIDED
    cases = {}

    def record(name, ckpt, settings, neg, tensors, conditions):
        save_file(tensors, out / f"{name}.safetensors")
        cases[name] = {"checkpoint": f"checkpoint_{ckpt}", "settings": settings, "negative": neg,
                       "conditions": conditions, "shapes": {k: list(v.shape) for k, v in tensors.items()}}

    record("i2v_20", "20", plain, False, i2v_case(pipes["20"], still, embeds, plain, False),
           [{"image": "still.png", "index": 0, "strength": 1.0, "pipeline": "LTX2ImageToVideoPipeline"}])
    record("i2v_23", "23", guided, True, i2v_case(pipes["23"], still, embeds, guided, True),
           [{"image": "still.png", "index": 0, "strength": 1.0, "pipeline": "LTX2ImageToVideoPipeline"}])
    conds = [LTX2VideoCondition(frames=still, index=0, strength=1.0, crf=0),
             LTX2VideoCondition(frames=keyframe, index=-1, strength=0.8, crf=0)]
    record("cond_23", "23", guided, True, condition_case(pipes["23"], conds, embeds, guided, True),
           [{"image": "still.png", "index": 0, "strength": 1.0}, {"image": "keyframe.png", "index": -1, "strength": 0.8}])
    conds = [LTX2VideoCondition(frames=keyframe, index=1, strength=1.0, crf=0)]
    record("kf_20", "20", plain, False, condition_case(pipes["20"], conds, embeds, plain, False),
           [{"image": "keyframe.png", "index": 1, "strength": 1.0}])

    vae = pipes["20"].vae
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "seed": SEED, "image_crf": 0,
           "vae": {"spatial_compression_ratio": vae.spatial_compression_ratio,
                   "temporal_compression_ratio": vae.temporal_compression_ratio},
           "cases": cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
