#!/usr/bin/env python3
"""Reference for the one_block example plugin (one_block.cpp): makes its checkpoint and checks its output.

  reference.py make MODEL_DIR [--channels 3] [--hidden 8]        write a random checkpoint (diffusers layout)
  reference.py check MODEL_DIR IMAGE.png --width W --height H --steps N --seed S
                                                                  compute the image with PyTorch, compare pixels
Exit 0 when every pixel is within 1/255 of the reference (the rounding of one uint8 step), 1 otherwise.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file


def make(args):
    out = Path(args.model_dir)
    (out / "block").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    c, h = args.channels, args.hidden
    tensors = {
        "block.fc1.weight": torch.randn(h, c, generator=g) / c ** 0.5,
        "block.fc1.bias": torch.randn(h, generator=g) * 0.1,
        "block.fc2.weight": torch.randn(c, h, generator=g) / h ** 0.5,
        "block.fc2.bias": torch.randn(c, generator=g) * 0.1,
    }
    save_file(tensors, str(out / "block" / "diffusion_pytorch_model.safetensors"))
    (out / "block" / "config.json").write_text(json.dumps({"channels": c, "hidden": h}) + "\n")
    (out / "model_index.json").write_text(json.dumps({"_class_name": "OneBlockExample", "block": ["ddo", "one_block"]}) + "\n")
    print(f"one_block checkpoint ({c} channels, hidden {h}) -> {out}")


def reference_image(model_dir, width, height, steps, seed):
    w = load_file(str(Path(model_dir) / "block" / "diffusion_pytorch_model.safetensors"))
    c = w["block.fc2.weight"].shape[0]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, c, height, width, generator=g)
    for _ in range(steps):
        p = x.permute(0, 2, 3, 1)
        y = torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(p, w["block.fc1.weight"], w["block.fc1.bias"])),
                                       w["block.fc2.weight"], w["block.fc2.bias"])
        x = x + y.permute(0, 3, 1, 2) / steps
    img = (torch.sigmoid(x)[0] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return img


def check(args):
    want = reference_image(args.model_dir, args.width, args.height, args.steps, args.seed)
    im = Image.open(args.image)
    got = np.asarray(im)
    if got.ndim == 2:
        got = got[:, :, None]
    modes = {1: "L", 3: "RGB", 4: "RGBA"}
    if im.mode != modes.get(want.shape[2]):
        print(f"FAIL: {args.image} is {im.mode}, the model has {want.shape[2]} channels ({modes.get(want.shape[2])})")
        return 1
    if got.shape != want.shape:
        print(f"FAIL: {args.image} has shape {got.shape}, reference {want.shape}")
        return 1
    diff = int(np.abs(got.astype(np.int32) - want.astype(np.int32)).max())
    print(f"one_block: max pixel difference {diff}/255 against the PyTorch reference (torch {torch.__version__}), "
          f"{want.shape[1]}x{want.shape[0]}x{want.shape[2]}")
    return 0 if diff <= 1 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("model_dir")
    m.add_argument("--channels", type=int, default=3)
    m.add_argument("--hidden", type=int, default=8)
    c = sub.add_parser("check")
    c.add_argument("model_dir")
    c.add_argument("image")
    for k, d in (("--width", 32), ("--height", 32), ("--steps", 4), ("--seed", 0)):
        c.add_argument(k, type=int, default=d)
    args = ap.parse_args()
    torch.set_num_threads(1)
    return make(args) if args.cmd == "make" else check(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
