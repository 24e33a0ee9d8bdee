#!/usr/bin/env python3
"""Pipeline parity fixtures for ltx2_video on quantized transformers (issue 26; Note [Quantized weights]).

Usage: ltx2_quant_fixtures.py OUT_DIR

The guided LTX-2.3 case of ltx2_pipeline_fixtures.py (same builders, same seed, same prompt embeddings, CFG + STG +
modality guidance + rescale on the distilled sigmas), with its transformer stored quantized:
  - sdnq_int8, sdnq_uint4_svd: sdnq 0.2.8 quantizes the transformer (sdnq_post_load_quant, every size allowed: the
    tiny layers are below sdnq's default minimum; int8, and uint4 with SVD rank 4) and save_sdnq_model writes it; the
    reference is diffusers' LTX2Pipeline with LTX2VideoTransformer3DModel.from_pretrained(<case>/transformer) --
    diffusers' own SDNQ integration;
  - fp8_scaled: every 2-D weight of the transformer blocks stored F8_E4M3 with a 0-dim F32 `weight_scale`
    (Lightricks' LTX-2 fp8 layout: scale = 448 / amax, weight_scale = 1 / scale); diffusers has no loader for it, so
    the reference runs the transformer whose weights are those decoded as ltx_core's loader folds them,
    (q.float() * weight_scale) in fp32, loaded dense;
  - gguf_q8_0: gguf-py's GGUFWriter writes transformer/diffusion_pytorch_model.gguf: Q8_0 for every 2-D weight whose
    rows are whole 32-blocks (the tiny DiT's feed-forward outputs and the audio/video projections of width 64),
    F32 for the rest; the reference runs gguf-py's decode of the written file loaded dense;
  - gguf_q4_k: the WIDE variant (the same LTX-2.3 builders' configs with every attention 2 heads of 128, so that the
    video and audio streams are 256 wide and their feed-forwards 1024, and the connectors widened to match: Q4_K rows
    of 256 fit; WIDE_TRANSFORMER / WIDE_CONNECTORS) written by gguf-py: Q4_K (gguf_writer.q4_k_quantize) for the
    blocks' 2-D `.weight`s whose rows are whole 256-blocks, Q8_0 for the other 2-D `.weight`s whose rows are whole
    32-blocks, F16 proj_out / audio_proj_out, F32 for the rest (the modulation tables stay F32, as city96's LTX
    GGUFs keep them), mixed as real files are; the reference runs gguf-py's decode loaded dense.

Files written:
  checkpoint_<case>/         the LTX-2.3 checkpoint (save_pretrained; the wide one for gguf_q4_k) with its
                             transformer/ quantized
  pipeline_<case>.safetensors  latents, audio_latents, frames, audio: as ltx2_pipeline_fixtures.py's pipeline_23
  reference.json             written last: versions, the settings, the cases (their stored formats, whether wide,
                             the sdnq options), the wide configs
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
from diffusers.pipelines.ltx2 import LTX2TextConnectors
from safetensors.torch import load_file, save_file
from sdnq import save_sdnq_model, sdnq_post_load_quant

import gguf_writer
import ltx2_pipeline_fixtures as lp

SDNQ_CASES = {
    "sdnq_int8": dict(weights_dtype="int8"),
    "sdnq_uint4_svd": dict(weights_dtype="uint4", use_svd=True, svd_rank=4),
}
# The gguf_q4_k case's models: the tiny LTX-2.3 configs with 2 heads of 128 everywhere (video and audio streams 256
# wide, feed-forwards 1024), the connectors producing text of those widths.
WIDE_TRANSFORMER = dict(attention_head_dim=128, cross_attention_dim=256, audio_attention_head_dim=128,
                        audio_cross_attention_dim=256)
WIDE_CONNECTORS = dict(video_connector_attention_head_dim=128, video_hidden_dim=256,
                       audio_connector_attention_head_dim=128, audio_hidden_dim=256)


def q8_0_or_f32(name, t):
    return Q.Q8_0 if t.dim() == 2 and t.shape[1] % 32 == 0 else Q.F32


def q4_k_mixed(name, t):
    if t.dim() != 2 or not name.endswith(".weight"):
        return Q.F32
    if name in ("proj_out.weight", "audio_proj_out.weight"):
        return Q.F16
    if name.startswith("transformer_blocks.") and t.shape[1] % 256 == 0:
        return Q.Q4_K
    return Q.Q8_0 if t.shape[1] % 32 == 0 else Q.F32


def wide_pipeline():
    """lp.pipeline(True) with the transformer and the connectors built from their configs widened (each after
    torch.manual_seed(0), as the builders do)."""
    pipe = lp.pipeline(True)
    torch.manual_seed(0)
    pipe.transformer = LTX2VideoTransformer3DModel.from_config({**pipe.transformer.config, **WIDE_TRANSFORMER})
    torch.manual_seed(0)
    pipe.connectors = LTX2TextConnectors.from_config({**pipe.connectors.config, **WIDE_CONNECTORS})
    assert pipe.transformer.config.attention_head_dim == 128 and pipe.connectors.config.video_hidden_dim == 256
    return pipe


def counts(types):
    return {k: sum(1 for v in types.values() if v == k) for k in sorted(set(types.values()))}


# The cases' transformers, shared with ltx2_image_quant_fixtures.py: each writes `dense` quantized into the component
# folder `folder` and returns the reference transformer and what the file stores.
def sdnq_case(dense, folder, opts):
    q = sdnq_post_load_quant(copy.deepcopy(dense), torch_dtype=torch.float32, minimum_allowed_numel=0,
                             minimum_allowed_channel_size=0, **opts)
    save_sdnq_model(q, str(folder))
    ref = type(dense).from_pretrained(str(folder), torch_dtype=torch.float32).eval()  # diffusers' SDNQ integration
    return ref, {"sdnq": opts}


def fp8_case(dense, folder):
    dense.save_pretrained(str(folder))
    path = folder / "diffusion_pytorch_model.safetensors"
    state = load_file(str(path))
    decoded = dict(state)
    n = 0
    for name, w in list(state.items()):
        if not (name.startswith("transformer_blocks.") and name.endswith(".weight") and w.dim() == 2):
            continue
        scale = 448.0 / w.float().abs().max()
        qw = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        ws = (1.0 / scale).reshape(()).to(torch.float32)
        state[name], state[name[:-len(".weight")] + ".weight_scale"] = qw, ws
        decoded[name] = (qw.to(torch.float32) * ws).to(w.dtype)
        n += 1
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    ref = copy.deepcopy(dense)
    ref.load_state_dict(decoded)
    return ref.eval(), {"layout": "weight F8_E4M3 + weight_scale", "F8_E4M3": n}


def gguf_case(dense, folder, type_of):
    folder.mkdir()
    dense.save_config(str(folder))
    path = folder / "diffusion_pytorch_model.gguf"
    gguf_writer.write(path, dense.state_dict(), type_of, arch="ltxv")
    decoded, types = gguf_writer.read_dense(path)
    ref = copy.deepcopy(dense)
    ref.load_state_dict(decoded)
    return ref.eval(), counts(types)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    embeds = lp.prompt_embeds()
    cases = {}
    for case in ("sdnq_int8", "sdnq_uint4_svd", "fp8_scaled", "gguf_q8_0", "gguf_q4_k"):
        wide = case == "gguf_q4_k"
        pipe = wide_pipeline() if wide else lp.pipeline(True)
        ckpt = out / f"checkpoint_{case}"
        pipe.save_pretrained(ckpt)
        shutil.rmtree(ckpt / "transformer")
        dense = pipe.transformer
        if case in SDNQ_CASES:
            pipe.transformer, formats = sdnq_case(dense, ckpt / "transformer", SDNQ_CASES[case])
        elif case == "fp8_scaled":
            pipe.transformer, formats = fp8_case(dense, ckpt / "transformer")
        else:
            pipe.transformer, formats = gguf_case(dense, ckpt / "transformer", q4_k_mixed if wide else q8_0_or_f32)
        tensors = lp.run(pipe, embeds, lp.GUIDED, True)
        save_file(tensors, str(out / f"pipeline_{case}.safetensors"))
        cases[case] = {"formats": formats, "wide": wide}
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "sdnq_version": importlib.metadata.version("sdnq"), "gguf_version": importlib.metadata.version("gguf"),
           "seed": lp.SEED, "settings": lp.GUIDED, "cases": cases, "wide_transformer": WIDE_TRANSFORMER,
           "wide_connectors": WIDE_CONNECTORS}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")


if __name__ == "__main__":
    sys.exit(main())
