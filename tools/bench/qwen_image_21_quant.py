#!/usr/bin/env python3
"""Quantized transformers against the bf16 one on the same work (issue 26), on the CPU: Qwen-Image 2.1 transformer
blocks at the real width (4096, 32 heads x 128, mlp_ratio 3), random weights, from the same prompt embeddings and
seed, computed in fp32.

Usage (tools/ddo bench qwen_image_21_quant [options] -> tools/bench/run_qwen_image_21_quant.sh BUILD [options]):
  qwen_image_21_quant.py BUILD [--blocks 4] [--size 256] [--steps 4] [--rounds 2] [--threads 2]
                               [--quant q8_0,q4_k,fp8,sdnq_int8,sdnq_uint4] [--routes resident,disk]

The bf16 checkpoint (tools/bench/qwen_image_21_bench_checkpoint.py) is the source; each quantized one is made from it
by the ecosystem's own writers and cached beside it (BUILD/bench/<checkpoint>_<quant>/, the transformer folder only
changes):
  q8_0, q4_k   gguf-py's GGUFWriter (tools/reference/gguf_writer.py): the blocks' 2-D weights in the type (Q4_K blocks
               from gguf_writer.q4_k_quantize), the other 2-D weights Q8_0, 1-D tensors F32, as city96's files keep
               norms and biases; transformer/diffusion_pytorch_model.gguf beside config.json;
  fp8          Lightricks' scaled fp8: the blocks' 2-D weights F8_E4M3 + a 0-dim F32 weight_scale;
  sdnq_int8, sdnq_uint4
               sdnq 0.2.8 (sdnq_post_load_quant with its default skip keys, save_sdnq_model).
Each round runs, in a fresh process each and interleaved: ddo-host on the bf16 checkpoint, resident (the baseline),
then every quantized checkpoint on every route. Per run: the steady step (median of steps 1..), bytes streamed per
steady step (the engine's per-step counter: resident 0, disk the stored bytes of the blocks read), the decode time
per step (counters.transformer.quantization.dequant_s over the steps), stored and dense bytes, peak RSS and the max
pixel difference against the bf16 run (quantization error, for information). Printed: medians over rounds with
min-max, each row's step against bf16 resident, its streamed bytes against bf16 disk's when run. Written to
BUILD/bench/qwen_image_21_quant.json. A benchmark prints figures; no test asserts on them (docs/benchmarks.md).
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

QUANTS = ["q8_0", "q4_k", "fp8", "sdnq_int8", "sdnq_uint4"]


def _copy_except_transformer(src: Path, dst: Path):
    import shutil
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("transformer"))
    (dst / "transformer").mkdir()
    shutil.copy(src / "transformer" / "config.json", dst / "transformer" / "config.json")


def make_quantized(src: Path, quant: str) -> Path:
    """The quantized copy of the bf16 bench checkpoint `src` (cached)."""
    dst = src.parent / f"{src.name}_{quant}"
    if (dst / "bench_quant.json").exists():
        return dst
    import shutil
    import torch
    from safetensors.torch import load_file, save_file
    print(f"bench: writing the {quant} transformer of {src.name} in {dst}", flush=True)
    if dst.exists():
        shutil.rmtree(dst)
    state = load_file(str(src / "transformer" / "diffusion_pytorch_model.safetensors"))
    if quant in ("q8_0", "q4_k"):
        import gguf_writer
        from gguf import GGMLQuantizationType as Q
        _copy_except_transformer(src, dst)

        def type_of(name, t):
            if t.dim() != 2 or t.shape[1] % 32:
                return Q.F32
            if quant == "q4_k" and name.startswith("transformer_blocks.") and t.shape[1] % 256 == 0:
                return Q.Q4_K
            return Q.Q8_0
        gguf_writer.write(dst / "transformer" / "diffusion_pytorch_model.gguf", state, type_of, arch="qwen_image")
    elif quant == "fp8":
        _copy_except_transformer(src, dst)
        out = {}
        for name, w in state.items():
            if name.startswith("transformer_blocks.") and name.endswith(".weight") and w.dim() == 2:
                scale = 448.0 / w.float().abs().max().clamp(min=1e-12)
                out[name] = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
                out[name[:-len(".weight")] + ".weight_scale"] = (1.0 / scale).reshape(()).to(torch.float32)
            else:
                out[name] = w
        save_file({k: v.contiguous() for k, v in out.items()},
                  str(dst / "transformer" / "diffusion_pytorch_model.safetensors"))
    else:
        os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")
        from diffusers import QwenImage21Transformer2DModel
        from sdnq import save_sdnq_model, sdnq_post_load_quant
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("transformer"))
        t = QwenImage21Transformer2DModel.from_pretrained(str(src / "transformer"), torch_dtype=torch.bfloat16).eval()
        t = sdnq_post_load_quant(t, torch_dtype=torch.bfloat16, weights_dtype=quant.split("_")[1])
        save_sdnq_model(t, str(dst / "transformer"))
    (dst / "bench_quant.json").write_text(json.dumps({"quant": quant, "source": src.name}) + "\n")
    return dst


def run_ddo(build: Path, ckpt: Path, route: str, a, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    args = [str(build / "bin" / "ddo-host"), "--plugin", "qwen_image", "--preset", "off.toml", "--model", str(ckpt),
            "--prompt-embeds", str(ckpt / "prompt_embeds.safetensors"), "--steps", str(a.steps), "--width",
            str(a.size), "--height", str(a.size), "--seed", "0", "--set", "workload.precision=fp32",
            "--set", "vae.strategy=resident", "--output", str(out), "--report", str(out / "report.json"),
            "--overwrite", "-q"]
    if route != "resident":
        args += ["--set", f"components.transformer.route={route}"]
    subprocess.run(args, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    rep = json.loads((out / "report.json").read_text())
    steps = [s for s in rep["steps"] if s["phase"] == "denoise"]
    per = [((s.get("extra") or {}).get("engine") or {}).get("transformer", {}).get("bytes_streamed") for s in steps]
    per = [b for b in per[1:] if b is not None]
    t = rep["counters"]["transformer"]
    q = t.get("quantization") or {}
    from PIL import Image
    import numpy as np
    return {"steps_s": [s["host_wall_s"] for s in steps], "streamed_per_step": statistics.median(per) if per else None,
            "dequant_s_per_step": (q.get("dequant_s") or 0.0) / max(1, len(steps)),
            "stored_bytes": q.get("stored_bytes"), "dense_bytes": q.get("dense_bytes"), "formats": q.get("formats"),
            "peak_rss_bytes": rep["memory"]["rss"]["kernel_hwm_bytes"],
            "pixels": np.asarray(Image.open(out / "image.png"))}


def summary(values):
    values = [v for v in values if v is not None]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quant", default=",".join(QUANTS))
    ap.add_argument("--routes", default="resident,disk")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    quants = [q for q in a.quant.split(",") if q]
    unknown = [q for q in quants if q not in QUANTS]
    if unknown:
        ap.error(f"unknown --quant {unknown}; have {QUANTS}")
    routes = [r for r in a.routes.split(",") if r]
    src = ckpt_mod.ensure_checkpoint(build / "bench", a.blocks, "bf16", tiny=False, log=lambda m: print(m, flush=True))
    ckpts = {"bf16": src, **{q: make_quantized(src, q) for q in quants}}
    names = [("bf16", "resident")] + [("bf16", "disk")] * ("disk" in routes) + [(q, r) for q in quants for r in routes]
    work = build / "bench" / "qwen_image_21_quant_runs"
    runs = {n: [] for n in names}
    load_before = os.getloadavg()
    for rnd in range(a.rounds):
        for q, r in names:
            print(f"bench: round {rnd + 1}/{a.rounds}: {q} {r}", flush=True)
            runs[(q, r)].append(run_ddo(build, ckpts[q], r, a, work / f"{q}_{r}"))
    load_after = os.getloadavg()
    ref = runs[("bf16", "resident")]
    base_step = statistics.median(statistics.median(x["steps_s"][1:]) for x in ref)
    base_disk = runs.get(("bf16", "disk"))
    base_streamed = statistics.median(x["streamed_per_step"] for x in base_disk) if base_disk else None
    rows = {}
    print(f"\n== Qwen-Image 2.1 transformer, {a.blocks} blocks at width 4096, fp32 compute, {a.size}x{a.size}, "
          f"{a.steps} steps, {a.threads} threads, {a.rounds} rounds (medians, min-max) ==")
    print(f"  {'run':<20} {'steady step':>24} {'vs bf16 res':>11} {'streamed GB/step':>16} {'vs bf16 disk':>12} "
          f"{'decode s/step':>13} {'stored/dense GB':>16} {'peak RSS GiB':>12} {'px diff':>7}")
    for q, r in names:
        rs = runs[(q, r)]
        steady = summary([statistics.median(x["steps_s"][1:]) for x in rs])
        streamed = summary([x["streamed_per_step"] for x in rs])
        row = {"steady_step_s": steady, "streamed_bytes_per_step": streamed,
               "dequant_s_per_step": summary([x["dequant_s_per_step"] for x in rs]),
               "peak_rss_gib": summary([x["peak_rss_bytes"] / 2**30 for x in rs]),
               "stored_bytes": rs[0]["stored_bytes"], "dense_bytes": rs[0]["dense_bytes"], "formats": rs[0]["formats"],
               "max_pixel_diff_vs_bf16": int(max(abs(x["pixels"].astype(int) - ref[0]["pixels"].astype(int)).max()
                                                 for x in rs))}
        rows[f"{q} {r}"] = row
        sg = streamed["median"] / 1e9 if streamed else None
        ratio_stream = f"{streamed['median'] / base_streamed:.3f}" if streamed and base_streamed else "n/a"
        sd = f"{row['stored_bytes'] / 1e9:.2f}/{row['dense_bytes'] / 1e9:.2f}" if row["stored_bytes"] else "n/a"
        print(f"  {q + ' ' + r:<20} {steady['median']:8.3f} s ({steady['min']:.3f}-{steady['max']:.3f}) "
              f"{steady['median'] / base_step:11.3f} {('n/a' if sg is None else f'{sg:.3f}'):>16} {ratio_stream:>12} "
              f"{row['dequant_s_per_step']['median']:13.3f} {sd:>16} {row['peak_rss_gib']['median']:12.2f} "
              f"{row['max_pixel_diff_vs_bf16']:7d}")
    print(f"  load average before {[round(x, 2) for x in load_before]}, after {[round(x, 2) for x in load_after]} "
          f"(1/5/15 min) on {os.cpu_count()} cores")
    result = {"config": vars(a), "load_average_before": load_before, "load_average_after": load_after, "rows": rows}
    (build / "bench" / "qwen_image_21_quant.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {build / 'bench' / 'qwen_image_21_quant.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
