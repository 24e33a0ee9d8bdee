#!/usr/bin/env python3
"""The LTX-2 video decode's memory on a structure-size VAE decoder: frames streamed into the muxer against one piece.

Issue 28's memory criterion: with `vae.strategy = temporal_stream` the decoded frames go into the MP4 as they become
final (no whole-clip frame buffer), so the decode phase's peak should not grow with the clip; with `resident` the
clip is decoded in one piece and handed on once. This script measures both with `ddo-host --decode-latents` (decode
only: no text encoder, no DiT) on a checkpoint whose `vae/` has the **real LTX-2.3 decoder shapes** (decoder widths
256/512/512/1024, 4/6/4/2/2 resnets, upsamplers st/st/temporal/spatial, patch 4, 128 latent channels: 407M decoder
parameters, ../shared/research/models.md §5.9) with random weights, float32; the encoder is made narrow (it is not
read by a decode). The audio VAE and vocoder are the tiny pipeline fixture's (their cost is negligible here).

Each run's figures come from its own report (`phases[decode].memory.rss`: peak, and the rise above the phase's lowest
sample, its start; `counters.vae.engine.counters.mapped_bytes`: the decoder's weights, read in place from the file
mapping, whose pages count in RSS once touched) and are printed beside the whole-clip frame buffer a non-streaming
writer would hold (F x H x W x 3 x (4 + 1) bytes: the float clip and its RGB24 copy, as docs/validation.md counts it).

With `--baseline OTHER_BUILD_DIR` every strategy is also decoded by that build's ddo-host (an earlier commit's tree)
on the same checkpoint and latents, right after this build's run, and the pair is printed with its ratios: the
comparison of two commits measured side by side in one run.

Usage: ltx2_decode_memory.py BUILD_DIR [--frames 121] [--size 256] [--strategies temporal_stream,resident]
  [--set vae.tile_size=128 ...] [--baseline OTHER_BUILD_DIR] (the venv python: ~/.cache/ddo/venv/bin/python). Work
  files go under BUILD_DIR/bench/ltx2_decode_memory.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

LATENT = 128
DECODER_23 = dict(  # the LTX-2.3 decoder as diffusers' converter writes it (models.md §5.9)
    in_channels=3, out_channels=3, latent_channels=LATENT,
    block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),  # encoder: narrow, not read by a decode
    downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
    decoder_block_out_channels=(256, 512, 512, 1024), decoder_layers_per_block=(4, 6, 4, 2, 2),
    decoder_spatio_temporal_scaling=(True, True, True, True), decoder_inject_noise=(False,) * 5,
    upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"),
    upsample_residual=(False, False, False, False), upsample_factor=(2, 2, 1, 2),
    timestep_conditioning=False, patch_size=4, patch_size_t=1, encoder_causal=True, decoder_causal=False,
    decoder_spatial_padding_mode="zeros", spatial_compression_ratio=32, temporal_compression_ratio=8,
)


def make_checkpoint(build: Path, work: Path) -> Path:
    """The tiny LTX-2.3 pipeline fixture with its vae/ replaced by the structure-size decoder (made once)."""
    ckpt = work / "checkpoint"
    stamp = ckpt / ".ddo-structure-vae"
    want = json.dumps(DECODER_23, sort_keys=True)
    if stamp.exists() and stamp.read_text() == want:
        return ckpt
    src = build / "fixtures" / "ltx2_pipeline" / "checkpoint_23"
    if not src.is_dir():
        sys.exit(f"ltx2_decode_memory: {src} is missing; build the fixtures first (tools/ddo test, or "
                 f"cmake --build {build} --target ddo_fixtures_ltx2_pipeline)")
    from diffusers import AutoencoderKLLTX2Video
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.copytree(src, ckpt)
    shutil.rmtree(ckpt / "vae")
    torch.manual_seed(0)
    t0 = time.time()
    vae = AutoencoderKLLTX2Video(**DECODER_23).eval()
    vae.latents_mean.copy_(torch.randn(LATENT) * 0.1)
    vae.latents_std.copy_(torch.rand(LATENT) + 0.5)
    vae.save_pretrained(ckpt / "vae", safe_serialization=True)
    dec = sum(p.numel() for n, p in vae.named_parameters() if n.startswith("decoder."))
    print(f"ltx2_decode_memory: wrote {ckpt / 'vae'} ({dec / 1e6:.1f}M decoder parameters, float32) in "
          f"{time.time() - t0:.0f} s")
    stamp.write_text(want)
    return ckpt


def audio_latent_shape(ckpt: Path, frames: int, fps: float):
    """ltx2_common latents.cpp latent_geometry: duration * sample_rate / hop / 4 (Python's round), mel_bins / 4."""
    c = json.loads((ckpt / "audio_vae" / "config.json").read_text())
    per_second = c["sample_rate"] / c["mel_hop_length"] / 4
    return [1, c["latent_channels"], round(frames / fps * per_second), c["mel_bins"] // 4]


def make_latents(ckpt: Path, work: Path, frames: int, size: int, fps: float) -> Path:
    """A --decode-latents file as ltx2_video's --save-latents writes it (format ddo.ltx2_video.latents, version 1).
    The decoders' identity is left null: the decode-only run then checks shapes, not which checkpoint denoised."""
    path = work / f"latents_{frames}x{size}.safetensors"
    g = torch.Generator().manual_seed(0)
    video = torch.randn([1, LATENT, (frames - 1) // 8 + 1, size // 32, size // 32], generator=g)
    audio = torch.randn(audio_latent_shape(ckpt, frames, fps), generator=g)
    workload = {"width": size, "height": size, "frames": frames, "fps": fps, "steps": 1, "seed": 0,
                "decode_timestep": 0.0, "latent": None}
    save_file({"video_latents": video, "audio_latents": audio}, str(path), metadata={
        "format": "ddo.ltx2_video.latents", "format_version": "1", "workload": json.dumps(workload),
        "decoders": json.dumps({"vae": None, "audio_vae": None, "vocoder": None})})
    return path


def decode(host: Path, ckpt: Path, latents: Path, out: Path, strategy: str, extra):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    report = out / "ddo_report.json"
    cmd = [str(host), "--plugin", "ltx2_video", "--model", str(ckpt), "--decode-latents", str(latents),
           "--output", str(out), "--report", str(report), "--overwrite", "--set", f"vae.strategy={strategy}", *extra]
    t0 = time.time()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if rc.returncode != 0:
        sys.exit(f"ltx2_decode_memory: {' '.join(cmd)} exited {rc.returncode}:\n{rc.stderr[-3000:]}")
    r = json.loads(report.read_text())
    ph = next(p for p in r["phases"] if p["name"] == "decode")
    rss = ph["memory"]["rss"]
    engine = r.get("counters", {}).get("vae", {}).get("engine", {}).get("counters", {})
    return dict(strategy=strategy, wall_s=wall, phase_s=ph.get("host_wall_s"), rss=rss, mapped=engine.get("mapped_bytes"),
                decision=r.get("workload", {}).get("vae_decision"), mp4=(out / "video.mp4").stat().st_size,
                mp4_sha256=hashlib.sha256((out / "video.mp4").read_bytes()).hexdigest())


def mib(b):
    return "unavailable" if b is None else f"{b / 2**20:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--frames", type=int, default=121)
    ap.add_argument("--size", type=int, default=256, help="width = height, a multiple of 32")
    ap.add_argument("--fps", type=float, default=24.0)
    ap.add_argument("--strategies", default="temporal_stream,resident")
    ap.add_argument("--set", action="append", default=[], help="extra ddo-host --set KEY=VALUE for every run")
    ap.add_argument("--baseline", type=Path, help="another build dir whose ddo-host decodes the same inputs too")
    a = ap.parse_args()
    build = a.build.resolve()
    host = build / "bin" / "ddo-host"
    work = build / "bench" / "ltx2_decode_memory"
    work.mkdir(parents=True, exist_ok=True)
    ckpt = make_checkpoint(build, work)
    latents = make_latents(ckpt, work, a.frames, a.size, a.fps)
    extra = [x for kv in a.set for x in ("--set", kv)]
    buffer = a.frames * a.size * a.size * 3 * (4 + 1)
    print(f"ltx2_decode_memory: {a.frames} frames of {a.size}x{a.size}, structure-size LTX-2.3 decoder; whole-clip "
          f"frame buffer F x H x W x 3 x (4 + 1) = {mib(buffer)}")
    hosts = [("this build", host)]
    if a.baseline:
        hosts.append(("baseline", a.baseline.resolve() / "bin" / "ddo-host"))
    tag = "".join("_" + kv.split("=")[0].split(".")[-1] + "_" + kv.split("=")[-1] for kv in a.set)
    rows = []
    for s in a.strategies.split(","):
        pair = []
        for label, h in hosts:
            out = work / f"out_{s}_{a.frames}x{a.size}{tag}" / label.replace(" ", "_")
            row = decode(h, ckpt, latents, out, s, extra)
            rss = row["rss"]
            peak, start = rss.get("peak_bytes"), rss.get("min_bytes")
            rise = None if peak is None or start is None else peak - start
            rows.append((s, label, peak, rise, row))
            mapped = row["mapped"]
            act = None if rise is None or mapped is None else rise - mapped
            pair.append((act, row["phase_s"], row["mp4_sha256"]))
            print(f"  {s:16s} {label:10s} decode phase: RSS peak {mib(peak)}, rise above its lowest sample {mib(rise)}, "
                  f"of which the decoder's weights read in place from the file mapping {mib(mapped)}: the rest "
                  f"{mib(act)} ({'below' if act is not None and act < buffer else 'not below'} the buffer); "
                  f"{row['phase_s']:.1f} s phase, {row['wall_s']:.1f} s wall; MP4 {row['mp4']} bytes", flush=True)
        if len(pair) == 2 and None not in (pair[0][0], pair[1][0]):
            print(f"  {s:16s} this build / baseline: rest {pair[0][0] / pair[1][0]:.3f}x, decode phase time "
                  f"{pair[0][1] / pair[1][1]:.3f}x; MP4 bytes {'equal' if pair[0][2] == pair[1][2] else 'differ'}")
    print(json.dumps({"frames": a.frames, "size": a.size, "frame_buffer_bytes": buffer,
                      "runs": [{"strategy": s, "host": label, "rss_peak_bytes": p, "rss_rise_bytes": r,
                                "mapped_weight_bytes": row["mapped"],
                                "phase_s": row["phase_s"],
                                "decision": row["decision"]} for s, label, p, r, row in rows]}, indent=1))


if __name__ == "__main__":
    main()
