#!/usr/bin/env python3
"""Parity fixtures for qwen_image_21 with condition images (references): whole QwenImage21Pipeline(prompt=...,
image=[...]) runs on a tiny checkpoint saved whole with its Qwen3-VL vision tower (issue 29,
conditioning-serving-peers.md §1).

Usage: qwen_image_21_reference_fixtures.py OUT_DIR

The reference is diffusers 0.42.1's QwenImage21Pipeline with transformers' Qwen3VLForConditionalGeneration (tiny,
random fp32, its vision tower with deepstack mergers) and a Qwen3VLProcessor assembled from the tiny tokenizer and
transformers' PIL image processor (Qwen2VLImageProcessorPil): the venv has no torchvision (no wheel for torch 2.15),
and the processor's torchvision backend is only chosen when torchvision is installed; the PIL backend is the one a
machine without torchvision runs. Its config is Qwen3-VL's (patch 16, merge 2, temporal patch 2, mean = std = 0.5)
with a small min_pixels, so that the tiny references (output_resolution 96) are not upscaled by smart_resize.

Files written:
  checkpoint/                    the whole pipeline (fp32), processor/preprocessor_config.json included
  checkpoint_diffusers_test/     the components of diffusers' own test (test_qwenimage21.py get_dummy_components)
  refs/<name>.png                the condition images ddo-host reads (RGB and RGBA, several sizes and ratios)
  pipeline_refs.safetensors      <run>.pixels uint8 [N, H, W, 4] (numpy_to_pil's rounding; diffusers_test.pixels
                                 for the diffusers test's test_inference_with_condition_image call);
                                 <run>.prompt_embeds / .image_pad_mask (encode_prompt with the resized images),
                                 <run>.image_latents (prepare_latents: the normalised reference latents, packed)
  reference.json                 versions, configs and "runs" (prompt, negative prompt, images, output_resolution,
                                 steps, guidance, KV cache, the size the pipeline chose)
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
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen_image_21_fixtures as base  # noqa: E402  (_save, VAE randomisation)
import qwen_image_21_text_fixtures as text  # noqa: E402  (tokenizer, chat template, denoiser, checkpoint layout)

SEED = 0
# Two vision blocks, deepstack after both (added after LLM layers 0 and 1); a 4x4 position table, so that every
# reference grid is an interpolation of it.
VISION_CONFIG = dict(depth=2, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=text.TEXT_HIDDEN,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                     deepstack_visual_indexes=[0, 1])
IMAGE_PROCESSOR = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5, 0.5, 0.5],
                       image_std=[0.5, 0.5, 0.5], size={"shortest_edge": 32 * 32, "longest_edge": 16777216})
OUTPUT_RESOLUTION = 96


def build_processor():
    tok = text.build_processor().tokenizer
    Qwen3VLProcessor.check_argument_for_proper_class = lambda self, name, arg: type(arg)
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(**IMAGE_PROCESSOR), tokenizer=tok,
                            video_processor=None, chat_template=text.CHAT_TEMPLATE)


def build_text_encoder(tokenizer):
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                            "<|vision_end|>"]}
    cfg = Qwen3VLConfig(text_config=dict(text.TEXT_CONFIG, vocab_size=len(tokenizer)), vision_config=VISION_CONFIG,
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(SEED + 21)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # randomise everything, norms around 1 (a wrong norm or a missing scale shows)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) * p[0].numel() ** -0.5)
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def diffusers_test_pipeline(processor):
    """The components of diffusers' own tests/pipelines/qwenimage21/test_qwenimage21.py get_dummy_components (same
    configs, same seeds, default initialisation); the tokenizer is the tiny one (the test's comes from the Hub)."""
    from diffusers import AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler, QwenImage21Transformer2DModel
    z_dim, hidden = 8, 16
    torch.manual_seed(0)
    transformer = QwenImage21Transformer2DModel(patch_size=1, in_channels=z_dim, out_channels=z_dim, num_layers=2,
                                                attention_head_dim=16, num_attention_heads=2, context_in_dim=hidden,
                                                mlp_ratio=2, axes_dims_rope=(4, 6, 6)).eval()
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage21(base_dim=4, decoder_base_dim=4, z_dim=z_dim, dim_mult=[1, 1, 1, 1, 1],
                                   num_res_blocks=1, attn_scales=[], temperal_downsample=[False, True, True, True],
                                   latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim).eval()
    tok = processor.tokenizer  # a fresh one: a tokenizer that has padded a batch saves its padding in tokenizer.json
    ids = {t: tok.convert_tokens_to_ids(t) for t in ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                      "<|vision_end|>"]}
    torch.manual_seed(0)
    config = Qwen3VLConfig(
        text_config={"hidden_size": hidden, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 2, "head_dim": 8, "vocab_size": len(tok),
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]}},
        vision_config={"depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": hidden,
                       "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "num_position_embeddings": 64, "deepstack_visual_indexes": [0]},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    text_encoder = Qwen3VLForConditionalGeneration(config).eval()
    proc = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=64 * 64),
        tokenizer=tok, video_processor=None, chat_template=text.CHAT_TEMPLATE)
    return transformer, vae, text_encoder, proc


