#!/usr/bin/env python3
"""Parity fixtures for qwen_image_21 from a text prompt: the Qwen3-VL text tower, the pipeline's prompt template and
drop, and whole QwenImage21Pipeline runs from text (models.md §4, issue 12).

Usage: qwen_image_21_text_fixtures.py OUT_DIR [--num-layers N] [--checkpoint-only]
  --num-layers N       transformer blocks (the demo uses more than the tests, so blocks stream every step)
  --checkpoint-only    write checkpoint/ alone (tools/ddo demo), no fixtures

The reference is transformers' Qwen3VLForConditionalGeneration (tiny, random fp32), a byte-level BPE tokenizer
trained offline with the `tokenizers` library in Qwen2's layout (tiny_qwen_tokenizer.py), and diffusers'
QwenImage21Pipeline driven with `prompt=` / `negative_prompt=`. The checkpoint is written the way
QwenImage21Pipeline.save_pretrained lays it out (model_index.json, scheduler/, text_encoder/, processor/,
transformer/, vae/); the processor is assembled from its parts (tokenizer, image processor, chat template) because
transformers' video processor needs torchvision, which the venv does not carry — the pipeline's text path does not
use it.

Files written:
  checkpoint/                    the whole pipeline (fp32); transformer context_in_dim = the text hidden size
  checkpoint_sigmas/             the same with model_index.json sample_sigmas (the model author's default grid)
  text_encoder.safetensors       <case>.ids / .layer0 (first decoder layer's output) / .last (last layer before the
                                 final norm) / .embeds (after the template drop) per prompt; batch.* two prompts
                                 of different lengths together (left padding, masks)
  pipeline_text.safetensors      <run>.pixels uint8 [N, H, W, 4] (numpy_to_pil's rounding) for the runs in
                                 reference.json "pipeline_runs"
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
import transformers
from diffusers import AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler, QwenImage21Pipeline, \
    QwenImage21Transformer2DModel
from transformers import Qwen2TokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen_image_21_fixtures as base  # noqa: E402  (configs, VAE randomisation)
import tiny_qwen_tokenizer  # noqa: E402

SEED = 0
TEXT_HIDDEN = 16
TEXT_CONFIG = dict(hidden_size=TEXT_HIDDEN, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6, max_position_embeddings=4096,
                   rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 1, 1],
                                    "mrope_interleaved": True})
VISION_CONFIG = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=TEXT_HIDDEN,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                     deepstack_visual_indexes=[0])
# A minimal ChatML template: it renders a system message as Qwen3-VL's does, which is all the pipeline asks of it
# (apply_chat_template on the system message gives the drop index).
CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
                 "{%- if message.content is string %}{{- message.content }}{%- else %}"
                 "{%- for c in message.content %}{%- if 'text' in c %}{{- c.text }}{%- endif %}{%- endfor %}"
                 "{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
PROMPTS = {
    "cat": "a cat sitting on a mat",
    "cjk": "夕阳下的海边灯塔, watercolor 🐱",
    "long": "A photograph of an astronaut riding a horse on the moon, 85mm, f/1.8, soft light",
    "empty": "",  # the pipeline encodes " " instead
}
SAMPLE_SIGMAS = [1.0, 0.8, 0.45]


def build_text_encoder(tokenizer):
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                            "<|vision_end|>"]}
    cfg = Qwen3VLConfig(text_config=dict(TEXT_CONFIG, vocab_size=len(tokenizer)), vision_config=VISION_CONFIG,
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(SEED + 11)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    # Default init (std 0.02, unit norms) would hide a wrong norm or a missing scale: randomise everything.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
    return model


def build_processor():
    tok = Qwen2TokenizerFast(tokenizer_object=tiny_qwen_tokenizer.train(), eos_token="<|im_end|>",
                             pad_token="<|endoftext|>", unk_token=None, bos_token=None)
    # Qwen3VLProcessor checks each part against the transformers class registry, which lacks the video processor
    # without torchvision; the text path never calls it.
    Qwen3VLProcessor.check_argument_for_proper_class = lambda self, name, arg: type(arg)
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(), tokenizer=tok, video_processor=None,
                            chat_template=CHAT_TEMPLATE)


def build_denoiser(num_layers=None):
    torch.manual_seed(SEED)
    cfg = dict(base.TRANSFORMER_CONFIG, context_in_dim=TEXT_HIDDEN)
    if num_layers:
        cfg["num_layers"] = num_layers
    transformer = QwenImage21Transformer2DModel(**cfg).eval()
    with torch.no_grad():
        for name, p in transformer.named_parameters():
            p.copy_(torch.randn_like(p) * (p.shape[1] ** -0.5 if p.dim() > 1 else 0.2))
    torch.manual_seed(SEED + 1)
    z = base.VAE_CONFIG["z_dim"]
    vae = AutoencoderKLQwenImage21(**base.VAE_CONFIG, latents_mean=(torch.randn(z) * 0.5).tolist(),
                                   latents_std=(torch.rand(z) + 0.5).tolist()).eval()
    base._randomise_vae(vae)
    return transformer, vae, cfg


def save_checkpoint(ckpt, transformer, vae, text_encoder, processor, sample_sigmas=None):
    transformer.save_pretrained(ckpt / "transformer", safe_serialization=True)
    vae.save_pretrained(ckpt / "vae", safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**base.SCHEDULER_CONFIG).save_pretrained(ckpt / "scheduler")
    text_encoder.save_pretrained(ckpt / "text_encoder", safe_serialization=True)
    proc = ckpt / "processor"
    processor.tokenizer.save_pretrained(proc)
    processor.image_processor.save_pretrained(proc)
    (proc / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    index = {
        "_class_name": "QwenImage21Pipeline",
        "_diffusers_version": diffusers.__version__,
        "processor": ["transformers", "Qwen3VLProcessor"],
        "sample_sigmas": sample_sigmas,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen3VLForConditionalGeneration"],
        "transformer": ["diffusers", "QwenImage21Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage21"],
    }
    (ckpt / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")


def pipeline(transformer, vae, text_encoder, processor, sample_sigmas=None):
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**base.SCHEDULER_CONFIG), vae=vae,
                               text_encoder=text_encoder, processor=processor, transformer=transformer,
                               sample_sigmas=sample_sigmas)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def text_encoder_fixtures(out, pipe, meta):
    text_model = pipe.text_encoder.model.language_model
    tensors = {}
    captured = {}
    hook = text_model.layers[0].register_forward_hook(lambda m, a, o: captured.__setitem__("layer0", o))
    try:
        for name, prompt in PROMPTS.items():
            text = pipe.prompt_template_t2i.format(prompt or " ")
            ids = pipe.processor(text=[text], padding=True, padding_side="left", return_tensors="pt").input_ids
            with torch.no_grad():
                norm_hook = text_model.norm.register_forward_hook(lambda m, a, o: a[0])
                try:
                    last = pipe.text_encoder(input_ids=ids, attention_mask=torch.ones_like(ids),
                                             output_hidden_states=True).hidden_states[-1]
                finally:
                    norm_hook.remove()
                embeds, mask, _ = pipe.encode_prompt(prompt=prompt, device="cpu")
            assert mask is None, "one prompt is never padded"
            tensors[f"{name}.ids"] = ids
            tensors[f"{name}.layer0"] = captured["layer0"][0] if isinstance(captured["layer0"], tuple) \
                else captured["layer0"]
            tensors[f"{name}.last"] = last
            tensors[f"{name}.embeds"] = embeds
        with torch.no_grad():  # two prompts of different lengths: left padding, the mask, the drop per prompt
            embeds, mask, _ = pipe.encode_prompt(prompt=[PROMPTS["cat"], PROMPTS["long"]], device="cpu")
    finally:
        hook.remove()
    assert mask is not None and not bool(mask.all())
    tensors["batch.embeds"] = embeds
    tensors["batch.mask"] = mask.to(torch.uint8)
    base._save(out / "text_encoder.safetensors", tensors, {"reference": "transformers"})
    meta["prompts"] = PROMPTS
    meta["batch_prompts"] = ["cat", "long"]
    meta["drop_idx"] = pipe._drop_idx
    meta["template"] = pipe.prompt_template_t2i


def pipeline_fixtures(out, pipe, pipe_sigmas, meta):
    runs = {
        "cfg": dict(prompt=PROMPTS["cat"], negative_prompt="blurry, low quality", true_cfg_scale=4.0, steps=3,
                    height=64, width=96, use_kv_cache=True),
        "plain": dict(prompt=PROMPTS["cjk"], negative_prompt=None, true_cfg_scale=1.0, steps=2, height=64, width=64,
                      use_kv_cache=True),
        "sigmas": dict(prompt=PROMPTS["cat"], negative_prompt=None, true_cfg_scale=1.0, steps=None, height=64,
                       width=64, use_kv_cache=True, checkpoint="checkpoint_sigmas"),
        "call_sigmas": dict(prompt=PROMPTS["cat"], negative_prompt=None, true_cfg_scale=1.0, steps=None,
                            sigmas=[1.0, 0.6], height=64, width=64, use_kv_cache=True),
    }
    tensors = {}
    for name, r in runs.items():
        p = pipe_sigmas if r.get("checkpoint") == "checkpoint_sigmas" else pipe
        kwargs = dict(prompt=r["prompt"], height=r["height"], width=r["width"], true_cfg_scale=r["true_cfg_scale"],
                      use_kv_cache=r["use_kv_cache"])
        if r["negative_prompt"] is not None:
            kwargs["negative_prompt"] = r["negative_prompt"]
        if r["steps"] is not None:
            kwargs["num_inference_steps"] = r["steps"]
        if r.get("sigmas") is not None:
            kwargs["sigmas"] = r["sigmas"]
        with torch.no_grad():
            images = p(**kwargs, generator=torch.Generator().manual_seed(SEED), output_type="np",
                       return_dict=False)[0]
        tensors[f"{name}.pixels"] = torch.from_numpy((images * 255).round().astype("uint8"))
        r["seed"] = SEED
    base._save(out / "pipeline_text.safetensors", tensors, {"reference": "diffusers"})
    meta["pipeline_runs"] = runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--num-layers", type=int, default=None, help="transformer blocks (default: the tiny test config's)")
    ap.add_argument("--checkpoint-only", action="store_true", help="write checkpoint/ only (the demo's input)")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    processor = build_processor()
    text_encoder = build_text_encoder(processor.tokenizer)
    transformer, vae, transformer_config = build_denoiser(args.num_layers)
    save_checkpoint(out / "checkpoint", transformer, vae, text_encoder, processor)
    if args.checkpoint_only:
        (out / "checkpoint.json").write_text(json.dumps({"transformer_config": transformer_config}, indent=2) + "\n")
        print(f"qwen_image_21 checkpoint (saved whole, with its text encoder) -> {out / 'checkpoint'}")
        return 0
    save_checkpoint(out / "checkpoint_sigmas", transformer, vae, text_encoder, processor, SAMPLE_SIGMAS)
    meta = {"reference": "diffusers", "reference_version": diffusers.__version__,
            "transformers_version": transformers.__version__, "torch_version": torch.__version__,
            "numpy_version": np.__version__, "seed": SEED, "dtype": "float32",
            "classes": ["Qwen3VLForConditionalGeneration", "QwenImage21Pipeline"],
            "text_config": TEXT_CONFIG, "transformer_config": transformer_config, "sample_sigmas": SAMPLE_SIGMAS}
    pipe = pipeline(transformer, vae, text_encoder, processor)
    text_encoder_fixtures(out, pipe, meta)
    pipeline_fixtures(out, pipe, pipeline(transformer, vae, text_encoder, processor, SAMPLE_SIGMAS), meta)
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    print(f"qwen_image_21 text fixtures: diffusers {diffusers.__version__}, transformers {transformers.__version__} "
          f"-> {out}")


if __name__ == "__main__":
    sys.exit(main())
