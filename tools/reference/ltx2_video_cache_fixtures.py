#!/usr/bin/env python3
"""Pipeline parity fixtures for ltx2_video step caching: FirstBlockCache, MagCache, TaylorSeerCache and SeaCache
(diffusers 0.42.1 hooks) on diffusers' own LTX2Pipeline.

Usage: ltx2_video_cache_fixtures.py OUT_DIR [--probe]

The tiny LTX-2.3 pipeline of ltx2_pipeline_fixtures.py (its builders, same seeds, fp32, CPU) with NUM_LAYERS = 4
transformer blocks instead of 2 (the hooks take the first block as the head, the last as the tail, the ones between
as pass-throughs), run with CFG 3, STG 1 on block 1 and modality isolation 3 (rescale 0.7; audio 7 / 1 / 3 / 0.7),
20 linspace steps, from ltx2_pipeline_fixtures' prompt embeddings.

Cache contexts: LTX2Pipeline calls the transformer under cache_context("cond_uncond") for the guidance batch
[neg; pos] (ONE forward, so ONE hook state whose first-block signal covers both samples), then
cache_context("uncond_stg") and cache_context("uncond_modality") for the extra passes: three states, each
deciding on its own.

Registration, and why through a thin wrapper: LTX2VideoTransformerBlock is not in diffusers' TransformerBlockRegistry
("not registered"). It is DUAL-stream: forward(hidden_states (video), audio_hidden_states, encoder_hidden_states
(the TEXT), audio_encoder_hidden_states, ...) -> (hidden_states, audio_hidden_states). The hooks read the second
stream by the argument name "encoder_hidden_states" (TransformerBlockMetadata._get_parameter_from_args_kwargs), so
registering the class itself with (return_hidden_states_index=0, return_encoder_hidden_states_index=1) would make a
skipped block return the TEXT in place of the audio stream (and MagCache's reused pass too): wrong, and not what the
block has. This script therefore puts a thin wrapper around each block, HookedBlock, whose forward names the streams
as the hooks expect -- forward(hidden_states=video, encoder_hidden_states=AUDIO, text_hidden_states=text, ...) -- and
only renames the arguments before calling the real block; the transformer's block list holds adapters that call the
wrappers with the renamed arguments. HookedBlock is registered with
    TransformerBlockMetadata(return_hidden_states_index=0, return_encoder_hidden_states_index=1,
                             hidden_states_argument_name="hidden_states")
and the hooks are applied with diffusers' own apply_first_block_cache / apply_mag_cache to the list of wrappers: the
math (signal, residuals, decisions, MagCache's accumulation) is diffusers' hooks', unchanged. The script asserts that
the pipeline through the wrappers without a cache equals the plain pipeline bit for bit.

Runs: off, fbc_lo / fbc_hi (FirstBlockCacheConfig at two thresholds), mag_calibrate (MagCacheConfig(calibrate=True):
equal to off bit for bit, asserted), mag / mag_hi (the cond_uncond context's calibrated ratios at two thresholds);
image-to-video (LTX2ImageToVideoPipeline, still.png of ltx2_conditioning_fixtures.images() as latent frame 0,
image_crf 0): i2v_off, i2v_fbc_hi (fbc_hi's threshold), i2v_mag_hi (mag_hi's parameters).
No threshold lies within 1e-3 (relative) of a value compared with it (asserted).

TaylorSeer (TaylorSeerCacheConfig through transformer.enable_cache on the PLAIN transformer: it hooks modules by their
names, so no block registration and no wrapper -- the module names are LTX2VideoTransformer3DModel's own):
  ts          diffusers' defaults (cache_interval 5, disable_cache_before_step 3, max_order 1, bf16 factors). The
              default patterns ^transformer_blocks.*attn (re.fullmatch) hook only audio_to_video_attn and
              video_to_audio_attn: attn1, attn2, audio_attn1, audio_attn2 end in a digit. uncond_modality
              (isolate_modalities) never calls those two, so that context hooks nothing.
  ts_o2       max_order 2, fp32 factors, cache_interval 3, disable_cache_before_step 2, disable_cache_after_step 16;
              cache_identifiers: every block's attn1, audio_attn1 (the self-attentions, perturbed on block 1 in the
              uncond_stg passes: the hook wraps the whole module call), ff and audio_ff
  ts_lite     use_lite_mode: every block "skip" (a predicted block returns zeros of the recorded shapes, both
              streams), ^proj_out$ predicted; audio_proj_out is not matched, so on a predicted step it is COMPUTED on
              the audio stream of zeros (audio_norm_out's input all zeros: recorded and asserted): diffusers'
              behaviour, reproduced
  ts_nested   cache_identifiers block 1 (the dual-stream block: a two-output expansion), its attn2 (not called
              while its block predicts) and audio_proj_out; skip_predict_identifiers block 2's video_to_audio_attn;
              cache_interval 4, disable_cache_before_step 2, fp16 factors
  i2v_ts      ts_o2's parameters on the image-to-video pipeline
Recorded per context and hooked module: the schedule of its calls (TaylorSeerCacheHook._measure_should_compute):
C computed, P predicted.

SeaCache (SeaCacheConfig, its generic leader/tail path: apply_sea_cache on the Holder of HookedBlock wrappers, the
auxiliary stream of the (0, 1) registration the AUDIO, as the other block hooks):
  sea_lo/sea_hi  SeaCacheConfig(threshold) at two thresholds (residual_order 1, retention_steps 1, cache_end_steps 1,
                 max_consecutive_cached 2, power_exp 3: diffusers' defaults)
  sea_o0         threshold 0.65, residual_order 0, max_consecutive_cached 0 (no limit), retention_steps 2,
                 cache_end_steps 2
  i2v_sea        sea_o0's parameters on LTX2ImageToVideoPipeline (the indicator includes the clean frame 0)
What the generic path needs and LTX2Pipeline does not give it, given here:
  (a) the blocks registered: HookedBlock, (0, 1), as above; apply_sea_cache(holder, config) puts the leader hook on
      block 0, pass-through hooks on blocks 1-2 and the tail hook (which records the residual) on block 3.
  (b) the root hook around the REAL transformer call: apply_sea_cache registers its SeaCacheRootHook on the module it
      is given, the Holder, which is never called (so the gate would never see scheduler metadata: every pass would
      compute, fail-open). The script takes that very instance from the Holder's registry
      (HookRegistry.check_if_exists_or_initialize(holder).get_hook("sea_cache_root")) and registers it again, under
      the same name, on the pipeline's transformer (HookRegistry.check_if_exists_or_initialize(transformer)
      .register_hook(root, "sea_cache_root")): its pre_forward then runs at every transformer call with that call's
      arguments, and it shares the StateManager and SeaCacheSharedState of the block hooks. Being the one stateful
      hook there, it also receives the cache context that transformer.cache_context sets (the block hooks read the
      same StateManager). Asserted: the callback runs once per transformer call (3 per step) and passes are reused.
  (c) cache_context with step metadata: transformer.cache_context(name) is wrapped to pass step_index (the
      scheduler's step_index, None before the first step: 0), sigma = float(scheduler.sigmas[i]) and
      num_inference_steps = len(scheduler.timesteps), as diffusers' Wan pipeline passes them.
  raw_vision_callback(module, args, kwargs) returns LTX2Pipeline._unpack_latents(kwargs["hidden_states"],
  kwargs["num_frames"], kwargs["height"], kwargs["width"], patch sizes).unbind(0): the video latents the
  transformer receives, (C, F, H, W) per sample (cond_uncond: two samples, the same latents twice; image-to-video:
  frame 0 is the clean conditioned frame).
Recorded per context: computed/reused per pass (SeaCacheLeaderBlockHook.new_forward: not skip_remaining) and the
accumulated distance compared with the threshold (SeaCacheSharedState.resolve_gate: null where a guard forced the
pass), thresholds 1e-3 (relative) away from every compared value (asserted).

Files written:
  checkpoint/                 the LTX-2.3 tiny checkpoint (save_pretrained), NUM_LAYERS blocks
  prompt_embeds.safetensors   ltx2_pipeline_fixtures.prompt_embeds()
  still.png, keyframe.png     ltx2_conditioning_fixtures.images() (the i2v runs take still.png)
  pipeline.safetensors        "<run>.latents" (de-normalised [C, F', H', W'], output_type="latent") and
                              "<run>.audio_latents" (de-normalised [C, L, M])
  reference.json              written last: versions, settings, seed, runs (kind, params, pattern per context,
                              signals, calibration; TaylorSeer: hooked_modules, module_pattern per context),
                              module_names (the transformer's named_modules(), what TaylorSeer's patterns match)
"""

