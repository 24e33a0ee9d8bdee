#!/usr/bin/env python3
"""Pipeline parity fixtures for ltx2_image step caching: FirstBlockCache, MagCache, TaylorSeerCache and SeaCache
(diffusers 0.42.1 hooks).

Usage: ltx2_image_cache_fixtures.py OUT_DIR [--probe]

The image variant has no upstream diffusers pipeline; its reference is the composition of ltx2_image_fixtures.py
(compose_image and its components(), reused here: same seeds, fp32, CPU), with NUM_LAYERS = 4 transformer blocks
instead of that script's 2 (both hooks treat the first block as the head, the last as the tail and every block
between as a pass-through; with 2 blocks there would be no such middle block).

The block class the hooks attach to: the composed LTX2ImageTransformer2DModel keeps its block loop inline in the
model's forward (its blocks are plain modules without a forward), so the hooks have nothing to wrap there. The runs
therefore go through ltx2_image_fixtures.OriginalTransformer / OriginalBlock (the minimal copy of the original
implementation's LTX2ImageTransformer2DModel / LTX2ImageTransformerBlock, DEVAIEXP/ltx2-image-diffusers), loaded
with the composed model's state dict (strict); this script asserts that it gives the composed model's velocities and
the whole uncached pipeline's latents bit for bit, so the hooked model IS the reference. Its block is
    forward(hidden_states, encoder_hidden_states, temb, temb_prompt, video_rotary_emb, ...) -> hidden_states
single-stream: `hidden_states` is the image tokens, `encoder_hidden_states` the text (read, never returned). Neither
FirstBlockCache nor MagCache knows the class ("not registered"); this script registers it in diffusers'
TransformerBlockRegistry with the metadata the block really has:
    TransformerBlockMetadata(return_hidden_states_index=0, return_encoder_hidden_states_index=None,
                             hidden_states_argument_name="hidden_states")
so the math is the hooks' own: the residuals are those of the image tokens (the text is not a stream of the block).

Guidance and cache contexts: like diffusers' LTX2Pipeline (pipeline_ltx2.py calls the transformer under
cache_context("cond_uncond")), the image pipeline runs the guidance batch [neg; pos] (CFG) in ONE forward, so every
hook keeps ONE state, named "cond_uncond", and FirstBlockCache's signal is the relative L1 change of block 0's
residual over the whole batch (both samples); a reused step reuses both. The transformer call is wrapped in that
cache context here (diffusers' _set_cache_context, what ModelMixin.cache_context does) since the composed pipeline
calls the model directly. The hooks are attached with diffusers' apply_first_block_cache / apply_mag_cache (what
enable_cache calls), on a fresh model per run.

Runs (20 steps, CFG 3, rescale 0.7; the base case of ltx2_image_fixtures.py with more steps):
  off            no cache
  fbc_lo/fbc_hi  FirstBlockCacheConfig(threshold) at two thresholds, chosen from the measured signal on this tiny
                 model so that fbc_lo reuses a few steps and fbc_hi many but not all; no threshold lies within 1e-3
                 (relative) of any signal value it is compared with (asserted)
  fbc_pag        fbc_hi's threshold with PAG 0.2 on block 1 (batch [neg; pos; pos], still one context)
  mag_calibrate  MagCacheConfig(calibrate=True, num_inference_steps=STEPS): computes every step, equal to `off` bit
                 for bit (asserted); its calibration ratios are captured as they are computed
  mag/mag_hi     MagCacheConfig(mag_ratios=<the calibrated ratios>, threshold, max_skip_steps=3, retention_ratio=0.2,
                 num_inference_steps=STEPS) at two thresholds; the accumulated error compared with the threshold stays
                 1e-3 (relative) away from it (asserted)

TaylorSeer (diffusers' apply_taylorseer_cache, what enable_cache calls, on OriginalTransformer: it hooks modules by
their names, no registration; the names are that class's named_modules(), the ones the plugin routes):
  ts_defaults    TaylorSeerCacheConfig() as diffusers defaults it: the default patterns ^transformer_blocks.*attn
                 (re.fullmatch) match no module of this model (attn1 and attn2 end in a digit), so nothing is hooked
                 and the latents are `off`'s bit for bit (asserted); ddo refuses such a setting (it would change
                 nothing)
  ts             the default schedule (cache_interval 5, disable_cache_before_step 3, max_order 1, bf16 factors) with
                 cache_identifiers every attn1 and attn2
  ts_o2          max_order 2, fp32 factors, cache_interval 3, disable_cache_before_step 2, disable_cache_after_step 16;
                 cache_identifiers every attn1 and ff
  ts_pag         ts_o2 with PAG 0.2 on block 1 (the hooked attn1 of block 1 is the perturbed one: the hook wraps the
                 whole module call)
  ts_lite        use_lite_mode: every block "skip" (zeros of the recorded shape when predicting), proj_out predicted
  ts_nested      cache_identifiers block 1, its attn1 (not called while its block predicts) and proj_out;
                 skip_predict_identifiers block 2's attn2; cache_interval 4, disable_cache_before_step 2, fp16 factors
Recorded per hooked module: the schedule of its calls (TaylorSeerCacheHook._measure_should_compute): C computed,
P predicted.

SeaCache (SeaCacheConfig, its generic leader/tail path: diffusers' apply_sea_cache, what enable_cache calls, on
OriginalTransformer, whose registered single-stream block has no auxiliary stream):
  sea_lo/sea_hi  SeaCacheConfig(threshold) at two thresholds (residual_order 1, retention_steps 1, cache_end_steps 1,
                 max_consecutive_cached 2, power_exp 3: diffusers' defaults)
  sea_o0         residual_order 0, max_consecutive_cached 0 (no limit), retention_steps 2, cache_end_steps 2
What the generic path needs and the composed pipeline does not give it, given here:
  (a) the block registered: OriginalBlock, as above; the leader hook on block 0, pass-throughs on 1-2, the tail
      hook (which records the residual) on block 3.
  (b) the root hook around the real transformer call: apply_sea_cache registers its SeaCacheRootHook on the module
      it is given, here OriginalTransformer itself, the module compose_image calls (through InCacheContext): its
      pre_forward runs at every transformer call with that call's arguments. Asserted: the callback runs once per
      step and passes are reused (a fail-open run would compute every pass).
  (c) cache_context with step metadata: InCacheContext sets CacheContext("cond_uncond", step_index, sigma,
      num_inference_steps) from the run's scheduler (step_index: the scheduler's, None before the first step: 0;
      sigma = float(scheduler.sigmas[i]); num_inference_steps = len(scheduler.timesteps)), as diffusers' Wan pipeline
      passes them.
  raw_vision_callback(module, args, kwargs) binds the call to OriginalTransformer.forward's signature and returns
  LTX2Pipeline._unpack_latents(hidden_states, 1, height, width).unbind(0): the latents the transformer receives as
  one-frame videos, (C, 1, H, W) per sample of the guidance batch ([neg; pos]: the same latents twice).
Recorded: computed/reused per pass (SeaCacheLeaderBlockHook.new_forward: not skip_remaining) and the accumulated
distance compared with the threshold (SeaCacheSharedState.resolve_gate: null where a guard forced the pass),
thresholds 1e-3 (relative) away from every compared value (asserted).

Files written:
  checkpoint/                a diffusers-layout checkpoint (transformer with NUM_LAYERS blocks, connectors, vae,
                             scheduler: ltx2_image_fixtures' components)
  prompt_embeds.safetensors  ltx2_image_fixtures.prompt_embeds()
  pipeline.safetensors       "<run>.latents": the pipeline's denoised latents (packed [1, h*w, C])
  reference.json             written last: versions, steps, size, seed, guidance, runs (kind, params, pattern,
                             signals, calibration; TaylorSeer: hooked_modules, module_pattern), module_names
                             (OriginalTransformer's named_modules(), what TaylorSeer's patterns match)
"""

