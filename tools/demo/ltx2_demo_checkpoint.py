#!/usr/bin/env python3
"""The ltx2 demo's checkpoint: a small random LTX-2.3-style LTX2Pipeline saved whole with diffusers' save_pretrained
(text_encoder/ = a tiny random Gemma-3 with its SentencePiece tokenizer, connectors/ with per-modality projections
and registers, transformer/ with the 2.3 flags and --num-layers blocks, vae/ (x2 space and time), audio_vae/, the
BWE vocoder (16 kHz -> 48 kHz), scheduler/). The builders are the parity fixtures' (tools/reference/
ltx2_pipeline_fixtures.py, ltx2_text_fixtures.py, gemma3_fixtures.py, tiny_gemma_tokenizer.py): random weights,
so the video is noise-like; the demo shows the runtime, not a model.

Usage: ltx2_demo_checkpoint.py OUT_DIR [--num-layers N]
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import gemma3_fixtures  # noqa: E402
import ltx2_pipeline_fixtures as p  # noqa: E402
import ltx2_text_fixtures  # noqa: E402
import tiny_gemma_tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--num-layers", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out_dir)
    if out.exists():
        shutil.rmtree(out)
    assert p.CAPTION == gemma3_fixtures.TEXT_CONFIG["hidden_size"]
    p.TEXT_LAYERS = gemma3_fixtures.TEXT_CONFIG["num_hidden_layers"]
    model_bytes = tiny_gemma_tokenizer.train()
    a = p.audio_vae()
    transformer = p.transformer(True)
    if args.num_layers != transformer.config.num_layers:  # the same config with more blocks
        cfg = dict(transformer.config)
        cfg["num_layers"] = args.num_layers
        torch.manual_seed(0)
        transformer = type(transformer).from_config(cfg)
    pipe = LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**p.LTX2_SCHEDULER), vae=p.video_vae(), audio_vae=a,
        text_encoder=ltx2_text_fixtures.text_encoder(),
        tokenizer=tiny_gemma_tokenizer.transformers_tokenizer(model_bytes), connectors=p.connectors(True),
        transformer=transformer, vocoder=p.vocoder(True, a.config.output_channels * a.config.mel_bins))
    pipe.save_pretrained(out)
    (out / "tokenizer" / "tokenizer.model").write_bytes(model_bytes)
    (out / "demo.json").write_text(json.dumps({"num_layers": args.num_layers}) + "\n")
    print(f"ltx2 demo checkpoint ({args.num_layers} blocks) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
