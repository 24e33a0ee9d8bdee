#!/usr/bin/env python3
"""The benchmarks' LTX-2 checkpoint: a diffusers-layout LTX2Pipeline with random weights whose transformer blocks are
the real LTX-2.3 blocks (../shared/research/models.md §5.2: video stream 4096 = 32 heads x 128, audio stream 2048 =
32 x 64, cross-attention 4096 / 2048, 128 video and 128 audio latent channels, gated attention, cross-attention
modulation with prompt AdaLN, perturbed attention, split RoPE in float64: LTX2VideoTransformer3DModel's defaults with
the 2.3 flags), `blocks` of them instead of 48; every other component as small as ddo's ltx2_video plugin accepts
beside that transformer:

  transformer/  386.7M parameters a block, 427.5M outside the blocks (the timestep, cross-attention and prompt AdaLN
                embeddings, proj_in/out: the real model's, at the real width), saved in `dtype` (bf16 by default), one
                shard per block plus one for the rest (diffusion_pytorch_model-0000i-of-0000n.safetensors + index).
                Weights N(0, 1/fan_in) for matrices, N(0, 0.01) for vectors (biases, norm weights) -- the Qwen bench
                checkpoint's recipe (qwen_image_21_bench_checkpoint.py) -- drawn tensor by tensor from one seeded
                generator, never the whole model in float32 (the module is built on the meta device for its names).
  connectors/   the 2.3 per-modality projections at the transformer's text widths (4096 / 2048) from a small text
                encoder's stacked hidden states (CAPTION 32 x (TEXT_LAYERS 2 + 1) = 96 features, as the parity
                fixtures' prompt embeddings), 128 learnable registers a modality (the real count), 0 connector
                blocks (the plugin accepts 0: the projections, the registers and the final norm run).
  vae/          the LTX-2.3 video VAE's structure (patch 4, 4 down / up stages: 32x space, 8x time, 128 latent
                channels; ltx2_decode_memory.DECODER_23) at tiny widths (encoder 8, decoder 8/16/16/32, one resnet a
                stage), random latents_mean / latents_std.
  audio_vae/    AutoencoderKLLTX2Audio with the real latent layout (8 latent channels x 64 mel bins / 4 = 128 packed
                features = the transformer's audio_in_channels; base_channels 128, the width of its latents_mean /
                latents_std, which apply to the packed features), one level, one resnet.
  vocoder/      the parity fixtures' tiny LTX2Vocoder (ltx2_pipeline_fixtures.vocoder(False, 2 x 64 mel channels)).
  scheduler/    the real LTX-2 dev scheduler config (ltx2_pipeline_fixtures.LTX2_SCHEDULER: dynamic exponential shift,
                shift_terminal 0.1).
  bench.json    the parameters the directory is keyed by.

prompt_embeds_l<L>.safetensors (ensure_prompt_embeds) beside them: LTX2Pipeline's prompt_embeds /
prompt_attention_mask and negative_prompt_embeds / negative_prompt_attention_mask ([1, L, 96], fp32, N(0, 1);
positive left-padded by 5 tokens, negative all padding but the last 2, as ltx2_pipeline_fixtures.prompt_embeds()),
L a multiple of the 128 registers (default 128).

Usage: ltx2_video_bench_checkpoint.py BUILD_DIR [--blocks 3] [--dtype bf16|fp32|fp16] [--text-len 128]
  (writes BUILD_DIR/bench/ltx2_video_w4096_b<blocks>_<dtype>/ once; used by tools/bench/ltx2_video_cache.py)
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
CAPTION, TEXT_LAYERS, REGISTERS = 32, 2, 128
MEL_BINS, AUDIO_LATENT = 64, 8
FORMAT = 1  # bump when what build_checkpoint writes changes: a cached directory of another format is rebuilt

# LTX-2.3's transformer (models.md §5.2): the constructor's defaults are the real widths; these are the 2.3 flags.
TRANSFORMER_23 = dict(rope_type="split", gated_attn=True, cross_attn_mod=True, audio_gated_attn=True,
                      audio_cross_attn_mod=True, use_prompt_embeddings=False, perturbed_attn=True)


def checkpoint_name(blocks: int, dtype: str) -> str:
    return f"ltx2_video_w4096_b{blocks}_{dtype}"


def _params(blocks: int, dtype: str) -> dict:
    return {"format": FORMAT, "blocks": blocks, "dtype": dtype}


def transformer_bytes(ckpt: Path) -> dict:
    """Payload bytes of the transformer's safetensors files: {"blocks": per-block list, "other": the rest}."""
    per_block, other = {}, 0
    for f in sorted((ckpt / "transformer").glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            size = v["data_offsets"][1] - v["data_offsets"][0]
            if k.startswith("transformer_blocks."):
                i = int(k.split(".")[1])
                per_block[i] = per_block.get(i, 0) + size
            else:
                other += size
    return {"blocks": [per_block[i] for i in sorted(per_block)], "other": other}


def _write_transformer(out: Path, blocks: int, torch_dtype, log):
    """Random weights for LTX2VideoTransformer3DModel(num_layers=blocks, **TRANSFORMER_23), shard by shard."""
    import torch
    from diffusers import LTX2VideoTransformer3DModel
    from safetensors.torch import save_file

    with torch.device("meta"):
        model = LTX2VideoTransformer3DModel(num_layers=blocks, **TRANSFORMER_23)
    out.mkdir(parents=True, exist_ok=True)
    model.save_config(out)
    names = list(model.state_dict().items())
    groups = [[(n, t) for n, t in names if not n.startswith("transformer_blocks.")]]
    groups += [[(n, t) for n, t in names if n.startswith(f"transformer_blocks.{i}.")] for i in range(blocks)]
    assert sum(len(g) for g in groups) == len(names)
    g = torch.Generator().manual_seed(0)
    weight_map, total = {}, 0
    for s, group in enumerate(groups):
        fname = f"diffusion_pytorch_model-{s + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for n, meta in group:
            shape = tuple(meta.shape)
            std = shape[1] ** -0.5 if len(shape) > 1 else 0.1
            shard[n] = (torch.randn(shape, generator=g) * std).to(torch_dtype).contiguous()
            weight_map[n] = fname
            total += shard[n].numel() * shard[n].element_size()
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        log(f"bench:   transformer shard {s + 1}/{len(groups)} ({'outside the blocks' if s == 0 else f'block {s - 1}'})")
        del shard
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def build_checkpoint(ckpt: Path, blocks: int, dtype: str = "bf16", log=print):
    import torch
    import diffusers
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    import ltx2_pipeline_fixtures as pl
    from ltx2_decode_memory import DECODER_23

    torch_dtype = getattr(torch, DTYPES[dtype])
    _write_transformer(ckpt / "transformer", blocks, torch_dtype, log)

    torch.manual_seed(0)
    connectors = LTX2TextConnectors(
        caption_channels=CAPTION, text_proj_in_factor=TEXT_LAYERS + 1, video_connector_num_attention_heads=32,
        video_connector_attention_head_dim=128, video_connector_num_layers=0,
        video_connector_num_learnable_registers=REGISTERS, video_gated_attn=True,
        audio_connector_num_attention_heads=32, audio_connector_attention_head_dim=64, audio_connector_num_layers=0,
        audio_connector_num_learnable_registers=REGISTERS, audio_gated_attn=True, connector_rope_base_seq_len=4096,
        rope_theta=10000.0, rope_double_precision=True, causal_temporal_positioning=False, rope_type="split",
        per_modality_projections=True, video_hidden_dim=4096, audio_hidden_dim=2048, proj_bias=True).eval()
    connectors.to(torch_dtype).save_pretrained(ckpt / "connectors", safe_serialization=True)

    torch.manual_seed(0)
    vae = AutoencoderKLLTX2Video(**dict(DECODER_23, decoder_block_out_channels=(8, 16, 16, 32),
                                        decoder_layers_per_block=(1, 1, 1, 1, 1))).eval()
    g = torch.Generator().manual_seed(1)
    vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=g) * 0.1)
    vae.latents_std.copy_(1.0 + torch.rand(vae.latents_std.shape, generator=g) * 0.5)
    vae.to(torch_dtype).save_pretrained(ckpt / "vae", safe_serialization=True)

    torch.manual_seed(0)
    packed = AUDIO_LATENT * (MEL_BINS // 4)
    audio_vae = AutoencoderKLLTX2Audio(
        base_channels=packed, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None,
        in_channels=2, resolution=32, latent_channels=AUDIO_LATENT, norm_type="pixel", causality_axis="height",
        dropout=0.0, mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160, is_causal=True,
        mel_bins=MEL_BINS).eval()
    g = torch.Generator().manual_seed(2)
    audio_vae.latents_mean.copy_(torch.randn(audio_vae.latents_mean.shape, generator=g) * 0.1)
    audio_vae.latents_std.copy_(1.0 + torch.rand(audio_vae.latents_std.shape, generator=g) * 0.5)
    audio_vae.to(torch_dtype).save_pretrained(ckpt / "audio_vae", safe_serialization=True)

    vocoder = pl.vocoder(False, audio_vae.config.output_channels * MEL_BINS).eval()
    vocoder.to(torch_dtype).save_pretrained(ckpt / "vocoder", safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**pl.LTX2_SCHEDULER).save_pretrained(ckpt / "scheduler")

    index = {"_class_name": "LTX2Pipeline", "_diffusers_version": diffusers.__version__,
             "audio_vae": ["diffusers", "AutoencoderKLLTX2Audio"], "connectors": ["ltx2", "LTX2TextConnectors"],
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": [None, None],
             "tokenizer": [None, None], "transformer": ["diffusers", "LTX2VideoTransformer3DModel"],
             "vae": ["diffusers", "AutoencoderKLLTX2Video"], "vocoder": ["ltx2", "LTX2Vocoder"]}
    (ckpt / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    (ckpt / "bench.json").write_text(json.dumps(_params(blocks, dtype)) + "\n")  # written last: the directory is whole


def ensure_checkpoint(bench_dir: Path, blocks: int, dtype: str = "bf16", log=print) -> Path:
    """The cached checkpoint for (blocks, dtype), built on first use (or again when its format changed)."""
    ckpt = bench_dir / checkpoint_name(blocks, dtype)
    stamp = ckpt / "bench.json"
    if not (stamp.exists() and json.loads(stamp.read_text()) == _params(blocks, dtype)):
        import shutil
        import time
        shutil.rmtree(ckpt, ignore_errors=True)
        log(f"bench: building a random LTX-2.3 checkpoint ({blocks} blocks at width 4096 / 2048, {dtype}) in {ckpt}")
        t0 = time.perf_counter()
        build_checkpoint(ckpt, blocks, dtype, log)
        log(f"bench: checkpoint written in {time.perf_counter() - t0:.0f} s")
    return ckpt


def ensure_prompt_embeds(ckpt: Path, text_len: int = 128) -> Path:
    """Positive and negative prompt embeddings for the checkpoint's connectors (module docstring; cached)."""
    if text_len % REGISTERS:
        raise SystemExit(f"bench: --text-len {text_len} is not a multiple of the connectors' {REGISTERS} registers")
    out = ckpt / f"prompt_embeds_l{text_len}.safetensors"
    if out.exists():
        return out
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(3)
    feat = CAPTION * (TEXT_LAYERS + 1)
    pad = 5
    pos = torch.randn(1, text_len, feat, generator=g)
    neg = torch.randn(1, text_len, feat, generator=g)
    pos_mask = torch.ones(1, text_len, dtype=torch.int64)
    pos_mask[:, :pad] = 0
    pos[:, :pad] = 0.0
    neg_mask = torch.ones(1, text_len, dtype=torch.int64)
    neg_mask[:, : text_len - 2] = 0  # "" encodes to a couple of tokens, left padded
    neg[:, : text_len - 2] = 0.0
    tmp = out.with_suffix(".tmp")
    save_file({"prompt_embeds": pos, "prompt_attention_mask": pos_mask, "negative_prompt_embeds": neg,
               "negative_prompt_attention_mask": neg_mask}, str(tmp))
    tmp.rename(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--text-len", type=int, default=128)
    a = ap.parse_args()
    ckpt = ensure_checkpoint(Path(a.build).resolve() / "bench", a.blocks, a.dtype)
    embeds = ensure_prompt_embeds(ckpt, a.text_len)
    sizes = transformer_bytes(ckpt)
    print(f"{ckpt}: transformer {sum(sizes['blocks']) / 1e9:.2f} GB in {len(sizes['blocks'])} blocks "
          f"({sizes['blocks'][0] / 1e6:.0f} MB each) + {sizes['other'] / 1e6:.0f} MB outside them; {embeds.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