import contextlib
import inspect
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
from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline
from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, SeaCacheConfig, TaylorSeerCacheConfig
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
from diffusers.hooks.first_block_cache import FBCHeadBlockHook, apply_first_block_cache
from diffusers.hooks.hooks import CacheContext, _set_cache_context
from diffusers.hooks.mag_cache import MagCacheBlockHook, MagCacheHeadHook, apply_mag_cache
from diffusers.hooks.sea_cache import SeaCacheLeaderBlockHook, SeaCacheSharedState, apply_sea_cache
from diffusers.hooks.taylorseer_cache import TaylorSeerCacheHook, apply_taylorseer_cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_image_fixtures as li  # noqa: E402

SEED = li.SEED
STEPS = 20
NUM_LAYERS = 4
CONTEXT = "cond_uncond"
BRANCHES = (CONTEXT,)
MARGIN = 1e-3
BASE = dict(steps=STEPS, guidance_scale=3.0, guidance_rescale=0.7, pag_scale=0.0, pag_blocks=[])
PAG = dict(BASE, pag_scale=0.2, pag_blocks=[1])
FBC_THRESHOLDS = {"fbc_lo": 0.075, "fbc_hi": 0.125}
MAG_THRESHOLDS = {"mag": 0.02, "mag_hi": 0.12}
REUSE_RANGE = {"fbc_lo": (1, 6), "fbc_hi": (8, 15), "fbc_pag": (4, 15), "mag": (2, 8), "mag_hi": (8, STEPS - 4)}
MAG_MAX_SKIP_STEPS = 3
MAG_RETENTION_RATIO = 0.2
TS_O2 = dict(max_order=2, taylor_factors_dtype=torch.float32, cache_interval=3, disable_cache_before_step=2,
             disable_cache_after_step=16, cache_identifiers=[r"transformer_blocks\.[0-9]+\.(attn1|ff)"])