import contextlib
import copy
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import save_file

import diffusers
from diffusers import (FlowMatchEulerDiscreteScheduler, LTX2ImageToVideoPipeline, LTX2Pipeline,
                       LTX2VideoTransformer3DModel)
from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, SeaCacheConfig, TaylorSeerCacheConfig
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
from diffusers.hooks.first_block_cache import FBCHeadBlockHook, apply_first_block_cache
from diffusers.hooks.hooks import HookRegistry
from diffusers.hooks.mag_cache import MagCacheBlockHook, MagCacheHeadHook, apply_mag_cache
from diffusers.hooks.sea_cache import SeaCacheLeaderBlockHook, SeaCacheSharedState, apply_sea_cache
from diffusers.hooks.taylorseer_cache import TaylorSeerCacheHook

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_conditioning_fixtures as cf  # noqa: E402
import ltx2_pipeline_fixtures as pl  # noqa: E402

SEED = pl.SEED
STEPS = 20
NUM_LAYERS = 4
BRANCHES = ("cond_uncond", "uncond_stg", "uncond_modality")
MARGIN = 1e-3
SETTINGS = dict(pl.GUIDED, num_inference_steps=STEPS)
SETTINGS.pop("sigmas")
FBC_THRESHOLDS = {"fbc_lo": 0.11, "fbc_hi": 0.17}
MAG_THRESHOLDS = {"mag": 0.06, "mag_hi": 0.2}
MAG_MAX_SKIP_STEPS = 3
MAG_RETENTION_RATIO = 0.2
TS_O2 = dict(max_order=2, taylor_factors_dtype=torch.float32, cache_interval=3, disable_cache_before_step=2,
             disable_cache_after_step=16,
             cache_identifiers=[r"transformer_blocks\.[0-9]+\.(audio_)?attn1", r"transformer_blocks\.[0-9]+\.(audio_)?ff"])
