"""tools/ddo bench full_scale: the real Qwen-Image 2.1 transformer on a machine whose RAM it does not fit.

  full_scale.py BUILD [--size 256] [--steps 1] [--route disk] [--json OUT] [--cache DIR]

The transformer is diffusers' QwenImage21Transformer2DModel at its defaults (the released configuration: 32 blocks of
width 4096, mlp_ratio 3, text width 4096), its weights random bf16, written once, one shard per four blocks, into a
cache outside the clone (--cache, else $DDO_FULL_SCALE_CACHE, else ~/.cache/ddo/full_scale). Computed in fp32 on the
CPU its weights are twice their stored size; when that exceeds the machine's RAM only a streamed route can run it.
The VAE, scheduler and prompt embeddings are the bench checkpoint's (tools/bench/qwen_image_21_bench_checkpoint.py).

Before the run the shards' pages are dropped from the page cache (posix_fadvise DONTNEED), so the step reads its
weights from the disk. Printed: the checkpoint's size, the machine's RAM, the forecast of each phase's host peak beside
the measured peak (LibTorch's and the engine's allocations: forecast.phases[].measured) and the RSS (the sampler's peak
and the kernel's VmHWM), the engine's bytes read from the file and the bytes the process read from the disk, the step
time (host wall) and the read rate. A figure the report does not have is printed as unavailable, never as 0.

The run is confined to a memory cgroup of --memory-limit (default 8 GiB; where this machine lets one be made), which is
also its --host-memory: the forecast is held against it, `ddo-host plan` shows the refusal on the preset's own route and
what --fit auto applies, and the measured run proves the weights need not fit in memory."""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools" / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

BLOCKS_PER_SHARD = 4


def mib(b):
    return "unavailable" if b is None else f"{b / 1048576:.1f} MiB"


def gib(b):
    return "unavailable" if b is None else f"{b / 1073741824:.2f} GiB"


def write_transformer(dst: Path, log=print) -> int:
    """The released configuration with random bf16 weights, written shard by shard (never all in memory)."""
    import torch
    from diffusers import QwenImage21Transformer2DModel
    from safetensors.torch import save_file

    with torch.device("meta"):
        model = QwenImage21Transformer2DModel()
    dst.mkdir(parents=True, exist_ok=True)
    model.save_config(dst)
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    depth = model.config.num_layers
    shards = [[n for n in shapes if not n.startswith("transformer_blocks.")]]
    for first in range(0, depth, BLOCKS_PER_SHARD):
        prefixes = tuple(f"transformer_blocks.{i}." for i in range(first, min(first + BLOCKS_PER_SHARD, depth)))
        shards.append([n for n in shapes if n.startswith(prefixes)])
    g = torch.Generator().manual_seed(0)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for n in names:
            shape = shapes[n]
            scale = shape[1] ** -0.5 if len(shape) > 1 else 0.1
            tensors[n] = (torch.randn(shape, generator=g) * scale).to(torch.bfloat16)
            total += tensors[n].numel() * 2
            weight_map[n] = name
        save_file(tensors, str(dst / name), metadata={"format": "pt"})
        log(f"  {name}: {len(names)} tensors")
        del tensors
    (dst / "diffusion_pytorch_model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n")
    return total


def ensure_checkpoint(cache: Path, log=print) -> Path:
    ckpt = cache / "qwen_image_21_full_bf16"
    if (ckpt / "full_scale.json").exists():
        return ckpt
    import qwen_image_21_bench_checkpoint as qck
    log(f"full_scale: writing the released Qwen-Image 2.1 transformer (random bf16 weights) into {ckpt} (once)")
    shutil.rmtree(ckpt, ignore_errors=True)
    rest = cache / "qwen_image_21_full_rest"
    shutil.rmtree(rest, ignore_errors=True)
    qck.build_checkpoint(rest, 1, "bf16", False)  # VAE, scheduler, model_index, prompt embeddings
    ckpt.mkdir(parents=True)
    for part in ("vae", "scheduler", "model_index.json", "prompt_embeds.safetensors"):
        src = rest / part
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, ckpt / part)
    shutil.rmtree(rest)
    t0 = time.perf_counter()
    total = write_transformer(ckpt / "transformer", log)
    (ckpt / "full_scale.json").write_text(json.dumps({"transformer_bytes": total, "dtype": "bf16",
                                                      "write_seconds": time.perf_counter() - t0}) + "\n")
    return ckpt


