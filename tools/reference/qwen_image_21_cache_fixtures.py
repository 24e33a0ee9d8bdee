#!/usr/bin/env python3
"""Pipeline parity fixtures for qwen_image_21 step caching: FirstBlockCache, MagCache, TaylorSeerCache and SeaCache
(diffusers 0.42.1 hooks).

Usage: qwen_image_21_cache_fixtures.py OUT_DIR

The tiny Qwen-Image 2.1 checkpoint of qwen_image_21_fixtures.py (its build_models, same seed, fp32, CPU), built with
NUM_LAYERS = 4 transformer blocks instead of that script's default 2 (what its `--num-layers 4` gives): both hooks
treat the first block as the head, the last as the tail and every block between as a pass-through (FirstBlockCache's
FBCBlockHook, MagCache's MagCacheBlockHook with is_tail False), and with 2 blocks there would be no such middle block.
It and the reference pipeline (diffusers' QwenImage21Pipeline from prompt embeddings, CFG on,
output_type="latent") run with diffusers' own cache hooks, `transformer.enable_cache(FirstBlockCacheConfig(...))` /
`MagCacheConfig(...)`, one pipeline call per run, the cache disabled between runs (the pipeline's
maybe_free_model_hooks also resets the hooks' state at the end of every call).

Registration: diffusers 0.42.1's TransformerBlockRegistry has no entry for QwenImage21TransformerBlock, so both hooks
would raise "not registered". This script registers it as a single-stream block:
    TransformerBlockMetadata(return_hidden_states_index=0, return_encoder_hidden_states_index=None,
                             hidden_states_argument_name="hidden_states")
(`forward(hidden_states, modulation, rotary_emb, ...)` takes the joint text + image sequence in one argument and
returns one tensor; the Qwen-Image 1.x entry (1, 0) would look for an `encoder_hidden_states` argument that does not
exist). The caches therefore see the whole joint sequence, text rows included.

The pipeline runs with use_kv_cache=False: with the prefix KV cache on, FirstBlockCache fails at step 1 (shape
mismatch) and so does MagCache's calibration (the "cached" steps feed the blocks the image rows only).

Runs (CFG: true_cfg_scale 4 with the negative embeddings; the pipeline calls the transformer under
cache_context("cond") then cache_context("uncond"), and every hook keeps one state per context name):
  off            no cache
  fbc_lo/fbc_hi  FirstBlockCacheConfig(threshold) at two thresholds, chosen from the measured signal on this tiny
                 model (random weights change differently from trained ones) so that fbc_lo reuses a few steps
                 (about 20 %) and fbc_hi many but not all (about 60 %), the two branches' patterns differing; no
                 threshold lies within 1e-3 (relative) of any signal value it is compared with (asserted)
  mag_calibrate  MagCacheConfig(calibrate=True, num_inference_steps=STEPS): computes every step, equal to `off` bit
                 for bit (asserted); its per-branch calibration ratios are captured as they are computed (the hook
                 clears them at the last step)
  mag/mag_hi     MagCacheConfig(mag_ratios=<the cond branch's calibrated ratios>, threshold, max_skip_steps=3,
                 retention_ratio=0.2, num_inference_steps=STEPS) at two thresholds; the accumulated error compared
                 with the threshold stays 1e-3 (relative) away from it (asserted)

  ts             TaylorSeerCacheConfig() as diffusers defaults it (cache_interval 5, disable_cache_before_step 3,
                 max_order 1, bf16 factors; the hooked modules: diffusers' attention set, here every
                 transformer_blocks.<i>.attn). TaylorSeer needs no registration: it hooks modules by name.
  ts_o2          max_order 2, fp32 factors, cache_interval 3, disable_cache_before_step 2, disable_cache_after_step 16,
                 cache_identifiers: every img_mlp and the attn of blocks 1 and 3
  ts_lite        use_lite_mode: every block "skip" (zeros of the recorded shape when predicting), proj_out predicted
  ts_nested      cache_identifiers block 1, its attn, and proj_out (a hooked module inside a hooked block: it is
                 not called while its block predicts, so its own step count lags), skip_predict_identifiers block
                 2's img_mlp; cache_interval 4, disable_cache_before_step 2, fp16 factors
  ts_kv          ts with use_kv_cache=True (the prefix KV cache: step 0 runs prefix + target rows, later steps the
                 target rows; the hook restarts its expansion from order 0 when the shape changes)
  off_kv         no cache, use_kv_cache=True (what ts_kv is compared with)
  sea_lo/sea_hi  SeaCacheConfig(threshold) at two thresholds (residual_order 1, retention_steps 1, cache_end_steps 1,
                 max_consecutive_cached 2, power_exp 3: diffusers' defaults); sea_o0 residual_order 0,
                 max_consecutive_cached 0 (no limit), retention_steps 2, cache_end_steps 2. SeaCache's generic path
                 needs what QwenImage21Pipeline does not give it, so this script gives it as diffusers' Wan pipeline
                 does: each cache_context("cond"/"uncond") carries step_index, sigma = float(scheduler.sigmas[i]) and
                 num_inference_steps (a wrapper around transformer.cache_context; i is the scheduler's step_index,
                 None before the first step: 0), and raw_vision_callback returns the target latents as images,
                 QwenImage21Pipeline._unpack_latents of the transformer's last h*w hidden_states rows, one (C, 1, h, w)
                 per sample. The block is the registered single-stream block (no auxiliary stream).

Recorded per run, step and branch (by wrapping the hooks): computed (true) or reused (false); FirstBlockCache's
signal (relative L1 change of block 0's residual against the last *computed* step's, null at a branch's first step);
MagCache's accumulated error as compared with the threshold (null inside the retention window, where none is
compared) and after the decision, and the calibration ratios; TaylorSeer: per branch and hooked module (diffusers
names), the schedule of its calls: C computed, P predicted (TaylorSeerCacheHook._measure_should_compute).

Files written:
  checkpoint/                a diffusers checkpoint (qwen_image_21_fixtures.build_models, NUM_LAYERS blocks)
  prompt_embeds.safetensors  prompt_embeds/_mask + negative_prompt_embeds/_mask
  pipeline.safetensors       "<run>.latents": the pipeline's output latents (output_type="latent", packed [1, S, C])
  reference.json             written last: versions, steps, size, seed, cfg, runs (kind, params, pattern, signals,
                             calibration)
"""

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler, QwenImage21Pipeline
from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, SeaCacheConfig, TaylorSeerCacheConfig
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
from diffusers.hooks.first_block_cache import FBCHeadBlockHook
from diffusers.hooks.mag_cache import MagCacheBlockHook, MagCacheHeadHook
from diffusers.hooks.sea_cache import SeaCacheLeaderBlockHook, SeaCacheSharedState
from diffusers.hooks.taylorseer_cache import TaylorSeerCacheHook
from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21TransformerBlock