def smooth_image(rng, width, height, channels):
    """A smooth random image (low-frequency noise upsampled): resize filters and patches both matter."""
    low = rng.integers(0, 256, size=(max(2, height // 8), max(2, width // 8), channels)).astype(np.uint8)
    mode = "RGBA" if channels == 4 else "RGB"
    img = Image.fromarray(low, mode).resize((width, height), Image.Resampling.BICUBIC)
    arr = np.asarray(img).copy()
    arr = np.clip(arr.astype(np.int16) + rng.integers(-12, 13, size=arr.shape), 0, 255).astype(np.uint8)
    if channels == 4:  # alpha from transparent to opaque across the image, plus a fully transparent corner
        arr[..., 3] = np.linspace(0, 255, width, dtype=np.float32)[None, :].round().astype(np.uint8)
        arr[: height // 4, : width // 4, 3] = 0
    return Image.fromarray(arr, mode)


REFS = {  # name: (width, height, channels)
    "wide_rgb": (150, 100, 3),
    "tall_rgba": (72, 120, 4),
    "square_rgb": (64, 64, 3),
    "small_rgba": (40, 56, 4),
    "sliver_rgb": (400, 2, 3),  # refused: at output_resolution 96 its height rounds to 0
}

RUNS = {
    "one_rgb": dict(prompt="make the cat blue", negative_prompt=None, true_cfg_scale=1.0, steps=2,
                    images=["wide_rgb"], use_kv_cache=True),
    "one_rgba_cfg": dict(prompt="a sticker on a table", negative_prompt="blurry", true_cfg_scale=4.0, steps=2,
                         images=["tall_rgba"], use_kv_cache=True),
    "three_cfg": dict(prompt="combine them into one scene", negative_prompt="low quality", true_cfg_scale=3.0,
                      steps=2, images=["wide_rgb", "small_rgba", "square_rgb"], use_kv_cache=True),
    "three_no_cache": dict(prompt="combine them into one scene", negative_prompt=None, true_cfg_scale=1.0, steps=2,
                           images=["tall_rgba", "wide_rgb", "square_rgb"], use_kv_cache=False),
    "two_per_prompt": dict(prompt="two variations", negative_prompt="blurry", true_cfg_scale=2.0, steps=2,
                           images=["tall_rgba", "square_rgb"], use_kv_cache=True, num_images=2),
    "sized": dict(prompt="the same, wider", negative_prompt=None, true_cfg_scale=1.0, steps=2, images=["square_rgb"],
                  use_kv_cache=True, width=128, height=64),
}


def encode_rungs(pipe, run, images, tensors, name):
    """encode_prompt and prepare_latents as __call__ runs them, for the rungs below the whole image."""
    calc = diffusers.pipelines.qwenimage21.pipeline_qwenimage21.calculate_dimensions
    input_images, vae_images = [], []
    for img in images:
        img = img.convert("RGBA") if img.mode != "RGBA" else img
        w, h, _ = calc(OUTPUT_RESOLUTION * OUTPUT_RESOLUTION, img.size[0] / img.size[1])
        input_images.append(pipe.image_processor.resize(img, width=w, height=h))
        vae_images.append(pipe.image_processor.preprocess(img, width=w, height=h).unsqueeze(2))
    with torch.no_grad():
        embeds, mask, pad = pipe.encode_prompt(image=input_images, prompt=run["prompt"], device="cpu")
        tensors[f"{name}.prompt_embeds"] = embeds
        tensors[f"{name}.image_pad_mask"] = pad.to(torch.uint8)
        latents = [pipe._encode_vae_image(v, torch.Generator().manual_seed(SEED)) for v in vae_images]
        packed = [z.permute(0, 2, 3, 4, 1).reshape(1, -1, z.shape[1]) for z in latents]
        tensors[f"{name}.image_latents"] = torch.cat(packed, dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    processor = build_processor()
    text_encoder = build_text_encoder(processor.tokenizer)
    transformer, vae, transformer_config = text.build_denoiser()
    text.save_checkpoint(out / "checkpoint", transformer, vae, text_encoder, processor)
    pipe = text.pipeline(transformer, vae, text_encoder, processor)

    rng = np.random.default_rng(SEED + 5)
    (out / "refs").mkdir(exist_ok=True)
    refs = {}
    for name, (w, h, c) in REFS.items():
        refs[name] = smooth_image(rng, w, h, c)
        refs[name].save(out / "refs" / f"{name}.png")
    # What the pipeline reads is what ddo reads: the PNG files, decoded again.
    refs = {name: Image.open(out / "refs" / f"{name}.png") for name in REFS}
    for img in refs.values():
        img.load()

    tensors = {}
    for name, r in RUNS.items():
        images = [refs[i] for i in r["images"]]
        kwargs = dict(prompt=r["prompt"], image=images, true_cfg_scale=r["true_cfg_scale"],
                      num_inference_steps=r["steps"], use_kv_cache=r["use_kv_cache"],
                      output_resolution=OUTPUT_RESOLUTION)
        if r["negative_prompt"] is not None:
            kwargs["negative_prompt"] = r["negative_prompt"]
        if "width" in r:
            kwargs["width"], kwargs["height"] = r["width"], r["height"]
        if "num_images" in r:
            kwargs["num_images_per_prompt"] = r["num_images"]
        with torch.no_grad():
            result = pipe(**kwargs, generator=torch.Generator().manual_seed(SEED), output_type="np",
                          return_dict=False)[0]
        tensors[f"{name}.pixels"] = torch.from_numpy((result * 255).round().astype("uint8"))
        r["seed"] = SEED
        r["output_height"], r["output_width"] = int(result.shape[1]), int(result.shape[2])
        encode_rungs(pipe, r, images, tensors, name)
    # diffusers' own test config (test_inference_with_condition_image): its 32x32 condition image, output_resolution 32.
    dt = diffusers_test_pipeline(build_processor())
    text.save_checkpoint(out / "checkpoint_diffusers_test", *dt)
    dpipe = text.pipeline(*dt)
    cond = Image.fromarray(np.random.RandomState(0).randint(0, 255, (32, 32, 3), dtype=np.uint8)).convert("RGBA")
    cond.save(out / "refs" / "diffusers_test.png")
    cond = Image.open(out / "refs" / "diffusers_test.png")
    cond.load()
    with torch.no_grad():
        result = dpipe(prompt="dance monkey", negative_prompt="bad quality", image=cond, num_inference_steps=2,
                       true_cfg_scale=1.0, height=32, width=32, output_resolution=32,
                       generator=torch.Generator().manual_seed(0), output_type="np", return_dict=False)[0]
    tensors["diffusers_test.pixels"] = torch.from_numpy((result * 255).round().astype("uint8"))
    base._save(out / "pipeline_refs.safetensors", tensors, {"reference": "diffusers"})

    meta = {"reference": "diffusers", "reference_version": diffusers.__version__,
            "transformers_version": transformers.__version__, "torch_version": torch.__version__,
            "numpy_version": np.__version__, "pillow_version": Image.__version__, "seed": SEED, "dtype": "float32",
            "classes": ["Qwen3VLForConditionalGeneration", "QwenImage21Pipeline", "Qwen2VLImageProcessorPil"],
            "vision_config": VISION_CONFIG, "image_processor": IMAGE_PROCESSOR,
            "output_resolution": OUTPUT_RESOLUTION, "refs": {k: list(v) for k, v in REFS.items()},
            "transformer_config": transformer_config, "drop_idx": pipe._drop_idx, "runs": RUNS,
            "diffusers_test": {"checkpoint": "checkpoint_diffusers_test", "prompt": "dance monkey",
                               "negative_prompt": "bad quality", "true_cfg_scale": 1.0, "steps": 2, "seed": 0,
                               "width": 32, "height": 32, "output_resolution": 32, "images": ["diffusers_test"]}}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    print(f"qwen_image_21 reference fixtures: diffusers {diffusers.__version__}, transformers "
          f"{transformers.__version__} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