def drop_page_cache(folder: Path):
    for f in folder.glob("*.safetensors"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class MemoryCgroup:
    """A memory cgroup of `limit` bytes the run is started in (v2: memory.max, v1: memory.limit_in_bytes), when this
    machine lets us make one; its peak (v2 memory.peak, v1 memory.max_usage_in_bytes: the page cache charged to it
    included) is read after the run. `reason` says why there is none."""

    def __init__(self, limit: int, name: str = "ddo_full_scale"):
        self.limit, self.path, self.version, self.reason = limit, None, None, None
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        candidates = [(2, Path("/sys/fs/cgroup") / name, "memory.max")] if v2.exists() else []
        candidates.append((1, Path("/sys/fs/cgroup/memory") / name, "memory.limit_in_bytes"))
        for version, path, key in candidates:
            try:
                path.mkdir(exist_ok=True)
                (path / key).write_text(str(limit))
                self.path, self.version = path, version
                return
            except OSError as e:
                self.reason = f"{path}: {e.strerror}"

    def enter(self):  # in the child, before exec
        if self.path:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self):
        if not self.path:
            return None
        f = self.path / ("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")
        try:
            return int(f.read_text().split()[0])
        except (OSError, ValueError):
            return None

    def reset(self):
        if self.path and self.version == 1:
            try:
                (self.path / "memory.max_usage_in_bytes").write_text("0")
            except OSError:
                pass

    def remove(self):
        if self.path:
            try:
                self.path.rmdir()
            except OSError:
                pass


def parse_size(text: str) -> int:
    units = {"GiB": 1 << 30, "MiB": 1 << 20}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[:-len(u)]) * m)
    raise SystemExit(f"--memory-limit {text}: give GiB or MiB, e.g. 8GiB")


def mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)  # one step of this scheduler's shifted grid is not finite
    ap.add_argument("--memory-limit", default="8GiB",
                    help="the run's memory cgroup (and --host-memory, the forecast's budget); 0: none")
    ap.add_argument("--route", default="disk")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    cache = a.cache or Path(os.environ.get("DDO_FULL_SCALE_CACHE") or
                            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddo" / "full_scale")
    ckpt = ensure_checkpoint(cache)
    info = json.loads((ckpt / "full_scale.json").read_text())
    stored = info["transformer_bytes"]
    ram = mem_total()
    print(f"checkpoint: {ckpt}\n  transformer {gib(stored)} stored (bf16), {gib(2 * stored)} in the fp32 compute dtype; "
          f"this machine's RAM: {gib(ram)}")
    limit = 0 if a.memory_limit in ("0", "") else parse_size(a.memory_limit)
    cg = MemoryCgroup(limit) if limit else None
    if cg:
        print(f"memory cgroup: {cg.path} (v{cg.version}), limit {gib(limit)}" if cg.path
              else f"memory cgroup: none ({cg.reason}); the run is not confined")
    work = a.build / "bench" / "full_scale_run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = ["--plugin", "qwen_image", "--preset", "off.toml", "--model", str(ckpt),
            "--prompt-embeds", str(ckpt / "prompt_embeds.safetensors"), "--steps", str(a.steps),
            "--width", str(a.size), "--height", str(a.size)]
    if limit:
        base += ["--host-memory", f"{limit // (1 << 20)}MiB"]
    # The forecast first, on the preset's own route: `ddo-host plan` (nothing loads), as asked and with --fit auto.
    plans = {}
    for name, extra in (("as asked", []), ("--fit auto", ["--fit", "auto"])):
        rep_path = work / f"plan_{len(plans)}.json"
        p = subprocess.run([str(a.build / "bin" / "ddo-host"), "plan", *base, *extra, "--output", str(work / "plan"),
                            "--report", str(rep_path), "--overwrite"], capture_output=True, text=True)
        rep = json.loads(rep_path.read_text()) if rep_path.exists() else {}
        adjustments = [f"{x['key']} = {x['effective']}" for x in rep.get("adjustments", [])
                       if str(x.get("reason", "")).startswith("fit.policy")]
        print(f"ddo-host plan ({name}): exit {p.returncode}"
              + (f"; adjustments: {', '.join(adjustments)}" if adjustments else ""))
        if p.returncode != 0:
            why = [l for l in (p.stdout + p.stderr).splitlines() if "needs" in l]
            print("  " + (why[-1][why[-1].find("qwen_image_21:"):][:2000] if why else "(no message)"))
        plans[name] = {"exit": p.returncode, "adjustments": adjustments,
                       "refused": (rep.get("forecast") or {}).get("refused")}
    drop_page_cache(ckpt / "transformer")
    report = work / "report.json"
    args = [str(a.build / "bin" / "ddo-host"), *base, "--set", f"components.transformer.route={a.route}",
            "--output", str(work), "--report", str(report), "--overwrite"]
    print("run: " + " ".join(args))
    t0 = time.perf_counter()
    if cg:
        cg.reset()
    inblock0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock
    p = subprocess.run(args, capture_output=True, text=True, preexec_fn=cg.enter if cg and cg.path else None)
    wall = time.perf_counter() - t0
    disk_read = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock - inblock0) * 512  # from the block device
    cg_peak = cg.peak() if cg else None
    if cg:
        cg.remove()
    if p.returncode != 0 or not report.exists():
        print(p.stderr[-4000:])
        sys.exit(f"full_scale: ddo-host exited {p.returncode}")
    rep = json.loads(report.read_text())
    fc = rep.get("forecast") or {}
    phases = {ph.get("name"): ph for ph in rep.get("phases", [])}
    out = {"checkpoint": str(ckpt), "transformer_bytes": stored, "ram_bytes": ram, "route": a.route, "size": a.size,
           "steps": a.steps, "wall_seconds": wall, "plans": plans, "phases": []}
    print(f"{'phase':10} {'forecast host':>15} {'measured':>15} {'ratio':>7} {'RSS peak (sampler)':>20}")
    for f in fc.get("phases", []):
        name = f["phase"]
        forecast = f["host"]["forecast_bytes"] + (f["device"]["forecast_bytes"] if fc.get("device") == "cpu" else 0)
        m = f.get("measured") or {}
        measured = None
        if m.get("host_bytes") is not None and m.get("device_bytes") is not None:
            measured = m["host_bytes"] + (m["device_bytes"] if fc.get("device") == "cpu" else 0)
        rss = (((phases.get(name) or {}).get("memory") or {}).get("rss") or {}).get("peak_bytes")
        ratio = None if measured is None or forecast == 0 else measured / forecast
        print(f"{name:10} {mib(forecast):>15} {mib(measured):>15} {('%.3f' % ratio) if ratio else 'n/a':>7} {mib(rss):>20}")
        out["phases"].append({"phase": name, "forecast_bytes": forecast, "measured_bytes": measured, "ratio": ratio,
                              "rss_peak_bytes": rss})
    hwm = ((rep.get("memory") or {}).get("rss") or {}).get("kernel_hwm_bytes")
    eng = (((rep.get("counters") or {}).get("transformer") or {}).get("engine") or {}).get("counters") or {}
    read = (eng.get("bytes_moved") or {}).get("file")
    steps = [s for s in rep.get("steps", []) if s.get("phase", "").startswith("denoise")]
    step_s = [s.get("host_wall_s") for s in steps]
    out.update({"kernel_hwm_bytes": hwm, "bytes_from_file": read, "step_seconds": step_s, "memory_limit_bytes": limit,
                "cgroup_peak_bytes": cg_peak})
    print(f"RSS high-water mark (VmHWM, whole run): {mib(hwm)}")
    if cg and cg.path:
        print(f"memory cgroup peak (page cache charged to it included): {mib(cg_peak)} of the {gib(limit)} limit")
    print(f"bytes read from the weight files by the engine: {gib(read)}"
          + (f" ({read / stored:.2f}x the stored transformer)" if read else "")
          + f"; from the disk (the process's block reads, getrusage ru_inblock): {gib(disk_read)}")
    out["disk_read_bytes"] = disk_read
    for i, s in enumerate(step_s):
        rate = f", {read / len(step_s) / s / 1e9:.2f} GB/s read per step" if read and s else ""
        print(f"step {i}: {s:.1f} s (host wall){rate}" if s is not None else f"step {i}: unavailable")
    print(f"run wall time: {wall:.1f} s")
    dst = a.json or (a.build / "bench" / "full_scale.json")
    dst.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