TAYLORSEER_RUNS = {  # name: (params, settings)
    "ts_defaults": ({}, BASE),
    "ts": (dict(cache_identifiers=[r"transformer_blocks\.[0-9]+\.attn[12]"]), BASE),
    "ts_o2": (TS_O2, BASE),
    "ts_pag": (TS_O2, PAG),
    "ts_lite": (dict(use_lite_mode=True), BASE),
    "ts_nested": (dict(cache_interval=4, disable_cache_before_step=2, taylor_factors_dtype=torch.float16,
                       cache_identifiers=[r"transformer_blocks\.1(\.attn1)?", "proj_out"],
                       skip_predict_identifiers=[r"transformer_blocks\.2\.attn2"]), BASE),
}

# SeaCache (module docstring); thresholds chosen from the accumulated distances measured with --probe: 0.89 at step 1
# falling to about 0.04-0.05 per step late in the schedule.
#   sea_lo 0.15: CCCCCCRCRCRRCRRCRRCC  8 reused (smallest margin 2.3 %: 0.1466 at step 6)
#   sea_hi 0.6:  CCRCRRCRRCRRCRRCRRCC 11 reused (every third step forced by max_consecutive_cached 2)
#   sea_o0 0.6:  CCRCRRRCRRRRRRRRRRCC 14 reused (order 0, no limit; smallest margin 5.2 %)
SEA_LO, SEA_HI = 0.15, 0.6
SEA_RUNS = {"sea_lo": dict(threshold=SEA_LO), "sea_hi": dict(threshold=SEA_HI),
            "sea_o0": dict(threshold=SEA_HI, residual_order=0, max_consecutive_cached=0, retention_steps=2,
                           cache_end_steps=2)}
REUSE_RANGE.update({"sea_lo": (6, 10), "sea_hi": (9, 13), "sea_o0": (12, 16)})

BLOCK_METADATA = dict(return_hidden_states_index=0, return_encoder_hidden_states_index=None,
                      hidden_states_argument_name="hidden_states")


class Recorder:
    def __init__(self):
        self.pattern = {b: [] for b in BRANCHES}
        self.fbc_signal = {b: [] for b in BRANCHES}
        self.mag_err_compared = {b: [] for b in BRANCHES}
        self.mag_err_after = {b: [] for b in BRANCHES}
        self.calibration = {b: [] for b in BRANCHES}
        self.modules = {b: {} for b in BRANCHES}  # TaylorSeer: module -> [computed?] per call
        self.hooked = []
        self.sea_compared = {b: [] for b in BRANCHES}  # SeaCache: the accumulated distance compared (None: forced)
        self.sea_root_calls = 0  # SeaCache: raw_vision_callback calls (the root hook's pre_forward with metadata)


REC = None


def install_hook_probes():
    """Registers the image block and wraps the hooks' decision points; each wrapper calls the original unchanged."""
    TransformerBlockRegistry.register(li.OriginalBlock, TransformerBlockMetadata(**BLOCK_METADATA))

    fbc_should = FBCHeadBlockHook._should_compute_remaining_blocks

    def fbc_should_probe(self, hidden_states_residual):
        state = self.state_manager.get_state()
        name = self.state_manager.context.name
        prev = state.head_block_residual
        diff = None
        if prev is not None:
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


