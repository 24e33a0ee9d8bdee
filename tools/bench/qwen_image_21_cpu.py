#!/usr/bin/env python3
"""ddo against diffusers on the same work, on the CPU (issue 17's table): Qwen-Image 2.1 transformer blocks at the
real width (4096, 32 heads x 128, mlp_ratio 3), random weights, fp32, from the same prompt embeddings and seed.

Usage (tools/ddo bench qwen_image_21_cpu [options] -> tools/bench/run_qwen_image_21_cpu.sh BUILD [options]):
  qwen_image_21_cpu.py BUILD [--blocks 4] [--size 256] [--steps 4] [--rounds 3]
                             [--routes resident,dynamic,disk,group_block] [--threads 2] [--checkpoint-dtype fp32|bf16]

Each round runs, in a fresh process each and interleaved: diffusers' QwenImage21Pipeline without offload (the
control: weights loaded by from_pretrained, then the call), then ddo-host on each route. Per run: step 0 and the
steady steps (host wall clock: diffusers from callback_on_step_end, ddo from its report's steps), the process's
peak RSS (the kernel's high-water mark: ru_maxrss for diffusers, VmHWM from ddo's report), the telemetry's own CPU
share (ddo) and the output's max pixel difference against diffusers'. Printed: medians over rounds with min-max,
ratios to diffusers; with resident and disk both run, the disk route's peak RSS against the resident set + its slots
(Note [Disk route memory] in docs/benchmarks.md) and its steady step against resident's; the load average before and
after and the CPU time stolen by the hypervisor meanwhile. Written to BUILD/bench/qwen_image_21_cpu.json. A
benchmark prints figures; no test asserts on them (docs/benchmarks.md).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import qwen_image_21_bench_checkpoint as ckpt_mod  # noqa: E402


def diffusers_child(ckpt: Path, size: int, steps: int, out: Path):
    """One diffusers run in this (fresh) process: from_pretrained, the call with per-step times, peak RSS."""
    import numpy as np
    import torch

    t0 = time.perf_counter()
    pipe, embeds, _, _ = ckpt_mod.make_pipeline(ckpt, "fp32")
    embeds = embeds.to(torch.float32)  # saved in the checkpoint's dtype; ddo-host converts them the same way
    setup_s = time.perf_counter() - t0
    marks = []

    def on_step(p, i, t, kw):
        marks.append(time.perf_counter())
        return kw

    with torch.no_grad():
        start = time.perf_counter()
        image = pipe(prompt_embeds=embeds, height=size, width=size, num_inference_steps=steps,
                     generator=torch.Generator().manual_seed(0), output_type="np", callback_on_step_end=on_step,
                     return_dict=False)[0]
        total = time.perf_counter() - start
    step_s = [marks[0] - start] + [b - a for a, b in zip(marks, marks[1:])]
    pixels = (image[0] * 255).round().astype("uint8")
    np.save(out.with_suffix(".npy"), pixels)
    out.write_text(json.dumps({"setup_s": setup_s, "steps_s": step_s, "call_s": total,
                               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}) + "\n")


def run_diffusers(ckpt, size, steps, work: Path, threads):
    out = work / "diffusers.json"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run([sys.executable, __file__, "--child-diffusers", str(ckpt), str(size), str(steps), str(out)],
                   check=True, env=env)
    r = json.loads(out.read_text())
    import numpy as np
    r["pixels"] = np.load(out.with_suffix(".npy"))
    return r


def block_bytes(ckpt: Path) -> int:
    h = json.loads((ckpt / "transformer" / "config.json").read_text())
    d = h["num_attention_heads"] * h["attention_head_dim"]
    per = 2 if json.loads((ckpt / "bench.json").read_text())["dtype"] == "bf16" else 4
    return (4 * d * d + 3 * d * h["mlp_ratio"] * d + 2 * h["attention_head_dim"]) * per


def run_ddo(build: Path, ckpt, route, size, steps, work: Path, threads, blocks):
    out = work / f"ddo_{route}"
    out.mkdir(parents=True, exist_ok=True)
    args = [str(build / "bin" / "ddo-host"), "--plugin", "qwen_image", "--preset", "off.toml", "--model", str(ckpt),
            "--prompt-embeds", str(ckpt / "prompt_embeds.safetensors"), "--steps", str(steps), "--width", str(size),
            "--height", str(size), "--seed", "0", "--set", "workload.precision=fp32", "--output", str(out),
            "--report", str(out / "report.json"), "--overwrite", "-q"]
    if route != "resident":
        args += ["--set", f"components.transformer.route={route}"]
    if route == "dynamic":  # half of the blocks resident, the rest streamed from host copies
        gb = block_bytes(ckpt) * (blocks // 2) / 2**30 + 0.001
        args += ["--set", f"components.transformer.resident_budget_gb={gb:.4f}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run(args, check=True, env=env)
    rep = json.loads((out / "report.json").read_text())
    steps_s = [s["host_wall_s"] for s in rep["steps"] if s["phase"] == "denoise"]
    setup = sum(p["host_wall_s"] for p in rep["phases"] if p["name"] in ("setup", "load"))
    from PIL import Image
    import numpy as np
    engine = rep["counters"]["transformer"]["engine"]["counters"]
    load_rss = next(p["memory"]["rss"]["peak_bytes"] for p in rep["phases"] if p["name"] == "load")
    return {"setup_s": setup, "steps_s": steps_s, "peak_rss_bytes": rep["memory"]["rss"]["kernel_hwm_bytes"],
            "telemetry_cpu_fraction": rep["sampler"]["cpu_fraction_of_wall"],
            "mapped_bytes": engine["mapped_bytes"], "slot_bytes": engine["device_bytes"], "load_rss_bytes": load_rss,
            "pixels": np.asarray(Image.open(out / "image.png"))}


def cpu_steal_s():
    """Seconds of CPU time the hypervisor gave to others (all cores, /proc/stat's steal): noise load average misses."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child-diffusers":
        diffusers_child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--routes", default="resident,dynamic,disk,group_block")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    # The file's dtype; both compute in fp32 (bf16: diffusers converts at from_pretrained, ddo as its plan does).
    ap.add_argument("--checkpoint-dtype", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    ckpt = ckpt_mod.ensure_checkpoint(build / "bench", a.blocks, a.checkpoint_dtype, tiny=False,
                                      log=lambda m: print(m, flush=True))
    work = build / "bench" / "qwen_image_21_cpu_runs"
    work.mkdir(parents=True, exist_ok=True)
    routes = [r for r in a.routes.split(",") if r]
    names = ["diffusers"] + [f"ddo {r}" for r in routes]
    runs = {n: [] for n in names}
    load_before, steal_before = os.getloadavg(), cpu_steal_s()
    for rnd in range(a.rounds):
        for n in names:
            print(f"bench: round {rnd + 1}/{a.rounds}: {n}", flush=True)
            if n == "diffusers":
                runs[n].append(run_diffusers(ckpt, a.size, a.steps, work, a.threads))
            else:
                runs[n].append(run_ddo(build, ckpt, n.split(" ", 1)[1], a.size, a.steps, work, a.threads, a.blocks))
    load_after, steal_after = os.getloadavg(), cpu_steal_s()
    ref_pixels = runs["diffusers"][0]["pixels"]
    rows = {}
    for n in names:
        rs = runs[n]
        steady = [statistics.median(r["steps_s"][1:]) for r in rs if len(r["steps_s"]) > 1]
        rows[n] = {"steady_step_s": summary(steady), "step0_s": summary([r["steps_s"][0] for r in rs]),
                   "peak_rss_gib": summary([r["peak_rss_bytes"] / 2**30 for r in rs]),
                   "max_pixel_diff": int(max(abs(r["pixels"].astype(int) - ref_pixels.astype(int)).max() for r in rs))}
        if "telemetry_cpu_fraction" in rs[0]:
            rows[n]["telemetry_cpu_fraction"] = summary([r["telemetry_cpu_fraction"] for r in rs])
            rows[n]["mapped_gib"] = rs[0]["mapped_bytes"] / 2**30
            rows[n]["slot_gib"] = rs[0]["slot_bytes"] / 2**30
            rows[n]["load_rss_gib"] = summary([r["load_rss_bytes"] / 2**30 for r in rs])
    d = rows["diffusers"]
    dtype = "fp32" if a.checkpoint_dtype == "fp32" else f"fp32 from a {a.checkpoint_dtype} checkpoint"
    print(f"\n== Qwen-Image 2.1 transformer, {a.blocks} blocks at width 4096, {dtype}, {a.size}x{a.size}, {a.steps} steps, "
          f"{a.threads} threads, {a.rounds} rounds (medians, min-max) ==")
    print(f"  {'run':<18} {'steady step':>22} {'ratio':>6} {'step 0':>20} {'ratio':>6} {'peak RSS GiB':>20} "
          f"{'px diff':>7} {'telemetry':>9}")
    for n in names:
        r = rows[n]
        s, z, m = r["steady_step_s"], r["step0_s"], r["peak_rss_gib"]
        tel = f"{100 * r['telemetry_cpu_fraction']['median']:.2f}%" if "telemetry_cpu_fraction" in r else "-"
        print(f"  {n:<18} {s['median']:8.3f} s ({s['min']:.3f}-{s['max']:.3f}) {s['median'] / d['steady_step_s']['median']:6.2f}"
              f" {z['median']:7.3f} s ({z['min']:.2f}-{z['max']:.2f}) {z['median'] / d['step0_s']['median']:6.2f}"
              f" {m['median']:7.2f} ({m['min']:.2f}-{m['max']:.2f}) {r['max_pixel_diff']:7d} {tel:>9}")
    if "ddo resident" in rows and "ddo disk" in rows:
        # Note [Disk route memory] in docs/benchmarks.md: what the disk route holds beyond its slots.
        res, dsk = rows["ddo resident"], rows["ddo disk"]
        kept = res["peak_rss_gib"]["median"] - res["mapped_gib"]  # the resident run without the blocks disk streams
        print(f"  disk peak RSS {dsk['peak_rss_gib']['median']:.2f} GiB against resident set + slots "
              f"{kept:.2f} + {dsk['slot_gib']:.2f} = {kept + dsk['slot_gib']:.2f} GiB: "
              f"x{dsk['peak_rss_gib']['median'] / (kept + dsk['slot_gib']):.3f} (resident set = the resident run's peak "
              f"RSS less the {res['mapped_gib']:.2f} GiB of blocks the disk run streams); against RSS after load + slots "
              f"{dsk['load_rss_gib']['median']:.2f} + {dsk['slot_gib']:.2f}: "
              f"x{dsk['peak_rss_gib']['median'] / (dsk['load_rss_gib']['median'] + dsk['slot_gib']):.3f} (activations excluded)")
        print(f"  disk steady step x{dsk['steady_step_s']['median'] / res['steady_step_s']['median']:.3f} of resident")
    steal = None if steal_before is None or steal_after is None else steal_after - steal_before
    print(f"  load average before {[round(x, 2) for x in load_before]}, after {[round(x, 2) for x in load_after]} "
          f"(1/5/15 min) on {os.cpu_count()} cores; CPU steal during the bench "
          f"{'unknown' if steal is None else f'{steal:.1f} s'}")
    result = {"config": vars(a), "load_average_before": load_before, "load_average_after": load_after,
              "cpu_steal_s": steal, "rows": rows}
    (build / "bench" / "qwen_image_21_cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {build / 'bench' / 'qwen_image_21_cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
