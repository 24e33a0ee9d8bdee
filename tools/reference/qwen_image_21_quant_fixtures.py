#!/usr/bin/env python3
"""Pipeline parity fixtures for qwen_image_21 on quantized transformers (issue 26; Note [Quantized weights]).

Usage: qwen_image_21_quant_fixtures.py OUT_DIR

The tiny Qwen-Image 2.1 checkpoint of qwen_image_21_fixtures.py (its build_models, same seed), with its transformer
replaced by a quantized one, and the reference pipeline run on each:
  - sdnq_int8, sdnq_uint4_svd, sdnq_fp8: sdnq 0.2.8 quantizes the transformer (sdnq_post_load_quant with its model skip keys, so
    the embedders, the output projection and the norms stay dense; every size allowed, the tiny model's layers are
    below sdnq's default minimum) and save_sdnq_model writes it; the reference is diffusers' QwenImage21Pipeline with
    QwenImage21Transformer2DModel.from_pretrained(<case>/transformer, torch_dtype=float32) -- diffusers' own SDNQ
    integration, whose layers dequantize (no quantized matmul) and run the dense Linear;
  - fp8_scaled: every Linear weight of the transformer blocks stored F8_E4M3 with a 0-dim F32 `weight_scale`
    (Lightricks' LTX-2 fp8 layout: scale = 448 / amax, weight_scale = 1 / scale); diffusers has no loader for it, so
    the reference is the same pipeline on the dense transformer whose weights are those decoded as ltx_core's loader
    folds them, (q.float() * weight_scale) in fp32;
  - gguf_q8_0, gguf_q4_k: a wider transformer (attention_head_dim 128: inner dim 256, so that K-quant rows of 256
    fit) written by gguf-py's GGUFWriter as transformer/diffusion_pytorch_model.gguf beside its config.json: Q8_0 for
    every 2-D weight whose rows are whole 32-blocks (gguf_q8_0), Q4_K for the blocks' 2-D weights whose rows are whole
    256-blocks and Q8_0 for the other 32-multiples (gguf_q4_k, mixed as real files are), F16 proj_out, F32 for the
    rest. Two references: the pipeline on the dense transformer loaded with gguf-py's decode of the written file
    ("<case>.<run>.latents"), and diffusers' own GGUF integration, QwenImage21Transformer2DModel.from_single_file with
    GGUFQuantizationConfig(compute_dtype=float32) ("<case>.<run>.diffusers_gguf").
Layout twin (issue 40): sdnq_int8_qmm/ is sdnq_int8's transformer saved in sdnq's quantized-matmul layout, no
reference run (ddo must give the same bits from both folders).
Single-file forms (Note [Component files]): gguf_single/ is the checkpoint whose transformer/ holds only the wide
config.json; gguf_q4_k_comfy.gguf is the gguf_q4_k file with every name under "model.diffusion_model." (ComfyUI's
layout); gguf_foreign.gguf holds the same tensors under other names (another model's file).

Files written:
  <case>/                  a diffusers checkpoint (model_index.json, scheduler/, vae/ copied; transformer/ quantized)
  prompt_embeds.safetensors  prompt_embeds/_mask + negative_prompt_embeds/_mask
  pipeline.safetensors     "<case>.<run>.latents": the pipeline's output latents (output_type="latent")
  reference.json           written last: versions, cases and their sdnq options, runs
"""

import copy
import importlib.metadata
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")  # sdnq's eager path (no Triton here), before sdnq is imported

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import (FlowMatchEulerDiscreteScheduler, GGUFQuantizationConfig, QwenImage21Pipeline,
                       QwenImage21Transformer2DModel)
from gguf import GGMLQuantizationType as Q
from sdnq import save_sdnq_model, sdnq_post_load_quant

import gguf_writer
import qwen_image_21_fixtures as q21