import qwen_image_21_fixtures as q21

SEED = q21.SEED
STEPS = 20
HEIGHT, WIDTH = 96, 128  # 6 x 8 latents: 48 image tokens beside 9 (cond) / 5 (uncond) text tokens
TRUE_CFG_SCALE = 4.0
BRANCHES = ("cond", "uncond")
MARGIN = 1e-3  # no threshold within this relative distance of a value it is compared with
NUM_LAYERS = 4  # head block, two pass-through middle blocks, tail block
# Chosen from the signals this tiny model gives with NUM_LAYERS blocks (random weights: block 0's residual changes by
# 0.49-1.35 relative L1 from one step to the next, the uncond branch's by about 6 % more than the cond branch's; the
# calibration ratios swing between 0.53 and 1.62). The script asserts the margin and the mix. Patterns (C computed,
# R reused; step 0 first):
#   fbc_lo 0.655: cond   CCRCCCCCCRCRCCCCRRCC  5 reused  (smallest margin 1.8 %)
#                 uncond CCCCCCCCCRCRCCCCRRCC  4 reused  (differs at step 2; smallest margin 2.1 %)
#   fbc_hi 0.865: cond   CRRCCRCRCRRRRRRRRCCC 12 reused  (smallest margin 1.0 %)
#                 uncond CRRCCRCCRRRRCRRRRRCC 12 reused  (differs at steps 7, 8, 12; smallest margin 1.2 %)
#   mag 0.1:      CCCCCCCCCCRCRCRRCRCC  5 of 20 skipped, both branches (margin 13 %); every computed step after the
#                 retention window (steps 0-3) is the threshold's
#   mag_hi 1.0:   CCCCRRRCRRRCRRRCRRRC 12 of 20 skipped, both branches (margin 21 %); step 7 is computed by the
#                 threshold, steps 11, 15 and 19 by the max_skip_steps limit
FBC_THRESHOLDS = {"fbc_lo": 0.655, "fbc_hi": 0.865}
MAG_THRESHOLDS = {"mag": 0.1, "mag_hi": 1.0}
# Reused steps per branch each run must land in (inclusive): the intended mix, so that a changed reference is noticed.
REUSE_RANGE = {"fbc_lo": (3, 5), "fbc_hi": (10, 14), "mag": (2, 8), "mag_hi": (9, STEPS - 5),
               "sea_lo": (5, 9), "sea_hi": (10, 14), "sea_o0": (10, 16)}
