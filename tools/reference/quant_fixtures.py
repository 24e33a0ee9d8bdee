#!/usr/bin/env python3
"""Dequantization parity fixtures: quantized files written by the ecosystem's own writers, and what each writer's own
reader makes of them (quantization-lora.md §3-§5; Note [Quantized weights] in docs/architecture.md).

Usage: quant_fixtures.py OUT_DIR

The references:
  - GGUF: gguf-py (`gguf.GGUFWriter` writes the files; `gguf.GGUFReader` reads them back and `gguf.quants.dequantize`
    decodes every tensor). Types with a gguf-py quantizer (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16, F16, F32) are quantized
    from seeded N(0, 1) weights; the K-quants (Q2_K .. Q6_K), which gguf-py decodes but does not quantize, are seeded
    random blocks whose f16 scales are finite (every bit pattern of the quants and the 6-bit scales occurs).
  - SDNQ: sdnq 0.2.8 quantizes a toy diffusers model (int8, uint8, int4, uint4, float8; grouped and row-wise; zero
    points; SVD; Hadamard; quantized-matmul layouts; per-module dtypes) and save_sdnq_model writes it; diffusers'
    from_pretrained loads it back (sdnq's SDNQQuantizer) and each layer's sdnq_dequantizer decodes it.
  - FP8 (safetensors, written with safetensors.torch): TorchAO's Float8Tensor (`Float8Tensor.from_hp`, per row and
    per tensor, e4m3fn) flattened by `torchao.prototype.safetensors` as diffusers saves it, decoded by
    `Float8Tensor.dequantize()`; a Lightricks-style scaled fp8 layer (`weight` F8_E4M3 + 0-dim `weight_scale`, folded
    in fp32 as ltx_core's fp8 loader does); a ComfyUI `scaled_fp8` layer (`scale_weight`, decoded in the compute
    dtype as comfy/ops.py does); unscaled e4m3fn and e5m2 casts.

Files written:
  gguf/types.gguf           one tensor per (type, shape) case, default alignment (32); names "<type>.<case>"
  gguf/aligned.gguf         the Q8_0 and Q4_K cases again with general.alignment = 64 and a few metadata kinds
  gguf/expected.safetensors "<type>.<case>" -> gguf-py's float32 decode, in PyTorch order
  fp8/torchao.safetensors   a TorchAO float8 state dict (per-row "row." and per-tensor "tensor." layers) + metadata
  fp8/ltx.safetensors       Lightricks layout: "ltx.weight" F8_E4M3 + 0-dim "ltx.weight_scale" (+ input_scale, bias)
  fp8/comfy.safetensors     ComfyUI scaled_fp8: the "scaled_fp8" marker, "comfy.weight" + "comfy.scale_weight"
  fp8/cast.safetensors      unscaled casts: "cast_e4m3.weight", "cast_e5m2.weight"
  fp8/expected.safetensors  the bf16 weight each reader builds, under the layer's name + ".weight"
  sdnq/<case>/              a ToyLinears saved by sdnq's save_sdnq_model (config.json with quantization_config,
                            quantization_config.json, diffusion_pytorch_model.safetensors), one folder per SDNQ_CASES
  sdnq/expected.safetensors "<case>/<layer>.weight" -> the bf16 weight sdnq decodes after diffusers' from_pretrained
  reference.json            written last: package versions, the cases
"""

import importlib.metadata
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")  # sdnq's eager path (no Triton here), before sdnq is imported

import numpy as np
import torch
from safetensors.torch import save_file

import gguf
from gguf import GGMLQuantizationType as Q
import torchao
from torchao.quantization import PerRow, PerTensor
from torchao.quantization.quantize_.workflows.float8.float8_tensor import Float8Tensor
from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict
import sdnq
from sdnq import save_sdnq_model, sdnq_post_load_quant
from sdnq.utils import get_sdnq_params
from diffusers import ModelMixin, ConfigMixin
from diffusers.configuration_utils import register_to_config

SEED = 0

# (type, shapes in PyTorch order). Rows (the last dim) are multiples of the block; for the 32-element blocks some
# rows are not multiples of 256, and one case is 3-D.
QUANTIZED = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
K_QUANTS = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
PLAIN = [Q.F32, Q.F16, Q.BF16]
SHAPES = {
    "block32": [(3, 64), (5, 96), (2, 3, 32), (1, 4096)],
    "block256": [(3, 256), (2, 512), (2, 2, 256)],
    "plain": [(7, 5), (3,), (2, 3, 4)],
}


def f16_bytes(rng, n, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=n).astype(np.float16).view(np.uint8).reshape(n, 2)


