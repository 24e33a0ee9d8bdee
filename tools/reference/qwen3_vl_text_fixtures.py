#!/usr/bin/env python3
"""Parity fixtures for the Qwen3-VL text side with condition images (issue 29): the Qwen2-VL image processor
(smart_resize, PIL resize, rescale/normalize, patchify with the frame duplicated over T), the RGBA composite over white
of QwenImage21Pipeline._get_qwen_prompt_embeds, and the Qwen3-VL text tower fed vision features (the embeds at
<|image_pad|>, 3-D M-RoPE positions of Qwen3VLModel.get_rope_index, deepstack features after the first layers).

Usage: qwen3_vl_text_fixtures.py OUT_DIR

The tokenizer and processor are those of qwen_image_21_text_fixtures.py (build_processor, imported, not edited) with a
Qwen3-VL-like image processor instead of the default one (patch 16, merge 2, temporal 2, mean = std = 0.5, a small
min_pixels); the text encoder is that script's tiny Qwen3VLForConditionalGeneration with a two-block vision tower and
two deepstack layers (so the deepstack sum after layers 0 and 1 of 3 is exercised). The tests feed the vision features
the reference computed: the vision tower is another rung.

Files written:
  checkpoint/text_encoder/       Qwen3VLForConditionalGeneration.save_pretrained (fp32)
  checkpoint/processor/          the tokenizer and preprocessor_config.json (Qwen2VLImageProcessorPil.save_pretrained)
  preprocess.safetensors         <case>.image uint8 [H, W, C] (the input), <case>.rgb uint8 [H', W', 3] (RGBA cases:
                                 the composite over white), <case>.pixel_values float32 [N, C*T*P*P],
                                 <case>.grid_thw int64 [3]; smart_resize.table int64 [n, 7]
                                 (h, w, factor, min_pixels, max_pixels, h_bar, w_bar); blend_table.image / .rgb
                                 all 256 x 256 (colour, alpha) pairs and their composite over white;
                                 resize.<i>.in / .out uint8 [H, W, C] and resize.table int64 [n, 5] (H, W, h, w,
                                 PIL filter): Image.resize around Pillow 13's pass-order switch
  text_tower.safetensors         <case>.input_ids / .attention_mask / .mm_token_type_ids [B, L], .grid_thw [n, 3],
                                 .embeds [N, hidden] (the vision embeds fed to the LLM), .deepstack<k> [N, hidden],
                                 .position_ids [3, B, L], .hidden [B, L, hidden] (last layer before the final norm)
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import diffusers
import transformers
from transformers import Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen_image_21_fixtures as base  # noqa: E402  (_save)
import qwen_image_21_text_fixtures as t21  # noqa: E402  (tokenizer, processor, text encoder, pipeline)

SEED = 0
IMAGE_PROCESSOR = dict(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5, 0.5, 0.5],
                       image_std=[0.5, 0.5, 0.5], size={"shortest_edge": 2048, "longest_edge": 65536})
VISION_CONFIG = dict(t21.VISION_CONFIG, depth=2, deepstack_visual_indexes=[0, 1])
# name -> (height, width, channels): exact multiples of 32 (no resize), sizes smart_resize changes (incl. a .5 that
# Python's round takes to even), an odd aspect ratio, one below min_pixels and one above max_pixels.
PREPROCESS = {
    "rgb_64x96": (64, 96, 3),
    "rgb_50x75": (50, 75, 3),
    "rgb_odd_40x130": (40, 130, 3),
    "rgb_tiny_20x30": (20, 30, 3),
    "rgb_big_300x260": (300, 260, 3),
    "rgba_80x48": (80, 48, 4),
    "rgba_96x64": (96, 64, 4),
}
# The text-tower images (3 of different sizes; the RGBA one composited over white as the pipeline does).
TOWER_IMAGES = ["rgb_64x96", "rgb_odd_40x130", "rgba_80x48"]
TOWER_CASES = {
    "one": dict(prompts=["make the cat blue"], images=["rgb_64x96"]),
    "three": dict(prompts=["put the second and third into the first"], images=TOWER_IMAGES),
    "batch": dict(prompts=["a cat", "A photograph of an astronaut riding a horse, 85mm, soft light"],
                  images=TOWER_IMAGES),
}


def make_image(name, h, w, c):
    g = np.random.default_rng(sum(map(ord, name)))
    a = g.integers(0, 256, size=(h, w, c), dtype=np.uint8)
    if c == 4:  # every alpha value class: 0, 255 and in between
        a[..., 3] = g.choice(np.array([0, 255, 17, 128, 200], dtype=np.uint8), size=(h, w))
    return a


def as_pil(arr):
    return Image.fromarray(arr, "RGBA" if arr.shape[2] == 4 else "RGB")


def over_white(img):  # QwenImage21Pipeline._get_qwen_prompt_embeds
    white = Image.new("RGB", img.size, (255, 255, 255))
    white.paste(img, mask=img.getchannel("A"))
    return white


def build_processor():
    proc = t21.build_processor()
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(**IMAGE_PROCESSOR), tokenizer=proc.tokenizer,
                            video_processor=None, chat_template=t21.CHAT_TEMPLATE)


def preprocess_fixtures(processor, tensors):
    ip = processor.image_processor
    for name, (h, w, c) in PREPROCESS.items():
        arr = make_image(name, h, w, c)
        img = as_pil(arr)
        tensors[f"{name}.image"] = torch.from_numpy(arr)
        if c == 4:
            img = over_white(img)
            tensors[f"{name}.rgb"] = torch.from_numpy(np.array(img))
        out = ip(images=[img], return_tensors="pt")
        tensors[f"{name}.pixel_values"] = out["pixel_values"].to(torch.float32)
        tensors[f"{name}.grid_thw"] = out["image_grid_thw"][0].to(torch.int64)
    # Every (colour, alpha) pair through Pillow's paste-with-mask: pixel (y, x) = (x, 255 - x, x, y).
    x = np.arange(256, dtype=np.uint8)
    table = np.stack(np.broadcast_arrays(x[None, :], 255 - x[None, :], x[None, :], x[:, None]), -1).astype(np.uint8)
    tensors["blend_table.image"] = torch.from_numpy(table)
    tensors["blend_table.rgb"] = torch.from_numpy(np.array(over_white(as_pil(table))))
    rows = []
    for h in [20, 48, 50, 75, 80, 112, 144, 300, 1000, 3000, 4000]:
        for w in [16, 30, 48, 80, 130, 240, 2000]:
            if max(h, w) / min(h, w) > 200:
                continue
            for mn, mx in [(2048, 65536), (56 * 56, 28 * 28 * 1280), (1024, 1024 * 1024)]:
                for factor in [28, 32]:
                    rows.append([h, w, factor, mn, mx, *smart_resize(h, w, factor, mn, mx)])
    tensors["smart_resize.table"] = torch.tensor(rows, dtype=torch.int64)


def resize_order_fixtures(tensors):
    """Pillow's resize around Pillow 13's pass-order switch (vertical first when the height shrinks by more than twice
    what the width shrinks): sizes at the boundary and one off either side, every convolving filter, L / RGB / RGBA."""
    g = np.random.default_rng(7)
    rows = []
    filters = [1, 2, 3, 4, 5]  # lanczos, bilinear, bicubic, box, hamming
    modes = {"L": 1, "RGB": 3, "RGBA": 4}
    i = 0
    while len(rows) < 60:
        W, w = int(g.integers(4, 90)), int(g.integers(2, 90))
        if W == w:
            continue
        dh = 2 * (W - w) + int(g.integers(-1, 2))
        H = int(g.integers(max(dh + 2, 4), max(dh + 2, 4) + 60))
        h = H - dh
        if h < 2 or h == H:
            continue
        mode = list(modes)[i % 3]
        f = filters[i % len(filters)]
        shape = (H, W) if mode == "L" else (H, W, modes[mode])
        a = g.integers(0, 256, size=shape, dtype=np.uint8)
        out = np.array(Image.fromarray(a, mode).resize((w, h), f))
        tensors[f"resize.{i}.in"] = torch.from_numpy(a.reshape(H, W, -1).copy())
        tensors[f"resize.{i}.out"] = torch.from_numpy(out.reshape(h, w, -1).copy())
        rows.append([H, W, h, w, f])
        i += 1
    tensors["resize.table"] = torch.tensor(rows, dtype=torch.int64)


def tower_fixtures(pipe, tensors, meta):
    te = pipe.text_encoder
    lm = te.model.language_model
    cap = {}

    def on_te(mod, args, kwargs):
        cap["inputs"] = dict(kwargs)

    def on_visual(mod, args, out):
        cap["visual"] = out

    def on_lm(mod, args, kwargs):
        cap["position_ids"] = kwargs["position_ids"]

    def on_norm(mod, args, out):
        cap["hidden"] = args[0]
        return args[0]

    hooks = [te.register_forward_pre_hook(on_te, with_kwargs=True), te.model.visual.register_forward_hook(on_visual),
             lm.register_forward_pre_hook(on_lm, with_kwargs=True)]
    try:
        for case, spec in TOWER_CASES.items():
            images = []
            for n in spec["images"]:
                h, w, c = PREPROCESS[n]
                images.append(as_pil(make_image(n, h, w, c)))
            cap.clear()
            with torch.no_grad():
                pipe._get_qwen_prompt_embeds(spec["prompts"], images, torch.device("cpu"))
                # The pipeline's own call hooked the norm away; capture its input in a second, identical forward.
                nh = lm.norm.register_forward_hook(on_norm)
                try:
                    te(**cap["inputs"])
                finally:
                    nh.remove()
            inp = cap["inputs"]
            vis = cap["visual"]
            tensors[f"{case}.input_ids"] = inp["input_ids"]
            tensors[f"{case}.attention_mask"] = inp["attention_mask"]
            tensors[f"{case}.mm_token_type_ids"] = inp["mm_token_type_ids"].to(torch.int64)
            tensors[f"{case}.grid_thw"] = inp["image_grid_thw"].to(torch.int64)
            # get_image_features splits the visual module's output per image in place: join it back.
            joined = lambda t: torch.cat(t, 0) if isinstance(t, (tuple, list)) else t  # noqa: E731
            tensors[f"{case}.embeds"] = joined(vis.pooler_output)
            for k, f in enumerate(vis.deepstack_features):
                tensors[f"{case}.deepstack{k}"] = joined(f)
            tensors[f"{case}.position_ids"] = cap["position_ids"]
            tensors[f"{case}.hidden"] = cap["hidden"]
            meta.setdefault("tower_cases", {})[case] = dict(spec, deepstack=len(vis.deepstack_features),
                                                            image_token_id=te.config.image_token_id,
                                                            spatial_merge_size=VISION_CONFIG["spatial_merge_size"])
    finally:
        for h in hooks:
            h.remove()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    processor = build_processor()
    t21.VISION_CONFIG = VISION_CONFIG  # the tiny encoder of the text script with two deepstack layers
    text_encoder = t21.build_text_encoder(processor.tokenizer)
    transformer, vae, _ = t21.build_denoiser()
    ckpt = out / "checkpoint"
    text_encoder.save_pretrained(ckpt / "text_encoder", safe_serialization=True)
    processor.tokenizer.save_pretrained(ckpt / "processor")
    processor.image_processor.save_pretrained(ckpt / "processor")
    meta = {"reference": "transformers", "reference_version": transformers.__version__,
            "diffusers_version": diffusers.__version__, "torch_version": torch.__version__,
            "numpy_version": np.__version__, "seed": SEED, "dtype": "float32",
            "classes": ["Qwen2VLImageProcessorPil", "Qwen3VLForConditionalGeneration", "QwenImage21Pipeline"],
            "image_processor": IMAGE_PROCESSOR, "vision_config": VISION_CONFIG, "text_config": t21.TEXT_CONFIG,
            "preprocess": {k: list(v) for k, v in PREPROCESS.items()}}
    pre = {}
    preprocess_fixtures(processor, pre)
    resize_order_fixtures(pre)
    base._save(out / "preprocess.safetensors", pre, {"reference": "transformers"})
    pipe = t21.pipeline(transformer, vae, text_encoder, processor)
    tower = {}
    tower_fixtures(pipe, tower, meta)
    base._save(out / "text_tower.safetensors", tower, {"reference": "transformers"})
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    print(f"qwen3_vl text fixtures: transformers {transformers.__version__}, diffusers {diffusers.__version__} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