SEED = q21.SEED
SDNQ_CASES = {
    "sdnq_int8": dict(weights_dtype="int8"),
    "sdnq_uint4_svd": dict(weights_dtype="uint4", use_svd=True, svd_rank=4),
    "sdnq_fp8": dict(weights_dtype="float8_e4m3fn"),
}
# Issue 40: the sdnq_int8 transformer again, saved in the quantized-matmul layout (int8 weights stored [in, out],
# scales [1, out]): the same values as sdnq_int8, so ddo's latents and images from the two folders must be equal bit
# for bit. No reference run: diffusers would run sdnq's quantized matmul on it, another computation.
LAYOUT_TWINS = {"sdnq_int8_qmm": dict(SDNQ_CASES["sdnq_int8"], use_quantized_matmul=True)}
# The GGUF cases' transformer: inner dim 256 (2 heads of 128) so that Q4_K rows (256 elements) fit.
GGUF_TRANSFORMER_CONFIG = dict(q21.TRANSFORMER_CONFIG, attention_head_dim=128, axes_dims_rope=(16, 56, 56))
COMFY_PREFIX = "model.diffusion_model."
RUNS = {
    "cfg": dict(true_cfg_scale=4.0, use_kv_cache=True, steps=2, height=64, width=64),
    "plain": dict(true_cfg_scale=1.0, use_kv_cache=False, steps=2, height=64, width=96),
}


def copy_checkpoint(out, case):
    dst = out / case
    shutil.copytree(out / "checkpoint", dst, ignore=shutil.ignore_patterns("transformer"))
    return dst


def sdnq_case(out, transformer, case, opts):
    ckpt = copy_checkpoint(out, case)
    t = copy.deepcopy(transformer)
    t = sdnq_post_load_quant(t, torch_dtype=torch.float32, minimum_allowed_numel=0, minimum_allowed_channel_size=0,
                             **opts)
    save_sdnq_model(t, str(ckpt / "transformer"))
    return QwenImage21Transformer2DModel.from_pretrained(str(ckpt / "transformer"), torch_dtype=torch.float32).eval()


def fp8_case(out, transformer, case):
    ckpt = copy_checkpoint(out, case)
    shutil.copytree(out / "checkpoint" / "transformer", ckpt / "transformer")
    path = ckpt / "transformer" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(path))
    dense = dict(state)
    for name, w in list(state.items()):
        if not (name.startswith("transformer_blocks.") and name.endswith(".weight") and w.dim() == 2):
            continue
        scale = 448.0 / w.float().abs().max()
        qw = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        ws = (1.0 / scale).reshape(()).to(torch.float32)
        state[name], state[name[:-len(".weight")] + ".weight_scale"] = qw, ws
        dense[name] = (qw.to(torch.float32) * ws).to(w.dtype)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    ref = copy.deepcopy(transformer)
    ref.load_state_dict(dense)
    return ref.eval()


def gguf_transformer():
    torch.manual_seed(SEED + 7)
    t = QwenImage21Transformer2DModel(**GGUF_TRANSFORMER_CONFIG).eval()
    with torch.no_grad():
        for _, p in t.named_parameters():
            p.copy_(torch.randn_like(p) * (p.shape[1] ** -0.5 if p.dim() > 1 else 0.2))
    return t


def gguf_type(case):
    def type_of(name, t):
        if t.dim() != 2:
            return Q.F32
        if name == "proj_out.weight":
            return Q.F16
        rows = t.shape[1]
        if case == "gguf_q4_k" and name.startswith("transformer_blocks.") and rows % 256 == 0:
            return Q.Q4_K
        return Q.Q8_0 if rows % 32 == 0 else Q.F32
    return type_of


def gguf_case(out, transformer, case):
    """The folder form (transformer/diffusion_pytorch_model.gguf + config.json); returns the reference transformer
    (dense, gguf-py's decode of the file), diffusers' GGUF-integration transformer and the tensor types."""
    ckpt = copy_checkpoint(out, case)
    (ckpt / "transformer").mkdir()
    transformer.save_config(str(ckpt / "transformer"))
    path = ckpt / "transformer" / "diffusion_pytorch_model.gguf"
    gguf_writer.write(path, transformer.state_dict(), gguf_type(case), arch="qwen_image")
    dense, types = gguf_writer.read_dense(path)
    ref = copy.deepcopy(transformer)
    ref.load_state_dict(dense)
    integration = QwenImage21Transformer2DModel.from_single_file(
        str(path), config=str(ckpt / "transformer"), torch_dtype=torch.float32,
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32)).eval()
    return ref.eval(), integration, types