# SeaCache's accumulated distance on this model (random weights; the indicator is the filtered latents, the same for
# both branches, so their patterns agree): 0.78 at step 1 falling to about 0.05-0.11 per step late in the schedule.
#   sea_lo 0.15: CCCCCCRCRCRRCRRCRRCC  8 reused (smallest margin 2.3 %; steps 12, 15 forced by max_consecutive_cached)
#   sea_hi 0.6:  CCRCRRCRRCRRCRRCRRCC 11 reused (every third step forced by max_consecutive_cached 2)
#   sea_o0 0.6:  CCRCRRRCRRRRRRRRRRCC 14 reused (order 0, no limit; smallest margin 0.9 %)
SEA_LO, SEA_HI = 0.15, 0.6
TAYLORSEER_RUNS = {
    "ts": ({}, False),
    "ts_o2": (dict(max_order=2, taylor_factors_dtype=torch.float32, cache_interval=3, disable_cache_before_step=2,
                   disable_cache_after_step=16,
                   cache_identifiers=[r"transformer_blocks\.[0-9]+\.img_mlp", r"transformer_blocks\.[13]\.attn"]),
              False),
    "ts_lite": (dict(use_lite_mode=True), False),
    "ts_nested": (dict(cache_interval=4, disable_cache_before_step=2, taylor_factors_dtype=torch.float16,
                       cache_identifiers=[r"transformer_blocks\.1(\.attn)?", "proj_out"],
                       skip_predict_identifiers=[r"transformer_blocks\.2\.img_mlp"]), False),
    "ts_kv": ({}, True),
}
SEA_RUNS = {"sea_lo": dict(threshold=SEA_LO), "sea_hi": dict(threshold=SEA_HI),
            "sea_o0": dict(threshold=SEA_HI, residual_order=0, max_consecutive_cached=0, retention_steps=2,
                           cache_end_steps=2)}
MAG_MAX_SKIP_STEPS = 3
MAG_RETENTION_RATIO = 0.2

BLOCK_METADATA = dict(return_hidden_states_index=0, return_encoder_hidden_states_index=None,
                      hidden_states_argument_name="hidden_states")


