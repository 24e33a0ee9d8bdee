#!/usr/bin/env python3
"""Parity fixtures for the Qwen3-VL vision tower (transformers' Qwen3VLVisionModel, issue 29): the tower's merged
embeddings and every deepstack feature for single and packed multi-image calls, on two tiny random fp32
Qwen3VLForConditionalGeneration text encoders saved with save_pretrained.

Usage: qwen3_vision_fixtures.py OUT_DIR

Configs (reference.json "configs"):
  small   diffusers' QwenImage21 test vision config (depth 1, deepstack_visual_indexes [0], 16 position embeddings:
          a 4 x 4 table resampled to each grid)
  deep    depth 3, deepstack_visual_indexes [0, 2], 50 position embeddings (int(sqrt(50)) = 7: a 7 x 7 table whose
          last row is never read, resampled to grids that are not 7 x 7), 2 heads of 16
Cases (reference.json "cases"), images made by Qwen2VLImageProcessorPil (Qwen3-VL-like settings: patch 16, merge 2,
temporal patch 2, mean = std = 0.5, min_pixels small so tiny images are not upscaled) from random RGB pixels:
  one     one image of 64 x 96 pixels: grid (1, 4, 6)
  three   three images of 64 x 96, 32 x 32 and 96 x 64 pixels in one call: grids (1, 4, 6), (1, 2, 2), (1, 6, 4)
  frames  random pixel values (randn) on grids (2, 2, 4) and (1, 2, 2): an entry of two frames (what a video
          gives: attention per frame, positions repeated per frame) beside an image

Files written:
  <config>/text_encoder/          Qwen3VLForConditionalGeneration.save_pretrained (config.json, model.safetensors)
  broken_missing/, broken_shape/  copies of small/text_encoder with reference.json "broken_tensor" removed / of a
                                  wrong shape
  vision.safetensors              <case>.pixel_values [N, 3*2*16*16], <case>.grid_thw int64 [images, 3] (shared by
                                  both configs), <config>.<case>.embeds (pooler_output: the merger's output) and
                                  <config>.<case>.deepstack.<k> (deepstack_features[k], in the reference's order)
  reference.json                  written last (marks a complete set): versions, seed, configs, cases, return type
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

SEED = 0
TEXT_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6, max_position_embeddings=4096, vocab_size=64,
                   rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 1, 1],
                                    "mrope_interleaved": True})
CONFIGS = {
    # diffusers' tests/pipelines/qwenimage (QwenImage21) vision_config
    "small": dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                  deepstack_visual_indexes=[0]),
    "deep": dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=24, patch_size=16,
                 spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=50,
                 deepstack_visual_indexes=[0, 2]),
}
CASES = {"one": [(64, 96)], "three": [(64, 96), (32, 32), (96, 64)]}  # (height, width) in pixels


def build_model(vision_config, seed):
    cfg = Qwen3VLConfig(text_config=TEXT_CONFIG, vision_config=vision_config, image_token_id=60, video_token_id=61,
                        vision_start_token_id=62, vision_end_token_id=63)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    # Default init (std 0.02, unit norms, zero biases) would hide a wrong norm or a missing bias: randomise all.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.dim() > 1:
                fan_in = p[0].numel()  # Conv3d [out, in, t, p, p]: in*t*p*p
                p.copy_(torch.randn_like(p) * fan_in ** -0.5)
            else:
                p.copy_(0.2 * torch.randn_like(p))  # biases (norm biases included)
    return model


def processor():
    return Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5, 0.5, 0.5],
                                    image_std=[0.5, 0.5, 0.5], min_pixels=32 * 32, max_pixels=1 << 20)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    proc = processor()
    rng = np.random.default_rng(SEED)
    tensors, cases = {}, {}
    for case, sizes in CASES.items():
        images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB") for h, w in sizes]
        enc = proc(images=images, return_tensors="pt")
        tensors[f"{case}.pixel_values"] = enc["pixel_values"].float().contiguous()
        tensors[f"{case}.grid_thw"] = enc["image_grid_thw"].long().contiguous()
        cases[case] = {"sizes": sizes, "grid_thw": enc["image_grid_thw"].tolist()}
    g = torch.Generator().manual_seed(SEED + 5)
    tensors["frames.pixel_values"] = torch.randn(2 * 2 * 4 + 2 * 2, 3 * 2 * 16 * 16, generator=g)
    tensors["frames.grid_thw"] = torch.tensor([[2, 2, 4], [1, 2, 2]], dtype=torch.long)
    cases["frames"] = {"sizes": None, "grid_thw": [[2, 2, 4], [1, 2, 2]]}
    expected = {"one": [[1, 4, 6]], "three": [[1, 4, 6], [1, 2, 2], [1, 6, 4]]}
    for case, grids in expected.items():
        assert cases[case]["grid_thw"] == grids, (case, cases[case]["grid_thw"])

    return_type = None
    prefixes = {}
    for i, (name, vc) in enumerate(CONFIGS.items()):
        model = build_model(vc, SEED + 21 + i)
        te = out / name / "text_encoder"
        model.save_pretrained(te, safe_serialization=True)
        names = list(load_file(te / "model.safetensors").keys())
        prefixes[name] = next(n for n in names if n.endswith("patch_embed.proj.weight"))[:-len("patch_embed.proj.weight")]
        visual = model.model.visual
        for case in cases:
            with torch.no_grad():
                o = visual(tensors[f"{case}.pixel_values"], grid_thw=tensors[f"{case}.grid_thw"])
            return_type = type(o).__name__
            tensors[f"{name}.{case}.embeds"] = o.pooler_output.contiguous()
            assert len(o.deepstack_features) == len(vc["deepstack_visual_indexes"])
            for k, f in enumerate(o.deepstack_features):
                tensors[f"{name}.{case}.deepstack.{k}"] = f.contiguous()
    save_file(tensors, out / "vision.safetensors", metadata={"format": "pt"})

    src = out / "small" / "text_encoder"
    weights = load_file(src / "model.safetensors")
    victim = next(n for n in weights if n.endswith("visual.blocks.0.mlp.linear_fc1.weight"))
    for name, change in [("broken_missing", lambda w: w.pop(victim)),
                         ("broken_shape", lambda w: w.__setitem__(victim, w[victim][:-1].clone()))]:
        shutil.rmtree(out / name, ignore_errors=True)
        (out / name).mkdir()
        shutil.copy(src / "config.json", out / name / "config.json")
        w = dict(weights)
        change(w)
        save_file(w, out / name / "model.safetensors", metadata={"format": "pt"})

    meta = {"reference": "transformers", "reference_version": transformers.__version__,
            "torch_version": torch.__version__, "numpy_version": np.__version__, "seed": SEED, "dtype": "float32",
            "classes": ["Qwen3VLForConditionalGeneration", "Qwen3VLVisionModel", "Qwen2VLImageProcessorPil"],
            "attn_implementation": model.config._attn_implementation, "return_type": return_type,
            "configs": CONFIGS, "cases": cases, "weight_prefix": prefixes, "broken_tensor": victim}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"qwen3 vision fixtures: transformers {transformers.__version__} ({return_type}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
