#!/usr/bin/env python3
"""Parity fixtures for the qwen_image_21 model plugin (models.md §4, parity ladder §7.3).

Usage: qwen_image_21_fixtures.py OUT_DIR [--demo-size 256]

The reference is diffusers' own QwenImage21 code (QwenImage21Transformer2DModel, AutoencoderKLQwenImage21,
FlowMatchEulerDiscreteScheduler, QwenImage21Pipeline). Tiny random fp32 models are built from the tiny test config
of diffusers' tests/pipelines/qwenimage21 (models.md §4), saved with diffusers' save_pretrained into
OUT_DIR/checkpoint (a genuine diffusers-layout checkpoint: model_index.json + transformer/ vae/ scheduler/; the
Qwen3-VL text encoder is not part of it: the plugin takes prompt embeddings), and every rung of the ladder is
exported as safetensors next to OUT_DIR/reference.json (reference name + version, torch version, seed, cases).

Files written:
  checkpoint/                      tiny diffusers checkpoint (fp32)
  prompt_embeds.safetensors        prompt_embeds/_mask + negative_prompt_embeds/_mask (the --prompt-embeds input)
  scheduler.safetensors            case<i>.sigmas / case<i>.timesteps (configs + mu in reference.json)
  rope.safetensors                 case<i>.table (complex as [S, D/2, 2]) + case<i>.image_pad_mask
  block.safetensors                one block's inputs/outputs captured inside the transformer (weights: checkpoint)
  transformer.safetensors          whole transformer: t2i, condition image, KV cache extract/cached
  vae.safetensors                  decode plain and tiled
  vae_encode.safetensors           encode (latent_dist.mode()) plain and tiled, and the pipeline's normalised
                                   condition-image latents (_encode_vae_image), from one seeded RGBA image;
                                   wide.* the same encode (and a decode) through vae_wide/
  vae_wide/                        a second tiny VAE whose channels change between blocks (dim_mult [1,2,2,4,4],
                                   num_res_blocks 2): exercises conv_shortcut and the grouped AvgDown/DupUp paths
                                   that the pipeline VAE (dim_mult all 1) never takes
  pipeline.safetensors             embeddings -> pixels (seeded noise, CFG + KV cache; no CFG, no cache)
  checkpoint_rgb/                  the same transformer with a 3-channel (RGB) VAE (in/out_channels 3)
  pipeline_rgb.safetensors         rgb.pixels: QwenImage21Pipeline(output_type="np") on checkpoint_rgb as uint8 HWC
                                   (numpy_to_pil's rounding), the image a PNG writer must reproduce
  pipeline_multi.safetensors       multi.pixels: num_images_per_prompt = 2 (uint8 [2, H, W, 4]) on checkpoint
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
from diffusers import (
    AutoencoderKLQwenImage21,
    FlowMatchEulerDiscreteScheduler,
    QwenImage21Pipeline,
    QwenImage21Transformer2DModel,
)
from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache

SEED = 0

# Tiny test config (models.md §4, diffusers tests/pipelines/qwenimage21/test_qwenimage21.py).
TRANSFORMER_CONFIG = dict(
    patch_size=1,
    in_channels=8,
    out_channels=8,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    context_in_dim=16,
    mlp_ratio=2,
    axes_dims_rope=(4, 6, 6),
)
VAE_CONFIG = dict(
    base_dim=4,
    decoder_base_dim=4,
    z_dim=8,
    dim_mult=[1, 1, 1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[False, True, True, True],
)
VAE_WIDE_CONFIG = dict(VAE_CONFIG, dim_mult=[1, 2, 2, 4, 4], num_res_blocks=2)
# Qwen-Image's scheduler settings (models.md §2.1): dynamic exponential shift with a terminal stretch.
SCHEDULER_CONFIG = dict(
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    base_image_seq_len=256,
    max_image_seq_len=8192,
    shift_terminal=0.02,
    time_shift_type="exponential",
)


class _NoProcessor:
    """Stands in for the Qwen3-VL processor: the pipeline is driven from prompt embeddings, so it only needs the two
    calls its constructor makes."""

    class _Tokenizer:
        def encode(self, text):
            return [0]

    tokenizer = _Tokenizer()

    def apply_chat_template(self, *args, **kwargs):
        return [[0]]


def _real(t):
    return torch.view_as_real(t.contiguous()).contiguous() if t.is_complex() else t.contiguous()


def _save(path, tensors, meta):
    save_file({k: _real(v).detach().clone().contiguous() for k, v in tensors.items()}, str(path),
              metadata={k: str(v) for k, v in meta.items()})


def _calculate_shift(seq_len, cfg):
    m = (cfg["max_shift"] - cfg["base_shift"]) / (cfg["max_image_seq_len"] - cfg["base_image_seq_len"])
    b = cfg["base_shift"] - m * cfg["base_image_seq_len"]
    return seq_len * m + b


def _randomise_vae(vae):
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if "gamma" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn_like(p))


def build_models(out):
    torch.manual_seed(SEED)
    transformer = QwenImage21Transformer2DModel(**TRANSFORMER_CONFIG).eval()
    # Zero-initialised norms (txt_in.text_norm stores scale-1) would hide bugs: randomise every parameter.
    with torch.no_grad():
        for name, p in transformer.named_parameters():
            scale = p.shape[1] ** -0.5 if p.dim() > 1 else 0.2
            p.copy_(torch.randn_like(p) * scale)
    torch.manual_seed(SEED + 1)
    latents_mean = (torch.randn(VAE_CONFIG["z_dim"]) * 0.5).tolist()
    latents_std = (torch.rand(VAE_CONFIG["z_dim"]) + 0.5).tolist()
    vae = AutoencoderKLQwenImage21(**VAE_CONFIG, latents_mean=latents_mean, latents_std=latents_std).eval()
    _randomise_vae(vae)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)

    ckpt = out / "checkpoint"
    transformer.save_pretrained(ckpt / "transformer", safe_serialization=True)
    vae.save_pretrained(ckpt / "vae", safe_serialization=True)
    scheduler.save_pretrained(ckpt / "scheduler")
    # The pipeline's own model_index.json needs its text encoder + processor; this checkpoint has neither (the plugin
    # takes prompt embeddings), so the index lists them as absent the way diffusers writes optional components.
    index = {
        "_class_name": "QwenImage21Pipeline",
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "transformer": ["diffusers", "QwenImage21Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage21"],
        "text_encoder": [None, None],
        "processor": [None, None],
    }
    (ckpt / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return transformer, vae, scheduler


def scheduler_fixtures(out, meta):
    cases = [
        (dict(), 2, None),
        (dict(SCHEDULER_CONFIG), 4, _calculate_shift(16, SCHEDULER_CONFIG)),
        (dict(SCHEDULER_CONFIG), 20, _calculate_shift(4096, SCHEDULER_CONFIG)),
        (dict(SCHEDULER_CONFIG, time_shift_type="linear", shift_terminal=None), 7, 1.3),
        (dict(shift=3.0), 8, None),
    ]
    tensors, infos = {}, []
    for i, (cfg, n, mu) in enumerate(cases):
        s = FlowMatchEulerDiscreteScheduler(**cfg)
        sig = np.linspace(1.0, 1 / n, n)
        s.set_timesteps(sigmas=sig, mu=mu) if mu is not None else s.set_timesteps(sigmas=sig)
        tensors[f"case{i}.sigmas"] = s.sigmas
        tensors[f"case{i}.timesteps"] = s.timesteps
        full = {k: s.config[k] for k in ("num_train_timesteps", "shift", "use_dynamic_shifting", "base_shift",
                                         "max_shift", "base_image_seq_len", "max_image_seq_len", "shift_terminal",
                                         "time_shift_type")}
        infos.append(dict(config=full, steps=n, mu=mu))
    # One Euler step: x + (sigma1 - sigma0) * v, x upcast to fp32.
    s = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    s.set_timesteps(sigmas=np.linspace(1.0, 0.25, 4), mu=0.7)
    s.set_begin_index(0)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(1, 16, 8, generator=g)
    v = torch.randn(1, 16, 8, generator=g)
    tensors["step.x"], tensors["step.v"] = x, v
    tensors["step.sigmas"] = s.sigmas
    tensors["step.out"] = s.step(v, s.timesteps[0], x, return_dict=False)[0]
    _save(out / "scheduler.safetensors", tensors, {"reference": "diffusers"})
    meta["scheduler_cases"] = infos


def _t2i_inputs(batch, text_len, h, w, pad, generator):
    cfg = TRANSFORMER_CONFIG
    n = h * w
    hidden = torch.randn(batch, n, cfg["in_channels"], generator=generator)
    text = torch.randn(batch, text_len, cfg["context_in_dim"], generator=generator)
    mask = torch.ones(batch, text_len, dtype=torch.bool)
    if pad:
        mask[:, text_len - pad:] = False
    img_mask = torch.cat([torch.zeros(batch, text_len, dtype=torch.bool), torch.ones(batch, n // 4, dtype=torch.bool)],
                         dim=1)
    return hidden, text, mask, img_mask, [[(1, h, w)]] * batch


def rope_fixtures(out, transformer, meta):
    tensors, infos = {}, []
    layouts = [
        # (text tokens before, condition (h, w) or None, text tokens after, target (h, w))
        (5, None, 0, (4, 4)),
        (3, (2, 2), 4, (4, 6)),
        (7, (4, 2), 2, (5, 3)),
    ]
    for i, (pre, cond, post, tgt) in enumerate(layouts):
        shapes, mask = [], [False] * pre
        if cond:
            shapes.append((1, *cond))
            mask += [True] * (cond[0] * cond[1])
            mask += [False] * post
        shapes.append((1, *tgt))
        mask += [True] * (tgt[0] * tgt[1])
        pad_mask = torch.tensor(mask)
        tensors[f"case{i}.table"] = transformer.pos_embed(shapes, pad_mask, device=torch.device("cpu"))
        tensors[f"case{i}.image_pad_mask"] = pad_mask.to(torch.uint8)
        infos.append(dict(img_shapes=[list(s) for s in shapes]))
    _save(out / "rope.safetensors", tensors, {"reference": "diffusers"})
    meta["rope_cases"] = infos


def transformer_fixtures(out, transformer, meta):
    g = torch.Generator().manual_seed(SEED + 2)
    tensors, infos = {}, {}
    block_capture = {}

    def hook(module, args, kwargs, output):
        if "in" not in block_capture:
            block_capture["in"] = {k: v for k, v in kwargs.items()}
            block_capture["out"] = output

    handle = transformer.transformer_blocks[0].register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        # t2i with right-padded prompt (padded keys masked), batch 2 so per-sample modulation rows are exercised.
        hidden, text, mask, img_mask, shapes = _t2i_inputs(2, 6, 4, 4, 2, g)
        t = torch.tensor([0.8, 0.35])
        tensors.update({"t2i.hidden_states": hidden, "t2i.encoder_hidden_states": text,
                        "t2i.encoder_hidden_states_mask": mask.to(torch.uint8), "t2i.timestep": t,
                        "t2i.img_mask": img_mask.to(torch.uint8)})
        tensors["t2i.out"] = transformer(hidden, text, t, shapes, img_mask, mask, return_dict=False)[0]
        infos["t2i"] = dict(img_shapes=[list(s) for s in shapes[0]])
    handle.remove()

    with torch.no_grad():
        # A condition image inside the text (one 2x2 slot = 4 latent tokens at VLM position 3).
        text_len = 8
        cond_h, cond_w, h, w = 2, 4, 4, 4
        vlm_mask = torch.zeros(1, text_len, dtype=torch.bool)
        vlm_mask[0, 3:5] = True  # 2 slots = 8 latent tokens = the 2x4 condition image
        img_mask = torch.cat([vlm_mask, torch.ones(1, h * w // 4, dtype=torch.bool)], dim=1)
        hidden = torch.randn(1, cond_h * cond_w + h * w, TRANSFORMER_CONFIG["in_channels"], generator=g)
        text = torch.randn(1, text_len, TRANSFORMER_CONFIG["context_in_dim"], generator=g)
        t = torch.tensor([0.6])
        shapes = [[(1, cond_h, cond_w), (1, h, w)]]
        tensors.update({"cond.hidden_states": hidden, "cond.encoder_hidden_states": text, "cond.timestep": t,
                        "cond.img_mask": img_mask.to(torch.uint8)})
        tensors["cond.out"] = transformer(hidden, text, t, shapes, img_mask, None, return_dict=False)[0]
        infos["cond"] = dict(img_shapes=[list(s) for s in shapes[0]])

        # KV cache: extract at step 0, cached at step 1 (and the uncached forward of step 1 for comparison).
        hidden0, text, mask, img_mask, shapes = _t2i_inputs(1, 7, 4, 4, 3, g)
        hidden1 = torch.randn(hidden0.shape, generator=g)
        t0, t1 = torch.tensor([0.9]), torch.tensor([0.55])
        cache = QwenImage21KVCache(TRANSFORMER_CONFIG["num_layers"])
        tensors.update({"kv.hidden_states0": hidden0, "kv.hidden_states1": hidden1, "kv.encoder_hidden_states": text,
                        "kv.encoder_hidden_states_mask": mask.to(torch.uint8), "kv.timestep0": t0,
                        "kv.timestep1": t1, "kv.img_mask": img_mask.to(torch.uint8)})
        tensors["kv.extract_out"] = transformer(hidden0, text, t0, shapes, img_mask, mask, kv_cache=cache,
                                                kv_cache_mode="extract", return_dict=False)[0]
        tensors["kv.cache0.k"] = cache.get_layer(0).k
        tensors["kv.cache0.v"] = cache.get_layer(0).v
        tensors["kv.cached_out"] = transformer(hidden1, text, t1, shapes, img_mask, mask, kv_cache=cache,
                                               kv_cache_mode="cached", return_dict=False)[0]
        tensors["kv.uncached_out"] = transformer(hidden1, text, t1, shapes, img_mask, mask, return_dict=False)[0]
        infos["kv"] = dict(img_shapes=[list(s) for s in shapes[0]])
    _save(out / "transformer.safetensors", tensors, {"reference": "diffusers"})
    meta["transformer_cases"] = infos

    cap = block_capture["in"]
    segments = cap["segments"]
    block = {
        "hidden_states": cap["hidden_states"],
        "modulation": cap["modulation"],
        "rotary_emb": cap["rotary_emb"],
        "target_token_mask": cap["target_token_mask"].to(torch.uint8),
        "key_valid": cap["key_valid"].to(torch.uint8),
        "segments": torch.tensor([[s, e, int(txt)] for s, e, txt in segments], dtype=torch.int64),
        "out": block_capture["out"],
    }
    _save(out / "block.safetensors", block, {"reference": "diffusers", "block": "transformer_blocks.0"})


def vae_fixtures(out, vae, meta):
    g = torch.Generator().manual_seed(SEED + 3)
    z = torch.randn(1, VAE_CONFIG["z_dim"], 1, 6, 5, generator=g)
    tensors = {"z": z}
    with torch.no_grad():
        vae.disable_tiling()
        tensors["decode"] = vae.decode(z, return_dict=False)[0]
        tiling = dict(tile_sample_min_height=64, tile_sample_min_width=48, tile_sample_stride_height=32,
                      tile_sample_stride_width=32)
        vae.enable_tiling(**tiling)
        tensors["decode_tiled"] = vae.decode(z, return_dict=False)[0]
        vae.disable_tiling()
    _save(out / "vae.safetensors", tensors, {"reference": "diffusers"})
    meta["vae_tiling"] = tiling


def vae_encode_fixtures(out, transformer, vae, meta):
    """Encoder rungs. Written after every other fixture and from its own generator, so the files above stay
    bitwise what they were before the encoder rungs existed."""
    g = torch.Generator().manual_seed(SEED + 5)
    # One RGBA frame in [-1, 1] (what VaeImageProcessor.preprocess hands the VAE), 96 x 80 = 6 x 5 latents.
    pixels = torch.rand(1, VAE_CONFIG.get("in_channels", 4), 1, 96, 80, generator=g) * 2 - 1
    tensors = {"pixels": pixels}
    # Tiles of 64 x 48 px every 32 px: 3 x 3 tiles (the last ones cut to 32 and 16 px), blended over
    # (64 - 32) / 16 = 2 latent rows and (48 - 32) / 16 = 1 latent column.
    tiling = dict(tile_sample_min_height=64, tile_sample_min_width=48, tile_sample_stride_height=32,
                  tile_sample_stride_width=32)
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG), vae=vae,
                               text_encoder=None, processor=_NoProcessor(), transformer=transformer)
    with torch.no_grad():
        vae.disable_tiling()
        tensors["encode"] = vae.encode(pixels).latent_dist.mode()
        tensors["encode_normalized"] = pipe._encode_vae_image(pixels, generator=None)
        vae.enable_tiling(**tiling)
        tensors["encode_tiled"] = vae.encode(pixels).latent_dist.mode()
        vae.disable_tiling()
    # The tiled rung only means something if the reference actually tiled.
    assert not torch.allclose(tensors["encode"], tensors["encode_tiled"], atol=1e-3), "tiled_encode did not tile"

    torch.manual_seed(SEED + 6)
    z_dim = VAE_WIDE_CONFIG["z_dim"]
    wide = AutoencoderKLQwenImage21(**VAE_WIDE_CONFIG, latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim).eval()
    _randomise_vae(wide)
    wide.save_pretrained(out / "vae_wide", safe_serialization=True)
    pixels = torch.rand(2, 4, 1, 64, 48, generator=g) * 2 - 1
    z = torch.randn(2, z_dim, 1, 4, 3, generator=g)
    with torch.no_grad():
        tensors.update({"wide.pixels": pixels, "wide.encode": wide.encode(pixels).latent_dist.mode(), "wide.z": z,
                        "wide.decode": wide.decode(z, return_dict=False)[0]})
    _save(out / "vae_encode.safetensors", tensors, {"reference": "diffusers"})
    meta["vae_encode_tiling"] = tiling
    meta["vae_wide_config"] = VAE_WIDE_CONFIG


def _embeds(generator, batch, length, valid):
    e = torch.randn(batch, length, TRANSFORMER_CONFIG["context_in_dim"], generator=generator)
    m = torch.zeros(batch, length, dtype=torch.bool)
    m[:, :valid] = True
    e[~m] = 0.0
    return e, m


def pipeline_fixtures(out, transformer, vae, meta, size):
    g = torch.Generator().manual_seed(SEED + 4)
    pos, pos_mask = _embeds(g, 1, 9, 7)
    neg, neg_mask = _embeds(g, 1, 5, 5)
    save_file({"prompt_embeds": pos, "prompt_embeds_mask": pos_mask.to(torch.uint8),
               "negative_prompt_embeds": neg, "negative_prompt_embeds_mask": neg_mask.to(torch.uint8)},
              str(out / "prompt_embeds.safetensors"), metadata={"reference": "diffusers", "producer": __file__})
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    pipe = QwenImage21Pipeline(scheduler=scheduler, vae=vae, text_encoder=None, processor=_NoProcessor(),
                               transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    runs = {
        "cfg_kv": dict(true_cfg_scale=4.0, use_kv_cache=True, steps=3, height=64, width=96),
        "plain": dict(true_cfg_scale=1.0, use_kv_cache=False, steps=2, height=64, width=64),
    }
    tensors = {}
    for name, r in runs.items():
        kwargs = dict(prompt_embeds=pos, prompt_embeds_mask=pos_mask, height=r["height"], width=r["width"],
                      num_inference_steps=r["steps"], true_cfg_scale=r["true_cfg_scale"],
                      use_kv_cache=r["use_kv_cache"])
        if r["true_cfg_scale"] > 1:
            kwargs.update(negative_prompt_embeds=neg, negative_prompt_embeds_mask=neg_mask)
        with torch.no_grad():
            latents = pipe(**kwargs, generator=torch.Generator().manual_seed(SEED), output_type="latent",
                           return_dict=False)[0]
            image = pipe(**kwargs, generator=torch.Generator().manual_seed(SEED), output_type="pt",
                         return_dict=False)[0]
        tensors[f"{name}.latents"] = latents
        tensors[f"{name}.image"] = image
        r["seed"] = SEED
    _save(out / "pipeline.safetensors", tensors, {"reference": "diffusers"})
    meta["pipeline_runs"] = runs


def rgb_fixtures(out, transformer, meta):
    """A checkpoint whose VAE has 3 channels (the plugin must write an RGB PNG from it). Own generators, written
    after every other fixture, so the files above stay bitwise what they were."""
    torch.manual_seed(SEED + 7)
    cfg = dict(VAE_CONFIG, in_channels=3, out_channels=3)
    z_dim = cfg["z_dim"]
    vae = AutoencoderKLQwenImage21(**cfg, latents_mean=(torch.randn(z_dim) * 0.5).tolist(),
                                   latents_std=(torch.rand(z_dim) + 0.5).tolist()).eval()
    _randomise_vae(vae)
    ckpt = out / "checkpoint_rgb"
    transformer.save_pretrained(ckpt / "transformer", safe_serialization=True)
    vae.save_pretrained(ckpt / "vae", safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG).save_pretrained(ckpt / "scheduler")
    index = json.loads((out / "checkpoint" / "model_index.json").read_text())
    (ckpt / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    g = torch.Generator().manual_seed(SEED + 4)
    pos, pos_mask = _embeds(g, 1, 9, 7)
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG), vae=vae, text_encoder=None,
                               processor=_NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    run = dict(true_cfg_scale=1.0, use_kv_cache=True, steps=2, height=64, width=96, seed=SEED)
    with torch.no_grad():
        image = pipe(prompt_embeds=pos, prompt_embeds_mask=pos_mask, height=run["height"], width=run["width"],
                     num_inference_steps=run["steps"], true_cfg_scale=run["true_cfg_scale"],
                     use_kv_cache=run["use_kv_cache"], generator=torch.Generator().manual_seed(SEED),
                     output_type="np", return_dict=False)[0]
    assert image.shape[-1] == 3, f"the RGB VAE produced {image.shape}"
    pixels = torch.from_numpy((image[0] * 255).round().astype("uint8"))  # diffusers' numpy_to_pil
    _save(out / "pipeline_rgb.safetensors", {"rgb.pixels": pixels}, {"reference": "diffusers"})
    meta["pipeline_rgb"] = run


def multi_fixtures(out, transformer, vae, meta):
    """num_images_per_prompt = 2 from the prompt embeddings: the images the plugin's --num-images must reproduce."""
    g = torch.Generator().manual_seed(SEED + 4)
    pos, pos_mask = _embeds(g, 1, 9, 7)
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG), vae=vae, text_encoder=None,
                               processor=_NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    run = dict(num_images_per_prompt=2, steps=2, height=64, width=64, seed=SEED)
    with torch.no_grad():
        images = pipe(prompt_embeds=pos, prompt_embeds_mask=pos_mask, height=run["height"], width=run["width"],
                      num_inference_steps=run["steps"], num_images_per_prompt=run["num_images_per_prompt"],
                      generator=torch.Generator().manual_seed(SEED), output_type="np", return_dict=False)[0]
    assert images.shape[0] == 2, images.shape
    pixels = torch.from_numpy((images * 255).round().astype("uint8"))  # [2, H, W, 4], numpy_to_pil's rounding
    assert not torch.equal(pixels[0], pixels[1]), "the two images of one prompt must differ (one noise draw for both)"
    _save(out / "pipeline_multi.safetensors", {"multi.pixels": pixels}, {"reference": "diffusers"})
    meta["pipeline_multi"] = run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--num-layers", type=int, default=TRANSFORMER_CONFIG["num_layers"],
                    help="transformer blocks of the tiny checkpoint (the demo uses more than the tests, so that "
                         "blocks are streamed every step)")
    args = ap.parse_args()
    TRANSFORMER_CONFIG["num_layers"] = args.num_layers
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    meta = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
            "numpy_version": np.__version__, "seed": SEED, "dtype": "float32",
            "classes": ["QwenImage21Transformer2DModel", "AutoencoderKLQwenImage21",
                        "FlowMatchEulerDiscreteScheduler", "QwenImage21Pipeline"],
            "transformer_config": TRANSFORMER_CONFIG, "vae_config": VAE_CONFIG, "scheduler_config": SCHEDULER_CONFIG}
    transformer, vae, _ = build_models(out)
    scheduler_fixtures(out, meta)
    rope_fixtures(out, transformer, meta)
    transformer_fixtures(out, transformer, meta)
    vae_fixtures(out, vae, meta)
    pipeline_fixtures(out, transformer, vae, meta, 64)
    vae_encode_fixtures(out, transformer, vae, meta)
    rgb_fixtures(out, transformer, meta)
    multi_fixtures(out, transformer, vae, meta)
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    print(f"qwen_image_21 fixtures: diffusers {diffusers.__version__}, torch {torch.__version__} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
