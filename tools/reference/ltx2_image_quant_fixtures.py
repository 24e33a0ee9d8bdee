#!/usr/bin/env python3
"""Parity fixtures for ltx2_image on quantized transformers (issue 26; Note [Quantized weights]).

Usage: ltx2_image_quant_fixtures.py OUT_DIR

The "base_pag" case of ltx2_image_fixtures.py (its builders, seed and prompt embeddings: 4 steps, CFG 3, rescale 0.7,
PAG 0.2 on block 1, the composed diffusers reference pipeline compose_image), with the image transformer stored as
ltx2_quant_fixtures.py stores the video one (its helpers):
  - sdnq_int8, sdnq_uint4_svd: sdnq 0.2.8 (sdnq_post_load_quant, every size allowed; int8, and uint4 with SVD rank 4)
    and save_sdnq_model; the reference transformer is LTX2ImageTransformer2DModel.from_pretrained(<case>/transformer,
    torch_dtype=float32) -- diffusers' own SDNQ integration on the composed model class;
  - fp8_scaled: every 2-D weight of the blocks F8_E4M3 with a 0-dim F32 `weight_scale` (Lightricks' layout); the
    reference runs the weights decoded as (q.float() * weight_scale), loaded dense;
  - gguf_q8_0: gguf-py writes transformer/diffusion_pytorch_model.gguf, Q8_0 for every 2-D weight whose rows are
    whole 32-blocks, F32 for the rest; the reference runs gguf-py's decode of the file, loaded dense;
  - gguf_q4_k: the same with Q4_K (gguf_writer.q4_k_quantize) for the 2-D `.weight`s whose rows are whole 256-blocks:
    the tiny image DiT is 16 wide (feed-forward 64), so these are only the two timestep embedders' first layers (256
    sinusoidal channels; globals, not block weights); Q4_K block weights are covered on the wide video DiT of
    ltx2_quant_fixtures.py.

Files written:
  checkpoint_<case>/          the image checkpoint (connectors/, vae/, scheduler/ as ltx2_image_fixtures.py's
                              checkpoint/, model_index.json) with its transformer/ quantized
  image_<case>.safetensors    latents (denoised, packed [1, h*w, C]) and image [3, H, W] in [0, 1]
  reference.json              written last: versions, the case and its settings, the cases' stored formats
"""

import importlib.metadata
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")  # sdnq's eager path (no Triton here), before sdnq is imported

import torch
from safetensors.torch import save_file

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_image_fixtures as li  # noqa: E402
import ltx2_quant_fixtures as lq  # noqa: E402

CASE = "base_pag"


def q4_k_where_rows_fit(name, t):
    if t.dim() == 2 and name.endswith(".weight") and t.shape[1] % 256 == 0:
        return lq.Q.Q4_K
    return lq.q8_0_or_f32(name, t)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    embeds = li.prompt_embeds()
    tr, conn, vae, sched = li.components()
    s = li.CASES[CASE]
    cases = {}
    for case in ("sdnq_int8", "sdnq_uint4_svd", "fp8_scaled", "gguf_q8_0", "gguf_q4_k"):
        ck = out / f"checkpoint_{case}"
        conn.save_pretrained(ck / "connectors")
        vae.save_pretrained(ck / "vae")
        sched.save_pretrained(ck / "scheduler")
        (ck / "model_index.json").write_text(li.model_index(False))
        folder = ck / "transformer"
        if case in lq.SDNQ_CASES:
            ref, formats = lq.sdnq_case(tr, folder, lq.SDNQ_CASES[case])
        elif case == "fp8_scaled":
            ref, formats = lq.fp8_case(tr, folder)
        else:
            ref, formats = lq.gguf_case(tr, folder, q4_k_where_rows_fit if case == "gguf_q4_k" else lq.q8_0_or_f32)
        with torch.no_grad():
            latents, image = li.compose_image(ref, conn, vae, FlowMatchEulerDiscreteScheduler(**li.LTX2_SCHEDULER),
                                              embeds, s, li.SEED)
        save_file({"latents": latents.contiguous(), "image": image.contiguous()}, str(out / f"image_{case}.safetensors"))
        cases[case] = {"formats": formats}
    ref = {"reference": "diffusers (composed LTX-2 image variant)", "reference_version": diffusers.__version__,
           "torch_version": torch.__version__, "sdnq_version": importlib.metadata.version("sdnq"),
           "gguf_version": importlib.metadata.version("gguf"), "seed": li.SEED, "case": CASE, "settings": s,
           "height": li.HEIGHT, "width": li.WIDTH, "cases": cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")


if __name__ == "__main__":
    sys.exit(main())
