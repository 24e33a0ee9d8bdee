#!/usr/bin/env python3
"""Matched benchmark of a model plugin against the peers (issue 13; rules: docs/benchmarks.md, seeds 003/004).

Usage (tools/ddo bench model [options] -> tools/bench/run_model.sh BUILD [options]):
  model_bench.py BUILD [--plugin qwen_image_21] [--device cpu|cuda] [--budget-gb N] [--depth N] [--size WxH]
                       [--steps N] [--rounds N] [--dtype fp32|bf16] [--threads N] [--variants a,b,...]
                       [--name NAME] [--tiny] [--check] [--dry-run] [--run-timeout S]
                       [--quant q8_0,q4_k,fp8,sdnq_int8,sdnq_uint4] [--quant-presets off,low_ram_safe]

One checkpoint with random weights at the model's real block shapes (`--depth` blocks; cached under BUILD/bench),
one workload (size, steps, seed 0, dtype, the same prompt embeddings), and in one session, interleaved in rounds,
each run in a fresh process:
  - ddo-host with the presets that matter: off (resident, when it fits the budget), one_shot_fast, low_ram_safe,
    diffusers_offload_compat, diffusers_leaf_offload_compat; `capacities.device_budget_gb` = the budget; the VAE
    decodes resident in every run (`vae.strategy=resident`), as in the controls, so the decode phase is the same work;
  - the controls, in Python on the same checkpoint: diffusers without offload (when it fits), diffusers
    `enable_group_offload` block_level (one block per group) and leaf_level, with `use_stream=True` and
    `low_cpu_mem_usage=True` on CUDA (the CPU has no streams: `use_stream=False` there, said in the table), and the
    original Python DDO (PyPI diffusers-dynamic-offloader 0.1.0rc2) one_shot_fast / low_ram_safe when the bench
    environment has it (tools/reference/requirements-bench.txt; otherwise those rows say why they are missing).
    On CUDA the budget binds the controls through torch.cuda.set_per_process_memory_fraction (and DDO 0.1.0rc2's
    planner is told the budget as the device's total memory, the only size it reads).
With --quant, the same checkpoint's transformer quantized by the ecosystem's own writers (gguf-py, Lightricks' scaled
fp8 layout, sdnq 0.2.8: tools/bench/qwen_image_21_quant.py make_quantized, cached beside it) adds rows
"ddo <preset> <quant>" for each --quant-presets preset, beside the dense rows of the same presets: their streamed
bytes against the dense row's (x0.5 expected for 8-bit, x0.28-0.31 for 4-bit) and their decode time per step
(counters.transformer.quantization.dequant_s; on CUDA the host clock of the enqueueing). Their pixels differ from the
control by the quantization error: shown for information, not judged against the tolerance.
Round 1 of every variant is its warm-up (page cache, allocator, kernels) and is excluded unless --rounds 1.
Per run: setup, transformer prepare, step 0, steady step (median/min/max), denoise, decode, total (host wall
clock; on CUDA also CUDA-event step times, a separate field), peak RSS, peak device memory (absolute and
baseline-relative; CUDA only), bytes streamed per step, output hash and max pixel difference against the control.
A physical-bound column: step / max(compute-only step, bytes per step / link bandwidth), with the link measured at
start-up (CUDA: pinned and pageable host->device, one 1 GiB copy each by default, --link-bytes;
CPU: one host memory copy).
Writes BUILD/bench/<name>.json and BUILD/bench/<name>.md (one workload, column explanations above the table);
--check exits 1 when a column is missing or an output differs from the control beyond the tolerance (the CI smoke
uses it with --tiny). --dry-run lists what would run, and why parts are skipped, without running anything.
A benchmark prints figures; nothing here asserts a time.
"""

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import qwen_image_21_bench_checkpoint as ckpt_mod  # noqa: E402

QUANTS = ["q8_0", "q4_k", "fp8", "sdnq_int8", "sdnq_uint4"]  # qwen_image_21_quant.QUANTS (imported lazily: torch)

DDO_PRESETS = ["off", "one_shot_fast", "low_ram_safe", "diffusers_offload_compat", "diffusers_leaf_offload_compat"]
CONTROLS = ["diffusers", "diffusers group_offload block_level", "diffusers group_offload leaf_level",
            "DDO-0.1.0rc2 one_shot_fast", "DDO-0.1.0rc2 low_ram_safe"]
PIXEL_TOLERANCE = {"fp32": 1, "bf16": 4, "fp16": 4}  # max |diff| of 8-bit pixels to the control for a valid entry
COLUMNS = ["variant", "status", "setup_s", "transformer_prepare_s", "step0_s", "steady_step_s", "denoise_s", "decode_s",
           "total_s", "clock", "peak_rss_gib", "peak_device_abs_gib", "peak_device_delta_gib", "streamed_gb_per_step",
           "bound_ratio", "max_pixel_diff", "output_sha256"]


# ---------------------------------------------------------------------------------------------------------- children