class Recorder:
    """What the wrapped hooks saw during one pipeline call, per cache context ("cond" / "uncond")."""

    def __init__(self):
        self.pattern = {b: [] for b in BRANCHES}
        self.fbc_signal = {b: [] for b in BRANCHES}
        self.mag_err_compared = {b: [] for b in BRANCHES}
        self.mag_err_after = {b: [] for b in BRANCHES}
        self.calibration = {b: [] for b in BRANCHES}
        self.modules = {b: {} for b in BRANCHES}  # TaylorSeer: module -> [computed?] per call
        self.hooked = []
        self.sea_compared = {b: [] for b in BRANCHES}  # SeaCache: the accumulated distance compared (None: forced)


REC = None


def install_hook_probes():
    """Registers the 2.1 block and wraps the hooks' decision points; each wrapper calls the original unchanged."""
    TransformerBlockRegistry.register(QwenImage21TransformerBlock, TransformerBlockMetadata(**BLOCK_METADATA))

    fbc_should = FBCHeadBlockHook._should_compute_remaining_blocks

    def fbc_should_probe(self, hidden_states_residual):
        state = self.state_manager.get_state()
        name = self.state_manager.context.name
        prev = state.head_block_residual
        diff = None
        if prev is not None:  # the hook's own expression, evaluated again on the same tensors
            diff = ((hidden_states_residual - prev).abs().mean() / prev.abs().mean()).item()
        result = fbc_should(self, hidden_states_residual)
        assert result == (diff is None or diff > self.threshold), (name, diff, self.threshold, result)
        REC.pattern[name].append(bool(result))
        REC.fbc_signal[name].append(diff)
        return result

    FBCHeadBlockHook._should_compute_remaining_blocks = fbc_should_probe

    mag_head = MagCacheHeadHook.new_forward

    def mag_head_probe(self, module, *args, **kwargs):
        name = self.state_manager.context.name
        state = self.state_manager.get_state()
        cfg = self.config
        compared = None
        if not cfg.calibrate:
            step = state.step_index
            retention_step = int(cfg.retention_ratio * cfg.num_inference_steps + 0.5)
            if step >= retention_step:
                # The hook's own arithmetic (float32 0-dim tensors, since mag_ratios is a float32 tensor).
                scale = cfg.mag_ratios[step] if step < len(cfg.mag_ratios) else 1.0
                ratio = state.accumulated_ratio * scale
                compared = float(state.accumulated_err + abs(1.0 - ratio))
        out = mag_head(self, module, *args, **kwargs)
        REC.pattern[name].append(bool(state.should_compute))
        REC.mag_err_compared[name].append(compared)
        REC.mag_err_after[name].append(float(state.accumulated_err))
        return out

    MagCacheHeadHook.new_forward = mag_head_probe

    mag_calibrate = MagCacheBlockHook._perform_calibration_step

    def mag_calibrate_probe(self, state, current_residual):
        mag_calibrate(self, state, current_residual)
        REC.calibration[self.state_manager.context.name].append(float(state.calibration_ratios[-1]))

    MagCacheBlockHook._perform_calibration_step = mag_calibrate_probe

    ts_measure = TaylorSeerCacheHook._measure_should_compute

    def ts_measure_probe(self):
        should, state = ts_measure(self)
        REC.modules[self.state_manager.context.name].setdefault(self._ddo_name, []).append(bool(should))
        return should, state

    TaylorSeerCacheHook._measure_should_compute = ts_measure_probe

    sea_leader = SeaCacheLeaderBlockHook.new_forward
    sea_gate = SeaCacheSharedState.resolve_gate
    current = {}

    def sea_gate_probe(self, state, metadata, indicator, config):
        prev, acc = state.previous_indicator, state.accumulated_distance
        forced = (prev is None or indicator is None or metadata.step_index < config.retention_steps
                  or metadata.step_index >= metadata.num_inference_steps - config.cache_end_steps
                  or bool(config.max_consecutive_cached and state.consecutive_cached >= config.max_consecutive_cached))
        compared = None
        if not forced:  # the gate's own expression, evaluated again on the same tensors
            d = sum(float(((c.float() - q.float()).abs().mean() / (q.float().abs().mean() + 1e-16)).cpu())
                    for c, q in zip(indicator, prev)) / len(indicator)
            compared = acc + d
        should = sea_gate(self, state, metadata, indicator, config)
        assert should == (compared is None or compared >= config.threshold), (compared, config.threshold, should)
        REC.sea_compared[current["name"]].append(compared)
        return should

    def sea_leader_probe(self, module, *args, **kwargs):
        current["name"] = self.state_manager._context.name
        out = sea_leader(self, module, *args, **kwargs)
        REC.pattern[current["name"]].append(not self.state_manager.get_state().skip_remaining)
        return out

    SeaCacheSharedState.resolve_gate = sea_gate_probe
    SeaCacheLeaderBlockHook.new_forward = sea_leader_probe