def random_k_blocks(rng, qtype, n_blocks):
    """Seeded random K-quant blocks with finite f16 fields at the offsets of gguf-py's layout."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    # (offset of each f16 field) per type, as in quants.py dequantize_blocks
    fields = {Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}[qtype]
    for off in fields:
        b[:, off:off + 2] = f16_bytes(rng, n_blocks, 1e-3, 0.1)
    return b


def gguf_cases(rng):
    """[(name, qtype, shape, numpy payload for add_tensor)]"""
    cases = []
    for qtype in QUANTIZED + K_QUANTS + PLAIN:
        kind = "plain" if qtype in PLAIN else "block256" if qtype in K_QUANTS else "block32"
        for i, shape in enumerate(SHAPES[kind]):
            name = f"{qtype.name}.{i}"
            if qtype in K_QUANTS:
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
                n_blocks = int(np.prod(shape)) // block
                raw = random_k_blocks(rng, qtype, n_blocks).reshape(*shape[:-1], shape[-1] // block * type_size)
                cases.append((name, qtype, shape, raw))
            else:
                w = rng.standard_normal(size=shape).astype(np.float32)
                if qtype == Q.F32:
                    cases.append((name, qtype, shape, w))
                elif qtype == Q.F16:
                    cases.append((name, qtype, shape, w.astype(np.float16)))
                else:
                    cases.append((name, qtype, shape, gguf.quants.quantize(w, qtype)))
    return cases


def write_gguf(path, cases, alignment=None, metadata=True):
    w = gguf.GGUFWriter(str(path), "ddo-test")
    if alignment:
        w.add_custom_alignment(alignment)
    if metadata:
        w.add_name("ddo dequantization fixtures")
        w.add_uint32("ddo.test.u32", 7)
        w.add_float32("ddo.test.f32", 0.5)
        w.add_bool("ddo.test.bool", True)
        w.add_array("ddo.test.strings", ["a", "bc", ""])
        w.add_array("ddo.test.ints", [1, -2, 3])
    for name, qtype, _, payload in cases:
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, payload)
        else:
            w.add_tensor(name, payload, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_expected(path):
    """gguf-py's own reading and decoding of every tensor in the file, in PyTorch order."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        y = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))
        out[t.name] = torch.from_numpy(np.array(y, dtype=np.float32).reshape(shape))
    return out