def _peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _DeviceSampler:
    """Absolute device memory in use (cudaMemGetInfo: all processes and contexts) every 20 ms, and its baseline."""

    def __init__(self, torch):
        self.torch = torch
        free, total = torch.cuda.mem_get_info()
        self.baseline = total - free
        self.peak = self.baseline
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            free, total = self.torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.02)

    def finish(self):
        self.stop = True
        self.t.join()
        return self.peak, self.peak - self.baseline


def control_child(spec):
    """One control run in this fresh process; writes spec['out'] (JSON) and the pixels (.npy)."""
    import numpy as np
    import torch
    torch.set_num_threads(spec["threads"])
    device, dtype = spec["device"], spec["dtype"]
    variant = spec["variant"]
    rec = {"variant": variant, "kind": "control", "status": "completed", "notes": []}
    cuda = device == "cuda"
    if cuda and spec["budget_gb"]:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, spec["budget_gb"] * 2**30 / total), 0)
        rec["notes"].append(f"torch.cuda.set_per_process_memory_fraction: {spec['budget_gb']} GiB of {total / 2**30:.1f}")
    sampler = _DeviceSampler(torch) if cuda else None
    t0 = time.perf_counter()
    pipe, embeds, t_transformer, t_rest = ckpt_mod.make_pipeline(Path(spec["ckpt"]), dtype)
    t_apply0 = time.perf_counter()
    tr = pipe.transformer
    streamed_per_step = None
    streamed_reason = None
    transformer_bytes = sum(p.numel() * p.element_size() for p in tr.parameters())
    if variant == "diffusers":
        tr.to(device)
        streamed_per_step, streamed_reason = 0, "nothing streams: the transformer is resident"
    elif variant.startswith("diffusers group_offload"):
        level = variant.split()[-1]
        kw = dict(onload_device=torch.device(device), offload_device=torch.device("cpu"), offload_type=level,
                  use_stream=cuda, low_cpu_mem_usage=cuda)
        if level == "block_level":
            kw["num_blocks_per_group"] = 1
        tr.enable_group_offload(**kw)
        rec["notes"].append("enable_group_offload(" + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")")
        if cuda:
            streamed_per_step = transformer_bytes  # every group is onloaded once per forward
        else:
            streamed_per_step, streamed_reason = 0, "onload device = offload device (cpu): no copies"
    elif variant.startswith("DDO-0.1.0rc2"):
        preset = variant.split()[-1]
        try:
            import diffusers_dynamic_offloader as ddo_py
            from diffusers_dynamic_offloader import dynamic_offload as ddo_impl
        except ImportError as e:
            rec.update(status="unavailable", reason=f"diffusers-dynamic-offloader is not installed in the bench "
                                                    f"environment ({e}); tools/reference/requirements-bench.txt")
            Path(spec["out"]).write_text(json.dumps(rec) + "\n")
            return
        if cuda and spec["budget_gb"]:
            ddo_impl.get_cuda_total_vram_gb = lambda *a, **k: float(spec["budget_gb"])
            rec["notes"].append(f"get_cuda_total_vram_gb -> {spec['budget_gb']} (its planner's only device size)")
        result = ddo_py.enable_offload(tr, preset=preset, component="transformer", execution_device=device)
        rec["ddo_py_route"] = getattr(result, "route", None)
        rec["notes"].append(f"enable_offload(transformer, preset={preset!r}, execution_device={device!r})")
        streamed_reason = "DDO 0.1.0rc2: see its metrics (ddo_py_metrics)"
    else:
        raise SystemExit(f"unknown control {variant!r}")
    pipe.vae.to(device)
    prepare_s = t_transformer + (time.perf_counter() - t_apply0)
    setup_s = time.perf_counter() - t0
    embeds = embeds.to(device)
    marks, events = [], []

    def on_step(p, i, t, kw):
        marks.append(time.perf_counter())
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            events.append(e)
        return kw

    with torch.no_grad():
        if cuda:
            e0 = torch.cuda.Event(enable_timing=True)
            e0.record()
            events.append(e0)
        start = time.perf_counter()
        image = pipe(prompt_embeds=embeds, height=spec["height"], width=spec["width"],
                     num_inference_steps=spec["steps"], generator=torch.Generator().manual_seed(0), output_type="np",
                     callback_on_step_end=on_step, return_dict=False)[0]
        if cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
    steps_s = [marks[0] - start] + [b - a for a, b in zip(marks, marks[1:])]
    rec.update(setup_s=setup_s, transformer_prepare_s=prepare_s, steps_s=steps_s, denoise_s=marks[-1] - start,
               decode_s=end - marks[-1], total_s=setup_s + (end - start), clock="host wall",
               peak_rss_bytes=_peak_rss_bytes(), streamed_bytes_per_step=streamed_per_step,
               streamed_reason=streamed_reason, transformer_bytes=transformer_bytes,
               decode_note="from the last step callback to the call's return (decode + postprocess)")
    if cuda:
        rec["steps_cuda_event_s"] = [a.elapsed_time(b) / 1000 for a, b in zip(events, events[1:])]
        rec["peak_device_abs_bytes"], rec["peak_device_delta_bytes"] = sampler.finish()
        rec["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    else:
        rec["device_reason"] = "CPU run: no device memory"
    if variant.startswith("DDO-0.1.0rc2"):
        try:
            rec["ddo_py_metrics"] = result.metrics_snapshot().as_dict().get("runtime")
        except Exception as e:  # its metrics API is optional to this record
            rec["ddo_py_metrics_reason"] = str(e)
    pixels = (image[0] * 255).round().astype("uint8")
    np.save(Path(spec["out"]).with_suffix(".npy"), pixels)
    Path(spec["out"]).write_text(json.dumps(rec) + "\n")


# ------------------------------------------------------------------------------------------------------------ runs

def _env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")


def run_control(py, variant, a, ckpt, work):
    out = work / (variant.replace(" ", "_").replace(".", "") + ".json")
    for f in (out, out.with_suffix(".npy")):
        f.unlink(missing_ok=True)
    spec = dict(variant=variant, ckpt=str(ckpt), device=a.device, dtype=a.dtype, budget_gb=a.budget_gb,
                width=a.width, height=a.height, steps=a.steps, threads=a.threads, out=str(out))
    try:
        p = subprocess.run([py, __file__, "--child", json.dumps(spec)], env=_env(a.threads), capture_output=True,
                           text=True, timeout=a.run_timeout or None)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "status": "failed", "reason": f"timed out after {a.run_timeout} s (--run-timeout)"}
    if p.returncode != 0 or not out.exists():
        return {"variant": variant, "status": "failed", "reason": (p.stderr.strip().splitlines() or ["?"])[-1]}
    rec = json.loads(out.read_text())
    if out.with_suffix(".npy").exists():
        rec["pixels_file"] = str(out.with_suffix(".npy"))
    return rec


