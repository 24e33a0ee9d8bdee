#!/usr/bin/env python3
"""Step caching (issue 41) against no cache on the same work, on the CPU: the LTX-2 row. LTX-2.3 transformer blocks
at the real width (video stream 4096 = 32 heads x 128, audio stream 2048 = 32 x 64), random weights, from the same
prompt embeddings and seed, computed in fp32, text-to-video with audio, classifier-free guidance on (the negative
embeddings batched with the positive ones: ONE transformer pass a step, cache context "cond_uncond"), STG off and
modality isolation off (--stg-scale 0, --modality-scale 1: each would add a pass a step with its own cache state).

Usage (tools/ddo bench ltx2_video_cache [options] -> tools/bench/run_ltx2_video_cache.sh BUILD [options]):
  ltx2_video_cache.py BUILD [--blocks 3] [--size 128] [--frames 9] [--fps 24] [--steps 20] [--rounds 2]
                            [--threads 2] [--cfg-scale 3] [--stg-scale 0] [--modality-scale 1] [--text-len 128]
                            [--routes resident,disk] [--kinds off,first_block,mag,taylorseer,sea]
                            [--checkpoint-dtype bf16|fp32] [--fbc-thresholds LO,HI] [--mag-thresholds LO,HI]
                            [--mag-max-skip 3] [--taylorseer-intervals 3,5] [--sea-thresholds 0.25,0.5]

The checkpoint is tools/bench/ltx2_video_bench_checkpoint.py's (built once under BUILD/bench/, keyed by --blocks and
--checkpoint-dtype): `--blocks` real-width LTX-2.3 blocks (386.7M parameters, 773 MB in bf16 each) and the 427.5M
parameters outside them at the real width (the timestep / cross-attention / prompt AdaLN embeddings: 855 MB in bf16,
which every pass that runs a block reads -- 27 % of the transformer's bytes with 3 blocks, 1.8 % of the real 48-block
model's), connectors with the real text widths and no blocks, the real VAE structure (32x space, 8x time,
128 latent channels) at tiny widths, a tiny audio VAE with the real 128 packed audio features, a tiny vocoder, and the
LTX-2 dev scheduler (dynamic shift). The prompt embeddings file beside it (prompt_embeds_l<L>.safetensors) holds
positive and negative embeddings of --text-len tokens ([1, L, 96]); every run passes it and --cfg-scale (default 3,
LTX2Pipeline's): CFG is on, its two samples batched in one pass. The default clip, 128x128 with 9 frames at 24 fps,
is 2 latent frames of 4x4: 32 video tokens and 9 audio tokens a sample (the Qwen bench's 128² is 64 image tokens).
--blocks defaults to 3 so that one run stays near a minute on the 2-core machine (estimated idle: a resident off run
~20 s for its first step, which converts the bf16 weights to fp32 once, then ~2.2 s a step; a disk off run ~3.5 s a
step; 4 blocks ~1.3x that).

Before the rows, two runs on the resident route measure what the thresholds act on (each only when a row needs it):
  signal       --cache first_block --set cache.threshold=0: every pass computed, each pass's relative L1 change of
               block 0's residual against the previous step (steps[].extra.cache[].signal) recorded;
  calibration  --cache mag --set cache.calibrate=true: every step computed, <output>/mag_ratios.toml written; its
               ratios are passed to every mag row as --set 'cache.mag_ratios=[...]'.
Thresholds (unless given) are picked as tools/bench/qwen_image_21_cache.py picks them (its helpers, imported): mag's
by replaying MagCache's decision on the calibrated ratios for 40 % and 70 % reuse (with max_skip_steps 3 and
retention 0.2 at most 60 % of 20 steps can be reused, so the high row is capped there); first_block's from the
measured signal, the --fbc-low-quantile (0.75) quantile of the per-step signal for the low row and its maximum plus
--fbc-high-margin for the high row, rounded to 0.01. The reuse they give is measured, printed and written.

What random weights do to the signal: as on the Qwen bench, the random timestep modulation and velocity make block
0's residual nearly decorrelate between consecutive steps: relative L1 changes of 0.90-1.01 (median 0.96) at every
step of the 20 (smoke run on the 4-block checkpoint, 2026-12-07; the signal run prints this run's), flat over the
schedule, where trained checkpoints move by a few hundredths (diffusers' default first_block threshold 0.05); the
MagCache ratios stay within 0.95-1.05 (the residual's norm moves little while its direction does). The thresholds are
therefore far above the defaults (there: first_block 0.98 and 1.08 -> 8 and 15 of 20 passes reused; mag 0.0112 and
0.0778 -> 8 and 12), and the frames with the cache differ from the frames without it far more than a trained
model's would: the pixel columns are for information only (a reused pass on random weights is a wrong pass), not a
quality figure. sea's gate reads the latents, not the weights, and needs no calibration.

Rows, each on every route in --routes (components.transformer.route; resident = the blocks read in place from the
file mapping, disk = every computed block read from the file into a slot each pass), each a fresh ddo-host process,
interleaved over --rounds rounds: off, first_block at the two thresholds, mag at the two thresholds, taylorseer in
lite mode at two cache intervals (a predicted step runs no block; warm-up 3 steps), sea at two thresholds; --kinds
keeps a subset (off always runs: the rows are ratios to it). Per run: the denoise phase's host wall, the steady step
(median of the denoise steps after the first), bytes streamed (steps[].extra.engine.transformer.bytes_streamed summed;
and the engine counters' bytes_moved and bytes_skipped), step_cache.computed_block_fraction, reused passes, and the
max pixel difference and PSNR of the decoded frames (plugin.ltx2_video.frames_png: every frame a PNG) against the off
run of the same route (first round); the WAV's max sample difference against off goes to the JSON. Printed per route,
the Qwen bench's columns: medians over rounds with min-max, the wall ratio to off (median of the paired per-round
ratios), the steady step and its ratio, streamed GB and its ratio, the computed fraction, reused passes, `wall ratio -
computed fraction`, max pixel difference, PSNR, stall. The claim read here: on the disk route the wall ratio is within
0.10 of the computed fraction (a skipped block is neither read nor computed). Written to
BUILD/bench/ltx2_video_cache.json. A benchmark prints figures; no test asserts on them (docs/benchmarks.md).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))
import ltx2_video_bench_checkpoint as ckpt_mod  # noqa: E402
from qwen_image_21_cache import (MAG_TARGETS, mag_replay, pick_mag_thresholds, print_rows, psnr,  # noqa: E402
                                 quantile, signal_stats)
from qwen_image_21_quant import summary  # noqa: E402  (median, min, max over the rounds: one definition)
from qwen_image_21_cpu import cpu_steal_s  # noqa: E402

KINDS = ("off", "first_block", "mag", "taylorseer", "sea")
P = "plugin.ltx2_video."


def ddo_args(build: Path, ckpt: Path, embeds: Path, route: str, a, out: Path, extra):
    args = [str(build / "bin" / "ddo-host"), "--plugin", "ltx2", "--preset", "off.toml", "--model", str(ckpt),
            "--prompt-embeds", str(embeds), "--steps", str(a.steps), "--width", str(a.size), "--height", str(a.size),
            "--frames", str(a.frames), "--fps", f"{a.fps:g}", "--seed", "0", "--cfg-scale", f"{a.cfg_scale:g}",
            "--set", f"{P}stg_scale={a.stg_scale!r}", "--set", f"{P}audio_stg_scale={a.stg_scale!r}",
            "--set", f"{P}modality_scale={a.modality_scale!r}",
            "--set", f"{P}audio_modality_scale={a.modality_scale!r}",
            "--set", "workload.precision=fp32", "--set", "vae.strategy=resident", "--set", f"{P}frames_png=true",
            "--output", str(out), "--report", str(out / "report.json"), "--overwrite", "-q"]
    if a.stg_scale != 0:
        args += ["--set", f"{P}stg_blocks=[{a.blocks // 2}]"]  # the default [28] does not exist in a short model
    if route != "resident":
        args += ["--set", f"components.transformer.route={route}"]
    if a.steps < 10:
        args += ["--set", "cache.allow_few_steps=true"]  # a no-op for off; the cache refuses < cache.min_steps
    return args + list(extra)


def read_wav(path: Path):
    import wave
    import numpy as np
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, w.getnchannels())


def run_ddo(build, ckpt, embeds, route, a, out: Path, extra):
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("video_*.png"):
        f.unlink()  # a previous run's frames (another --frames) must not be compared
    t0 = time.perf_counter()
    subprocess.run(ddo_args(build, ckpt, embeds, route, a, out, extra), check=True,
                   env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    process_s = time.perf_counter() - t0
    rep = json.loads((out / "report.json").read_text())
    if rep.get("adjustments"):
        raise SystemExit(f"bench: ddo-host adjusted the run ({rep['adjustments']}); the rows would not be the same work")
    if not rep["workload"].get("cfg_batch"):
        raise SystemExit("bench: the run has no unconditional branch: CFG is off")
    steps = [s for s in rep["steps"] if s["phase"] == "denoise"]
    streamed = [((s.get("extra") or {}).get("engine") or {}).get("transformer", {}).get("bytes_streamed") for s in steps]
    c = rep["counters"]["transformer"]["engine"]["counters"]
    sc = rep.get("step_cache")
    from PIL import Image
    import numpy as np
    frames = sorted(out.glob("video_*.png"))
    if len(frames) != rep["workload"]["frames"]:
        raise SystemExit(f"bench: {out} holds {len(frames)} PNG frames for a {rep['workload']['frames']}-frame clip")
    return {"denoise_s": next(p["host_wall_s"] for p in rep["phases"] if p["name"] == "denoise"),
            "process_s": process_s,  # the whole ddo-host process: start, LibTorch, load, denoise, decode, write
            "steps_s": [s["host_wall_s"] for s in steps],
            "passes_per_step": rep["workload"]["passes_per_step"],
            "bytes_streamed": sum(b for b in streamed if b is not None),
            "bytes_moved": sum(v for v in c["bytes_moved"].values() if isinstance(v, (int, float))),
            "bytes_moved_by_kind": c["bytes_moved"], "bytes_skipped": c["bytes_skipped"],
            "skipped_groups": c["skipped_groups"], "stall_s": c.get("stall_s"),
            "stall_s_steps": [((s.get("extra") or {}).get("engine") or {}).get("transformer", {}).get("stall_s")
                              for s in steps],
            "computed_fraction": 1.0 if sc is None else sc["computed_block_fraction"],
            "passes": None if sc is None else sc["passes"], "reused_passes": 0 if sc is None else sc["reused_passes"],
            "bytes_not_streamed": 0 if sc is None else sc["bytes_not_streamed"],
            "fired": None if sc is None else sc["fired"],
            "records": [r for s in steps for r in ((s.get("extra") or {}).get("cache") or [])],
            "step_cache": sc, "peak_rss_bytes": rep["memory"]["rss"]["kernel_hwm_bytes"],
            "pixels": np.stack([np.asarray(Image.open(f)) for f in frames]),
            "audio": read_wav(out / "audio.wav")}


def pattern(records, branch=None):
    return "".join("C" if r["computed"] else "R" for r in records if branch is None or r["branch"] == branch)


def thresholds(build, ckpt, embeds, a, work, kinds):
    """The signal and calibration runs (only those a kind in `kinds` needs), and the thresholds of every row."""
    out = {"signal": None, "fbc": None, "fbc_how": None, "mag": None, "mag_how": None, "ratios": None,
           "calibration": None, "mag_replayed": None, "sig_run": None, "cal_run": None, "cal_file": None}
    if "first_block" in kinds:
        if a.fbc_thresholds:
            out["fbc"] = [float(x) for x in a.fbc_thresholds.split(",")]
            out["fbc_how"] = "given (--fbc-thresholds)"
        else:
            print("bench: signal run (--cache first_block, threshold 0: every pass computed)", flush=True)
            sig_run = run_ddo(build, ckpt, embeds, "resident", a, work / "signal",
                              ["--cache", "first_block", "--set", "cache.threshold=0"])
            by_branch = {}
            for r in sig_run["records"]:
                by_branch.setdefault(r["branch"], []).append(r)
            all_sig = [r["signal"] for r in sig_run["records"] if r.get("signal") is not None]
            out["signal"] = {"per_branch": {b: signal_stats(rs) for b, rs in by_branch.items()}, "all": all_sig}
            out["sig_run"] = sig_run
            out["fbc"] = [round(quantile(all_sig, a.fbc_low_quantile), 2), round(max(all_sig) + a.fbc_high_margin, 2)]
            out["fbc_how"] = (f"the {a.fbc_low_quantile:.0%} quantile of the measured per-step signal, and its maximum "
                              f"+ {a.fbc_high_margin}")
            print(f"bench: first_block signal (relative L1 change of block 0's residual, step to step, random "
                  f"weights): min {min(all_sig):.4f}, median {statistics.median(all_sig):.4f}, max {max(all_sig):.4f} "
                  f"over {len(all_sig)} passes; thresholds {out['fbc']} ({out['fbc_how']})", flush=True)
    if "mag" in kinds:
        print("bench: calibration run (--cache mag --set cache.calibrate=true)", flush=True)
        cal_dir = work / "calibration"
        cal_file = cal_dir / "mag_ratios.toml"
        if cal_file.exists():
            cal_file.unlink()  # written by the run; a stale file must not be read
        cal_run = run_ddo(build, ckpt, embeds, "resident", a, cal_dir,
                          ["--cache", "mag", "--set", "cache.calibrate=true"])
        ratios = tomllib.loads(cal_file.read_text())["cache"]["mag_ratios"]
        if len(ratios) != a.steps:
            raise SystemExit(f"bench: {cal_file} holds {len(ratios)} ratios for {a.steps} steps")
        out.update(ratios=ratios, calibration=cal_run["step_cache"]["calibration"], cal_run=cal_run, cal_file=cal_file)
        if a.mag_thresholds:
            out["mag"] = [float(x) for x in a.mag_thresholds.split(",")]
            out["mag_how"] = "given (--mag-thresholds)"
        else:
            picks, mag_max_reuse = pick_mag_thresholds(ratios, a.steps, a.mag_max_skip, a.mag_retention)
            out["mag"] = [float(f"{t:.6g}") for t, _ in picks]
            out["mag_how"] = (f"replayed on the calibrated ratios for {MAG_TARGETS[0]:.0%} and {MAG_TARGETS[1]:.0%} "
                              f"reuse (max_skip_steps {a.mag_max_skip}, retention {a.mag_retention}: at most "
                              f"{mag_max_reuse:.0%} of the steps can be reused)")
        out["mag_replayed"] = [mag_replay(ratios, a.steps, t, a.mag_max_skip, a.mag_retention) for t in out["mag"]]
        print(f"bench: mag ratios min {min(ratios):.4f}, median {statistics.median(ratios):.4f}, max "
              f"{max(ratios):.4f}; thresholds {out['mag']} ({out['mag_how']}; replayed reuse {out['mag_replayed']} "
              f"of {a.steps} steps)", flush=True)
    return out


def variants_of(a, kinds, th):
    variants = [("off", [])]
    if "first_block" in kinds:
        variants += [(f"first_block {t:g}", ["--cache", "first_block", "--set", f"cache.threshold={t!r}"])
                     for t in th["fbc"]]
    if "mag" in kinds:
        mag_set = "cache.mag_ratios=[" + ", ".join(repr(float(x)) for x in th["ratios"]) + "]"
        variants += [(f"mag {t:g}", ["--cache", "mag", "--set", f"cache.threshold={t!r}", "--set", mag_set,
                                     "--set", f"cache.max_skip_steps={a.mag_max_skip}",
                                     "--set", f"cache.retention_ratio={a.mag_retention!r}"]) for t in th["mag"]]
    if "taylorseer" in kinds:
        variants += [(f"taylorseer-lite {n}", ["--cache", "taylorseer", "--set", "cache.use_lite_mode=true",
                                               "--set", f"cache.cache_interval={n}"])
                     for n in (int(x) for x in a.taylorseer_intervals.split(","))]
    if "sea" in kinds:
        variants += [(f"sea {t:g}", ["--cache", "sea", "--set", f"cache.threshold={t!r}"])
                     for t in (float(x) for x in a.sea_thresholds.split(","))]
    return variants


def row_of(v, r, args, rs, off):
    """One row's figures: `rs` the variant's runs on route r, `off` the off runs of that route (same rounds)."""
    import numpy as np
    ref_px, ref_audio = off[0]["pixels"], off[0]["audio"]
    wall_ratio = [x["denoise_s"] / o["denoise_s"] for x, o in zip(rs, off)]
    steady = [statistics.median(x["steps_s"][1:]) for x in rs]
    steady_off = [statistics.median(o["steps_s"][1:]) for o in off]
    stream_ratio = [x["bytes_streamed"] / o["bytes_streamed"] if o["bytes_streamed"] else None for x, o in zip(rs, off)]
    frac = statistics.median(x["computed_fraction"] for x in rs)
    return {"route": r, "variant": v, "args": args[:4] if v.startswith("mag") else args,
            "denoise_wall_s": summary([x["denoise_s"] for x in rs]), "wall_ratio": summary(wall_ratio),
            "process_s": summary([x["process_s"] for x in rs]),
            "steady_step_s": summary(steady), "steady_ratio": summary([s / o for s, o in zip(steady, steady_off)]),
            "bytes_streamed": summary([x["bytes_streamed"] for x in rs]), "streamed_ratio": summary(stream_ratio),
            "bytes_moved": summary([x["bytes_moved"] for x in rs]), "bytes_moved_by_kind": rs[0]["bytes_moved_by_kind"],
            "bytes_skipped": summary([x["bytes_skipped"] for x in rs]),
            "skipped_groups": summary([x["skipped_groups"] for x in rs]),
            "stall_s": summary([x["stall_s"] for x in rs]), "stall_s_steps": [x["stall_s_steps"] for x in rs],
            "bytes_not_streamed": summary([x["bytes_not_streamed"] for x in rs]),
            "computed_fraction": frac, "computed_fractions": [x["computed_fraction"] for x in rs],
            "passes": rs[0]["passes"], "reused_passes": [x["reused_passes"] for x in rs], "fired": rs[0]["fired"],
            "wall_ratio_minus_fraction": statistics.median(wall_ratio) - frac,
            "max_pixel_diff_vs_off": int(max(np.abs(x["pixels"].astype(int) - ref_px.astype(int)).max() for x in rs)),
            "psnr_vs_off_db": min(psnr(x["pixels"], ref_px) for x in rs),
            "audio_max_sample_diff_vs_off": int(max(np.abs(x["audio"].astype(int) - ref_audio.astype(int)).max()
                                                    for x in rs)),
            "peak_rss_gib": summary([x["peak_rss_bytes"] / 2**30 for x in rs]),
            "steps_s": [x["steps_s"] for x in rs], "pattern": [pattern(x["records"]) for x in rs]}


def print_table(a, routes, variants, rows, runs):
    sizes = ckpt_mod.transformer_bytes(Path(a.ckpt))
    print(f"\n== LTX-2.3 transformer, {a.blocks} blocks at width 4096 / 2048 ({sizes['blocks'][0] / 1e6:.0f} MB each, "
          f"{sizes['other'] / 1e6:.0f} MB outside them, {a.checkpoint_dtype}), fp32 compute, {a.size}x{a.size} x "
          f"{a.frames} frames, {a.steps} steps, CFG {a.cfg_scale:g} batched (STG {a.stg_scale:g}, modality "
          f"{a.modality_scale:g}: {runs[('off', routes[0])][0]['passes_per_step']} pass a step), {a.threads} threads, "
          f"{a.rounds} rounds (medians, min-max; ratios: median of per-round ratios to off on the same route) ==")
    print_rows(routes, variants, rows)
    if len(variants) > 1:
        print("  passes per step, first round, per cache context (C computed, R reused):")
        for v, _ in variants[1:]:
            recs = runs[(v, routes[0])][0]["records"]
            branches = list(dict.fromkeys(rec["branch"] for rec in recs))
            print(f"    {v:<24} " + "  ".join(f"{b} {pattern(recs, b)}" for b in branches))
    for r in routes:
        if r == "resident" or len(variants) < 2:
            continue
        worst = max((abs(rows[f"{v} {r}"]["wall_ratio_minus_fraction"]), v) for v, _ in variants if v != "off")
        print(f"  {r} route: |wall ratio - computed fraction| at most {worst[0]:.3f} ({worst[1]}); the claim is "
              f"<= 0.10 (a skipped block is neither read nor computed)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--size", type=int, default=128, help="width = height, a multiple of 32 (the VAE's compression)")
    ap.add_argument("--frames", type=int, default=9, help="1 + 8k")
    ap.add_argument("--fps", type=float, default=24.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cfg-scale", type=float, default=3.0)
    ap.add_argument("--stg-scale", type=float, default=0.0,
                    help="video and audio STG scale; non-zero adds a pass a step (STG block: blocks // 2)")
    ap.add_argument("--modality-scale", type=float, default=1.0,
                    help="video and audio modality scale; != 1 adds a pass a step (modality isolation)")
    ap.add_argument("--text-len", type=int, default=128, help="prompt tokens (a multiple of the 128 registers)")
    ap.add_argument("--routes", default="resident,disk")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the row kinds to run (off always runs)")
    ap.add_argument("--checkpoint-dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--fbc-thresholds", default=None, help="LO,HI for first_block (default: from the measured signal)")
    ap.add_argument("--fbc-low-quantile", type=float, default=0.75)
    ap.add_argument("--fbc-high-margin", type=float, default=0.07)
    ap.add_argument("--mag-thresholds", default=None, help="LO,HI for mag (default: replayed on the calibrated ratios)")
    ap.add_argument("--mag-max-skip", type=int, default=3, help="cache.max_skip_steps of the mag rows (MagCache's K)")
    ap.add_argument("--mag-retention", type=float, default=0.2, help="cache.retention_ratio of the mag rows")
    ap.add_argument("--taylorseer-intervals", default="3,5",
                    help="cache.cache_interval of the two taylorseer rows (lite mode: a predicted step runs no block)")
    ap.add_argument("--sea-thresholds", default="0.25,0.5", help="LO,HI for sea (default: diffusers' 0.25, and 0.5)")
    a = ap.parse_args()
    if a.cfg_scale <= 1:
        ap.error("--cfg-scale must be > 1 (CFG on)")
    kinds = [k for k in a.kinds.split(",") if k]
    if set(kinds) - set(KINDS):
        ap.error(f"--kinds: unknown {sorted(set(kinds) - set(KINDS))} (have {', '.join(KINDS)})")
    build = Path(a.build).resolve()
    routes = [r for r in a.routes.split(",") if r]
    t_start = time.perf_counter()
    ckpt = ckpt_mod.ensure_checkpoint(build / "bench", a.blocks, a.checkpoint_dtype, log=lambda m: print(m, flush=True))
    a.ckpt = str(ckpt)
    embeds = ckpt_mod.ensure_prompt_embeds(ckpt, a.text_len)
    work = build / "bench" / "ltx2_video_cache_runs"
    load_before, steal_before = os.getloadavg(), cpu_steal_s()

    # 1. What the thresholds act on (resident route, once), and the rows.
    th = thresholds(build, ckpt, embeds, a, work, kinds)
    variants = variants_of(a, kinds, th)

    # 2. The rows, interleaved.
    names = [(v, r) for r in routes for v, _ in variants]
    extra = dict(variants)
    runs = {n: [] for n in names}
    for rnd in range(a.rounds):
        for v, r in names:
            print(f"bench: round {rnd + 1}/{a.rounds}: {v} {r}", flush=True)
            runs[(v, r)].append(run_ddo(build, ckpt, embeds, r, a, work / f"{v.replace(' ', '_')}_{r}", extra[v]))
    load_after, steal_after = os.getloadavg(), cpu_steal_s()

    # 3. Figures.
    rows = {f"{v} {r}": row_of(v, r, extra[v], runs[(v, r)], runs[("off", r)]) for r in routes for v, _ in variants}
    print_table(a, routes, variants, rows, runs)
    if th["signal"]:
        sig = th["signal"]["all"]
        print(f"  first_block signal, random weights: {min(sig):.3f}-{max(sig):.3f} (median {statistics.median(sig):.3f})"
              f" step to step, where trained checkpoints move by hundredths (diffusers' default threshold 0.05)")
    if th["ratios"]:
        print(f"  mag ratios {min(th['ratios']):.3f}-{max(th['ratios']):.3f}")
    print("  engine bytes per run (median): " + "; ".join(
        f"{k}: moved {rows[k]['bytes_moved']['median'] / 1e9:.2f} GB, skipped "
        f"{rows[k]['bytes_skipped']['median'] / 1e9:.2f} GB" for k in rows if not k.endswith(" resident")))
    steal = None if steal_before is None or steal_after is None else steal_after - steal_before
    print(f"  load average before {[round(x, 2) for x in load_before]}, after {[round(x, 2) for x in load_after]} "
          f"(1/5/15 min) on {os.cpu_count()} cores; CPU steal during the bench "
          f"{'unknown' if steal is None else f'{steal:.1f} s'}; bench wall {time.perf_counter() - t_start:.0f} s")
    cal_px = None
    if th["cal_run"] and ("off", "resident") in runs:
        import numpy as np
        cal_px = int(np.abs(th["cal_run"]["pixels"].astype(int) - runs[("off", "resident")][0]["pixels"].astype(int)).max())
        print(f"  calibration run's frames against off resident: max pixel difference {cal_px} (calibration computes "
              f"every step)")
    result = {"config": vars(a), "checkpoint": str(ckpt), "embeds": str(embeds),
              "transformer_bytes": ckpt_mod.transformer_bytes(ckpt),
              "load_average_before": load_before, "load_average_after": load_after, "cpu_steal_s": steal,
              "bench_wall_s": time.perf_counter() - t_start,
              "signal": None if th["signal"] is None and th["fbc"] is None else
              {"per_branch": (th["signal"] or {}).get("per_branch"), "first_block_thresholds": th["fbc"],
               "first_block_how": th["fbc_how"]},
              "mag": None if th["ratios"] is None else
              {"ratios": th["ratios"], "calibration": th["calibration"], "calibration_file": str(th["cal_file"]),
               "thresholds": th["mag"], "how": th["mag_how"], "replayed_reused_steps": th["mag_replayed"],
               "calibration_max_pixel_diff_vs_off": cal_px, "calibration_denoise_s": th["cal_run"]["denoise_s"]},
              "signal_run_denoise_s": th["sig_run"]["denoise_s"] if th["sig_run"] else None, "rows": rows}
    (build / "bench" / "ltx2_video_cache.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {build / 'bench' / 'ltx2_video_cache.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
