#!/usr/bin/env python3
"""Pipeline parity fixtures for ltx2_video on quantized transformers (issue 26; Note [Quantized weights]).

Usage: ltx2_quant_fixtures.py OUT_DIR

The guided LTX-2.3 case of ltx2_pipeline_fixtures.py (same builders, same seed, same prompt embeddings, CFG + STG +
modality guidance + rescale on the distilled sigmas), with its transformer stored quantized:
  - sdnq_int8: sdnq 0.2.8 quantizes the transformer (sdnq_post_load_quant, every size allowed: the tiny layers are
    below sdnq's default minimum) and save_sdnq_model writes it; the reference is diffusers' LTX2Pipeline with
    LTX2VideoTransformer3DModel.from_pretrained(<case>/transformer) -- diffusers' own SDNQ integration;
  - gguf_q8_0: gguf-py's GGUFWriter writes transformer/diffusion_pytorch_model.gguf: Q8_0 for every 2-D weight whose
    rows are whole 32-blocks (the tiny DiT's feed-forward outputs and the audio/video projections of width 64),
    F32 for the rest; the reference runs gguf-py's decode of the written file loaded dense.

Files written:
  checkpoint_<case>/         the LTX-2.3 checkpoint (save_pretrained) with its transformer/ quantized
  pipeline_<case>.safetensors  latents, audio_latents, frames, audio: as ltx2_pipeline_fixtures.py's pipeline_23
  reference.json             written last: versions, the cases and their stored formats
"""

import copy
import importlib.metadata
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")  # sdnq's eager path (no Triton here), before sdnq is imported

import torch
from gguf import GGMLQuantizationType as Q

import diffusers
from diffusers import LTX2VideoTransformer3DModel
from safetensors.torch import save_file
from sdnq import save_sdnq_model, sdnq_post_load_quant

import gguf_writer
import ltx2_pipeline_fixtures as lp


def q8_0_or_f32(name, t):
    return Q.Q8_0 if t.dim() == 2 and t.shape[1] % 32 == 0 else Q.F32


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    embeds = lp.prompt_embeds()
    cases = {}
    for case in ("sdnq_int8", "gguf_q8_0"):
        pipe = lp.pipeline(True)
        ckpt = out / f"checkpoint_{case}"
        pipe.save_pretrained(ckpt)
        shutil.rmtree(ckpt / "transformer")
        dense = pipe.transformer
        if case == "sdnq_int8":
            q = sdnq_post_load_quant(copy.deepcopy(dense), torch_dtype=torch.float32, weights_dtype="int8",
                                     minimum_allowed_numel=0, minimum_allowed_channel_size=0)
            save_sdnq_model(q, str(ckpt / "transformer"))
            pipe.transformer = LTX2VideoTransformer3DModel.from_pretrained(str(ckpt / "transformer"),
                                                                           torch_dtype=torch.float32).eval()
            formats = {"sdnq": "int8"}
        else:
            (ckpt / "transformer").mkdir()
            dense.save_config(str(ckpt / "transformer"))
            path = ckpt / "transformer" / "diffusion_pytorch_model.gguf"
            gguf_writer.write(path, dense.state_dict(), q8_0_or_f32, arch="ltxv")
            decoded, types = gguf_writer.read_dense(path)
            ref = copy.deepcopy(dense)
            ref.load_state_dict(decoded)
            pipe.transformer = ref.eval()
            formats = {k: sum(1 for v in types.values() if v == k) for k in sorted(set(types.values()))}
        tensors = lp.run(pipe, embeds, lp.GUIDED, True)
        save_file(tensors, str(out / f"pipeline_{case}.safetensors"))
        cases[case] = {"formats": formats}
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "sdnq_version": importlib.metadata.version("sdnq"), "gguf_version": importlib.metadata.version("gguf"),
           "seed": lp.SEED, "settings": lp.GUIDED, "cases": cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")


if __name__ == "__main__":
    sys.exit(main())