def fp8_fixtures(out):
    g = torch.Generator().manual_seed(SEED)
    # TorchAO: Float8Tensor per row and per tensor, flattened as diffusers' save_pretrained does.
    state = {}
    expected = {}
    for prefix, gran, shape in [("row", PerRow(), (64, 96)), ("tensor", PerTensor(), (32, 64))]:
        w = (torch.randn(shape, generator=g) * 0.05).to(torch.bfloat16)
        q = Float8Tensor.from_hp(w, granularity=gran)
        state[f"{prefix}.weight"] = q
        state[f"{prefix}.bias"] = torch.randn(shape[0], generator=g).to(torch.bfloat16)
        expected[f"{prefix}.weight"] = q.dequantize()
    flat, meta = flatten_tensor_state_dict(state)
    save_file(flat, str(out / "torchao.safetensors"), metadata=meta)

    # Lightricks (ltx_core fp8 loader): scale = 448 / amax, weight_scale = 1 / scale (0-dim F32), W = q.float() * s.
    ltx = {}
    w = (torch.randn(48, 64, generator=g) * 0.02).to(torch.bfloat16)
    scale = 448.0 / w.float().abs().max()
    q = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    ws = (1.0 / scale).reshape(()).to(torch.float32)
    ltx["ltx.weight"], ltx["ltx.weight_scale"], ltx["ltx.input_scale"] = q, ws, torch.ones((), dtype=torch.float32)
    ltx["ltx.bias"] = torch.randn(48, generator=g).to(torch.bfloat16)
    expected["ltx.weight"] = (q.to(torch.float32) * ws).to(torch.bfloat16)
    save_file(ltx, str(out / "ltx.safetensors"))
    # ComfyUI scaled_fp8 (comfy/ops.py): the scaled_fp8 marker, weight.to(dtype) * scale_weight.to(dtype).
    comfy = {}
    w = (torch.randn(32, 48, generator=g) * 0.02).to(torch.bfloat16)
    sw = (w.float().abs().max() / 448.0).reshape(()).to(torch.float32)
    q = (w.float() / sw).clamp(-448, 448).to(torch.float8_e4m3fn)
    comfy["comfy.weight"], comfy["comfy.scale_weight"] = q, sw
    comfy["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    expected["comfy.weight"] = q.to(torch.bfloat16) * sw.to(torch.bfloat16)
    save_file(comfy, str(out / "comfy.safetensors"))
    # Unscaled casts (ComfyUI "fp8_e4m3fn" checkpoints): the weight is cast.
    cast = {}
    for name, dt in [("cast_e4m3", torch.float8_e4m3fn), ("cast_e5m2", torch.float8_e5m2)]:
        q = (torch.randn(16, 32, generator=g) * 0.5).to(dt)
        cast[f"{name}.weight"] = q
        expected[f"{name}.weight"] = q.to(torch.bfloat16)
    save_file(cast, str(out / "cast.safetensors"))
    save_file({k: v.contiguous() for k, v in expected.items()}, str(out / "expected.safetensors"))
    return sorted(expected)


class ToyLinears(ModelMixin, ConfigMixin):
    """Three Linear layers of the shapes SDNQ lays out differently: a [256, 512] (row-wise int8, 8 groups of 64 for
    4-bit), b [64, 4096] (int8 grouped 3-D: 4 groups of 1024), c [256, 96] (a row that is not a multiple of the 4-bit
    group: one group per row; Hadamard group 32), and a LayerNorm that stays dense."""

    @register_to_config
    def __init__(self, width: int = 512):
        super().__init__()
        self.a = torch.nn.Linear(width, 256)
        self.b = torch.nn.Linear(4096, 64)
        self.c = torch.nn.Linear(96, 256)
        self.norm = torch.nn.LayerNorm(64)


# case name -> sdnq_post_load_quant options (sdnq 0.2.8 defaults otherwise: dequantize_fp32, no qmm, auto groups)
SDNQ_CASES = {
    "int8": dict(weights_dtype="int8"),
    "int8_qmm": dict(weights_dtype="int8", use_quantized_matmul=True),
    "int8_qmm_bf16": dict(weights_dtype="int8", use_quantized_matmul=True, dequantize_fp32=False),
    "uint8": dict(weights_dtype="uint8"),
    "uint8_qmm": dict(weights_dtype="uint8", use_quantized_matmul=True),
    "uint4": dict(weights_dtype="uint4"),
    "uint4_svd_qmm": dict(weights_dtype="uint4", use_svd=True, svd_rank=8, use_quantized_matmul=True),
    "int4_svd": dict(weights_dtype="int4", use_svd=True, svd_rank=4),
    "fp8": dict(weights_dtype="float8_e4m3fn"),
    "fp8_qmm": dict(weights_dtype="float8_e4m3fn", use_quantized_matmul=True),
    "int8_hadamard": dict(weights_dtype="int8", use_hadamard=True),
    "uint4_hadamard_svd": dict(weights_dtype="uint4", use_hadamard=True, use_svd=True, svd_rank=4),
    "mixed": dict(weights_dtype="int8", modules_dtype_dict={"uint4": ["c"], "float8_e4m3fn": [".b"]}),
}
SDNQ_LAYERS = ["a", "b", "c"]


def sdnq_fixtures(out):
    """Each case quantized with sdnq and saved with save_sdnq_model (what the SDNQ checkpoints on the hub are), then
    loaded back as diffusers loads it (from_pretrained: SDNQQuantizer casts scales and factors) and decoded by each
    layer's own sdnq_dequantizer, as its forward does."""
    expected, cases = {}, {}
    for i, (case, opts) in enumerate(SDNQ_CASES.items()):
        torch.manual_seed(SEED + i)
        model = ToyLinears().to(torch.bfloat16)
        model = sdnq_post_load_quant(model, torch_dtype=torch.bfloat16, add_skip_keys=False, **opts)
        save_sdnq_model(model, str(out / case))
        loaded = ToyLinears.from_pretrained(str(out / case), torch_dtype=torch.bfloat16)
        for name in SDNQ_LAYERS:
            layer = getattr(loaded, name)
            deq = layer.sdnq_dequantizer
            w = deq(**get_sdnq_params(layer), skip_quantized_matmul=deq.use_quantized_matmul, skip_compile=True)
            expected[f"{case}/{name}.weight"] = w.contiguous()
        cases[case] = {k: v for k, v in opts.items()}
    save_file(expected, str(out / "expected.safetensors"))
    return cases


def main():
    out = Path(sys.argv[1])
    (out / "gguf").mkdir(parents=True, exist_ok=True)
    (out / "fp8").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    cases = gguf_cases(rng)
    write_gguf(out / "gguf" / "types.gguf", cases)
    aligned = [c for c in cases if c[0].startswith(("Q8_0.", "Q4_K."))]
    write_gguf(out / "gguf" / "aligned.gguf", aligned, alignment=64)
    expected = gguf_expected(out / "gguf" / "types.gguf")
    save_file(expected, str(out / "gguf" / "expected.safetensors"))
    fp8_cases = fp8_fixtures(out / "fp8")
    (out / "sdnq").mkdir(parents=True, exist_ok=True)
    sdnq_cases = sdnq_fixtures(out / "sdnq")
    ref = {
        "reference": "gguf-py + torchao",
        "reference_version": f"gguf {importlib.metadata.version('gguf')}, torchao {torchao.__version__}, "
                             f"sdnq {importlib.metadata.version('sdnq')}, diffusers {importlib.metadata.version('diffusers')}",
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "seed": SEED,
        "gguf_cases": [{"name": n, "type": q.name, "shape": list(s)} for n, q, s, _ in cases],
        "gguf_aligned": [c[0] for c in aligned],
        "fp8_cases": fp8_cases,
        "sdnq_cases": sdnq_cases,
        "sdnq_layers": SDNQ_LAYERS,
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
