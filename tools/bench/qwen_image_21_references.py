#!/usr/bin/env python3
"""The prefix KV cache with condition images (issue 29): ddo-host with 3 references, cache on against off, on the
same work, on the CPU: Qwen-Image 2.1 transformer blocks at the real width (4096, 32 heads x 128, mlp_ratio 3),
random weights, computed in fp32.

Usage (tools/ddo bench qwen_image_21_references [options] -> tools/bench/run_qwen_image_21_references.sh BUILD ...):
  qwen_image_21_references.py BUILD [--blocks 4] [--size 256] [--refs 3] [--steps 4] [--rounds 2] [--threads N]

The checkpoint is the bf16 bench checkpoint (tools/bench/qwen_image_21_bench_checkpoint.py: transformer, VAE,
scheduler) copied with a text encoder added (BUILD/bench/<checkpoint>_refs/, cached): a Qwen3VLForConditionalGeneration
whose language model has the DiT's text width (4096: 32 heads x 128, 8 KV heads, one layer, MLP 1024) and a small
vision tower (2 blocks of width 64, patch 16, merge 2, out 4096), random bf16 weights, with the tiny tokenizer of the
parity fixtures and a Qwen3-VL image processor config (patch 16, merge 2, mean = std = 0.5). The text side is not
what this bench measures: it exists so that ddo-host runs the whole reference path (vision tower, the prompt with
vision slots, the VAE encoder, the joint sequence).

The references are --refs PNG files of --size x --size pixels (random, seeded) at output_resolution = --size, so each
adds (size / 16)^2 tokens to the transformer's sequence, as many as the target. Each round runs, in a fresh process
each and interleaved, ddo-host with plugin.qwen_image_21.use_kv_cache = true and = false, resident route, --steps
steps, seed 0, workload.precision = fp32. Per run: the steady step (median of the denoise steps after the first,
host wall clock from the report: with the cache, step 0 computes the whole sequence and fills the cache, later steps
only the target's tokens), the first step, counters.kv_cache (bytes, hits), peak RSS, and the max pixel difference
between the two (the cache changes rounding only). Printed: medians over rounds with min-max and the ratio off / on
of the steady step. Written to BUILD/bench/qwen_image_21_references.json. A benchmark prints figures; no test asserts
on them (docs/benchmarks.md).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))
import qwen_image_21_bench_checkpoint as ckpt_mod  # noqa: E402
from qwen_image_21_quant import summary  # noqa: E402  (median, min, max over the rounds: one definition)


def add_text_encoder(src: Path) -> Path:
    """The bench checkpoint with a Qwen3-VL text encoder (text width 4096) and a processor, cached beside it."""
    dst = src.parent / f"{src.name}_refs"
    if (dst / "bench_refs.json").exists():
        return dst
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    import qwen_image_21_text_fixtures as text
    import qwen_image_21_reference_fixtures as refs
    print(f"bench: adding a Qwen3-VL text encoder (width 4096) to {src.name} in {dst}", flush=True)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    processor = refs.build_processor()
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                      "<|vision_end|>"]}
    cfg = Qwen3VLConfig(
        text_config=dict(hidden_size=4096, intermediate_size=1024, num_hidden_layers=1, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6, vocab_size=len(tok),
                         max_position_embeddings=32768,
                         rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=4096,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=256,
                           deepstack_visual_indexes=[0]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(29)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) * p[0].numel() ** -0.5)
    model.to(torch.bfloat16).save_pretrained(dst / "text_encoder", safe_serialization=True)
    proc = dst / "processor"
    processor.tokenizer.save_pretrained(proc)
    processor.image_processor.save_pretrained(proc)
    (proc / "chat_template.jinja").write_text(text.CHAT_TEMPLATE)
    index = json.loads((dst / "model_index.json").read_text())
    index.update({"text_encoder": ["transformers", "Qwen3VLForConditionalGeneration"],
                  "processor": ["transformers", "Qwen3VLProcessor"]})
    (dst / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    (dst / "bench_refs.json").write_text(json.dumps({"source": src.name, "text_width": 4096}) + "\n")
    return dst


def make_refs(work: Path, n: int, size: int):
    import numpy as np
    from PIL import Image
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2900)
    files = []
    for i in range(n):
        f = work / f"ref_{i}.png"
        low = rng.integers(0, 256, size=(size // 16, size // 16, 3)).astype(np.uint8)
        Image.fromarray(low, "RGB").resize((size, size), Image.Resampling.BICUBIC).save(f)
        files.append(f)
    return files


def run_ddo(build: Path, ckpt: Path, refs, cache: bool, a, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    args = [str(build / "bin" / "ddo-host"), "--plugin", "qwen_image", "--preset", "off.toml", "--model", str(ckpt),
            "-p", "put the three objects together on a table", "--steps", str(a.steps), "--width", str(a.size),
            "--height", str(a.size), "--seed", "0", "--set", "workload.precision=fp32",
            "--set", f"plugin.qwen_image_21.output_resolution={a.size}",
            "--set", f"plugin.qwen_image_21.use_kv_cache={'true' if cache else 'false'}",
            "--set", "vae.strategy=resident", "--output", str(out), "--report", str(out / "report.json"),
            "--overwrite", "-q"]
    for f in refs:
        args += ["--image", str(f)]
    subprocess.run(args, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    rep = json.loads((out / "report.json").read_text())
    steps = [s["host_wall_s"] for s in rep["steps"] if s["phase"] == "denoise"]
    from PIL import Image
    import numpy as np
    return {"steps_s": steps, "kv_cache": rep["counters"].get("kv_cache"),
            "prefix_tokens": rep["counters"].get("kv_cache", {}).get("prefix_tokens"),
            "references": rep["workload"].get("references"),
            "peak_rss_bytes": rep["memory"]["rss"]["kernel_hwm_bytes"],
            "pixels": np.asarray(Image.open(out / "image.png"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--refs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    build = Path(a.build).resolve()
    src = ckpt_mod.ensure_checkpoint(build / "bench", a.blocks, "bf16", tiny=False, log=lambda m: print(m, flush=True))
    ckpt = add_text_encoder(src)
    work = build / "bench" / "qwen_image_21_references"
    refs = make_refs(work / "refs", a.refs, a.size)
    load_before = os.getloadavg()
    runs = {True: [], False: []}
    for rnd in range(a.rounds):
        for cache in (True, False):
            print(f"bench: round {rnd + 1}/{a.rounds}: kv cache {'on' if cache else 'off'}", flush=True)
            runs[cache].append(run_ddo(build, ckpt, refs, cache, a, work / f"run_{'on' if cache else 'off'}"))
    load_after = os.getloadavg()
    import numpy as np
    px = int(np.abs(runs[True][0]["pixels"].astype(int) - runs[False][0]["pixels"].astype(int)).max())
    rows = {}
    for cache in (True, False):
        rs = runs[cache]
        rows[cache] = {"steady": summary([statistics.median(r["steps_s"][1:]) for r in rs]),
                       "first": summary([r["steps_s"][0] for r in rs]),
                       "peak_rss_gib": statistics.median(r["peak_rss_bytes"] for r in rs) / 2**30,
                       "kv_cache": rs[0]["kv_cache"]}
    on, off = rows[True], rows[False]
    tokens = rs[0]["references"]
    print(f"\n== Qwen-Image 2.1 transformer, {a.blocks} blocks at width 4096, fp32 compute, {a.size}x{a.size}, "
          f"{a.refs} references of {a.size}x{a.size} ({sum(r['latent_tokens'] for r in tokens)} reference tokens, "
          f"{(a.size // 16) ** 2} target tokens), {a.steps} steps, {a.rounds} rounds, {a.threads} threads")
    for name, r in (("kv cache on", on), ("kv cache off", off)):
        s, f = r["steady"], r["first"]
        kv = r["kv_cache"] or {}
        print(f"  {name:<13} steady step {s['median']:.3f} s ({s['min']:.3f}-{s['max']:.3f}), first step "
              f"{f['median']:.3f} s, cache {kv.get('bytes', 0) / 2**20:.1f} MiB ({kv.get('where')}), hits "
              f"{kv.get('hits', 0)}, prefix tokens {kv.get('prefix_tokens')}, peak RSS {r['peak_rss_gib']:.2f} GiB")
    ratio = off["steady"]["median"] / on["steady"]["median"]
    print(f"  steady step off / on: {ratio:.2f}x; max pixel difference on vs off {px}/255 (the cache changes rounding "
          f"only)")
    print(f"  load average before {[round(x, 2) for x in load_before]}, after {[round(x, 2) for x in load_after]}")
    out = build / "bench" / "qwen_image_21_references.json"
    out.write_text(json.dumps({"args": vars(a), "rows": {"on": on, "off": off}, "ratio_off_on": ratio,
                               "pixel_diff": px, "time": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=2,
                              default=str) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
