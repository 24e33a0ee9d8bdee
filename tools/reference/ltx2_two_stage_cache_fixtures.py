#!/usr/bin/env python3
"""Parity fixtures for ltx2_video's two-stage run with a step cache (issue 41; Note [Step caching], "Two-stage runs"):
diffusers 0.42.1's own cache hooks on the two-stage composition of ltx2_two_stage_fixtures.py, stage 1 at 20 steps
with CFG.

Usage: ltx2_two_stage_cache_fixtures.py OUT_DIR [--probe]

The composition: LTX2Pipeline at half size (32x32, 5 frames at 25 fps, 20 linspace steps, CFG 3, STG 1 on block 1,
modality 3, rescale 0.7, audio 7 / 1 / 3 / 0.7: ltx2_video_cache_fixtures.SETTINGS, so stage 1 is that script's
workload exactly) with output_type="latent" -> LTX2LatentUpsamplePipeline(vae, the tiny x2 latent upsampler of
ltx2_two_stage_fixtures) -> LTX2Pipeline(latents=upscaled, audio_latents=stage-1 audio, 64x64,
sigmas=STAGE_2_DISTILLED_SIGMA_VALUES, noise_scale=its first value, guidance_scale 1.0, every other setting stage 1's),
one torch.Generator carried through both stages. The transformer is ltx2_video_cache_fixtures' 4-block one.

The cache per stage, as ddo runs it: each stage has its own cache of the same settings, fresh state, configured for
that stage's step count (diffusers resets a transformer's stateful hooks at the end of every pipeline call:
DiffusionPipeline.maybe_free_model_hooks -> _reset_stateful_cache; MagCacheConfig takes num_inference_steps per
stage and interpolates mag_ratios to it). ddo caches stage 2 only when its schedule reaches cache.min_steps (10) or
cache.allow_few_steps is set: the "stage 2 off" cases run stage 2 through a pipeline without hooks, the "_all" cases
with hooks of their own on a fresh copy of the same transformer. The hooks, the block wrapper that names the
dual-stream block's streams as the hooks read them (registered in TransformerBlockRegistry), SeaCache's root hook and
step context, and the probes that record each pass's decision are ltx2_video_cache_fixtures.py's (imported; its
docstring says why each is needed).

Cases (stage 1 / stage 2):
  off          no cache / no cache
  fbc          FirstBlockCache 0.17 / none (3 steps < min_steps)
  fbc_all      FirstBlockCache 0.3 / FirstBlockCache 0.3 (allow_few_steps)
  mag_all      MagCache (stage 1's calibrated ratios, threshold 0.2, max_skip_steps 3, retention 0.2) on 20 steps /
               the same on 3 steps (ratios interpolated to 3)
  ts           TaylorSeer (ltx2_video_cache_fixtures.TS_O2) / none
  sea_all      SeaCache 0.85 / SeaCache 0.85 (allow_few_steps)
  i2v_fbc_all  fbc_all on LTX2ImageToVideoPipeline in both stages (still.png, image_crf 0)

Files written:
  checkpoint/                 the 4-block tiny LTX-2.3 checkpoint with latent_upsampler/
  prompt_embeds.safetensors   ltx2_pipeline_fixtures.prompt_embeds()
  still.png, keyframe.png     ltx2_conditioning_fixtures.images()
  pipeline.safetensors        "<case>.latents" / "<case>.audio_latents": stage 2's output (de-normalised,
                              output_type="latent"), [C, F', H', W'] and [C, L, M]
  reference.json              written last: versions, settings per stage, per case and stage the cache kind, params
                              and the pattern per cache context (FirstBlockCache, MagCache, SeaCache) or per context
                              and hooked module (TaylorSeer)
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import LTX2ImageToVideoPipeline, LTX2Pipeline
from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig
from diffusers.pipelines.ltx2 import LTX2LatentUpsamplePipeline
from diffusers.pipelines.ltx2.utils import STAGE_2_DISTILLED_SIGMA_VALUES

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_conditioning_fixtures as cf  # noqa: E402
import ltx2_pipeline_fixtures as pl  # noqa: E402
import ltx2_two_stage_fixtures as ts2  # noqa: E402
import ltx2_video_cache_fixtures as vc  # noqa: E402

SEED = pl.SEED
STAGE1 = dict(vc.SETTINGS)  # 32x32, 20 steps, CFG + STG + modality isolation
STAGE2 = dict(STAGE1, height=2 * STAGE1["height"], width=2 * STAGE1["width"], guidance_scale=1.0,
              sigmas=list(STAGE_2_DISTILLED_SIGMA_VALUES), noise_scale=STAGE_2_DISTILLED_SIGMA_VALUES[0])
STAGE2.pop("num_inference_steps")
STAGE2_STEPS = len(STAGE_2_DISTILLED_SIGMA_VALUES)
FBC_THRESHOLD = vc.FBC_THRESHOLDS["fbc_hi"]
# One setting for both stages, as ddo's cache.* is one: thresholds at which stage 2 (3 steps at the distilled sigmas,
# whose first-block signals --probe prints: about 0.18-0.23 at its second step, 0.15-0.77 at its third) reuses a pass,
# 1e-3 (relative) away from every value either stage compares (asserted; measured: 3.3 % at 0.3).
FBC_ALL_THRESHOLD = 0.3
MAG = dict(threshold=vc.MAG_THRESHOLDS["mag_hi"], max_skip_steps=vc.MAG_MAX_SKIP_STEPS,
           retention_ratio=vc.MAG_RETENTION_RATIO)
SEA = dict(threshold=0.85)  # stage 2's accumulated distance at its one gated step: 0.778 (margins 8.4 % / 13 %)


def stage(base, cfg, embeds, settings, gen, cls, extra, **inputs):
    """One pipeline call with `cfg` (None: a pipeline without hooks); returns (video, audio, recorder)."""
    vc.REC = vc.Recorder()
    wrap = cfg is not None and not isinstance(cfg, TaylorSeerCacheConfig)
    pipe = vc.make_pipeline(base, wrap, cfg, cls)
    with torch.no_grad():
        v, a = pipe(**embeds, **settings, **extra, **inputs, generator=gen, output_type="latent", return_dict=False)
    rec, vc.REC = vc.REC, None
    return v, a, rec, pipe


def two_stage(base, up, embeds, c1, c2, still=None):
    cls = LTX2Pipeline if still is None else LTX2ImageToVideoPipeline
    extra = {} if still is None else dict(image=still, image_crf=0)
    gen = torch.Generator().manual_seed(SEED)
    v1, a1, rec1, pipe = stage(base, c1, embeds, STAGE1, gen, cls, extra)
    upscaled = LTX2LatentUpsamplePipeline(vae=pipe.vae, latent_upsampler=up)(
        latents=v1, output_type="latent", return_dict=False)[0]
    v2, a2, rec2, _ = stage(base, c2, embeds, STAGE2, gen, cls, extra, latents=upscaled, audio_latents=a1)
    return v2[0].contiguous(), a2[0].contiguous(), rec1, rec2


def record(cfg, params, rec, steps):
    """What a stage's cache did, as ltx2_video_cache_fixtures records it."""
    if cfg is None:
        return {"kind": "none", "steps": steps}
    out = {"steps": steps, "params": params}
    if isinstance(cfg, TaylorSeerCacheConfig):
        out.update(kind="taylorseer_cache", hooked_modules=rec.hooked,
                   module_pattern={b: {m: vc.pattern_string(f).replace("R", "P") for m, f in rec.modules[b].items()}
                                   for b in vc.BRANCHES})
        return out
    for b in vc.BRANCHES:
        assert len(rec.pattern[b]) == steps, (b, rec.pattern[b])
    out["kind"] = ("first_block_cache" if isinstance(cfg, FirstBlockCacheConfig) else
                   "mag_cache" if isinstance(cfg, MagCacheConfig) else "sea_cache")
    out["pattern_string"] = {b: vc.pattern_string(rec.pattern[b]) for b in vc.BRANCHES}
    compared = (rec.fbc_signal if out["kind"] == "first_block_cache" else
                rec.mag_err_compared if out["kind"] == "mag_cache" else rec.sea_compared)
    out["signals_compared"] = compared
    if "threshold" in params:
        for b in vc.BRANCHES:
            vc.check_margin(f"{out['kind']}/{b}", params["threshold"], compared[b])
    return out


