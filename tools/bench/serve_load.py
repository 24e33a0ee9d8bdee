#!/usr/bin/env python3
"""ddo-host serve under load against the CLI doing the same work (issue 30's figures). Standard library only.

N requests (default 50) from C concurrent clients (default 4) to POST /v1/images/generations on one server, each the
demo's work (256x256, 4 steps, guidance 4 with a negative prompt, seeds 0..N-1); then the same N runs as N CLI
processes one after another. Prints and writes (JSON) per-request latency p50/p95 for both, the serve speedup, the
server's RSS after the 2nd and the last request, whether every request was served and run in queue order, and what
each job's report says it reused and read from the checkpoint (counters.<c>.session: weights built or reused,
file_bytes_read; the encode phase's embeddings_cache). --keep-weights and --embeddings-cache-mb go to the server
(default: its defaults, every component kept); `--keep-weights none --embeddings-cache-mb 0` measures a server that
loads every job as the CLI does.

Usage: python3 tools/bench/serve_load.py BUILD_DIR CHECKPOINT_DIR [--requests N] [--clients C] [--out FILE]
       [--keep-weights all|none|C,...] [--embeddings-cache-mb N] [--size PX] [--steps N]
"""
import argparse, json, os, queue, statistics, subprocess, sys, tempfile, threading, time, urllib.request

PROMPT, NEGATIVE = "a lighthouse at dusk, watercolor", "blurry, low quality"
COMMON = ["--preset", "low_ram_safe.toml", "--set", "components.transformer.resident_budget_gb=0.0001"]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def reuse(report):
    """Per component: built or reused, the bytes this job read from its files; the encode phase's cache note."""
    out = {}
    for c, v in (report.get("counters") or {}).items():
        session = (v or {}).get("session")
        if isinstance(session, dict):
            out[c] = {"weights": session.get("weights"), "file_bytes_read": session.get("file_bytes_read")}
    notes = [p.get("notes") or {} for p in report.get("phases") or [] if p.get("name") == "encode"]
    out["embeddings_cache"] = notes[0].get("embeddings_cache") if notes else None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("checkpoint")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep-weights", default=None)
    ap.add_argument("--embeddings-cache-mb", default=None)
    ap.add_argument("--size", type=int, default=256, help="image side in pixels (default 256, the demo's)")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    extra = (["--keep-weights", a.keep_weights] if a.keep_weights else []) + \
            (["--embeddings-cache-mb", a.embeddings_cache_mb] if a.embeddings_cache_mb else [])
    host = os.path.join(a.build, "bin", "ddo-host")
    work = tempfile.mkdtemp(prefix="ddo_serve_load_")
    srv = subprocess.Popen([host, "serve", "--plugin", "qwen_image", "--model", a.checkpoint, "--listen", "127.0.0.1:0",
                            "--queue", str(a.requests), "--state-dir", os.path.join(work, "state")] + COMMON[:2] +
                           ["--set", COMMON[3]] + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = None
    for line in srv.stdout:
        if line.startswith("ddo-host serve: listening on "):
            url = line.split()[-1]
            break
    if not url:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()

    todo = queue.Queue()
    for i in range(a.requests):
        todo.put(i)
    lat, ids, rss, errors, lock = {}, {}, {}, [], threading.Lock()
    done_count = [0]

    def client():
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            body = json.dumps({"prompt": PROMPT, "negative_prompt": NEGATIVE, "size": f"{a.size}x{a.size}", "steps": a.steps, "seed": i,
                               "guidance_scale": 4, "response_format": "b64_json"}).encode()
            req = urllib.request.Request(url + "/v1/images/generations", data=body, headers={"Content-Type": "application/json"})
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    j = json.load(r)
                ok = len(j["data"]) == 1 and len(j["data"][0]["b64_json"]) > 100
            except Exception as e:  # noqa: BLE001 — counted as lost
                ok, j = False, {"error": str(e)}
            dt = time.monotonic() - t0
            with lock:
                lat[i] = dt
                ids[i] = j.get("ddo", {}).get("job")
                if not ok:
                    errors.append((i, j))
                done_count[0] += 1
                if done_count[0] in (2, a.requests):
                    rss[done_count[0]] = rss_kb(srv.pid)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    serve_wall = time.monotonic() - t0
    srv.terminate()
    srv.wait()
    state = os.path.join(work, "state")
    log = open(os.path.join(state, "serve.log")).read().splitlines()
    queued = [l.split()[2] for l in log if " queued at position " in l]
    finished = [l.split()[2] for l in log if l.split()[3:4] == ["completed"]]
    reports = []
    for jid in finished:
        p = os.path.join(state, "jobs", jid, "ddo_report.json")
        if os.path.exists(p):
            reports.append(reuse(json.load(open(p))))

    cli = []
    for i in range(a.requests):
        out = os.path.join(work, "cli", str(i))
        t = time.monotonic()
        rc = subprocess.run([host, "-q", "--plugin", "qwen_image", "--model", a.checkpoint, "-p", PROMPT, "-n", NEGATIVE,
                             "--width", str(a.size), "--height", str(a.size), "--steps", str(a.steps), "--seed", str(i), "--cfg-scale", "4",
                             "--output", out] + COMMON, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        cli.append(time.monotonic() - t)
        if rc != 0:
            errors.append(("cli", i, rc))
    # A single client's latency includes its wait in the queue; the per-job service time is the fair comparison.
    summary = json.load(open(os.path.join(state, "serve_summary.json")))
    run_s = [r["run_s"] for r in summary["served"] if r["status"] == "completed"]
    res = {
        "requests": a.requests, "clients": a.clients, "served_ok": a.requests - len([e for e in errors if e[0] != "cli"]),
        "errors": errors[:5], "run_in_queue_order": queued == finished,
        "serve_wall_s": serve_wall, "serve_throughput_per_s": a.requests / serve_wall,
        "serve_latency_s": {"p50": pct(lat.values(), 0.5), "p95": pct(lat.values(), 0.95)},
        "serve_job_run_s": {"p50": pct(run_s, 0.5), "p95": pct(run_s, 0.95)},
        "cli_run_s": {"p50": pct(cli, 0.5), "p95": pct(cli, 0.95), "total": sum(cli)},
        "speedup_p50_run": pct(cli, 0.5) / pct(run_s, 0.5),
        "speedup_total_wall": sum(cli) / serve_wall,
        "rss_kb_after": {str(k): v for k, v in rss.items()},
        "rss_growth_2_to_last": (rss.get(a.requests, 0) - rss.get(2, 0)) / rss.get(2, 1),
        "server_flags": extra,
        "reuse_request_1": reports[0] if reports else None,
        "reuse_request_2": reports[1] if len(reports) > 1 else None,
        "reuse_last": reports[-1] if reports else None,
        # Requests 2..N: the jobs whose transformer was reused and read 0 bytes from its files.
        "transformer_reused_0_bytes_2_to_last": sum(1 for r in reports[1:] if (r.get("transformer") or {}).get("weights") == "reused"
                                                    and (r.get("transformer") or {}).get("file_bytes_read") == 0),
        "embeddings_cache_hits": sum(1 for r in reports if r.get("embeddings_cache") == "hit"),
        "session": summary.get("session"),
    }
    print(json.dumps(res, indent=2))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=2)
    return 0 if not errors and queued == finished else 1


if __name__ == "__main__":
    sys.exit(main())