TAYLORSEER_RUNS = {
    "ts": {},
    "ts_o2": TS_O2,
    "ts_lite": dict(use_lite_mode=True),
    "ts_nested": dict(cache_interval=4, disable_cache_before_step=2, taylor_factors_dtype=torch.float16,
                      cache_identifiers=[r"transformer_blocks\.1(\.attn2)?", "audio_proj_out"],
                      skip_predict_identifiers=[r"transformer_blocks\.2\.video_to_audio_attn"]),
}

# SeaCache (module docstring); thresholds chosen from the accumulated distances measured with --probe (the indicator
# is the filtered video latents, the same in the three contexts, so their patterns agree): 0.96 at step 1 falling to
# about 0.06-0.07 per step late in the schedule.
#   sea_lo 0.15:  CCCCCCRCRCRRCRRCRRCC  8 reused (smallest margin 5.7 %; steps 12, 15, 18 forced by max_consecutive_cached)
#   sea_hi 0.6:   CCRCRRCRRCRRCRRCRRCC 11 reused (smallest margin 0.9 %: 0.5947 at step 2)
#   sea_o0 0.65:  CCRCRRRRCRRRRRRRRCCC 13 reused (order 0, no limit; smallest margin 4.1 %)
#   i2v_sea 0.65: CCRCRRRRCRRRRRRRRRCC 14 reused (smallest margin 0.95 %)
SEA_LO, SEA_HI = 0.15, 0.6
SEA_O0 = dict(threshold=0.65, residual_order=0, max_consecutive_cached=0, retention_steps=2, cache_end_steps=2)
SEA_RUNS = {"sea_lo": dict(threshold=SEA_LO), "sea_hi": dict(threshold=SEA_HI), "sea_o0": SEA_O0}
# Reused passes per context each sea run must land in (inclusive): the intended mix, so that a changed reference is
# noticed.
SEA_REUSE_RANGE = {"sea_lo": (6, 10), "sea_hi": (9, 13), "sea_o0": (11, 15), "i2v_sea": (12, 16)}

