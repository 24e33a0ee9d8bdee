#!/usr/bin/env python3
"""LoRA applied at run time (issue 27) against no LoRA on the same work, on the CPU: Qwen-Image 2.1 transformer blocks
at the real width (4096, 32 heads x 128, mlp_ratio 3), random weights, from the same prompt embeddings and seed,
computed in fp32.

Usage (tools/ddo bench qwen_image_21_lora [options] -> tools/bench/run_qwen_image_21_lora.sh BUILD [options]):
  qwen_image_21_lora.py BUILD [--blocks 4] [--size 256] [--steps 4] [--rounds 2] [--threads 2]
                              [--counts 0,1,4] [--rank 32] [--routes resident,disk]

The checkpoint is the bf16 bench checkpoint (tools/bench/qwen_image_21_bench_checkpoint.py), unchanged. Beside it
(BUILD/bench/<checkpoint>_lora_r<rank>/, cached) this script writes 4 LoRA files lora_<i>.safetensors, i = 0..3, in
diffusers/PEFT keys as diffusers' save_lora_weights writes them: transformer.<module>.lora_A.weight [rank, in] and
transformer.<module>.lora_B.weight [out, rank], bf16 (as real LoRAs are stored), written by safetensors' save_file
with the safetensors metadata "lora_adapter_metadata" = {"transformer.r": rank, "transformer.lora_alpha": rank,
"transformer.use_rslora": false, "transformer.target_modules": [...]} (scale alpha / rank = 1). Modules: every 2-D
weight of every transformer block, i.e. attn.to_q, attn.to_k, attn.to_v, attn.to_out.0 (4096 -> 4096),
img_mlp.proj, img_mlp.gate_layer (4096 -> 12288) and img_mlp.out (12288 -> 4096): 7 a block, a typical full-block
LoRA (the script takes the list from the checkpoint's header and fails if it is not these 7 a block). Factors:
random, torch.Generator seed 27000 + i, lora_A ~ N(0, 1/in), lora_B ~ N(0, (0.02)^2 / rank), drawn in fp32, stored
bf16.

Each round runs, in a fresh process each and interleaved, ddo-host with 0, 1 (lora_0) and 4 (lora_0..3) LoRAs at
strength 1 (--lora FILE, repeatable), for each route (components.transformer.route) in --routes. ddo stacks the
LoRAs of a module into one pair (rank 32 n) in the compute dtype (fp32) and adds (x A^T)(s B)^T to the Linear's
output at every call (core/model/src/linear.cpp, Note [Applying LoRA]). Per run: the steady step (median of steps
1.., host wall clock of the denoise steps in the report), counters.transformer.lora {modules, bytes, read_s,
applied}, peak RSS and the max pixel difference against the same round's 0-LoRA run of the route (that the LoRAs
change the image, for information). A run with LoRAs whose counters.transformer.lora.modules or .applied is not the
number of adapted modules (blocks x 7), or a 0-LoRA run with a lora counter, fails the bench. Printed: medians over
rounds with min-max; each row's step against the 0-LoRA row of the same route; the cost per LoRA as a share of the
0-LoRA step, (t_n - t_0) / t_0 / n on the medians (issue 27's bar: <= 5 % at rank 32); the LoRA factor bytes ddo
holds (fp32, stacked) and their read time; and the share of the adapted Linears' multiply-adds one LoRA adds
(rank (in + out) / (in out) summed over the modules: the arithmetic floor of that cost). After the runs, the add
alone is timed in this process's torch (the libtorch ddo links) at the run's shapes: fp32, --threads threads,
(size / 16)^2 tokens (the steady steps run the KV-cached target tokens only), every adapted module's
h = linear(x, A), then y.addmm_(h, B^T) (beta 1: the up projection accumulated into y inside the GEMM) as
model::linear does, and for information the earlier form y.add_(linear(h, B)) (model::linear before 402661d), at
rank 32 n for each n, medians of 15 calls, summed over the modules; printed against the 0-LoRA step of the first
route. Written to
BUILD/bench/qwen_image_21_lora.json. A benchmark prints figures; no test asserts on them (docs/benchmarks.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))
import qwen_image_21_bench_checkpoint as ckpt_mod  # noqa: E402
from qwen_image_21_quant import summary  # noqa: E402  (median, min, max over the rounds: one definition)

N_LORAS = 4
SEED = 27000
BLOCK_MODULES = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "img_mlp.proj", "img_mlp.gate_layer",
                 "img_mlp.out"]


def adapted_modules(ckpt: Path):
    """module -> [out, in] for every 2-D weight of every transformer block of `ckpt` (from the safetensors header)."""
    mods = {}
    for f in sorted((ckpt / "transformer").glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k.startswith("transformer_blocks.") and k.endswith(".weight") and len(v["shape"]) == 2:
                mods[k[:-len(".weight")]] = v["shape"]
    blocks = sorted({int(m.split(".")[1]) for m in mods})
    want = {f"transformer_blocks.{b}.{m}" for b in blocks for m in BLOCK_MODULES}
    if set(mods) != want:
        raise SystemExit(f"bench: the blocks' 2-D weights of {ckpt} are not {BLOCK_MODULES} a block: "
                         f"extra {sorted(set(mods) - want)[:5]}, missing {sorted(want - set(mods))[:5]}")
    return dict(sorted(mods.items()))


def make_loras(ckpt: Path, rank: int):
    """The N_LORAS LoRA files for `ckpt` at `rank` (cached beside it)."""
    dst = ckpt.parent / f"{ckpt.name}_lora_r{rank}"
    files = [dst / f"lora_{i}.safetensors" for i in range(N_LORAS)]
    if (dst / "bench_lora.json").exists():
        return files
    import shutil
    import torch
    from safetensors.torch import save_file
    print(f"bench: writing {N_LORAS} rank-{rank} LoRAs for {ckpt.name} in {dst}", flush=True)
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    mods = adapted_modules(ckpt)
    meta = {"lora_adapter_metadata": json.dumps({
        "transformer.r": rank, "transformer.lora_alpha": rank, "transformer.use_rslora": False,
        "transformer.target_modules": sorted({m.split(".", 2)[2] for m in mods})}, sort_keys=True)}
    for i, f in enumerate(files):
        g = torch.Generator().manual_seed(SEED + i)
        state = {}
        for m, (out, inp) in mods.items():
            state[f"transformer.{m}.lora_A.weight"] = (torch.randn(rank, inp, generator=g) * inp ** -0.5).bfloat16()
            state[f"transformer.{m}.lora_B.weight"] = (torch.randn(out, rank, generator=g) * 0.02 * rank ** -0.5
                                                       ).bfloat16()
        save_file({k: v.contiguous() for k, v in state.items()}, str(f), metadata=meta)
    (dst / "bench_lora.json").write_text(json.dumps({
        "source": ckpt.name, "rank": rank, "dtype": "bf16", "seeds": [SEED + i for i in range(N_LORAS)],
        "modules": len(mods), "keys": "diffusers/peft"}) + "\n")
    return files


def run_ddo(build: Path, ckpt: Path, route: str, loras, a, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    args = [str(build / "bin" / "ddo-host"), "--plugin", "qwen_image", "--preset", "off.toml", "--model", str(ckpt),
            "--prompt-embeds", str(ckpt / "prompt_embeds.safetensors"), "--steps", str(a.steps), "--width",
            str(a.size), "--height", str(a.size), "--seed", "0", "--set", "workload.precision=fp32",
            "--set", "vae.strategy=resident", "--output", str(out), "--report", str(out / "report.json"),
            "--overwrite", "-q"]
    if route != "resident":
        args += ["--set", f"components.transformer.route={route}"]
    for f in loras:
        args += ["--lora", str(f)]
    subprocess.run(args, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    rep = json.loads((out / "report.json").read_text())
    steps = [s for s in rep["steps"] if s["phase"] == "denoise"]
    lora = rep["counters"]["transformer"].get("lora")
    from PIL import Image
    import numpy as np
    return {"steps_s": [s["host_wall_s"] for s in steps], "lora": lora,
            "peak_rss_bytes": rep["memory"]["rss"]["kernel_hwm_bytes"],
            "pixels": np.asarray(Image.open(out / "image.png"))}


def isolated_add(mods, ranks, tokens: int, threads: int, reps: int = 15):
    """The runtime add alone, in this process's torch (the libtorch ddo links), fp32, `threads` threads: per rank, the
    seconds a step over the adapted modules of what model::linear adds, linear(x, A) then addmm_ into y (beta 1), of
    the earlier form y.add_(linear(linear(x, A), B)) (for information), and of the bare Linears linear(x, W); medians
    of `reps` calls per module."""
    import time
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)

    def timed(fn):
        fn()
        fn()
        v = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            v.append(time.perf_counter() - t0)
        return statistics.median(v)
    out = {"tokens": tokens, "threads": threads, "linear_s": 0.0, "addmm_s": {r: 0.0 for r in ranks},
           "linear_add_s": {r: 0.0 for r in ranks}}
    cache = {}
    for o, i in mods.values():
        if (o, i) not in cache:  # the blocks repeat the same shapes: time each once
            x = torch.randn(1, tokens, i, generator=g)
            w = torch.randn(o, i, generator=g) * i ** -0.5
            y = F.linear(x, w)
            c = {"linear": timed(lambda: F.linear(x, w))}
            for r in ranks:
                da = torch.randn(r, i, generator=g) * i ** -0.5
                ub = torch.randn(o, r, generator=g) * 0.01
                c[("add", r)] = timed(lambda: y.add_(F.linear(F.linear(x, da), ub)))
                c[("addmm", r)] = timed(lambda: y.view(-1, o).addmm_(F.linear(x, da).view(-1, r), ub.t()))
            cache[(o, i)] = c
        c = cache[(o, i)]
        out["linear_s"] += c["linear"]
        for r in ranks:
            out["linear_add_s"][r] += c[("add", r)]
            out["addmm_s"][r] += c[("addmm", r)]
    return out


def check_lora(run, n: int, n_modules: int, what: str):
    lora = run["lora"]
    if n == 0:
        if lora and lora.get("modules"):
            raise SystemExit(f"bench: {what}: a run without LoRA reports counters.transformer.lora {lora}")
        return
    if not lora or lora.get("modules") != n_modules or lora.get("applied") != n_modules:
        raise SystemExit(f"bench: {what}: counters.transformer.lora is {lora}; expected modules = applied = "
                         f"{n_modules} (every block Linear adapted)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--counts", default="0,1,4", help="numbers of LoRAs per run (0..4; 0 is the baseline)")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--routes", default="resident,disk")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    counts = sorted({int(c) for c in a.counts.split(",") if c} | {0})
    if counts[-1] > N_LORAS:
        ap.error(f"--counts: at most {N_LORAS} LoRAs")
    routes = [r for r in a.routes.split(",") if r]
    src = ckpt_mod.ensure_checkpoint(build / "bench", a.blocks, "bf16", tiny=False, log=lambda m: print(m, flush=True))
    loras = make_loras(src, a.rank)
    mods = adapted_modules(src)
    n_modules = len(mods)
    # Multiply-adds per token: one LoRA's rank (in + out) against the adapted Linears' in x out.
    lora_share = sum(a.rank * (o + i) for o, i in mods.values()) / sum(o * i for o, i in mods.values())
    file_bytes = os.path.getsize(loras[0])
    names = [(n, r) for r in routes for n in counts]
    work = build / "bench" / "qwen_image_21_lora_runs"
    runs = {k: [] for k in names}
    load_before = os.getloadavg()
    for rnd in range(a.rounds):
        for n, r in names:
            print(f"bench: round {rnd + 1}/{a.rounds}: {n} LoRA{'s' * (n != 1)} {r}", flush=True)
            run = run_ddo(build, src, r, loras[:n], a, work / f"lora{n}_{r}")
            check_lora(run, n, n_modules, f"round {rnd + 1}, {n} LoRAs, {r}")
            runs[(n, r)].append(run)
    # Steady steps run the KV-cached target tokens only: (size / 8 latent / 2 patch)^2.
    iso = isolated_add(mods, [a.rank * n for n in counts if n], (a.size // 16) ** 2, a.threads)
    load_after = os.getloadavg()
    rows = {}
    print(f"\n== Qwen-Image 2.1 transformer, {a.blocks} blocks at width 4096, fp32 compute, {a.size}x{a.size}, "
          f"{a.steps} steps, {a.threads} threads, {a.rounds} rounds (medians, min-max); LoRAs rank {a.rank}, bf16 "
          f"files of {file_bytes / 1e6:.1f} MB, {n_modules} modules (every block Linear) ==")
    print(f"  {'run':<18} {'steady step':>24} {'vs 0 LoRAs':>10} {'cost/LoRA':>9} {'LoRA MB':>8} {'read s':>7} "
          f"{'peak RSS GiB':>12} {'px diff':>7}")
    for n, r in names:
        rs = runs[(n, r)]
        steady = summary([statistics.median(x["steps_s"][1:]) for x in rs])
        base = statistics.median(statistics.median(x["steps_s"][1:]) for x in runs[(0, r)])
        ratio = steady["median"] / base
        cost = (steady["median"] - base) / base / n if n else None
        lb = summary([(x["lora"] or {}).get("bytes") for x in rs]) if n else None
        ls = summary([(x["lora"] or {}).get("read_s") for x in rs]) if n else None
        px = int(max(abs(x["pixels"].astype(int) - y["pixels"].astype(int)).max() for x, y in zip(rs, runs[(0, r)])))
        row = {"loras": n, "route": r, "steady_step_s": steady, "vs_0_loras": ratio, "cost_per_lora": cost,
               "added_s_per_step": steady["median"] - base,
               "lora_bytes": lb, "lora_read_s": ls, "lora_counters": [x["lora"] for x in rs],
               "peak_rss_gib": summary([x["peak_rss_bytes"] / 2**30 for x in rs]),
               "max_pixel_diff_vs_0_loras": px}
        rows[f"{n} loras {r}"] = row
        name = f"{n} LoRA{'s' * (n != 1)} {r}"
        cost_s = "-" if cost is None else f"{100 * cost:+.2f} %"
        lb_s = "-" if lb is None else f"{lb['median'] / 1e6:.1f}"
        ls_s = "-" if ls is None else f"{ls['median']:.3f}"
        print(f"  {name:<18} {steady['median']:8.3f} s ({steady['min']:.3f}-{steady['max']:.3f}) {ratio:10.3f} "
              f"{cost_s:>9} {lb_s:>8} {ls_s:>7} {row['peak_rss_gib']['median']:12.2f} {px:7d}")
    print(f"  one rank-{a.rank} LoRA adds {100 * lora_share:.2f} % of the adapted Linears' multiply-adds "
          f"(rank (in + out) / (in out) over the {n_modules} modules)")
    base_res = statistics.median(statistics.median(x["steps_s"][1:]) for x in runs[(0, routes[0])])
    print(f"  the add alone ({iso['tokens']} tokens, fp32, {iso['threads']} threads, in torch; bare Linears "
          f"{iso['linear_s']:.3f} s a step), against the 0-LoRA {routes[0]} step {base_res:.3f} s:")
    for n in counts[1:]:
        r = a.rank * n
        t = iso["addmm_s"][r]
        print(f"    {n} LoRA{'s' * (n != 1)} (rank {r}): x A^T + addmm_ into y (model::linear) {t:.4f} s a step = "
              f"{100 * t / base_res:.2f} % ({100 * t / base_res / n:.2f} % per LoRA); as linear + add_ "
              f"(before 402661d) {iso['linear_add_s'][r]:.4f} s")
    print(f"  load average before {[round(x, 2) for x in load_before]}, after {[round(x, 2) for x in load_after]} "
          f"(1/5/15 min) on {os.cpu_count()} cores")
    result = {"config": vars(a), "lora": {"files": [str(f) for f in loras], "rank": a.rank, "dtype": "bf16",
                                          "file_bytes": file_bytes, "modules": n_modules, "seeds":
                                          [SEED + i for i in range(N_LORAS)], "multiply_add_share": lora_share},
              "isolated_add": iso, "load_average_before": load_before, "load_average_after": load_after, "rows": rows}
    (build / "bench" / "qwen_image_21_lora.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {build / 'bench' / 'qwen_image_21_lora.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
