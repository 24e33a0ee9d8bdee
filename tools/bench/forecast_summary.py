#!/usr/bin/env python3
"""The memory forecast beside the measured peaks of finished ddo runs (issue 42; Note [Memory forecast]).

Usage: forecast_summary.py REPORT.json|DIR [...]   (a DIR is searched for report.json / ddo_report.json files)

One line per report and forecast phase: the forecast device and host peaks, the measured ones (CUDA: the caching
allocator's allocated peak in the phase plus the engine's buffers; the CPU: ddo's counting allocator plus the
engine's), their ratio, and the phases beyond the forecast's tolerance. tools/device/gpu-bench.sh runs it over the
bench's reports on the GPU; tools/bench/memory_forecast.py prints its rows with it. Exit 0 always: a benchmark prints
figures (a missed forecast is also a warning in the report itself).
"""

import json
import sys
from pathlib import Path


def rows_of(report: dict, name: str):
    """(name, phase, forecast/measured device and host bytes, ratios) of each forecast phase of one report."""
    f = report.get("forecast")
    if not isinstance(f, dict):
        return []
    out = []
    for p in f.get("phases", []):
        m = p.get("measured", {})
        out.append({"config": name, "phase": p["phase"], "device": f.get("device"),
                    "forecast_device": p["device"]["forecast_bytes"], "measured_device": m.get("device_bytes"),
                    "ratio_device": p.get("ratio", {}).get("device"),
                    "forecast_host": p["host"]["forecast_bytes"], "measured_host": m.get("host_bytes"),
                    "ratio_host": p.get("ratio", {}).get("host"), "tolerance": f.get("tolerance")})
    return out


def line(r) -> str:
    mib = lambda b: f"{b / 2**20:10.2f}" if isinstance(b, (int, float)) else f"{'n/a':>10}"
    ratio = lambda x: f"{x:6.3f}" if isinstance(x, (int, float)) else "   n/a"
    return (f"{r['config']:58s} {r['phase']:15s} device {mib(r['forecast_device'])} / {mib(r['measured_device'])} MiB "
            f"{ratio(r['ratio_device'])}  host {mib(r['forecast_host'])} / {mib(r['measured_host'])} MiB "
            f"{ratio(r['ratio_host'])}")


def summary(rows) -> str:
    measured = [r for r in rows if isinstance(r.get("ratio_device"), (int, float))]
    if not measured:
        return f"forecast: {len(rows)} phase(s) forecast, none measured (a dry run measures nothing)"
    worst = max(abs(r["ratio_device"] - 1) for r in measured)
    tol = next((r["tolerance"] for r in measured if r.get("tolerance") is not None), 0.15)
    beyond = sum(1 for r in measured if abs(r["ratio_device"] - 1) > tol)
    return (f"forecast: {len(measured)} phase(s) measured in {len({r['config'] for r in measured})} run(s); largest "
            f"|device ratio - 1| {worst:.4f}; {beyond} beyond the tolerance {tol}")


def main():
    paths = []
    for a in sys.argv[1:]:
        p = Path(a)
        paths += sorted(p.rglob("*report*.json")) if p.is_dir() else [p]
    rows = []
    for p in paths:
        try:
            rep = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        for r in rows_of(rep, str(p.parent.name) + "/" + p.name):
            rows.append(r)
            print(line(r))
    print(summary(rows))


if __name__ == "__main__":
    main()