def sea_config(**params):
    """SeaCacheConfig with the raw_vision_callback this model needs: the latents as (C, 1, H, W) one-frame videos, one
    per sample (module docstring)."""

    def raw_vision(module, args, kwargs):
        assert isinstance(module, li.OriginalTransformer), type(module)
        REC.sea_root_calls += 1
        bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs).arguments
        x = bound["hidden_states"]
        return list(LTX2Pipeline._unpack_latents(x, 1, bound["height"], bound["width"]).unbind(0))

    return SeaCacheConfig(raw_vision_callback=raw_vision, **params)


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


class InCacheContext:
    """The hooked transformer as compose_image calls it, each call under cache_context(CONTEXT) (LTX2Pipeline's);
    with `scheduler` (SeaCache), the context carries the step's metadata (module docstring, (c))."""

    def __init__(self, model, config, scheduler=None):
        self.model, self.config, self.scheduler = model, config, scheduler

    def __call__(self, *args, **kwargs):
        meta = {}
        if self.scheduler is not None:
            s = self.scheduler
            i = 0 if s.step_index is None else s.step_index
            meta = dict(step_index=i, sigma=float(s.sigmas[i]), num_inference_steps=len(s.timesteps))
        _set_cache_context(self.model, CacheContext(CONTEXT, **meta))
        try:
            return self.model(*args, **kwargs)
        finally:
            _set_cache_context(self.model, None)


def components():
    """ltx2_image_fixtures.components() with NUM_LAYERS transformer blocks (the same constructor arguments)."""
    _, conn, vae, sched = li.components()
    torch.manual_seed(0)
    tr = li.LTX2ImageTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
        num_layers=NUM_LAYERS, gated_attn=True, cross_attn_mod=True, rope_type="split", rope_double_precision=True)
    return tr.eval(), conn, vae, sched


def hooked(tr, cache_config, scheduler):
    orig = li.OriginalTransformer(tr.config)
    orig.load_state_dict(tr.state_dict(), strict=True)
    orig.eval()
    if isinstance(cache_config, FirstBlockCacheConfig):
        apply_first_block_cache(orig, cache_config)
    elif isinstance(cache_config, MagCacheConfig):
        apply_mag_cache(orig, cache_config)
    elif isinstance(cache_config, TaylorSeerCacheConfig):
        apply_taylorseer_cache(orig, cache_config)
        REC.hooked = name_taylorseer_hooks(orig)
    elif isinstance(cache_config, SeaCacheConfig):
        apply_sea_cache(orig, cache_config)  # the root hook on orig: the module called (module docstring, (b))
        return InCacheContext(orig, tr.config, scheduler)
    return InCacheContext(orig, tr.config)