def sea_config(pipe, **params):
    """SeaCacheConfig with the raw_vision_callback this pipeline needs: the target latents as (C, 1, h, w) images."""
    h, w = 2 * (HEIGHT // 32), 2 * (WIDTH // 32)

    def raw_vision(module, args, kwargs):
        target = kwargs["hidden_states"][:, -h * w:]
        return list(QwenImage21Pipeline._unpack_latents(target, HEIGHT, WIDTH, pipe.vae_scale_factor).unbind(0))

    return SeaCacheConfig(raw_vision_callback=raw_vision, **params)


def with_step_context(pipe):
    """transformer.cache_context(name) -> cache_context(name, step_index, sigma, num_inference_steps), as Wan passes."""
    transformer = pipe.transformer
    original = transformer.cache_context

    @contextlib.contextmanager
    def cache_context(name, **kwargs):
        s = pipe.scheduler
        i = 0 if s.step_index is None else s.step_index
        with original(name, step_index=i, sigma=float(s.sigmas[i]), num_inference_steps=len(s.timesteps), **kwargs):
            yield

    transformer.cache_context = cache_context
    return original


def name_taylorseer_hooks(transformer):
    """Gives each TaylorSeer hook its module's name (the probe records by name)."""
    names = []
    for name, module in transformer.named_modules():
        registry = getattr(module, "_diffusers_hook", None)
        hook = registry.get_hook("taylorseer_cache") if registry is not None else None
        if hook is not None:
            hook._ddo_name = name
            names.append(name)
    return names


def make_pipeline(transformer, vae):
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**q21.SCHEDULER_CONFIG), vae=vae,
                               text_encoder=None, processor=q21._NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run(pipe, embeds, cache_config, use_kv_cache=False):
    """One pipeline call with `cache_config` enabled (None: no cache); returns the latents and the recorder."""
    global REC
    REC = Recorder()
    transformer = pipe.transformer
    if cache_config is not None:
        transformer.enable_cache(cache_config)
        REC.hooked = name_taylorseer_hooks(transformer)
    try:
        with torch.no_grad():
            latents = pipe(**embeds, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
                           true_cfg_scale=TRUE_CFG_SCALE, use_kv_cache=use_kv_cache,
                           generator=torch.Generator().manual_seed(SEED), output_type="latent", return_dict=False)[0]
    finally:
        if cache_config is not None:
            transformer.disable_cache()
    rec, REC = REC, None
    return latents.contiguous(), rec


def pattern_string(flags):
    return "".join("C" if f else "R" for f in flags)


def check_margin(label, threshold, values):
    for v in values:
        if v is not None:
            assert abs(v - threshold) > MARGIN * abs(threshold), \
                f"{label}: threshold {threshold} within {MARGIN} (relative) of the value {v} compared with it"


