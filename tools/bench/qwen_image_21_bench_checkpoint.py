"""The benchmarks' Qwen-Image 2.1 checkpoint: the real transformer block shapes (width 4096 = 32 heads x 128,
mlp_ratio 3, text width 4096, 64 latent channels: the defaults of diffusers' QwenImage21Transformer2DModel, 32 blocks) with random weights, `depth` blocks, saved in the run dtype so that
neither ddo nor diffusers converts; a small VAE with the real 64 latent channels (its decode is a separate phase,
not what the transformer comparison measures); the Qwen-Image scheduler; and one prompt-embeddings file. `tiny`
swaps in the parity fixtures' tiny transformer and VAE (CI smoke: seconds, not minutes).

Used by tools/bench/model_bench.py (`tools/ddo bench model`) and tools/bench/qwen_image_21_cpu.py."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools" / "reference"))

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def checkpoint_name(depth: int, dtype: str, tiny: bool) -> str:
    return f"qwen_image_21_{'tiny' if tiny else 'w4096'}_b{depth}_{dtype}"


def transformer_bytes(ckpt: Path) -> int:
    """Payload of the transformer's safetensors files (what a resident run holds on the device)."""
    total = 0
    for f in sorted((ckpt / "transformer").glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    return total


def build_checkpoint(ckpt: Path, depth: int, dtype: str = "fp32", tiny: bool = False, text_len: int = 32):
    import torch
    import diffusers
    from diffusers import AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler, QwenImage21Transformer2DModel
    from safetensors.torch import save_file
    import qwen_image_21_fixtures as base

    torch.manual_seed(0)
    if tiny:
        transformer = QwenImage21Transformer2DModel(**dict(base.TRANSFORMER_CONFIG, num_layers=depth)).eval()
        vae = AutoencoderKLQwenImage21(**base.VAE_CONFIG, latents_mean=[0.0] * base.VAE_CONFIG["z_dim"],
                                       latents_std=[1.0] * base.VAE_CONFIG["z_dim"]).eval()
    else:
        transformer = QwenImage21Transformer2DModel(num_layers=depth).eval()
        vae = AutoencoderKLQwenImage21(**dict(base.VAE_CONFIG, z_dim=64), latents_mean=[0.0] * 64,
                                       latents_std=[1.0] * 64).eval()
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # a GPU draws 10 GB of weights in seconds
    transformer.to(dev)
    with torch.no_grad():
        for _, p in transformer.named_parameters():
            p.copy_(torch.randn_like(p) * (p.shape[1] ** -0.5 if p.dim() > 1 else 0.1))
    torch_dtype = getattr(torch, DTYPES[dtype])
    transformer.to(torch_dtype).cpu().save_pretrained(ckpt / "transformer", safe_serialization=True)
    vae.to(torch_dtype).save_pretrained(ckpt / "vae", safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(**base.SCHEDULER_CONFIG).save_pretrained(ckpt / "scheduler")
    index = {"_class_name": "QwenImage21Pipeline", "_diffusers_version": diffusers.__version__,
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "transformer": ["diffusers", "QwenImage21Transformer2DModel"],
             "vae": ["diffusers", "AutoencoderKLQwenImage21"], "text_encoder": [None, None], "processor": [None, None]}
    (ckpt / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    g = torch.Generator().manual_seed(1)
    save_file({"prompt_embeds": torch.randn(1, text_len, transformer.config.context_in_dim, generator=g).to(torch_dtype)},
              str(ckpt / "prompt_embeds.safetensors"))
    (ckpt / "bench.json").write_text(json.dumps({"depth": depth, "dtype": dtype, "tiny": tiny}) + "\n")


def ensure_checkpoint(bench_dir: Path, depth: int, dtype: str, tiny: bool, log=print) -> Path:
    """The cached checkpoint for (depth, dtype, tiny), built on first use."""
    ckpt = bench_dir / checkpoint_name(depth, dtype, tiny)
    if not (ckpt / "bench.json").exists():
        log(f"bench: building a random Qwen-Image 2.1 checkpoint ({depth} blocks, "
            f"{'tiny' if tiny else 'width 4096'}, {dtype}) in {ckpt}")
        build_checkpoint(ckpt, depth, dtype, tiny)
    return ckpt


def make_pipeline(ckpt: Path, dtype: str):
    """diffusers' QwenImage21Pipeline on the checkpoint (CPU, checkpoint dtype) and the prompt embeddings.
    Returns (pipe, embeds, seconds to load the transformer, seconds to load the rest)."""
    import time
    import torch
    from diffusers import AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler, QwenImage21Pipeline, \
        QwenImage21Transformer2DModel
    from safetensors.torch import load_file
    import qwen_image_21_fixtures as base

    torch_dtype = getattr(torch, DTYPES[dtype])
    t0 = time.perf_counter()
    transformer = QwenImage21Transformer2DModel.from_pretrained(ckpt / "transformer", torch_dtype=torch_dtype).eval()
    t1 = time.perf_counter()
    vae = AutoencoderKLQwenImage21.from_pretrained(ckpt / "vae", torch_dtype=torch_dtype).eval()
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(ckpt / "scheduler"), vae=vae,
                               text_encoder=None, processor=base._NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    embeds = load_file(str(ckpt / "prompt_embeds.safetensors"))["prompt_embeds"]
    return pipe, embeds, t1 - t0, time.perf_counter() - t1