BLOCK_METADATA = dict(return_hidden_states_index=0, return_encoder_hidden_states_index=1,
                      hidden_states_argument_name="hidden_states")


class HookedBlock(nn.Module):
    """LTX2VideoTransformerBlock with its streams named as the cache hooks read them (module docstring)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, hidden_states, encoder_hidden_states, text_hidden_states, **kwargs):
        return self.block(hidden_states=hidden_states, audio_hidden_states=encoder_hidden_states,
                          encoder_hidden_states=text_hidden_states, **kwargs)


class Adapter(nn.Module):
    """What the transformer's block list holds: the transformer's call renamed for HookedBlock."""

    def __init__(self, hooked):
        super().__init__()
        self.hooked = hooked

    def forward(self, hidden_states, audio_hidden_states, encoder_hidden_states, **kwargs):
        return self.hooked(hidden_states=hidden_states, encoder_hidden_states=audio_hidden_states,
                           text_hidden_states=encoder_hidden_states, **kwargs)


class Holder(nn.Module):
    """The module the hooks are applied to: its `transformer_blocks` are the wrappers, in order."""

    def __init__(self, hooked):
        super().__init__()
        self.transformer_blocks = nn.ModuleList(hooked)


class Recorder:
    def __init__(self):
        self.pattern = {b: [] for b in BRANCHES}
        self.fbc_signal = {b: [] for b in BRANCHES}
        self.mag_err_compared = {b: [] for b in BRANCHES}
        self.mag_err_after = {b: [] for b in BRANCHES}
        self.calibration = {b: [] for b in BRANCHES}
        self.modules = {b: {} for b in BRANCHES}  # TaylorSeer: module -> [computed?] per call
        self.hooked = []
        self.last_context = None
        self.audio_norm_out_zero = {b: [] for b in BRANCHES}  # per pass: audio_norm_out's input all zeros
        self.sea_compared = {b: [] for b in BRANCHES}  # SeaCache: the accumulated distance compared (None: forced)
        self.sea_root_calls = 0  # SeaCache: raw_vision_callback calls (the root hook's pre_forward with metadata)


REC = None


def install_hook_probes():
    TransformerBlockRegistry.register(HookedBlock, TransformerBlockMetadata(**BLOCK_METADATA))

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
        REC.last_context = self.state_manager.context.name
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
    """SeaCacheConfig with the raw_vision_callback LTX2Pipeline needs: the transformer's video latents as (C, F, H, W)
    videos, one per sample (module docstring)."""

    def raw_vision(module, args, kwargs):
        assert isinstance(module, LTX2VideoTransformer3DModel), type(module)
        REC.sea_root_calls += 1
        video = LTX2Pipeline._unpack_latents(kwargs["hidden_states"], kwargs["num_frames"], kwargs["height"],
                                             kwargs["width"], module.config.patch_size, module.config.patch_size_t)
        return list(video.unbind(0))

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


def build_transformer():
    """ltx2_pipeline_fixtures.transformer(v23=True) with NUM_LAYERS blocks (the same constructor arguments)."""
    torch.manual_seed(0)
    return LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
        cross_attention_dim=16, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2,
        audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=NUM_LAYERS, qk_norm="rms_norm_across_heads",
        caption_channels=pl.CAPTION, rope_double_precision=False, rope_type="split", gated_attn=True,
        cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True, use_prompt_embeddings=False,
        perturbed_attn=True)


def make_pipeline(base, wrap, cache_config=None, cls=LTX2Pipeline):
    """A pipeline on a copy of `base`'s transformer; `wrap`: its blocks through HookedBlock (with the cache)."""
    tr = copy.deepcopy(base.transformer)
    if isinstance(cache_config, TaylorSeerCacheConfig):
        # TaylorSeer hooks modules by name: the plain transformer, its module names diffusers' own.
        assert not wrap
        tr.enable_cache(cache_config)
        REC.hooked = name_taylorseer_hooks(tr)

        def audio_norm_out_probe(module, args):
            # The pass's context: that of the last hook called (lite mode hooks every block, so each pass calls one).
            REC.audio_norm_out_zero[REC.last_context].append(bool((args[0] == 0).all()))

        if cache_config.use_lite_mode:
            tr.audio_norm_out.register_forward_pre_hook(audio_norm_out_probe)
    elif wrap:
        hooked = [HookedBlock(b) for b in tr.transformer_blocks]
        holder = Holder(hooked)
        tr.transformer_blocks = nn.ModuleList([Adapter(h) for h in hooked])
        if isinstance(cache_config, FirstBlockCacheConfig):
            apply_first_block_cache(holder, cache_config)
        elif isinstance(cache_config, MagCacheConfig):
            apply_mag_cache(holder, cache_config)
        elif isinstance(cache_config, SeaCacheConfig):
            # (b) of the module docstring: the root hook apply_sea_cache put on the Holder, registered again (the same
            # instance) on the transformer, whose forward the pipeline calls.
            apply_sea_cache(holder, cache_config)
            root = HookRegistry.check_if_exists_or_initialize(holder).get_hook("sea_cache_root")
            assert root is not None
            HookRegistry.check_if_exists_or_initialize(tr).register_hook(root, "sea_cache_root")
        tr._ddo_holder = [holder]  # kept alive beside the transformer (not a submodule)
    pipe = cls(scheduler=FlowMatchEulerDiscreteScheduler(), vae=base.vae, audio_vae=base.audio_vae,
                        text_encoder=None, tokenizer=None, connectors=base.connectors, transformer=tr,
                        vocoder=base.vocoder)
    pipe.set_progress_bar_config(disable=True)
    if isinstance(cache_config, SeaCacheConfig):
        with_step_context(pipe)  # (c) of the module docstring
    return pipe