def _steady_streamed(steps, total, n):
    """Bytes streamed per steady step from the report's per-step engine figures (step 0 also carries the resident
    uploads), else the run's total over its steps."""
    per = [((s.get("extra") or {}).get("engine") or {}).get("transformer", {}).get("bytes_streamed") for s in steps]
    per = [b for b in per[1:] if b is not None]
    return statistics.median(per) if per else total / max(1, n)


def run_ddo(build, preset, a, ckpt, work, quant=None):
    name = f"ddo {preset}" + (f" {quant}" if quant else "")
    out = work / name.replace(" ", "_")
    out.mkdir(parents=True, exist_ok=True)
    args = [str(build / "bin" / "ddo-host"), "--plugin", a.plugin, "--preset", f"{preset}.toml", "--model", str(ckpt),
            "--prompt-embeds", str(ckpt / "prompt_embeds.safetensors"), "--steps", str(a.steps), "--width",
            str(a.width), "--height", str(a.height), "--seed", "0", "--set", f"workload.precision={a.dtype}",
            "--set", "vae.strategy=resident", "--set", f"capacities.allocator_backend={'host' if a.device == 'cpu' else 'cuda'}",
            "--output", str(out), "--report", str(out / "report.json"), "--overwrite", "-q"]
    if a.budget_gb:
        args += ["--set", f"capacities.device_budget_gb={a.budget_gb}"]
    env = _env(a.threads)
    # Libraries ddo-host needs that the Python controls must not see (tools/device/gpu-bench.sh: the carried Debian
    # libraries, which would shadow the device image's own zlib, OpenSSL, ... in the controls).
    if os.environ.get("DDO_BENCH_HOST_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["DDO_BENCH_HOST_LIBRARY_PATH"] + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    try:
        p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=a.run_timeout or None)
    except subprocess.TimeoutExpired:
        return {"variant": name, "status": "failed", "reason": f"timed out after {a.run_timeout} s (--run-timeout)"}
    rep_file = out / "report.json"
    if not rep_file.exists():
        return {"variant": name, "status": "failed", "reason": (p.stderr.strip().splitlines() or ["?"])[-1]}
    rep = json.loads(rep_file.read_text())
    if rep.get("status") != "completed":
        err = rep.get("error") or {}
        return {"variant": name, "status": "failed",
                "reason": f"exit {rep.get('exit_code')}: {err.get('message', err) if isinstance(err, dict) else err}"}
    steps = [s for s in rep["steps"] if s["phase"] == "denoise"]
    phases = {p["name"]: p["host_wall_s"] for p in rep["phases"]}
    eng = rep["counters"]["transformer"]["engine"]
    c = eng["counters"]
    moved = c["bytes_moved"]
    streamed = moved["pinned"] + moved["pageable"] + moved["file"]
    mem = rep["memory"]
    q = rep["counters"]["transformer"].get("quantization") or {}
    rec = {"variant": name, "status": "completed", "quant": quant,
           "dequant_s_per_step": (q.get("dequant_s") or 0.0) / max(1, len(steps)),
           "stored_bytes": q.get("stored_bytes"), "formats": q.get("formats"),
           "setup_s": phases.get("setup", 0) + phases.get("load", 0),
           # ddo prepares the transformer in load (headers, plan, engine) and in the engine's phase begin, which
           # runs inside step 0 (host copies, resident uploads): step 0 carries that part, as diffusers' does not.
           "transformer_prepare_s": phases.get("load"), "steps_s": [s["host_wall_s"] for s in steps],
           "denoise_s": phases.get("denoise"), "decode_s": phases.get("decode"),
           "total_s": rep["timing"]["tracked_total_host_s"],
           "clock": "host wall" + (" (each step ends in a device sync)" if a.device == "cuda" else ""), "kind": "ddo",
           "peak_rss_bytes": mem["rss"]["kernel_hwm_bytes"],
           "streamed_bytes_per_step": _steady_streamed(steps, streamed, a.steps), "transformer_bytes": None,
           "stall_s_per_step": [((s.get("extra") or {}).get("engine") or {}).get("transformer", {}).get("stall_s")
                                for s in steps],
           "upload_gb_per_s": c.get("upload_gb_per_s"), "link": c.get("link"),
           "route": rep["counters"]["transformer"].get("route"), "engine_counters": c,
           "telemetry_cpu_fraction": rep["sampler"]["cpu_fraction_of_wall"], "report": str(rep_file)}
    if any(s.get("cuda_event_ms") is not None for s in steps):
        rec["steps_cuda_event_s"] = [None if s["cuda_event_ms"] is None else s["cuda_event_ms"] / 1000 for s in steps]
    if a.device == "cuda":
        rec["peak_device_abs_bytes"] = mem["gpu_absolute"]["peak_bytes"]
        rec["peak_device_delta_bytes"] = mem["gpu_delta"]["peak_bytes"]
        if rec["peak_device_abs_bytes"] is None:
            rec["device_reason"] = mem["gpu_absolute"]["reason"]
    else:
        rec["device_reason"] = "CPU run: no device memory"
    from PIL import Image
    import numpy as np
    img = out / "image.png"
    arr = np.asarray(Image.open(img))  # channels as written (the tiny VAE decodes 4)
    np.save(out / "pixels.npy", arr)
    rec["pixels_file"] = str(out / "pixels.npy")
    return rec