def single_file_forms(out, transformer):
    """gguf_single/ (the transformer folder holds its config only), the ComfyUI-named and the foreign-named files."""
    ckpt = copy_checkpoint(out, "gguf_single")
    (ckpt / "transformer").mkdir()
    transformer.save_config(str(ckpt / "transformer"))
    state = transformer.state_dict()
    gguf_writer.write(out / "gguf_q4_k_comfy.gguf", state, gguf_type("gguf_q4_k"), arch="qwen_image",
                      prefix=COMFY_PREFIX)
    foreign = {n.replace("transformer_blocks.", "blocks.").replace("attn.", "attention."): t for n, t in state.items()}
    gguf_writer.write(out / "gguf_foreign.gguf", foreign, gguf_type("gguf_q8_0"), arch="other")


def run_pipeline(transformer, vae, pos, pos_mask, neg, neg_mask, r):
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**q21.SCHEDULER_CONFIG), vae=vae,
                               text_encoder=None, processor=q21._NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt_embeds=pos, prompt_embeds_mask=pos_mask, height=r["height"], width=r["width"],
                  num_inference_steps=r["steps"], true_cfg_scale=r["true_cfg_scale"], use_kv_cache=r["use_kv_cache"])
    if r["true_cfg_scale"] > 1:
        kwargs.update(negative_prompt_embeds=neg, negative_prompt_embeds_mask=neg_mask)
    with torch.no_grad():
        return pipe(**kwargs, generator=torch.Generator().manual_seed(SEED), output_type="latent", return_dict=False)[0]


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    transformer, vae, _ = q21.build_models(out)
    g = torch.Generator().manual_seed(SEED + 4)
    pos, pos_mask = q21._embeds(g, 1, 9, 7)
    neg, neg_mask = q21._embeds(g, 1, 5, 5)
    save_file({"prompt_embeds": pos, "prompt_embeds_mask": pos_mask.to(torch.uint8),
               "negative_prompt_embeds": neg, "negative_prompt_embeds_mask": neg_mask.to(torch.uint8)},
              str(out / "prompt_embeds.safetensors"))
    models = {case: sdnq_case(out, transformer, case, opts) for case, opts in SDNQ_CASES.items()}
    for case, opts in LAYOUT_TWINS.items():
        sdnq_case(out, transformer, case, opts)
    models["fp8_scaled"] = fp8_case(out, transformer, "fp8_scaled")
    wide = gguf_transformer()
    integrations, gguf_types = {}, {}
    for case in ("gguf_q8_0", "gguf_q4_k"):
        models[case], integrations[case], types = gguf_case(out, wide, case)
        gguf_types[case] = {k: sum(1 for v in types.values() if v == k) for k in sorted(set(types.values()))}
    single_file_forms(out, wide)
    tensors = {}
    for case, t in models.items():
        for run, r in RUNS.items():
            tensors[f"{case}.{run}.latents"] = run_pipeline(t, vae, pos, pos_mask, neg, neg_mask, r).contiguous()
            if case in integrations:
                tensors[f"{case}.{run}.diffusers_gguf"] = run_pipeline(integrations[case], vae, pos, pos_mask, neg,
                                                                      neg_mask, r).contiguous()
    save_file(tensors, str(out / "pipeline.safetensors"))
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "sdnq_version": importlib.metadata.version("sdnq"), "numpy_version": np.__version__, "seed": SEED,
           "gguf_version": importlib.metadata.version("gguf"),
           "dtype": "float32", "cases": {**SDNQ_CASES, "fp8_scaled": {"layout": "weight F8_E4M3 + weight_scale"},
                                         **{c: {"gguf_types": gguf_types[c]} for c in gguf_types}},
           "layout_twins": {c: {"twin_of": "sdnq_int8", **o} for c, o in LAYOUT_TWINS.items()},
           "gguf_transformer_config": GGUF_TRANSFORMER_CONFIG, "comfy_prefix": COMFY_PREFIX,
           "runs": {k: dict(v, seed=SEED) for k, v in RUNS.items()}, "transformer_config": q21.TRANSFORMER_CONFIG}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")


if __name__ == "__main__":
    sys.exit(main())
