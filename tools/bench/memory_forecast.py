#!/usr/bin/env python3
"""The memory forecast against the measured peaks (issue 42; Note [Memory forecast] in docs/architecture.md).

Usage (tools/ddo bench memory_forecast [options] -> tools/bench/run_memory_forecast.sh BUILD [options]):
  memory_forecast.py BUILD [--only fixtures|real] [--json OUT]

Each configuration is one ddo-host run on the CPU (a fresh process); its report's `forecast` holds, per phase, the
forecast device and host peaks and the measured ones (LibTorch's CPU allocations, counted exactly by ddo's counting
allocator, plus the engine's buffers). Printed: one row per configuration and phase with both figures and their
ratio, and the largest |ratio - 1|. Configurations: the parity fixtures of qwen_image_21 and ltx2_video (tiny blocks,
many tokens) and the benchmarks' real-width checkpoints (Qwen-Image 2.1 blocks of width 4096, mlp_ratio 3; LTX-2.3
blocks of width 4096 / 2048), each at several sizes, with and without guidance, on the resident, dynamic and disk
routes. Writes BUILD/bench/memory_forecast.json. A benchmark prints figures; the tolerance test is
tests/e2e/memory_forecast_test.cpp.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from forecast_summary import line, rows_of, summary  # noqa: E402


def ltx2_sigmas(build: Path) -> str:
    ref = json.loads((build / "fixtures" / "ltx2_pipeline" / "reference.json").read_text())
    return ",".join(json.dumps(v) for v in ref["cases"]["23"]["settings"]["sigmas"])


def configurations(build: Path, only: str):
    q = build / "fixtures" / "qwen_image_21"
    qargs = ["--plugin", "qwen_image", "--model", str(q / "checkpoint"), "--prompt-embeds",
             str(q / "prompt_embeds.safetensors"), "--steps", "2"]
    l = build / "fixtures" / "ltx2_pipeline"
    largs = ["--plugin", "ltx2", "--model", str(l / "checkpoint_23"), "--prompt-embeds",
             str(l / "prompt_embeds.safetensors"), "--fps", "25", "--set", f"workload.sigmas=[{ltx2_sigmas(build)}]"]
    im = build / "fixtures" / "ltx2_image"
    iargs = ["--plugin", "ltx2_image", "--model", str(im / "checkpoint"), "--prompt-embeds",
             str(im / "prompt_embeds.safetensors"), "--steps", "2"]
    qq = build / "fixtures" / "qwen_image_21_quant"
    quant = lambda v: ["--plugin", "qwen_image", "--model", str(qq / v), "--prompt-embeds",
                       str(qq / "prompt_embeds.safetensors"), "--steps", "2"]
    qc = build / "fixtures" / "qwen_image_21_cache"
    cache = ["--plugin", "qwen_image", "--model", str(qc / "checkpoint"), "--prompt-embeds",
             str(qc / "prompt_embeds.safetensors")]
    qt = build / "fixtures" / "qwen_image_21_text"
    demo = ["--plugin", "qwen_image", "--preset", "low_ram_safe", "--model", str(qt / "checkpoint"), "-p",
            "a lighthouse at dusk, watercolor", "-n", "blurry, low quality", "--cfg-scale", "4", "--steps", "4"]
    guided = ["--cfg-scale", "3", "--set", "plugin.ltx2_video.stg_blocks=[1]",
              "--set", "plugin.ltx2_video.audio_guidance_scale=7"]
    out = []
    if only in ("all", "fixtures"):
        out += [
            ("qwen_image_21 fixture 256x256", qargs + ["--width", "256", "--height", "256"]),
            ("qwen_image_21 fixture 1024x1024", qargs + ["--width", "1024", "--height", "1024"]),
            ("qwen_image_21 fixture 768x512 CFG, 2 images", qargs + ["--width", "768", "--height", "512", "--cfg-scale", "4",
                                                                    "--num-images", "2"]),
            ("qwen_image_21 fixture 1024x1024 disk", qargs + ["--width", "1024", "--height", "1024", "--set",
                                                              "components.transformer.route=disk"]),
            ("qwen_image_21 fixture 512x512 low_ram_safe", qargs + ["--preset", "low_ram_safe", "--width", "512", "--height", "512"]),
            ("qwen_image_21 text fixture 256x256, the demo's text prompt, CFG", demo + ["--width", "256", "--height", "256"]),
            ("qwen_image_21 quant fixture 512x512 GGUF Q8_0", quant("gguf_q8_0") + ["--width", "512", "--height", "512"]),
            ("qwen_image_21 quant fixture 512x512 SDNQ int8, disk", quant("sdnq_int8") + ["--width", "512", "--height", "512",
                                                                                          "--set", "components.transformer.route=disk"]),
            ("qwen_image_21 cache fixture 512x512 first_block", cache + ["--width", "512", "--height", "512", "--steps", "4",
                                                                        "--cache", "first_block", "--set", "cache.threshold=0.8",
                                                                        "--set", "cache.allow_few_steps=true"]),
            ("ltx2_video fixture 96x96x9 CFG+STG+isolation", largs + ["--width", "96", "--height", "96", "--frames", "9"] + guided),
            ("ltx2_video fixture 128x64x17 unguided", largs + ["--width", "128", "--height", "64", "--frames", "17", "--cfg-scale",
                                                              "1", "--set", "plugin.ltx2_video.audio_guidance_scale=1",
                                                              "--set", "plugin.ltx2_video.modality_scale=1",
                                                              "--set", "plugin.ltx2_video.stg_scale=0"]),
            ("ltx2_video fixture 64x64x9 disk", largs + ["--width", "64", "--height", "64", "--frames", "9", "--set",
                                                         "components.transformer.route=disk"]),
            ("ltx2_image fixture 256x256 CFG+PAG", iargs + ["--width", "256", "--height", "256", "--cfg-scale", "3", "--set",
                                                           "plugin.ltx2_image.pag_scale=1", "--set",
                                                           "plugin.ltx2_image.pag_applied_layers=[0]"]),
            ("ltx2_image fixture 192x128 unguided", iargs + ["--width", "192", "--height", "128", "--cfg-scale", "1"]),
        ]
    if only in ("all", "real"):
        import qwen_image_21_bench_checkpoint as qck
        import ltx2_video_bench_checkpoint as lck
        qc = qck.ensure_checkpoint(build / "bench", 2, "fp32", False)
        qr = ["--plugin", "qwen_image", "--preset", "off.toml", "--model", str(qc), "--prompt-embeds",
              str(qc / "prompt_embeds.safetensors"), "--steps", "2"]
        lc = lck.ensure_checkpoint(build / "bench", 3, "bf16")
        le = lck.ensure_prompt_embeds(lc, 128)
        lr = ["--plugin", "ltx2", "--preset", "off.toml", "--model", str(lc), "--prompt-embeds", str(le), "--steps", "2",
              "--fps", "24"]
        out += [
            ("qwen_image_21 w4096 x2 blocks 256x256", qr + ["--width", "256", "--height", "256"]),
            ("qwen_image_21 w4096 x2 blocks 1024x1024", qr + ["--width", "1024", "--height", "1024"]),
            ("qwen_image_21 w4096 x2 blocks 512x512 disk", qr + ["--width", "512", "--height", "512", "--set",
                                                                 "components.transformer.route=disk"]),
            ("qwen_image_21 w4096 x2 blocks 512x512 dynamic, 1 resident", qr + ["--width", "512", "--height", "512", "--set",
                                                                              "components.transformer.route=dynamic", "--set",
                                                                              "components.transformer.resident_budget_gb=1"]),
            ("ltx2_video w4096 x3 blocks (bf16, fp32 compute) 256x256x17", lr + ["--width", "256", "--height", "256", "--frames", "17"]),
            ("ltx2_video w4096 x3 blocks 256x256x9 disk", lr + ["--width", "256", "--height", "256", "--frames", "9", "--set",
                                                                "components.transformer.route=disk"]),
        ]
    return out


def run(build: Path, args, work: Path):
    report = work / "report.json"
    p = subprocess.run([str(build / "bin" / "ddo-host"), *args, "--output", str(work), "--report", str(report),
                        "--overwrite", "-q"], capture_output=True, text=True)
    rep = json.loads(report.read_text()) if report.exists() else None
    return p.returncode, rep, p.stderr[-2000:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", type=Path)
    ap.add_argument("--only", choices=["all", "fixtures", "real"], default="all")
    ap.add_argument("--match", default="", help="only the configurations whose name contains this")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    build = a.build.resolve()
    rows = []
    for name, args in configurations(build, a.only):
        if a.match not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="ddo_forecast_") as d:
            code, rep, err = run(build, args, Path(d))
        if code != 0 or not rep or not isinstance(rep.get("forecast"), dict):
            print(f"{name}: exit {code}\n{err}", flush=True)
            rows.append({"config": name, "exit_code": code})
            continue
        for r in rows_of(rep, name):
            rows.append(r)
            print(line(r), flush=True)
    print(summary([r for r in rows if "phase" in r]))
    out = a.json or build / "bench" / "memory_forecast.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