def run(tr, conn, vae, embeds, cache_config, settings=BASE):
    global REC
    REC = Recorder()
    sched = FlowMatchEulerDiscreteScheduler(**li.LTX2_SCHEDULER)
    with torch.no_grad():
        latents, _ = li.compose_image(hooked(tr, cache_config, sched), conn, vae, sched, embeds, settings, SEED)
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
    probe = "--probe" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    started = time.monotonic()
    install_hook_probes()
    embeds = li.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    tr, conn, vae, sched = components()
    assert len(tr.transformer_blocks) == NUM_LAYERS
    ck = out / "checkpoint"
    tr.save_pretrained(ck / "transformer")
    conn.save_pretrained(ck / "connectors")
    vae.save_pretrained(ck / "vae")
    sched.save_pretrained(ck / "scheduler")
    (ck / "model_index.json").write_text(li.model_index(False))

    tensors, runs = {}, {}
    # The hooked class is the reference: the uncached run through OriginalTransformer equals the composed model's.
    with torch.no_grad():
        composed, _ = li.compose_image(tr, conn, vae, FlowMatchEulerDiscreteScheduler(**li.LTX2_SCHEDULER), embeds,
                                       BASE, SEED)
    latents, _ = run(tr, conn, vae, embeds, None)
    assert torch.equal(latents, composed.contiguous()), "OriginalTransformer differs from the composed model"
    tensors["off.latents"] = latents
    runs["off"] = {"kind": "none", "params": {}, "settings": BASE}
    with torch.no_grad():
        composed_pag, _ = li.compose_image(tr, conn, vae, FlowMatchEulerDiscreteScheduler(**li.LTX2_SCHEDULER), embeds,
                                           PAG, SEED)
    latents, _ = run(tr, conn, vae, embeds, None, PAG)
    assert torch.equal(latents, composed_pag.contiguous()), "OriginalTransformer differs from the composed model (PAG)"
    tensors["off_pag.latents"] = latents
    runs["off_pag"] = {"kind": "none", "params": {}, "settings": PAG}

    if probe:
        for s, label in ((BASE, "cfg"), (PAG, "pag")):
            _, rec = run(tr, conn, vae, embeds, FirstBlockCacheConfig(threshold=0.0), s)
            print(label, "fbc signals", [None if v is None else round(v, 4) for v in rec.fbc_signal[CONTEXT]])
        _, rec = run(tr, conn, vae, embeds, MagCacheConfig(calibrate=True, num_inference_steps=STEPS))
        print("mag calibration", [round(v, 4) for v in rec.calibration[CONTEXT]])
        # SeaCache at threshold 0: every pass computes, so each compared value is that step's own distance.
        _, rec = run(tr, conn, vae, embeds, sea_config(threshold=0.0, max_consecutive_cached=0))
        print("sea distances", [None if v is None else round(v, 4) for v in rec.sea_compared[CONTEXT]])
        for name, params in SEA_RUNS.items():
            _, rec = run(tr, conn, vae, embeds, sea_config(**params))
            print(name, pattern_string(rec.pattern[CONTEXT]),
                  [None if v is None else round(v, 4) for v in rec.sea_compared[CONTEXT]])
        return 0

    for name, threshold in FBC_THRESHOLDS.items():
        latents, rec = run(tr, conn, vae, embeds, FirstBlockCacheConfig(threshold=threshold))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            assert rec.fbc_signal[b][0] is None and all(v is not None for v in rec.fbc_signal[b][1:]), name
            check_margin(f"{name}/{b}", threshold, rec.fbc_signal[b])
            check_mix(name, b, rec.pattern[b])
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "first_block_cache", "params": {"threshold": threshold}, "settings": BASE,
                      "pattern": rec.pattern, "signals": {"relative_l1": rec.fbc_signal}}

    threshold = FBC_THRESHOLDS["fbc_hi"]
    latents, rec = run(tr, conn, vae, embeds, FirstBlockCacheConfig(threshold=threshold), PAG)
    for b in BRANCHES:
        assert len(rec.pattern[b]) == STEPS
        check_margin(f"fbc_pag/{b}", threshold, rec.fbc_signal[b])
        check_mix("fbc_pag", b, rec.pattern[b])
    tensors["fbc_pag.latents"] = latents
    runs["fbc_pag"] = {"kind": "first_block_cache", "params": {"threshold": threshold}, "settings": PAG,
                       "pattern": rec.pattern, "signals": {"relative_l1": rec.fbc_signal}}

    mag_common = dict(num_inference_steps=STEPS)
    with contextlib.redirect_stdout(io.StringIO()):
        latents, rec = run(tr, conn, vae, embeds, MagCacheConfig(calibrate=True, **mag_common))
    assert torch.equal(latents, tensors["off.latents"]), "MagCache calibration changed the latents"
    for b in BRANCHES:
        assert rec.pattern[b] == [True] * STEPS, (b, rec.pattern[b])
        assert len(rec.calibration[b]) == STEPS and rec.calibration[b][0] == 1.0, (b, rec.calibration[b])
    calibration = rec.calibration
    tensors["mag_calibrate.latents"] = latents
    runs["mag_calibrate"] = {"kind": "mag_cache", "params": {"calibrate": True, **mag_common}, "settings": BASE,
                             "pattern": rec.pattern, "calibration": calibration}

    mag_ratios = calibration[CONTEXT]
    for name, threshold in MAG_THRESHOLDS.items():
        params = dict(mag_ratios=list(mag_ratios), threshold=threshold, max_skip_steps=MAG_MAX_SKIP_STEPS,
                      retention_ratio=MAG_RETENTION_RATIO, **mag_common)
        latents, rec = run(tr, conn, vae, embeds, MagCacheConfig(**params))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", threshold, rec.mag_err_compared[b])
            check_mix(name, b, rec.pattern[b])
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "mag_cache", "params": params, "settings": BASE,
                      "mag_ratios_from": f"mag_calibrate.calibration.{CONTEXT}", "pattern": rec.pattern,
                      "signals": {"accumulated_err_compared": rec.mag_err_compared,
                                  "accumulated_err_after": rec.mag_err_after}}

    # SeaCache (module docstring): the hooks on OriginalTransformer (root hook included), step metadata in the context.
    for name, params in SEA_RUNS.items():
        latents, rec = run(tr, conn, vae, embeds, sea_config(**params))
        assert rec.sea_root_calls == STEPS, (name, rec.sea_root_calls)
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS and len(rec.sea_compared[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", params["threshold"], rec.sea_compared[b])
            check_mix(name, b, rec.pattern[b])
        assert not torch.equal(latents, tensors["off.latents"]), f"{name} reused nothing"
        tensors[f"{name}.latents"] = latents
        runs[name] = {"kind": "sea_cache", "params": params, "settings": BASE, "pattern": rec.pattern,
                      "signals": {"accumulated_distance_compared": rec.sea_compared},
                      "step_context": "step_index, sigma = float(scheduler.sigmas[i]), num_inference_steps",
                      "raw_vision": "LTX2Pipeline._unpack_latents(hidden_states, 1, h, w): (C, 1, H, W) per sample",
                      "root_hook": "apply_sea_cache(OriginalTransformer): the module called"}

    # TaylorSeer (module docstring): per hooked module, the C/P schedule in the one context.
    for name, (params, settings) in TAYLORSEER_RUNS.items():
        latents, rec = run(tr, conn, vae, embeds, TaylorSeerCacheConfig(**params), settings)
        base = tensors["off_pag.latents" if settings is PAG else "off.latents"]
        shown = {k: (str(x).split(".")[-1] if isinstance(x, torch.dtype) else x) for k, x in params.items()}
        runs[name] = {"kind": "taylorseer_cache", "params": shown, "settings": settings, "hooked_modules": rec.hooked,
                      "module_pattern": {b: {m: pattern_string(f).replace("R", "P") for m, f in rec.modules[b].items()}
                                         for b in BRANCHES}}
        if name == "ts_defaults":
            assert rec.hooked == [] and torch.equal(latents, base), "the default patterns hook a module of this model"
            runs[name]["hooks_nothing"] = True
            continue
        assert not torch.equal(latents, base), f"{name} predicted nothing"
        assert rec.hooked, f"{name}: no module hooked"
        for b in BRANCHES:
            # Every hooked module is called (ts_nested's attn1 of block 1 too: its block computes on some steps).
            assert set(rec.modules[b]) == set(rec.hooked), (name, b, sorted(rec.modules[b]), rec.hooked)
            assert any(not f for calls in rec.modules[b].values() for f in calls), (name, b, "nothing predicted")
        if name == "ts_lite":
            assert sorted(rec.hooked) == sorted([f"transformer_blocks.{i}" for i in range(NUM_LAYERS)] + ["proj_out"])
        tensors[f"{name}.latents"] = latents
        print(f"{name:12s} " + " ".join(f"{m}={p}" for m, p in runs[name]["module_pattern"][CONTEXT].items()))

    for name, r in runs.items():
        if "pattern" in r:
            r["pattern_string"] = {b: pattern_string(r["pattern"][b]) for b in BRANCHES}
            r["reused_steps"] = {b: r["pattern"][b].count(False) for b in BRANCHES}
            print(f"{name:14s} " + "  ".join(f"{b}={r['pattern_string'][b]}" for b in BRANCHES))
    save_file(tensors, str(out / "pipeline.safetensors"))
    ref = {"reference": "diffusers (composed LTX-2 image variant, hooked through OriginalTransformer)",
           "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "numpy_version": np.__version__, "seed": SEED, "dtype": "float32", "device": "cpu", "steps": STEPS,
           "height": li.HEIGHT, "width": li.WIDTH, "num_layers": NUM_LAYERS, "cache_context": CONTEXT,
           "block_metadata": {"class": "LTX2ImageTransformerBlock (ltx2_image_fixtures.OriginalBlock)",
                              **BLOCK_METADATA},
           "margin": MARGIN, "pattern_legend": "true/C: the pass computed every block; false/R: reused",
           "module_names": [n for n, _ in li.OriginalTransformer(tr.config).named_modules()],
           "runs": runs}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")
    print(f"ltx2_image cache fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out} "
          f"({time.monotonic() - started:.1f} s after the imports)")


if __name__ == "__main__":
    sys.exit(main())
