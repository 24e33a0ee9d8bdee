#!/usr/bin/env python3
"""Fixtures for an LTX-2 transformer given as one file in the original LTX names (`ddo-host --transformer FILE`,
Note [Component files]; issue 26), as Lightricks ships LTX-2 / LTX-2.3 fp8: one safetensors whose DiT tensors sit
under "model.diffusion_model." in ltx-core's names (patchify_proj, adaln_single, q_norm, ...), with the text
connectors inside the DiT prefix and other components beside it.

Usage: ltx2_single_file_fixtures.py OUT_DIR

For the LTX-2.0 and LTX-2.3 tiny pipelines of ltx2_pipeline_fixtures.py (same builders, same seed):
  fp8_<v>/                   the checkpoint (save_pretrained) with its transformer stored as Lightricks' scaled fp8:
                             every 2-D weight of the transformer blocks F8_E4M3 + a 0-dim F32 weight_scale
                             (scale = 448 / amax, weight_scale = 1 / scale) and a 0-dim input_scale of 1.0
  config_<v>/                the same checkpoint whose transformer/ holds only config.json
  ltx<v>_original_fp8.safetensors
                             fp8_<v>'s transformer tensors under "model.diffusion_model." in the original names
                             (diffusers' rename table inverted), two text-connector tensors under
                             "model.diffusion_model.video_embeddings_connector." and a "vae." tensor (a combined
                             file's other components)
  prompt_embeds.safetensors  ltx2_pipeline_fixtures.prompt_embeds()
  reference.json             written last: versions, the files, the renamed names

The original names are checked against diffusers' own converter: convert_ltx2_transformer_to_diffusers on the
original-named state dict gives back exactly the diffusers names (LTX-2.3's prompt_adaln_single.* excepted: that
converter leaves them, its LoRA converter maps them to prompt_adaln.*; reference.json lists them).
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers.loaders.single_file_utils import convert_ltx2_transformer_to_diffusers

import ltx2_pipeline_fixtures as lp

PREFIX = "model.diffusion_model."
# diffusers name -> original name, applied in this order to every occurrence (the inverse of the loader's table).
TO_ORIGINAL = [
    ("audio_proj_in", "audio_patchify_proj"),
    ("proj_in", "patchify_proj"),
    ("av_cross_attn_video_scale_shift", "av_ca_video_scale_shift_adaln_single"),
    ("av_cross_attn_video_a2v_gate", "av_ca_a2v_gate_adaln_single"),
    ("av_cross_attn_audio_scale_shift", "av_ca_audio_scale_shift_adaln_single"),
    ("av_cross_attn_audio_v2a_gate", "av_ca_v2a_gate_adaln_single"),
    ("video_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_video"),
    ("audio_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_audio"),
    ("audio_prompt_adaln.", "audio_prompt_adaln_single."),
    ("prompt_adaln.", "prompt_adaln_single."),
    ("norm_q", "q_norm"),
    ("norm_k", "k_norm"),
]


def to_original(name):
    if name.startswith("audio_time_embed."):
        name = "audio_adaln_single." + name[len("audio_time_embed."):]
    elif name.startswith("time_embed."):
        name = "adaln_single." + name[len("time_embed."):]
    for a, b in TO_ORIGINAL:
        name = name.replace(a, b)
    return name


def fp8_scaled(state):
    out = {}
    for name, w in state.items():
        if name.startswith("transformer_blocks.") and name.endswith(".weight") and w.dim() == 2:
            scale = 448.0 / w.float().abs().max().clamp(min=1e-12)
            p = name[:-len(".weight")]
            out[name] = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
            out[p + ".weight_scale"] = (1.0 / scale).reshape(()).to(torch.float32)
            out[p + ".input_scale"] = torch.ones((), dtype=torch.float32)
        else:
            out[name] = w
    return out


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    save_file({k: v.contiguous() for k, v in lp.prompt_embeds().items()}, out / "prompt_embeds.safetensors")
    cases = {}
    for v, v23 in (("20", False), ("23", True)):
        ckpt = out / f"fp8_{v}"
        lp.pipeline(v23).save_pretrained(ckpt)
        weights = ckpt / "transformer" / "diffusion_pytorch_model.safetensors"
        dense = load_file(str(weights))
        state = fp8_scaled(dense)
        save_file({k: t.contiguous() for k, t in state.items()}, str(weights))

        cfg = out / f"config_{v}"
        shutil.copytree(ckpt, cfg)
        (cfg / "transformer" / "diffusion_pytorch_model.safetensors").unlink()

        # diffusers' converter must read the original names back into the diffusers ones.
        back = convert_ltx2_transformer_to_diffusers({PREFIX + to_original(k): t for k, t in dense.items()})
        left = sorted(set(back) - set(dense))
        assert all(k.startswith(("prompt_adaln_single.", "audio_prompt_adaln_single.")) for k in left), left
        assert len(back) == len(dense) and all(torch.equal(back[k], dense[k]) for k in dense if k in back)

        original = {PREFIX + to_original(k): t for k, t in state.items()}
        conn = load_file(str(ckpt / "connectors" / "diffusion_pytorch_model.safetensors"))
        for k in sorted(conn)[:2]:
            original[PREFIX + "video_embeddings_connector." + k] = conn[k]
        vae = load_file(str(ckpt / "vae" / "diffusion_pytorch_model.safetensors"))
        first_vae = sorted(vae)[0]
        original["vae." + first_vae] = vae[first_vae]
        save_file({k: t.contiguous() for k, t in original.items()}, str(out / f"ltx{v}_original_fp8.safetensors"))
        cases[v] = {"renamed": sorted(k for k in dense if to_original(k) != k),
                    "diffusers_converter_leaves": left, "fp8_weights": sum(1 for t in state.values()
                                                                           if t.dtype == torch.float8_e4m3fn)}
    ref = {"reference": "diffusers convert_ltx2_transformer_to_diffusers", "reference_version": diffusers.__version__,
           "torch_version": torch.__version__, "seed": lp.SEED, "prefix": PREFIX, "cases": cases}
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