def check_mix(name, branch, pattern):
    lo, hi = REUSE_RANGE[name]
    reused = pattern.count(False)
    assert pattern[0] and lo <= reused <= hi, f"{name}/{branch}: {pattern_string(pattern)} reuses {reused} steps"


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    started = time.monotonic()
    install_hook_probes()
    # What qwen_image_21_fixtures.py's --num-layers does; build_models reads TRANSFORMER_CONFIG when it is called.
    q21.TRANSFORMER_CONFIG["num_layers"] = NUM_LAYERS
    transformer, vae, _ = q21.build_models(out)
    assert len(transformer.transformer_blocks) == NUM_LAYERS, len(transformer.transformer_blocks)
    g = torch.Generator().manual_seed(SEED + 4)
    pos, pos_mask = q21._embeds(g, 1, 9, 7)
    neg, neg_mask = q21._embeds(g, 1, 5, 5)
    save_file({"prompt_embeds": pos, "prompt_embeds_mask": pos_mask.to(torch.uint8),
               "negative_prompt_embeds": neg, "negative_prompt_embeds_mask": neg_mask.to(torch.uint8)},
              str(out / "prompt_embeds.safetensors"))
    embeds = dict(prompt_embeds=pos, prompt_embeds_mask=pos_mask, negative_prompt_embeds=neg,
                  negative_prompt_embeds_mask=neg_mask)
    pipe = make_pipeline(transformer, vae)
    tensors, runs = {}, {}

    latents, _ = run(pipe, embeds, None)
    tensors["off.latents"] = latents
    runs["off"] = {"kind": "none", "params": {}}

    for name, threshold in FBC_THRESHOLDS.items():
        latents, rec = run(pipe, embeds, FirstBlockCacheConfig(threshold=threshold))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            assert rec.fbc_signal[b][0] is None and all(v is not None for v in rec.fbc_signal[b][1:]), name
            check_margin(f"{name}/{b}", threshold, rec.fbc_signal[b])
            check_mix(name, b, rec.pattern[b])
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "first_block_cache", "params": {"threshold": threshold},
                      "pattern": rec.pattern, "signals": {"relative_l1": rec.fbc_signal}}

    mag_common = dict(num_inference_steps=STEPS)
    with contextlib.redirect_stdout(io.StringIO()):  # the hook prints each branch's ratios; they are recorded below
        latents, rec = run(pipe, embeds, MagCacheConfig(calibrate=True, **mag_common))
    assert torch.equal(latents, tensors["off.latents"]), "MagCache calibration changed the latents"
    for b in BRANCHES:
        assert rec.pattern[b] == [True] * STEPS, (b, rec.pattern[b])
        assert len(rec.calibration[b]) == STEPS and rec.calibration[b][0] == 1.0, (b, rec.calibration[b])
    calibration = rec.calibration
    tensors["mag_calibrate.latents"] = latents
    runs["mag_calibrate"] = {"kind": "mag_cache", "params": {"calibrate": True, **mag_common},
                             "pattern": rec.pattern, "calibration": calibration}

    mag_ratios = calibration["cond"]
    for name, threshold in MAG_THRESHOLDS.items():
        params = dict(mag_ratios=list(mag_ratios), threshold=threshold, max_skip_steps=MAG_MAX_SKIP_STEPS,
                      retention_ratio=MAG_RETENTION_RATIO, **mag_common)
        latents, rec = run(pipe, embeds, MagCacheConfig(**params))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", threshold, rec.mag_err_compared[b])
            check_mix(name, b, rec.pattern[b])
        assert rec.pattern["cond"] == rec.pattern["uncond"], f"{name}: MagCache branches disagree"
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "mag_cache", "params": params, "mag_ratios_from": "mag_calibrate.calibration.cond",
                      "pattern": rec.pattern,
                      "signals": {"accumulated_err_compared": rec.mag_err_compared,
                                  "accumulated_err_after": rec.mag_err_after}}

    latents, _ = run(pipe, embeds, None, use_kv_cache=True)
    tensors["off_kv.latents"] = latents
    runs["off_kv"] = {"kind": "none", "params": {}, "use_kv_cache": True}
    for name, (params, kv) in TAYLORSEER_RUNS.items():
        latents, rec = run(pipe, embeds, TaylorSeerCacheConfig(**params), use_kv_cache=kv)
        base = tensors["off_kv.latents" if kv else "off.latents"]
        assert not torch.equal(latents, base), f"{name} predicted nothing"
        assert rec.hooked, f"{name}: no module hooked"
        for b in BRANCHES:
            assert set(rec.modules[b]) == set(rec.hooked), (name, b, sorted(rec.modules[b]), rec.hooked)
            assert any(not f for calls in rec.modules[b].values() for f in calls), (name, b, "nothing predicted")
        assert rec.modules["cond"] == rec.modules["uncond"], f"{name}: the branches' schedules differ"
        shown = {k: (str(v).split(".")[-1] if isinstance(v, torch.dtype) else v) for k, v in params.items()}
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "taylorseer_cache", "params": shown, "use_kv_cache": kv, "hooked_modules": rec.hooked,
                      "module_pattern": {b: {m: pattern_string(f).replace("R", "P") for m, f in rec.modules[b].items()}
                                         for b in BRANCHES}}
        print(f"{name:14s} " + "  ".join(f"{m}={p}" for m, p in runs[name]["module_pattern"]["cond"].items()))

    original_context = with_step_context(pipe)
    for name, params in SEA_RUNS.items():
        latents, rec = run(pipe, embeds, sea_config(pipe, **params))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", params["threshold"], rec.sea_compared[b])
            check_mix(name, b, rec.pattern[b])
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "sea_cache", "params": params, "pattern": rec.pattern,
                      "signals": {"accumulated_distance_compared": rec.sea_compared},
                      "step_context": "step_index, sigma = float(scheduler.sigmas[i]), num_inference_steps",
                      "raw_vision": "QwenImage21Pipeline._unpack_latents(target rows): (C, 1, h, w) per sample"}
    pipe.transformer.cache_context = original_context

    # Hooks removed and state reset: a second uncached call gives the first one's bits.
    latents, _ = run(pipe, embeds, None)
    assert torch.equal(latents, tensors["off.latents"]), "disable_cache left something behind"

    for name, r in runs.items():
        if "pattern" in r:
            r["pattern_string"] = {b: pattern_string(r["pattern"][b]) for b in BRANCHES}
            r["reused_steps"] = {b: r["pattern"][b].count(False) for b in BRANCHES}
            print(f"{name:14s} " + "  ".join(f"{b}={r['pattern_string'][b]}" for b in BRANCHES))
    save_file(tensors, str(out / "pipeline.safetensors"))
    latent_h, latent_w = 2 * (HEIGHT // 32), 2 * (WIDTH // 32)
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "numpy_version": np.__version__, "seed": SEED, "dtype": "float32", "device": "cpu",
           "steps": STEPS, "height": HEIGHT, "width": WIDTH, "true_cfg_scale": TRUE_CFG_SCALE, "use_kv_cache": False,
           "initial_latents": (f"QwenImage21Pipeline.prepare_latents: randn_tensor((1, 1, "
                               f"{q21.TRANSFORMER_CONFIG['in_channels']}, {latent_h}, {latent_w}), "
                               f"generator=torch.Generator('cpu').manual_seed({SEED}), float32), then _pack_latents"),
           "block_metadata": {"class": "QwenImage21TransformerBlock", **BLOCK_METADATA},
           "margin": MARGIN, "pattern_legend": "true/C: the branch computed every block; false/R: reused",
           "runs": runs, "transformer_config": q21.TRANSFORMER_CONFIG, "scheduler_config": q21.SCHEDULER_CONFIG}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")
    print(f"qwen_image_21 cache fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out} "
          f"({time.monotonic() - started:.1f} s after the imports)")


if __name__ == "__main__":
    sys.exit(main())