def run(base, embeds, cache_config, wrap=True, still=None):
    """One seeded call (output_type="latent"); `still`: LTX2ImageToVideoPipeline with it as latent frame 0 (image_crf
    0, as ltx2_conditioning_fixtures' i2v cases)."""
    global REC
    REC = Recorder()
    cls = LTX2Pipeline if still is None else LTX2ImageToVideoPipeline
    pipe = make_pipeline(base, wrap, cache_config, cls)
    extra = {} if still is None else dict(image=still, image_crf=0)
    with torch.no_grad():
        lat = pipe(**embeds, **SETTINGS, **extra, generator=torch.Generator().manual_seed(SEED), output_type="latent")
    rec, REC = REC, None
    return lat.frames[0].contiguous(), lat.audio[0].contiguous(), rec


def pattern_string(flags):
    return "".join("C" if f else "R" for f in flags)


def check_margin(label, threshold, values):
    for v in values:
        if v is not None:
            assert abs(v - threshold) > MARGIN * abs(threshold), \
                f"{label}: threshold {threshold} within {MARGIN} (relative) of the value {v} compared with it"


def check_sea(name, params, rec):
    """A SeaCache run gated for real: the root hook saw every transformer call, every context decided every step,
    passes were reused, and no threshold lies within MARGIN of a compared value."""
    assert rec.sea_root_calls == len(BRANCHES) * STEPS, (name, rec.sea_root_calls)
    lo, hi = SEA_REUSE_RANGE[name]
    for b in BRANCHES:
        assert len(rec.pattern[b]) == STEPS and len(rec.sea_compared[b]) == STEPS, (name, b, rec.pattern[b])
        check_margin(f"{name}/{b}", params["threshold"], rec.sea_compared[b])
        reused = rec.pattern[b].count(False)
        assert rec.pattern[b][0] and lo <= reused <= hi, f"{name}/{b}: {pattern_string(rec.pattern[b])} reuses {reused}"


