#!/usr/bin/env python3
"""Parity fixtures for the LTX-2 DiT and text connectors (plugins/models/ltx2_common, models.md §5.2-5.8, §7.3).

Usage: ltx2_dit_fixtures.py OUT_DIR

The reference is diffusers' own code: LTX2VideoTransformer3DModel (models/transformers/transformer_ltx2.py) and
LTX2TextConnectors (pipelines/ltx2/connectors.py). Tiny random fp32 models are built with those classes after
torch.manual_seed(0) and saved with save_pretrained; every rung of the ladder is exported as safetensors next to
OUT_DIR/reference.json (reference name + version, torch version, seed, cases; written last).

Models (OUT_DIR/<name>/config.json + diffusion_pytorch_model.safetensors):
  dit20/          2.0 flags, rope_type "split", rope_double_precision True (the pipeline test's tiny DiT)
  dit23/          2.3 flags: gated_attn, cross_attn_mod (prompt AdaLN), perturbed_attn, no caption projection, split
  dit_default/    diffusers' model-test config: default interleaved RoPE, rope_double_precision False
  conn20_reg/     2.0 connectors (masked mean/range norm, shared text_proj_in), 4 learnable registers, split RoPE
  conn20_noreg/   the same without registers, interleaved RoPE (padded keys masked with -finfo.max)
  conn23_reg/     2.3 connectors (per-modality projections, gated attention), 4 registers, split RoPE
  conn23_noreg/   the same without registers
  broken_missing/ dit20 without transformer_blocks.1.attn2.to_k.weight
  broken_shape/   dit20 with scale_shift_table of the wrong shape

Files written:
  rope.safetensors         <case>.video_coords / .audio_coords (prepare_*_coords) and <case>.{video,audio,
                           cross_video,cross_audio}.{cos,sin} for four RoPE configs (split/interleaved x fp64/fp32
                           frequency base; configs in reference.json "rope_cases"); conn_<type>.{cos,sin}: connector
                           1-D RoPE (split and interleaved)
  adaln.safetensors        <model>.<module>.{timestep,temb,embedded}: LTX2AdaLayerNormSingle outputs (time_embed,
                           audio_time_embed, av_cross_attn_*, prompt_adaln for dit23)
  block.safetensors        <model>.in.* / <model>.out.{video,audio}: block 1's inputs and outputs captured with forward
                           hooks inside the real model (dit20: plain; dit23: STG on block 1 with a mixed perturbation
                           mask, use_cross_timestep, sigma)
  transformer.safetensors  <case>.in.* / <case>.out.{video,audio}: whole DiT outputs (cases in reference.json
                           "transformer_cases": default RoPE, 2.0 with a padded text mask, per-token timesteps,
                           2.3 with coords, isolate_modalities, STG with mixed and default perturbation masks)
  connectors.safetensors   <case>.in.{hidden,mask} / <case>.out.{video,audio,mask}
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import LTX2VideoTransformer3DModel
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

SEED = 0

# The pipeline test's tiny DiT (models.md §5.2, tests/pipelines/ltx2/test_ltx2.py), 2.0 flags.
DIT20 = dict(
    in_channels=4,
    out_channels=4,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=2,
    attention_head_dim=8,
    cross_attention_dim=16,
    audio_in_channels=4,
    audio_out_channels=4,
    audio_num_attention_heads=2,
    audio_attention_head_dim=4,
    audio_cross_attention_dim=8,
    num_layers=2,
    caption_channels=16,
    rope_type="split",
    rope_double_precision=True,
)
# 2.3 flags (models.md §5.2): gated attention, cross-attention modulation + prompt AdaLN, STG processor, no
# caption projection (the connectors project per modality).
DIT23 = dict(
    DIT20,
    num_layers=3,
    gated_attn=True,
    audio_gated_attn=True,
    cross_attn_mod=True,
    audio_cross_attn_mod=True,
    perturbed_attn=True,
    use_prompt_embeddings=False,
)
# diffusers' model test (tests/models/transformers/test_models_transformer_ltx2.py): default interleaved RoPE.
DIT_DEFAULT = dict(
    in_channels=4,
    out_channels=4,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=2,
    attention_head_dim=8,
    cross_attention_dim=16,
    audio_in_channels=4,
    audio_out_channels=4,
    audio_num_attention_heads=2,
    audio_attention_head_dim=4,
    audio_cross_attention_dim=8,
    num_layers=2,
    caption_channels=16,
    rope_double_precision=False,
)
# Connectors: C = 8 channels x F = 3 stacked layers.
CONN20 = dict(
    caption_channels=8,
    text_proj_in_factor=3,
    video_connector_num_attention_heads=2,
    video_connector_attention_head_dim=4,
    video_connector_num_layers=2,
    video_connector_num_learnable_registers=4,
    audio_connector_num_attention_heads=2,
    audio_connector_attention_head_dim=4,
    audio_connector_num_layers=1,
    audio_connector_num_learnable_registers=4,
    connector_rope_base_seq_len=32,
    rope_type="split",
    rope_double_precision=True,
)
CONN23 = dict(
    CONN20,
    video_connector_num_attention_heads=2,
    video_connector_attention_head_dim=8,
    audio_connector_num_attention_heads=2,
    audio_connector_attention_head_dim=4,
    video_gated_attn=True,
    audio_gated_attn=True,
    per_modality_projections=True,
    video_hidden_dim=16,
    audio_hidden_dim=8,
    proj_bias=True,
)
NO_REGISTERS = dict(video_connector_num_learnable_registers=None, audio_connector_num_learnable_registers=None)

B = 2
F, H, W = 3, 2, 3  # latent video grid (18 tokens)
N_A = 5  # latent audio frames
L = 8  # text tokens
FPS = 25.0


def build(cls, name, config, out):
    torch.manual_seed(SEED)
    model = cls(**config).eval()
    model.save_pretrained(out / name)
    return model


def save(tensors, path):
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, path)


def rnd(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def rope_cases(out, tensors, cases):
    combos = [
        ("split_f64", dict(DIT20)),
        ("split_f32", dict(DIT20, rope_double_precision=False)),
        ("interleaved_f64", dict(DIT_DEFAULT, rope_double_precision=True)),
        ("interleaved_f32", dict(DIT_DEFAULT)),
    ]
    for name, cfg in combos:
        cfg = dict(cfg, num_layers=1)
        torch.manual_seed(SEED)
        m = LTX2VideoTransformer3DModel(**cfg)
        vc = m.rope.prepare_video_coords(B, F, H, W, torch.device("cpu"), fps=FPS)
        ac = m.audio_rope.prepare_audio_coords(B, N_A, torch.device("cpu"))
        tensors[f"{name}.video_coords"] = vc
        tensors[f"{name}.audio_coords"] = ac
        for part, (cos, sin) in {
            "video": m.rope(vc),
            "audio": m.audio_rope(ac),
            "cross_video": m.cross_attn_rope(vc[:, 0:1, :]),
            "cross_audio": m.cross_attn_audio_rope(ac[:, 0:1, :]),
        }.items():
            tensors[f"{name}.{part}.cos"] = cos.contiguous()
            tensors[f"{name}.{part}.sin"] = sin.contiguous()
        cases[name] = dict(config=dict(m.config))
    for rope_type in ("split", "interleaved"):
        torch.manual_seed(SEED)
        conn = LTX2TextConnectors(**dict(CONN20, rope_type=rope_type))
        cos, sin = conn.video_connector.rope(B, L, torch.device("cpu"))
        tensors[f"conn_{rope_type}.cos"] = cos.contiguous()
        tensors[f"conn_{rope_type}.sin"] = sin.contiguous()
        cases[f"conn_{rope_type}"] = dict(config=dict(conn.config))


def adaln_cases(models, tensors):
    t = torch.tensor([0.0, 731.5])
    for mname, modules in (
        ("dit20", ["time_embed", "audio_time_embed", "av_cross_attn_video_scale_shift", "av_cross_attn_video_a2v_gate"]),
        ("dit23", ["time_embed", "audio_time_embed", "prompt_adaln", "audio_prompt_adaln",
                   "av_cross_attn_audio_scale_shift", "av_cross_attn_audio_v2a_gate"]),
    ):
        for mod in modules:
            temb, emb = getattr(models[mname], mod)(t, batch_size=B, hidden_dtype=torch.float32)
            tensors[f"{mname}.{mod}.timestep"] = t
            tensors[f"{mname}.{mod}.temb"] = temb
            tensors[f"{mname}.{mod}.embedded"] = emb


def dit_inputs(cfg, text_dim):
    n_v = F * H * W
    return dict(
        hidden_states=rnd(B, n_v, cfg["in_channels"]),
        audio_hidden_states=rnd(B, N_A, cfg["audio_in_channels"]),
        encoder_hidden_states=rnd(B, L, text_dim),
        audio_encoder_hidden_states=rnd(B, L, text_dim if cfg.get("use_prompt_embeddings", True)
                                        else cfg["audio_cross_attention_dim"]),
        timestep=torch.tensor([125.0, 870.0]),
    )


BLOCK_ARGS = [
    "hidden_states", "audio_hidden_states", "encoder_hidden_states", "audio_encoder_hidden_states", "temb",
    "temb_audio", "temb_ca_scale_shift", "temb_ca_audio_scale_shift", "temb_ca_gate", "temb_ca_audio_gate",
    "temb_prompt", "temb_prompt_audio", "encoder_attention_mask", "audio_encoder_attention_mask",
    "perturbation_mask",
]
BLOCK_ROPES = ["video_rotary_emb", "audio_rotary_emb", "ca_video_rotary_emb", "ca_audio_rotary_emb"]


def block_case(model, name, kwargs, tensors, cases, block=1):
    captured = {}

    def pre(_m, _args, kw):
        captured["in"] = dict(kw)

    def post(_m, _args, _kw, output):
        captured["out"] = output

    h1 = model.transformer_blocks[block].register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.transformer_blocks[block].register_forward_hook(post, with_kwargs=True)
    with torch.no_grad():
        model(**kwargs, return_dict=False)
    h1.remove()
    h2.remove()
    kw = captured["in"]
    for k in BLOCK_ARGS:
        if kw.get(k) is not None:
            tensors[f"{name}.in.{k}"] = kw[k].contiguous()
    for k in BLOCK_ROPES:
        cos, sin = kw[k]
        tensors[f"{name}.in.{k}.cos"] = cos.contiguous()
        tensors[f"{name}.in.{k}.sin"] = sin.contiguous()
    tensors[f"{name}.out.video"], tensors[f"{name}.out.audio"] = captured["out"]
    cases[name] = dict(
        block=block,
        use_a2v=bool(kw["use_a2v_cross_attention"]),
        use_v2a=bool(kw["use_v2a_cross_attention"]),
        all_perturbed=bool(kw["all_perturbed"]),
    )


def transformer_case(model, name, kwargs, tensors, cases):
    with torch.no_grad():
        video, audio = model(**kwargs, return_dict=False)
    scalars = {}
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            tensors[f"{name}.in.{k}"] = v.contiguous()
        else:
            scalars[k] = v
    tensors[f"{name}.out.video"] = video
    tensors[f"{name}.out.audio"] = audio
    cases[name] = scalars


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference.json").unlink(missing_ok=True)
    torch.set_grad_enabled(False)

    models = {
        "dit20": build(LTX2VideoTransformer3DModel, "dit20", DIT20, out),
        "dit23": build(LTX2VideoTransformer3DModel, "dit23", DIT23, out),
        "dit_default": build(LTX2VideoTransformer3DModel, "dit_default", DIT_DEFAULT, out),
    }
    connectors = {
        "conn20_reg": build(LTX2TextConnectors, "conn20_reg", CONN20, out),
        "conn20_noreg": build(LTX2TextConnectors, "conn20_noreg", dict(CONN20, **NO_REGISTERS, rope_type="interleaved"),
                              out),
        "conn23_reg": build(LTX2TextConnectors, "conn23_reg", CONN23, out),
        "conn23_noreg": build(LTX2TextConnectors, "conn23_noreg", dict(CONN23, **NO_REGISTERS), out),
    }

    # Broken checkpoints for the error tests (dit20's config).
    sd = load_file(out / "dit20" / "diffusion_pytorch_model.safetensors")
    for bname, edit in (
        ("broken_missing", lambda d: d.pop("transformer_blocks.1.attn2.to_k.weight")),
        ("broken_shape", lambda d: d.__setitem__("scale_shift_table", torch.zeros(3, 16))),
    ):
        d = dict(sd)
        edit(d)
        (out / bname).mkdir(exist_ok=True)
        shutil.copy(out / "dit20" / "config.json", out / bname / "config.json")
        save_file(d, out / bname / "diffusion_pytorch_model.safetensors")

    ref = dict(
        reference="diffusers",
        reference_version=diffusers.__version__,
        torch_version=torch.__version__,
        seed=SEED,
        grid=dict(batch=B, num_frames=F, height=H, width=W, audio_num_frames=N_A, text_len=L, fps=FPS),
    )

    torch.manual_seed(SEED)
    tensors, cases = {}, {}
    rope_cases(out, tensors, cases)
    save(tensors, out / "rope.safetensors")
    ref["rope_cases"] = cases

    tensors = {}
    adaln_cases(models, tensors)
    save(tensors, out / "adaln.safetensors")

    torch.manual_seed(SEED)
    grid = dict(num_frames=F, height=H, width=W, fps=FPS, audio_num_frames=N_A)
    mask = torch.ones(B, L)
    mask[0, :3] = 0  # left padding in sample 0
    tensors, cases = {}, {}
    block_case(models["dit20"], "dit20", dict(dit_inputs(DIT20, 16), encoder_attention_mask=mask,
                                              audio_encoder_attention_mask=mask, **grid), tensors, cases)
    sig = torch.tensor([125.0, 870.0])
    block_case(models["dit23"], "dit23", dict(dit_inputs(DIT23, 16), sigma=sig, use_cross_timestep=True,
                                              spatio_temporal_guidance_blocks=[1],
                                              perturbation_mask=torch.tensor([1.0, 0.0]), **grid), tensors, cases)
    save(tensors, out / "block.safetensors")
    ref["block_cases"] = cases

    torch.manual_seed(SEED)
    tensors, cases = {}, {}
    transformer_case(models["dit_default"], "default", dict(dit_inputs(DIT_DEFAULT, 16),
                                                            encoder_attention_mask=torch.ones(B, L), **grid),
                     tensors, cases)
    transformer_case(models["dit20"], "dit20_mask", dict(dit_inputs(DIT20, 16), encoder_attention_mask=mask,
                                                         audio_encoder_attention_mask=mask, **grid), tensors, cases)
    per_token = dict(dit_inputs(DIT20, 16), **grid)
    per_token["timestep"] = torch.rand(B, F * H * W) * 1000
    per_token["audio_timestep"] = torch.tensor([300.0, 640.0])
    transformer_case(models["dit20"], "dit20_per_token", per_token, tensors, cases)
    vc = models["dit23"].rope.prepare_video_coords(B, F, H, W, torch.device("cpu"), fps=FPS)
    ac = models["dit23"].audio_rope.prepare_audio_coords(B, N_A, torch.device("cpu"))
    base23 = lambda: dict(dit_inputs(DIT23, 16), sigma=torch.tensor([125.0, 870.0]),
                          audio_sigma=torch.tensor([200.0, 500.0]), video_coords=vc, audio_coords=ac)
    transformer_case(models["dit23"], "dit23", dict(base23(), use_cross_timestep=True), tensors, cases)
    transformer_case(models["dit23"], "dit23_isolated", dict(base23(), isolate_modalities=True), tensors, cases)
    transformer_case(models["dit23"], "dit23_stg_mixed", dict(base23(), spatio_temporal_guidance_blocks=[0, 2],
                                                              perturbation_mask=torch.tensor([0.0, 1.0])),
                     tensors, cases)
    transformer_case(models["dit23"], "dit23_stg_all", dict(base23(), spatio_temporal_guidance_blocks=[1]),
                     tensors, cases)
    save(tensors, out / "transformer.safetensors")
    ref["transformer_cases"] = cases

    torch.manual_seed(SEED)
    tensors, cases = {}, {}
    cmask = torch.ones(B, L, dtype=torch.int64)
    cmask[0, :5] = 0
    cmask[1, :1] = 0
    for name, conn in connectors.items():
        c = conn.config
        hidden = rnd(B, L, c.caption_channels, c.text_proj_in_factor) * 3.0
        feed = hidden.flatten(2) if name.endswith("_reg") else hidden
        with torch.no_grad():
            video, audio, m = conn(feed, cmask)
        tensors[f"{name}.in.hidden"] = feed.contiguous()
        tensors[f"{name}.in.mask"] = cmask
        tensors[f"{name}.out.video"] = video
        tensors[f"{name}.out.audio"] = audio
        tensors[f"{name}.out.mask"] = m
        cases[name] = dict(flattened=feed.ndim == 3)
    save(tensors, out / "connectors.safetensors")
    ref["connector_cases"] = cases

    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=str))


if __name__ == "__main__":
    main()