def main():
    out = Path(sys.argv[1])
    probe = "--probe" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    started = time.monotonic()
    vc.install_hook_probes()
    base = pl.pipeline(True)
    base.transformer = vc.build_transformer().eval()
    up = ts2.upsampler(base.vae.config.latent_channels)
    base.save_pretrained(out / "checkpoint")
    up.save_pretrained(out / "checkpoint" / "latent_upsampler")
    embeds = pl.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    still, _ = cf.images(out)

    if probe:
        _, _, _, rec2 = two_stage(base, up, embeds, None, FirstBlockCacheConfig(threshold=0.0))
        for b in vc.BRANCHES:
            print(b, "stage-2 fbc signals", rec2.fbc_signal[b])
        _, _, _, rec2 = two_stage(base, up, embeds, None, FirstBlockCacheConfig(threshold=0.0), still=still)
        for b in vc.BRANCHES:
            print(b, "i2v stage-2 fbc signals", rec2.fbc_signal[b])
        return 0

    # Stage 1's MagCache ratios: a calibration of the stage-1 workload (ltx2_video_cache_fixtures' mag_calibrate).
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        _, _, rec1, _ = two_stage(base, up, embeds, MagCacheConfig(calibrate=True, num_inference_steps=vc.STEPS), None)
    ratios = rec1.calibration["cond_uncond"]
    assert len(ratios) == vc.STEPS and ratios[0] == 1.0, ratios

    mag1 = dict(MAG, mag_ratios=list(ratios), num_inference_steps=vc.STEPS)
    mag2 = dict(MAG, mag_ratios=list(ratios), num_inference_steps=STAGE2_STEPS)
    ts_params = {k: (str(x).split(".")[-1] if isinstance(x, torch.dtype) else x) for k, x in vc.TS_O2.items()}
    cases = {
        "off": (None, {}, None, {}, None),
        "fbc": (FirstBlockCacheConfig(threshold=FBC_THRESHOLD), {"threshold": FBC_THRESHOLD}, None, {}, None),
        "fbc_all": (FirstBlockCacheConfig(threshold=FBC_ALL_THRESHOLD), {"threshold": FBC_ALL_THRESHOLD},
                    FirstBlockCacheConfig(threshold=FBC_ALL_THRESHOLD), {"threshold": FBC_ALL_THRESHOLD}, None),
        "mag_all": (MagCacheConfig(**mag1), mag1, MagCacheConfig(**mag2), mag2, None),
        "ts": (TaylorSeerCacheConfig(**vc.TS_O2), ts_params, None, {}, None),
        "sea_all": (vc.sea_config(**SEA), SEA, vc.sea_config(**SEA), SEA, None),
        "i2v_fbc_all": (FirstBlockCacheConfig(threshold=FBC_ALL_THRESHOLD), {"threshold": FBC_ALL_THRESHOLD},
                        FirstBlockCacheConfig(threshold=FBC_ALL_THRESHOLD), {"threshold": FBC_ALL_THRESHOLD}, still),
    }
    tensors, runs = {}, {}
    for name, (c1, p1, c2, p2, image) in cases.items():
        v, a, rec1, rec2 = two_stage(base, up, embeds, c1, c2, still=image)
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = {"stage1": record(c1, p1, rec1, vc.STEPS), "stage2": record(c2, p2, rec2, STAGE2_STEPS)}
        if image is not None:
            runs[name]["image"] = "still.png"
        for s in ("stage1", "stage2"):
            if "pattern_string" in runs[name][s]:
                print(f"{name:12s} {s} " + "  ".join(f"{b}={p}" for b, p in runs[name][s]["pattern_string"].items()))
    # Each cached case differs from the uncached one, and each "_all" case reused a pass in stage 2 (a stage-2 cache
    # that never fires would leave its path untested).
    for name in cases:
        if name not in ("off", "i2v_fbc_all"):
            assert not torch.equal(tensors[f"{name}.latents"], tensors["off.latents"]), f"{name} reused nothing"
        s2 = runs[name]["stage2"]
        if name.endswith("_all"):
            assert any("R" in p for p in s2["pattern_string"].values()), (name, s2["pattern_string"])

    save_file(tensors, str(out / "pipeline.safetensors"))
    ref = {"reference": "diffusers (LTX2Pipeline two-stage composition, blocks wrapped for the cache hooks)",
           "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "numpy_version": np.__version__, "seed": SEED, "dtype": "float32", "device": "cpu",
           "stage1": {**STAGE1, "steps": vc.STEPS}, "stage2": {**STAGE2, "steps": STAGE2_STEPS},
           "num_layers": vc.NUM_LAYERS, "cache_contexts": list(vc.BRANCHES), "margin": vc.MARGIN,
           "pattern_legend": "C: the pass computed every block; R: reused", "runs": runs}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")
    print(f"ltx2_video two-stage cache fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out} "
          f"({time.monotonic() - started:.1f} s after the imports)")


if __name__ == "__main__":
    sys.exit(main())