def sea_record(params, rec):
    return {"kind": "sea_cache", "params": params, "pattern": rec.pattern,
            "signals": {"accumulated_distance_compared": rec.sea_compared},
            "step_context": "step_index, sigma = float(scheduler.sigmas[i]), num_inference_steps",
            "raw_vision": "LTX2Pipeline._unpack_latents(hidden_states): (C, F, H, W) per sample",
            "root_hook": "apply_sea_cache(Holder) and the same SeaCacheRootHook registered on the transformer"}


def main():
    out = Path(sys.argv[1])
    probe = "--probe" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    started = time.monotonic()
    install_hook_probes()
    base = pl.pipeline(True)
    base.transformer = build_transformer().eval()
    base.save_pretrained(out / "checkpoint")
    embeds = pl.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")

    tensors, runs = {}, {}
    plain_v, plain_a, _ = run(base, embeds, None, wrap=False)
    v, a, _ = run(base, embeds, None, wrap=True)
    assert torch.equal(v, plain_v) and torch.equal(a, plain_a), "the HookedBlock wrappers changed the pipeline"
    tensors["off.latents"], tensors["off.audio_latents"] = v, a
    runs["off"] = {"kind": "none", "params": {}}

    if probe:
        _, _, rec = run(base, embeds, FirstBlockCacheConfig(threshold=0.0))
        for b in BRANCHES:
            print(b, "fbc signals", [None if x is None else round(x, 4) for x in rec.fbc_signal[b]])
        with contextlib.redirect_stdout(io.StringIO()):
            _, _, rec = run(base, embeds, MagCacheConfig(calibrate=True, num_inference_steps=STEPS))
        for b in BRANCHES:
            print(b, "mag calibration", [round(x, 4) for x in rec.calibration[b]])
        # SeaCache at threshold 0: every pass computes, so each compared value is that step's own distance.
        _, _, rec = run(base, embeds, sea_config(threshold=0.0, max_consecutive_cached=0))
        for b in BRANCHES:
            print(b, "sea distances", [None if x is None else round(x, 4) for x in rec.sea_compared[b]])
        for name, params in SEA_RUNS.items():
            _, _, rec = run(base, embeds, sea_config(**params))
            for b in BRANCHES:
                print(name, b, pattern_string(rec.pattern[b]),
                      [None if x is None else round(x, 4) for x in rec.sea_compared[b]])
        return 0

    for name, threshold in FBC_THRESHOLDS.items():
        v, a, rec = run(base, embeds, FirstBlockCacheConfig(threshold=threshold))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", threshold, rec.fbc_signal[b])
        assert any(not f for b in BRANCHES for f in rec.pattern[b]), f"{name} reused nothing"
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = {"kind": "first_block_cache", "params": {"threshold": threshold}, "pattern": rec.pattern,
                      "signals": {"relative_l1": rec.fbc_signal}}

    mag_common = dict(num_inference_steps=STEPS)
    with contextlib.redirect_stdout(io.StringIO()):
        v, a, rec = run(base, embeds, MagCacheConfig(calibrate=True, **mag_common))
    assert torch.equal(v, tensors["off.latents"]) and torch.equal(a, tensors["off.audio_latents"]), \
        "MagCache calibration changed the latents"
    for b in BRANCHES:
        assert rec.pattern[b] == [True] * STEPS, (b, rec.pattern[b])
        assert len(rec.calibration[b]) == STEPS and rec.calibration[b][0] == 1.0, (b, rec.calibration[b])
    calibration = rec.calibration
    tensors["mag_calibrate.latents"], tensors["mag_calibrate.audio_latents"] = v, a
    runs["mag_calibrate"] = {"kind": "mag_cache", "params": {"calibrate": True, **mag_common}, "pattern": rec.pattern,
                             "calibration": calibration}

    mag_ratios = calibration["cond_uncond"]
    for name, threshold in MAG_THRESHOLDS.items():
        params = dict(mag_ratios=list(mag_ratios), threshold=threshold, max_skip_steps=MAG_MAX_SKIP_STEPS,
                      retention_ratio=MAG_RETENTION_RATIO, **mag_common)
        v, a, rec = run(base, embeds, MagCacheConfig(**params))
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            check_margin(f"{name}/{b}", threshold, rec.mag_err_compared[b])
        assert any(not f for f in rec.pattern["cond_uncond"]), f"{name} reused nothing"
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = {"kind": "mag_cache", "params": params, "mag_ratios_from": "mag_calibrate.calibration.cond_uncond",
                      "pattern": rec.pattern,
                      "signals": {"accumulated_err_compared": rec.mag_err_compared,
                                  "accumulated_err_after": rec.mag_err_after}}

    # SeaCache (module docstring): the hooks on the wrapped blocks, the root hook on the transformer, step metadata in
    # the cache context.
    for name, params in SEA_RUNS.items():
        v, a, rec = run(base, embeds, sea_config(**params))
        check_sea(name, params, rec)
        assert not torch.equal(v, tensors["off.latents"]), f"{name} reused nothing (video)"
        assert not torch.equal(a, tensors["off.audio_latents"]), f"{name} reused nothing (audio)"
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = sea_record(params, rec)

    # Image-to-video (LTX2ImageToVideoPipeline, the same cache contexts): still.png of ltx2_conditioning_fixtures as
    # latent frame 0; uncached (wrapped == plain asserted), FirstBlockCache at fbc_hi's threshold, MagCache at mag_hi's.
    still, _ = cf.images(out)
    plain_v, plain_a, _ = run(base, embeds, None, wrap=False, still=still)
    v, a, _ = run(base, embeds, None, still=still)
    assert torch.equal(v, plain_v) and torch.equal(a, plain_a), "the HookedBlock wrappers changed the i2v pipeline"
    tensors["i2v_off.latents"], tensors["i2v_off.audio_latents"] = v, a
    runs["i2v_off"] = {"kind": "none", "params": {}, "image": "still.png"}
    for name, cfg, params in (
            ("i2v_fbc_hi", FirstBlockCacheConfig(threshold=FBC_THRESHOLDS["fbc_hi"]),
             {"threshold": FBC_THRESHOLDS["fbc_hi"]}),
            ("i2v_mag_hi", MagCacheConfig(**runs["mag_hi"]["params"]), runs["mag_hi"]["params"])):
        v, a, rec = run(base, embeds, cfg, still=still)
        for b in BRANCHES:
            assert len(rec.pattern[b]) == STEPS, (name, b, rec.pattern[b])
            values = rec.fbc_signal[b] if "fbc" in name else rec.mag_err_compared[b]
            check_margin(f"{name}/{b}", params["threshold"], values)
        assert any(not f for f in rec.pattern["cond_uncond"]), f"{name} reused nothing"
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = {"kind": "first_block_cache" if "fbc" in name else "mag_cache", "params": params,
                      "image": "still.png", "pattern": rec.pattern,
                      "signals": ({"relative_l1": rec.fbc_signal} if "fbc" in name else
                                  {"accumulated_err_compared": rec.mag_err_compared,
                                   "accumulated_err_after": rec.mag_err_after})}

    v, a, rec = run(base, embeds, sea_config(**SEA_O0), still=still)
    check_sea("i2v_sea", SEA_O0, rec)
    assert not torch.equal(v, tensors["i2v_off.latents"]), "i2v_sea reused nothing (video)"
    tensors["i2v_sea.latents"], tensors["i2v_sea.audio_latents"] = v, a
    runs["i2v_sea"] = dict(sea_record(SEA_O0, rec), image="still.png")

    # TaylorSeer on the plain transformer (module docstring): per context and hooked module, the C/P schedule.
    for name, params, image in [(n, p, None) for n, p in TAYLORSEER_RUNS.items()] + [("i2v_ts", TS_O2, still)]:
        v, a, rec = run(base, embeds, TaylorSeerCacheConfig(**params), wrap=False, still=image)
        base_name = "off" if image is None else "i2v_off"
        assert not torch.equal(v, tensors[f"{base_name}.latents"]), f"{name} predicted nothing (video)"
        assert not torch.equal(a, tensors[f"{base_name}.audio_latents"]), f"{name} predicted nothing (audio)"
        assert rec.hooked, f"{name}: no module hooked"
        for b in BRANCHES:
            assert set(rec.modules[b]) <= set(rec.hooked), (name, b, sorted(rec.modules[b]), rec.hooked)
        assert any(not f for calls in rec.modules["cond_uncond"].values() for f in calls), (name, "nothing predicted")
        if name == "ts":
            assert sorted(rec.hooked) == sorted(f"transformer_blocks.{i}.{m}" for i in range(NUM_LAYERS)
                                                for m in ("audio_to_video_attn", "video_to_audio_attn")), rec.hooked
            assert rec.modules["uncond_modality"] == {}, "isolate_modalities calls no a2v / v2a attention"
        if name == "ts_lite":
            assert sorted(rec.hooked) == sorted([f"transformer_blocks.{i}" for i in range(NUM_LAYERS)] + ["proj_out"])
            for b in BRANCHES:
                predicted = [not f for f in rec.modules[b]["proj_out"]]
                assert rec.audio_norm_out_zero[b] == predicted, (b, rec.audio_norm_out_zero[b], predicted)
        shown = {k: (str(x).split(".")[-1] if isinstance(x, torch.dtype) else x) for k, x in params.items()}
        tensors[f"{name}.latents"], tensors[f"{name}.audio_latents"] = v, a
        runs[name] = {"kind": "taylorseer_cache", "params": shown, "hooked_modules": rec.hooked,
                      "module_pattern": {b: {m: pattern_string(f).replace("R", "P") for m, f in rec.modules[b].items()}
                                         for b in BRANCHES}}
        if image is not None:
            runs[name]["image"] = "still.png"
        if name == "ts_lite":
            runs[name]["audio_norm_out_input_zero"] = rec.audio_norm_out_zero
        for b in BRANCHES:
            print(f"{name:10s} {b:15s} " + " ".join(f"{m}={p}" for m, p in runs[name]["module_pattern"][b].items()))

    for name, r in runs.items():
        if "pattern" in r:
            r["pattern_string"] = {b: pattern_string(r["pattern"][b]) for b in BRANCHES}
            r["reused_steps"] = {b: r["pattern"][b].count(False) for b in BRANCHES}
            print(f"{name:14s} " + "  ".join(f"{b}={r['pattern_string'][b]}" for b in BRANCHES))
    save_file(tensors, str(out / "pipeline.safetensors"))
    ref = {"reference": "diffusers (LTX2Pipeline, blocks wrapped for the cache hooks)",
           "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "numpy_version": np.__version__, "seed": SEED, "dtype": "float32", "device": "cpu", "steps": STEPS,
           "settings": SETTINGS, "num_layers": NUM_LAYERS, "cache_contexts": list(BRANCHES),
           "block_metadata": {"class": "HookedBlock(LTX2VideoTransformerBlock)", **BLOCK_METADATA},
           "margin": MARGIN, "pattern_legend": "true/C: the pass computed every block; false/R: reused",
           "module_names": [n for n, _ in base.transformer.named_modules()],
           "runs": runs}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")
    print(f"ltx2_video cache fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out} "
          f"({time.monotonic() - started:.1f} s after the imports)")


if __name__ == "__main__":
    sys.exit(main())