def measure_link(py, device, nbytes):
    """Host->device bandwidth, one large copy each (CUDA: pinned and pageable; CPU: host memory copy)."""
    code = r"""
import json, time, torch
n = NBYTES
if DEVICE == "cuda":
    src_pin = torch.empty(n, dtype=torch.uint8, pin_memory=True); src_pin.fill_(1)
    src_page = torch.empty(n, dtype=torch.uint8); src_page.fill_(1)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for name, src in (("pinned", src_pin), ("pageable", src_page)):
        dst.copy_(src, non_blocking=False); torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); dst.copy_(src, non_blocking=(name == "pinned")); b.record(); torch.cuda.synchronize()
        out[name + "_gb_per_s"] = n / (a.elapsed_time(b) / 1000) / 1e9
    out["clock"] = "CUDA events around one copy"
else:
    src = torch.ones(n, dtype=torch.uint8); dst = torch.zeros(n, dtype=torch.uint8)
    dst.copy_(src); best = None
    for _ in range(3):
        t = time.perf_counter(); dst.copy_(src); s = time.perf_counter() - t
        best = s if best is None else min(best, s)
    out = {"host_copy_gb_per_s": n / best / 1e9, "clock": "host wall, best of 3 copies (torch copy_)"}
out["bytes"] = n
print(json.dumps(out))
""".replace("DEVICE", repr(device)).replace("NBYTES", str(int(nbytes)))
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, env=_env(1))
    if p.returncode != 0:
        return {"reason": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------- summary

def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(name, recs, measured_rounds, control_pixels):
    import numpy as np
    done = [r for r in recs if r.get("status") == "completed"]
    if not done:
        r0 = recs[0]
        return {"variant": name, "status": r0.get("status", "failed"), "reason": r0.get("reason")}
    use = [done[i] for i in measured_rounds if i < len(done)] or done
    row = {"variant": name, "status": "completed", "runs": len(done), "measured_runs": len(use)}
    for k in ("setup_s", "transformer_prepare_s", "denoise_s", "decode_s", "total_s", "peak_rss_bytes",
              "peak_device_abs_bytes", "peak_device_delta_bytes", "streamed_bytes_per_step", "dequant_s_per_step"):
        row[k] = summary([r.get(k) for r in use])
    row["step0_s"] = summary([r["steps_s"][0] for r in use])
    row["steady_step_s"] = summary([statistics.median(r["steps_s"][1:]) for r in use if len(r["steps_s"]) > 1])
    row["clock"] = use[0]["clock"]
    if any(r.get("steps_cuda_event_s") for r in use):
        row["steady_step_cuda_event_s"] = summary(
            [statistics.median([x for x in r["steps_cuda_event_s"][1:] if x is not None] or [None])
             for r in use if r.get("steps_cuda_event_s")])
        if use[0].get("kind") == "control":
            # The controls' callbacks return before the GPU has finished a step (nothing synchronizes), so their
            # host intervals are enqueue times; the CUDA events recorded in the same callbacks are the device's.
            # ddo's steps end in a device sync (its finite check), so its host wall is completed work.
            row["steady_step_host_wall_s"] = row["steady_step_s"]
            row["step0_host_wall_s"] = row["step0_s"]
            row["steady_step_s"] = row["steady_step_cuda_event_s"]
            row["step0_s"] = summary([r["steps_cuda_event_s"][0] for r in use if r.get("steps_cuda_event_s")])
            row["clock"] = "CUDA events (callback to callback)"
    for k in ("device_reason", "streamed_reason", "notes", "route", "ddo_py_route", "quant", "stored_bytes", "formats"):
        if use[0].get(k) is not None:
            row[k] = use[0][k]
    pix = [np.load(r["pixels_file"]) for r in use if r.get("pixels_file")]
    if pix:
        row["output_sha256"] = hashlib.sha256(pix[0].tobytes()).hexdigest()
        row["outputs_identical_across_runs"] = all(np.array_equal(p, pix[0]) for p in pix)
        if control_pixels is not None:
            row["max_pixel_diff"] = int(max(np.abs(p.astype(int) - control_pixels.astype(int)).max() for p in pix))
    if "telemetry_cpu_fraction" in use[0]:
        row["telemetry_cpu_fraction"] = summary([r["telemetry_cpu_fraction"] for r in use])
    return row


def _f(v, fmt="{:.3f}"):
    return "n/a" if v is None else fmt.format(v)


def markdown(result):
    cfg = result["workload"]
    link = result["link"]
    lines = [f"### {result['name']}: {cfg['model']}, {cfg['width']}x{cfg['height']}, {cfg['steps']} steps, "
             f"{cfg['dtype']}, {cfg['device']}, device budget {cfg['budget_gb'] or 'none'} GiB", "",
             f"Command: `{result['command']}`. Machine: {result['machine']['cores']} cores, "
             f"load average {result['machine']['load_average_before']} before, "
             f"{result['machine']['load_average_after']} after. Control: **{result['control']}**. "
             f"{result['rounds_note']}", "",
             "Columns: *setup* — process start of the pipeline to ready (imports excluded; ddo: its setup + load "
             "phases); *prepare* — transformer load and offload apply (ddo: its load phase; its engine's phase "
             "begin — host copies, resident uploads — falls in step 0); *step 0*, *steady step* (median of steps "
             "1.. per run, then median over runs, min–max) in the row's *step clock*: host wall, except the Python "
             "controls on CUDA, whose callbacks return before the GPU finishes (nothing synchronizes), so their steps "
             "are CUDA events recorded in the same callbacks (host wall in the JSON); ddo's steps end in a device sync; "
             "*denoise*, *decode* (host wall); *total* — tracked total; *peak RSS* — the kernel's high-water "
             "mark (ru_maxrss / VmHWM), GiB; *peak device* — absolute device memory in use (all processes) and its "
             "delta over the run's baseline, GiB (CUDA only); *streamed* — bytes copied host→device per step, GB; "
             "*bound* — steady step / max(compute-only step, streamed / link bandwidth); *decode* — time decoding "
             "quantized weights per step (ddo's host clock: on CUDA the enqueueing; 0 for a dense checkpoint); "
             "*px diff* — max 8-bit "
             f"difference to the control (tolerance {result['pixel_tolerance']}; a quantized row's is its "
             "quantization error, for information); *sha256* — of the output pixels. "
             "n/a = unavailable (reason in the JSON), never zero.", "",
             f"Link: {json.dumps(link)}. Compute-only step: {_f(result['bound']['compute_step_s'])} s "
             f"({result['bound']['compute_from']}).", "",
             "| run | status | setup s | prepare s | step 0 s | steady step s (min–max) | ratio | step clock | denoise s | "
             "decode s | total s | peak RSS | peak device abs / delta | streamed GB/step | bound | dequant s/step | "
             "px diff | sha256 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ctrl = next((r for r in result["rows"] if r["variant"] == result["control"] and r["status"] == "completed"), None)
    for r in result["rows"]:
        if r["status"] != "completed":
            lines.append(f"| {r['variant']} | {r['status']}: {r.get('reason', '')} |" + " |" * 16)
            continue
        med = lambda k: (r.get(k) or {}).get("median")  # noqa: E731
        s = r["steady_step_s"] or {}
        ratio = (s.get("median") / ctrl["steady_step_s"]["median"]) if ctrl and s and ctrl.get("steady_step_s") else None
        dev = "n/a" if med("peak_device_abs_bytes") is None else \
            f"{med('peak_device_abs_bytes') / 2**30:.2f} / {med('peak_device_delta_bytes') / 2**30:.2f}"
        streamed = med("streamed_bytes_per_step")
        valid = "" if r.get("quant") or r.get("max_pixel_diff") is None or \
            r["max_pixel_diff"] <= result["pixel_tolerance"] else " (outputs differ: not a result)"
        lines.append(
            f"| {r['variant']}{valid} | {r['status']} | {_f(med('setup_s'), '{:.2f}')} | "
            f"{_f(med('transformer_prepare_s'), '{:.2f}')} | {_f(med('step0_s'))} | "
            f"{_f(s.get('median'))} ({_f(s.get('min'))}–{_f(s.get('max'))}) | {_f(ratio, '{:.2f}')} | {r['clock']} | "
            f"{_f(med('denoise_s'), '{:.2f}')} | {_f(med('decode_s'), '{:.2f}')} | {_f(med('total_s'), '{:.2f}')} | "
            f"{_f(med('peak_rss_bytes') and med('peak_rss_bytes') / 2**30, '{:.2f}')} | {dev} | "
            f"{_f(streamed and streamed / 1e9, '{:.2f}')} | {_f(r.get('bound_ratio'), '{:.2f}')} | "
            f"{_f(med('dequant_s_per_step'))} | "
            f"{r.get('max_pixel_diff', 'n/a')} | {r.get('output_sha256', 'n/a')[:12]} |")
    notes = [f"- {r['variant']}: {'; '.join(r['notes'])}" for r in result["rows"] if r.get("notes")]
    notes += quant_notes(result["rows"])
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def quant_notes(rows):
    """Per quantized row: its format counts, stored size, and streamed bytes and step against the dense row of the
    same preset (measured in the same rounds)."""
    out = []
    dense = {r["variant"]: r for r in rows if not r.get("quant") and r["status"] == "completed"}
    for r in rows:
        if not r.get("quant") or r["status"] != "completed":
            continue
        base = dense.get(r["variant"].rsplit(" ", 1)[0])
        med = lambda row, k: ((row or {}).get(k) or {}).get("median")  # noqa: E731
        sb, ss = med(base, "streamed_bytes_per_step"), med(base, "steady_step_s")
        st, s = med(r, "streamed_bytes_per_step"), med(r, "steady_step_s")
        parts = [f"formats {json.dumps(r.get('formats'))}",
                 f"stored {_f(r.get('stored_bytes') and r['stored_bytes'] / 1e9, '{:.2f}')} GB"]
        if base:
            parts.append(f"streamed x{_f(st / sb if st is not None and sb else None)} of {base['variant']}'s")
            parts.append(f"step x{_f(s / ss if s and ss else None)} of {base['variant']}'s")
        out.append(f"- {r['variant']}: " + "; ".join(parts))
    return out


def check(result, md):
    """CI smoke: every column present, every completed run's output within the tolerance of the control."""
    problems = []
    header = [line for line in md.splitlines() if line.startswith("| run |")]
    want = ["setup", "prepare", "step 0", "steady step", "step clock", "denoise", "decode", "total", "peak RSS", "peak device",
            "streamed", "bound", "dequant", "px diff", "sha256"]
    if not header:
        problems.append("the Markdown table has no header")
    else:
        problems += [f"column '{w}' missing from the table" for w in want if w not in header[0]]
    ctrl = [r for r in result["rows"] if r["variant"] == result["control"]]
    if not ctrl or ctrl[0]["status"] != "completed":
        problems.append(f"the control '{result['control']}' did not complete")
    for r in result["rows"]:
        if r["status"] == "completed":
            for k in ("steady_step_s", "step0_s", "peak_rss_bytes", "output_sha256"):
                if r.get(k) is None:
                    problems.append(f"{r['variant']}: {k} missing")
            if r.get("max_pixel_diff") is None or (r["max_pixel_diff"] > result["pixel_tolerance"] and not r.get("quant")):
                problems.append(f"{r['variant']}: output differs from the control by {r.get('max_pixel_diff')} "
                                f"(tolerance {result['pixel_tolerance']})")
        elif r["status"] == "failed":
            problems.append(f"{r['variant']} failed: {r.get('reason')}")
    if result["bound"]["compute_step_s"] is None:
        problems.append("the bound column has no compute-only step")
    return problems


# ------------------------------------------------------------------------------------------------------------- main

def _without_python(args):
    """The command as a user types it: run_model.sh adds --python itself."""
    out, skip = [], False
    for x in args:
        if skip:
            skip = False
        elif x == "--python":
            skip = True
        elif not x.startswith("--python="):
            out.append(x)
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--plugin", default="qwen_image_21", choices=["qwen_image_21"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--budget-gb", type=float, default=0.0, help="device budget for every run (0: none)")
    ap.add_argument("--depth", type=int, default=None, help="transformer blocks (default: 4 on cpu, 24 on cuda)")
    ap.add_argument("--size", default=None, help="WxH (default: 256x256 on cpu, 1024x1024 on cuda)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default=None, choices=["fp32", "bf16"], help="default: fp32 on cpu, bf16 on cuda")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--variants", default=None, help="comma list of variant names (default: all that apply)")
    ap.add_argument("--name", default=None, help="output name under BUILD/bench (default: model_<plugin>_<device>)")
    ap.add_argument("--tiny", action="store_true", help="the parity fixtures' tiny transformer (CI smoke)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a column is missing or an output differs")
    ap.add_argument("--dry-run", action="store_true", help="say what would run and what is skipped, run nothing")
    ap.add_argument("--link-bytes", type=int, default=1 << 30, help="bytes of the start-up link copy (1 GiB)")
    ap.add_argument("--run-timeout", type=float, default=0, help="seconds one run may take (0: no limit)")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the controls (the bench environment)")
    ap.add_argument("--quant", default="", help=f"comma list of quantized transformers to add rows for: {','.join(QUANTS)}")
    ap.add_argument("--quant-presets", default="off,low_ram_safe", help="the ddo presets each --quant runs with")
    a = ap.parse_args(argv)
    a.depth = a.depth or (4 if a.device == "cpu" else 24)
    a.dtype = a.dtype or ("fp32" if a.device == "cpu" else "bf16")
    size = a.size or ("256x256" if a.device == "cpu" else "1024x1024")
    try:
        a.width, a.height = (int(x) for x in size.lower().split("x"))
    except ValueError:
        ap.error(f"--size {size!r}: expected WxH, e.g. 1024x1024")
    a.name = a.name or f"model_{a.plugin}_{a.device}"
    a.quants = [q for q in a.quant.split(",") if q]
    a.quant_presets = [p for p in a.quant_presets.split(",") if p]
    bad = [q for q in a.quants if q not in QUANTS] + [p for p in a.quant_presets if p not in DDO_PRESETS]
    if bad:
        ap.error(f"unknown --quant / --quant-presets {bad}; have {QUANTS} and {DDO_PRESETS}")
    return a


def plan_variants(a, model_bytes, have_ddo_py, cuda_ok, quant_bytes=None):
    """(name, kind, skip reason or None) for every variant, in run order. quant_bytes: --quant -> the quantized
    transformer's stored bytes (None: not written yet), which decide whether its `off` row fits."""
    budget = a.budget_gb * 2**30 if a.budget_gb else None
    fits = budget is None or model_bytes * 1.15 <= budget  # weights + ~15 % for activations and slots
    fit_reason = None if fits else (f"the transformer ({model_bytes / 2**30:.2f} GiB) does not fit the "
                                    f"{a.budget_gb} GiB device budget")
    out = []
    for p in DDO_PRESETS:
        out.append((f"ddo {p}", "ddo", fit_reason if p == "off" else None))
    for c in CONTROLS:
        reason = None
        if c == "diffusers":
            reason = fit_reason
        if c.startswith("DDO-0.1.0rc2") and not have_ddo_py:
            reason = ("diffusers-dynamic-offloader 0.1.0rc2 is not installed in the bench environment "
                      "(tools/reference/requirements-bench.txt, installed by tools/ddo bench model)")
        out.append((c, "control", reason))
    for q in a.quants:
        qb = (quant_bytes or {}).get(q)
        for p in a.quant_presets:
            reason = None
            if p == "off" and budget is not None and qb is not None and qb * 1.15 > budget:
                reason = f"the {q} transformer ({qb / 2**30:.2f} GiB stored) does not fit the {a.budget_gb} GiB device budget"
            out.append((f"ddo {p} {q}", "ddo", reason))
    if a.device == "cuda" and not cuda_ok:
        out = [(n, k, r or "no CUDA device (torch.cuda.is_available() is false)") for n, k, r in out]
    if a.variants:
        wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
        unknown = [w for w in wanted if w not in [n for n, _, _ in out]]
        if unknown:
            raise SystemExit(f"bench: unknown variant(s) {unknown}; have: {[n for n, _, _ in out]}")
        out = [x for x in out if x[0] in wanted]
    return out


def main(argv):
    if argv and argv[0] == "--child":
        control_child(json.loads(argv[1]))
        return 0
    a = parse_args(argv)
    build = Path(a.build).resolve()
    bench_dir = build / "bench"
    bench_dir.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run([a.python, "-c", "import importlib.util, torch; print(int(torch.cuda.is_available()), "
                            "int(importlib.util.find_spec('diffusers_dynamic_offloader') is not None))"],
                           capture_output=True, text=True)
    cuda_ok, have_ddo_py = (bool(int(x)) for x in probe.stdout.split()) if probe.returncode == 0 else (False, False)
    ckpt_path = bench_dir / ckpt_mod.checkpoint_name(a.depth, a.dtype, a.tiny)
    if a.dry_run:
        est = None if not (ckpt_path / "bench.json").exists() else ckpt_mod.transformer_bytes(ckpt_path)
        variants = plan_variants(a, est or 0, have_ddo_py, cuda_ok)
        print(f"bench (dry run): {a.plugin}, {a.device}, depth {a.depth}, {a.width}x{a.height}, {a.steps} steps, "
              f"{a.dtype}, budget {a.budget_gb or 'none'} GiB, {a.rounds} rounds; checkpoint {ckpt_path} "
              f"({'cached' if est else 'to be built'})")
        for n, k, r in variants:
            print(f"  {'skip' if r else 'run '} {n:<40} {r or ''}")
        return 0
    if a.device == "cuda" and not cuda_ok:
        print("bench: --device cuda but torch sees no CUDA device; nothing to run (use --dry-run to list)")
        return 2
    ckpt = ckpt_mod.ensure_checkpoint(bench_dir, a.depth, a.dtype, a.tiny, log=lambda m: print(m, flush=True))
    model_bytes = ckpt_mod.transformer_bytes(ckpt)
    quant_ckpts, quant_bytes = {}, {}
    if a.quants:
        import qwen_image_21_quant as quant_mod  # the writers: gguf-py, sdnq, the fp8 layout
        for q in a.quants:
            quant_ckpts[q] = quant_mod.make_quantized(ckpt, q)
            quant_bytes[q] = sum(f.stat().st_size for f in (quant_ckpts[q] / "transformer").iterdir()
                                 if f.suffix in (".safetensors", ".gguf"))
    variants = plan_variants(a, model_bytes, have_ddo_py, cuda_ok, quant_bytes)
    work = bench_dir / f"{a.name}_runs"
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench: transformer {model_bytes / 2**30:.2f} GiB ({a.depth} blocks{' tiny' if a.tiny else ' at width 4096'}"
          f"{'' if a.tiny else ', depth reduced from 32 for time and disk'}), {a.width}x{a.height}, {a.steps} steps, "
          f"{a.dtype}, {a.device}", flush=True)
    link = measure_link(a.python, a.device, a.link_bytes)
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs = {n: [] for n, _, _ in variants}
    for rnd in range(a.rounds):
        for n, kind, skip in variants:
            if skip:
                if rnd == 0:
                    runs[n].append({"variant": n, "status": "skipped", "reason": skip})
                continue
            print(f"bench: round {rnd + 1}/{a.rounds}: {n}", flush=True)
            if kind == "ddo":
                words = n.split(" ")  # "ddo <preset>" or "ddo <preset> <quant>"
                q = words[2] if len(words) > 2 else None
                rec = run_ddo(build, words[1], a, quant_ckpts.get(q, ckpt), work, q)
            else:
                rec = run_control(a.python, n, a, ckpt, work)
            if rec.get("status") != "completed":
                print(f"bench:   {rec.get('status')}: {rec.get('reason')}", flush=True)
            # keep this round's pixels apart from the next round's (the files are reused per variant)
            if rec.get("pixels_file"):
                dst = Path(rec["pixels_file"]).with_name(Path(rec["pixels_file"]).stem + f"_r{rnd}.npy")
                os.replace(rec["pixels_file"], dst)
                rec["pixels_file"] = str(dst)
            runs[n].append(rec)
    load_after = [round(x, 2) for x in os.getloadavg()]
    measured = list(range(1, a.rounds)) if a.rounds > 1 else [0]
    control = next((n for n in ("diffusers", "diffusers group_offload block_level")
                    if any(r.get("status") == "completed" for r in runs.get(n, []))), "diffusers")
    import numpy as np
    ctrl_done = [r for r in runs.get(control, []) if r.get("status") == "completed" and r.get("pixels_file")]
    control_pixels = np.load(ctrl_done[0]["pixels_file"]) if ctrl_done else None
    rows = [summarize(n, runs[n], measured, control_pixels) for n, _, _ in variants]
    # Physical bound: compute-only step from the resident run (ddo off, else diffusers without offload).
    comp_row = next((r for r in rows if r["variant"] in ("ddo off", "diffusers") and r["status"] == "completed"), None)
    compute = comp_row["steady_step_s"]["median"] if comp_row and comp_row.get("steady_step_s") else None
    bw = link.get("pinned_gb_per_s") or link.get("host_copy_gb_per_s")
    for r in rows:
        if r["status"] != "completed" or compute is None or not r.get("steady_step_s"):
            continue
        streamed = (r.get("streamed_bytes_per_step") or {}).get("median")
        copy_s = streamed / (bw * 1e9) if streamed and bw else 0.0
        r["bound_s"] = max(compute, copy_s)
        r["bound_ratio"] = r["steady_step_s"]["median"] / r["bound_s"]
    result = {
        "schema": "ddo.bench.model/1", "name": a.name,
        "command": "tools/ddo bench model " + " ".join(_without_python(argv[1:])),
        "workload": {"model": f"{a.plugin} ({a.depth} blocks{', tiny' if a.tiny else ', width 4096'}, random weights)",
                     "plugin": a.plugin, "device": a.device, "budget_gb": a.budget_gb, "depth": a.depth,
                     "width": a.width, "height": a.height, "steps": a.steps, "seed": 0, "dtype": a.dtype,
                     "threads": a.threads, "transformer_bytes": model_bytes, "checkpoint": str(ckpt),
                     "vae": "resident decode in every run (ddo: vae.strategy=resident)",
                     "quant": {q: {"checkpoint": str(quant_ckpts[q]), "stored_bytes": quant_bytes[q]} for q in a.quants}},
        "machine": {"cores": os.cpu_count(), "load_average_before": load_before, "load_average_after": load_after},
        "link": link, "control": control, "pixel_tolerance": PIXEL_TOLERANCE[a.dtype],
        "rounds_note": (f"{a.rounds} rounds, round 1 is the warm-up and excluded" if a.rounds > 1
                        else "1 round (no warm-up excluded)"),
        "bound": {"compute_step_s": compute, "compute_from": comp_row["variant"] if comp_row else None,
                  "bandwidth_gb_per_s": bw},
        "rows": rows,
        "runs": {n: [{k: v for k, v in r.items() if k != "engine_counters"} for r in rs] for n, rs in runs.items()},
    }
    md = markdown(result)
    (bench_dir / f"{a.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (bench_dir / f"{a.name}.md").write_text(md)
    print()
    print(md)
    print(f"wrote {bench_dir / (a.name + '.json')} and {bench_dir / (a.name + '.md')}")
    if a.check:
        problems = check(result, md)
        for p in problems:
            print(f"bench check: {p}")
        if problems:
            return 1
        print(f"bench check: every column present; {sum(r['status'] == 'completed' for r in rows)} runs within "
              f"{result['pixel_tolerance']} of the control")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
