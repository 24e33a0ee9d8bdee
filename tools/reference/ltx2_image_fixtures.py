#!/usr/bin/env python3
"""Parity fixtures for the ltx2_image model plugin: LTX-2.3 image-only text -> image from prompt embeddings
(models.md §6). There is no upstream diffusers pipeline for it, so the reference is COMPOSED here from diffusers
0.42.1's LTX-2 modules, as the image variant: every audio module removed, one latent frame.

Usage: ltx2_image_fixtures.py OUT_DIR

The composed reference (what the C++ is compared with), built only from diffusers' modules:
  LTX2ImageTransformer2DModel  proj_in, LTX2AdaLayerNormSingle time_embed (9 params) and prompt_adaln (2, fed the
                               timestep), LTX2AudioVideoRotaryPosEmbed (video, one frame at 24 fps), blocks of
                               RMSNorm + LTX2Attention (attn1 with LTX2PerturbedAttnProcessor for PAG, attn2 text
                               cross-attention with LTX2AudioVideoAttnProcessor) + FeedForward, the 9-row and the
                               2-row prompt tables, LayerNorm + scale_shift_table + proj_out. Key names are the
                               LTX-2.3 video keys minus audio.
  LTX2ImageTextConnectors      diffusers' per_token_rms_norm / per_layer_masked_mean_norm, video_text_proj_in (or
                               text_proj_in) and one LTX2ConnectorTransformer1d (video_connector).
  the pipeline (compose_image) latents randn([B, C, 1, h, w]) fp32 (not normalised), mu = calculate_shift(h*w, 1024,
                               4096, 0.95, 2.05), FlowMatchEulerDiscreteScheduler, CFG batch [neg; pos] / PAG batch
                               [neg; pos; pos] with perturbation mask 0 on the last sample, guidance in x0 space with
                               rescale_noise_cfg, Euler steps; decode: x * std / scaling_factor + mean, the LTX-2
                               video VAE (AutoencoderKLLTX2Video), frame 0, VaeImageProcessor.postprocess.

The checking harness (NOT the reference): OriginalBlock / OriginalTransformer below are minimal copies of
DEVAIEXP/ltx2-image-diffusers custom_blocks/ltx2_image/transformer_ltx2_image.py (LTX2ImageTransformerBlock,
LTX2ImageTransformer2DModel.forward), the original public implementation, which cannot be pip-installed. The
script loads the composed transformer's state dict into it (strict: the key names are the same) and requires
bitwise-equal velocities on a CFG+PAG batch; the result is recorded in reference.json ("original_check") and the
C++ parity test asserts it. The pipeline loop follows modular_blocks_ltx2_image.py (LTX2ImagePrepareLatentsStep,
LTX2ImageDenoiseStep, LTX2ImageDecodeStep) step by step.

Files written:
  checkpoint/                    tiny random fp32 image checkpoint (save_pretrained): transformer/ (2 blocks, gated
                                 attention, cross-attention modulation, split RoPE in float64), connectors/
                                 (per-modality projection, 8 registers, gated), vae/ (tiny AutoencoderKLLTX2Video,
                                 x2 spatial, random latent statistics), scheduler/ (dynamic exponential shift,
                                 shift_terminal 0.1: mu matters)
  checkpoint_text/               the same image checkpoint saved whole WITH its text encoder: transformer/, vae/,
                                 scheduler/ as checkpoint/, connectors/ built for the text tower (text_proj_in_factor
                                 = 4 layers + 1), text_encoder/ (the tiny random fp32 Gemma3ForConditionalGeneration
                                 of ltx2_text_fixtures.py, save_pretrained), tokenizer/ (its GemmaTokenizer,
                                 save_pretrained, plus tokenizer.model), model_index.json naming both
  prompt_embeds.safetensors      prompt_embeds / prompt_attention_mask (left padded) and negative_*: [1, L, C*F]
  image_<case>.safetensors       latents (denoised, packed [1, h*w, C]) and image [3, H, W] in [0, 1] (output "pt")
                                 for the cases: "distilled" (DISTILLED_SIGMA_VALUES, 8 steps, no guidance),
                                 "base" (4 linspace steps, CFG 3, rescale 0.7), "base_pag" (the same + PAG 0.2 on
                                 block 1)
  image_text.safetensors         the same from the prompt TEXT_PROMPT on checkpoint_text ("text": 4 linspace steps,
                                 CFG 3, rescale 0.7, the default negative prompt "", max_sequence_length SEQ): the
                                 prompt encoded by diffusers' own LTX2Pipeline._get_gemma_prompt_embeds (the
                                 original's _get_gemma_prompt_embeds is the same function: strip, left padding,
                                 pad = eos, max_length, add_special_tokens, all hidden states stacked), with the text
                                 encoder and tokenizer loaded back with from_pretrained; also prompt_embeds /
                                 negative_prompt_embeds and their masks as encoded
  reference.json                 reference name and version, torch version, seed, cases, original_check
"""

import argparse
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import save_file

import diffusers
from diffusers import AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.image_processor import VaeImageProcessor
from diffusers.models.attention import FeedForward
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.normalization import RMSNorm
from diffusers.models.transformers.transformer_ltx2 import (
    LTX2AdaLayerNormSingle,
    LTX2Attention,
    LTX2AudioVideoAttnProcessor,
    LTX2AudioVideoRotaryPosEmbed,
    LTX2PerturbedAttnProcessor,
)
from diffusers.pipelines.ltx2.connectors import (
    LTX2ConnectorTransformer1d,
    per_layer_masked_mean_norm,
    per_token_rms_norm,
)
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline, calculate_shift, rescale_noise_cfg
from diffusers.pipelines.ltx2.utils import DISTILLED_SIGMA_VALUES
from transformers import AutoTokenizer, Gemma3ForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma3_fixtures  # noqa: E402
import ltx2_text_fixtures  # noqa: E402
import tiny_gemma_tokenizer  # noqa: E402

SEED = 43
CAPTION = 32      # caption channels of the (absent) text encoder
TEXT_LAYERS = 2   # its layers: CAPTION * (TEXT_LAYERS + 1) features per token
SEQ = 16          # max_sequence_length
PAD = 5           # left padding of the positive prompt
HEIGHT, WIDTH = 32, 24
TEXT_PROMPT = "a robot dancing in the rain"

LTX2_SCHEDULER = dict(
    num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
    base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1, time_shift_type="exponential",
)


# ------------------------------------------------------------------------------------------------ composed reference
class LTX2ImageTransformer2DModel(ModelMixin, ConfigMixin):
    """The image variant of LTX2VideoTransformer3DModel composed from diffusers' LTX-2 modules (video stream only)."""

    @register_to_config
    def __init__(self, in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, num_attention_heads=32,
                 attention_head_dim=128, cross_attention_dim=4096, num_layers=48, activation_fn="gelu-approximate",
                 qk_norm="rms_norm_across_heads", norm_elementwise_affine=False, norm_eps=1e-6, attention_bias=True,
                 attention_out_bias=True, rope_theta=10000.0, rope_double_precision=True, causal_offset=1,
                 gated_attn=False, cross_attn_mod=True, ff_bias=True, rope_type="interleaved",
                 vae_scale_factors=(8, 32, 32), pos_embed_max_pos=20, base_height=2048, base_width=2048,
                 use_prompt_adaln_single=True):
        super().__init__()
        d = num_attention_heads * attention_head_dim
        n_mod = 9 if cross_attn_mod else 6
        self.proj_in = nn.Linear(in_channels, d)
        self.time_embed = LTX2AdaLayerNormSingle(d, num_mod_params=n_mod, use_additional_conditions=False)
        self.scale_shift_table = nn.Parameter(torch.randn(2, d) / d**0.5)
        self.prompt_adaln = (LTX2AdaLayerNormSingle(d, num_mod_params=2, use_additional_conditions=False)
                             if cross_attn_mod and use_prompt_adaln_single else None)
        self.rope = LTX2AudioVideoRotaryPosEmbed(
            dim=d, patch_size=patch_size, patch_size_t=patch_size_t, base_num_frames=pos_embed_max_pos,
            base_height=base_height, base_width=base_width, scale_factors=vae_scale_factors, theta=rope_theta,
            causal_offset=causal_offset, modality="video", double_precision=rope_double_precision,
            rope_type=rope_type, num_attention_heads=num_attention_heads)

        def attention(kv_dim, processor):
            return LTX2Attention(query_dim=d, heads=num_attention_heads, kv_heads=num_attention_heads,
                                 dim_head=attention_head_dim, bias=attention_bias, cross_attention_dim=kv_dim,
                                 out_bias=attention_out_bias, qk_norm=qk_norm, rope_type=rope_type,
                                 apply_gated_attention=gated_attn, processor=processor)

        blocks = []
        for _ in range(num_layers):
            b = nn.Module()
            b.norm1 = RMSNorm(d, eps=norm_eps, elementwise_affine=norm_elementwise_affine)
            b.attn1 = attention(None, LTX2PerturbedAttnProcessor())
            b.norm2 = RMSNorm(d, eps=norm_eps, elementwise_affine=norm_elementwise_affine)
            b.attn2 = attention(cross_attention_dim, LTX2AudioVideoAttnProcessor())
            b.norm3 = RMSNorm(d, eps=norm_eps, elementwise_affine=norm_elementwise_affine)
            b.ff = FeedForward(d, activation_fn=activation_fn, bias=ff_bias)
            b.scale_shift_table = nn.Parameter(torch.randn(n_mod, d) / d**0.5)
            b.prompt_scale_shift_table = nn.Parameter(torch.randn(2, d))
            blocks.append(b)
        self.transformer_blocks = nn.ModuleList(blocks)
        self.norm_out = nn.LayerNorm(d, eps=1e-6, elementwise_affine=False)
        self.proj_out = nn.Linear(d, out_channels or in_channels)

    def forward(self, hidden_states, encoder_hidden_states, timestep, encoder_attention_mask, height, width,
                pag_blocks=(), perturbation_mask=None):
        # LTX2VideoTransformer3DModel.forward with the audio stream gone (models.md §5.5 steps 1-5, 8, 9).
        cfg = self.config
        B = hidden_states.size(0)
        mask = ((1 - encoder_attention_mask.to(hidden_states.dtype)) * -10000.0).unsqueeze(1)
        coords = self.rope.prepare_video_coords(B, 1, height, width, hidden_states.device, fps=24.0)
        rope = self.rope(coords, device=hidden_states.device)
        x = self.proj_in(hidden_states)
        temb, emb = self.time_embed(timestep.flatten(), batch_size=B, hidden_dtype=x.dtype)
        temb, emb = temb.view(B, -1, temb.size(-1)), emb.view(B, -1, emb.size(-1))
        temb_prompt = None
        if self.prompt_adaln is not None:  # fed the timestep (upstream passes sigma = timestep)
            temb_prompt = self.prompt_adaln(timestep.flatten(), batch_size=B, hidden_dtype=x.dtype)[0]
            temb_prompt = temb_prompt.view(B, -1, temb_prompt.size(-1))
        if perturbation_mask is not None:
            perturbation_mask = perturbation_mask[:, None, None]
        for i, b in enumerate(self.transformer_blocks):
            n = b.scale_shift_table.shape[0]
            p = (b.scale_shift_table[None, None] + temb.view(B, temb.size(1), n, -1)).unbind(2)
            if temb_prompt is not None:
                kv = (b.prompt_scale_shift_table[None, None] + temb_prompt.view(B, temb_prompt.size(1), 2, -1)).unbind(2)
            else:
                kv = b.prompt_scale_shift_table[None, None].unbind(2)
            # LTX2VideoTransformerBlock step 1 (video self-attention; PAG = STG's processor on the listed blocks).
            pm = perturbation_mask if i in pag_blocks else None
            h = b.norm1(x) * (1 + p[1]) + p[0]
            x = x + b.attn1(h, encoder_hidden_states=None, query_rotary_emb=rope, perturbation_mask=pm,
                            all_perturbed=bool(torch.all(pm == 0)) if pm is not None else False) * p[2]
            # Steps 3-4: prompt K/V modulation, text cross-attention with (shift, scale)_q and gate_q.
            text = encoder_hidden_states * (1 + kv[1]) + kv[0]
            h = b.norm2(x)
            if cfg.cross_attn_mod:
                h = h * (1 + p[7]) + p[6]
            o = b.attn2(h, encoder_hidden_states=text, attention_mask=mask)
            if cfg.cross_attn_mod:
                o = o * p[8]
            x = x + o
            # Step 7: feed-forward.
            x = x + b.ff(b.norm3(x) * (1 + p[4]) + p[3]) * p[5]
        v = self.scale_shift_table[None, None] + emb[:, :, None]
        return self.proj_out(self.norm_out(x) * (1 + v[:, :, 1]) + v[:, :, 0])


class LTX2ImageTextConnectors(ModelMixin, ConfigMixin):
    """LTX2TextConnectors' video half composed from diffusers' connector pieces."""

    @register_to_config
    def __init__(self, caption_channels=3840, text_proj_in_factor=49, video_connector_num_attention_heads=30,
                 video_connector_attention_head_dim=128, video_connector_num_layers=2,
                 video_connector_num_learnable_registers=128, video_gated_attn=False,
                 connector_rope_base_seq_len=4096, rope_theta=10000.0, rope_double_precision=True,
                 causal_temporal_positioning=False, rope_type="interleaved", per_modality_projections=False,
                 video_hidden_dim=4096, proj_bias=False):
        super().__init__()
        n = caption_channels * text_proj_in_factor
        if per_modality_projections:
            self.video_text_proj_in = nn.Linear(n, video_hidden_dim, bias=proj_bias)
        else:
            self.text_proj_in = nn.Linear(n, caption_channels, bias=proj_bias)
        self.video_connector = LTX2ConnectorTransformer1d(
            num_attention_heads=video_connector_num_attention_heads,
            attention_head_dim=video_connector_attention_head_dim, num_layers=video_connector_num_layers,
            num_learnable_registers=video_connector_num_learnable_registers,
            rope_base_seq_len=connector_rope_base_seq_len, rope_theta=rope_theta,
            rope_double_precision=rope_double_precision, causal_temporal_positioning=causal_temporal_positioning,
            rope_type=rope_type, gated_attention=video_gated_attn)

    def forward(self, x, mask):
        c = self.config
        x = x.unflatten(2, (c.caption_channels, -1))
        if c.per_modality_projections:
            h = per_token_rms_norm(x).flatten(2, 3)
            h = torch.where(mask.bool().unsqueeze(-1), h, torch.zeros_like(h))
            h = self.video_text_proj_in(h * math.sqrt(c.video_hidden_dim / c.caption_channels))
        else:
            h = self.text_proj_in(per_layer_masked_mean_norm(x, mask.sum(-1), x.device, "left", 8))
        m = (mask.to(torch.int64) - 1).to(h.dtype).reshape(mask.shape[0], 1, -1, mask.shape[-1])
        out, out_mask = self.video_connector(h, m * torch.finfo(h.dtype).max)
        binary = (out_mask < 1e-6).to(torch.int64).reshape(out.shape[0], out.shape[1], 1)
        return out * binary, binary.squeeze(-1)


def compose_image(tr, conn, vae, sched, embeds, s, seed):
    """The image pipeline from prompt embeddings (models.md §6), composed; returns packed latents and the image."""
    cfg_on = s["guidance_scale"] > 1.0
    pag_on = s["pag_scale"] > 0.0
    pos, pos_m = embeds["prompt_embeds"], embeds["prompt_attention_mask"]
    neg, neg_m = embeds["negative_prompt_embeds"], embeds["negative_prompt_attention_mask"]
    rows, masks = [pos], [pos_m]
    if cfg_on:
        rows, masks = [neg, pos], [neg_m, pos_m]
    if pag_on:
        rows, masks = rows + [pos], masks + [pos_m]
    text, text_mask = conn(torch.cat(rows), torch.cat(masks))
    mult = len(rows)

    h, w = HEIGHT // vae.spatial_compression_ratio, WIDTH // vae.spatial_compression_ratio
    C = tr.config.in_channels
    latents = torch.randn((1, C, 1, h, w), generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    latents = latents.permute(0, 2, 3, 4, 1).flatten(1, 3)
    sigmas = s.get("sigmas") or np.linspace(1.0, 1 / s["steps"], s["steps"])
    mu = calculate_shift(latents.shape[1], sched.config.get("base_image_seq_len", 1024),
                         sched.config.get("max_image_seq_len", 4096), sched.config.get("base_shift", 0.95),
                         sched.config.get("max_shift", 2.05))
    sched.set_timesteps(sigmas=sigmas, mu=mu)
    sched.set_begin_index(0)
    pag_blocks = set(s["pag_blocks"]) if pag_on else set()
    for i, t in enumerate(sched.timesteps):
        x_in = torch.cat([latents] * mult)
        pm = None
        if pag_on:
            pm = torch.ones((mult,))
            pm[-1:] = 0
        v = tr(x_in, text, t.expand(mult), text_mask, h, w, pag_blocks, pm).float()
        if cfg_on or pag_on:
            sig = sched.sigmas[i]
            x0 = [latents - c * sig for c in v.chunk(mult)]
            cond = x0[1] if cfg_on else x0[0]
            pred = cond
            if cfg_on:
                pred = pred + (s["guidance_scale"] - 1.0) * (cond - x0[0])
            if pag_on:
                pred = pred + s["pag_scale"] * (cond - x0[-1])
            if s["guidance_rescale"] > 0.0:
                pred = rescale_noise_cfg(pred, cond, s["guidance_rescale"])
            v = (latents - pred) / sig
        latents = sched.step(v, t, latents, return_dict=False)[0]

    z = latents.reshape(1, 1, h, w, C).permute(0, 4, 1, 2, 3)
    z = z * vae.latents_std.view(1, -1, 1, 1, 1) / vae.config.scaling_factor + vae.latents_mean.view(1, -1, 1, 1, 1)
    img = vae.decode(z, None, return_dict=False)[0][:, :, 0]
    img = VaeImageProcessor(vae_scale_factor=vae.spatial_compression_ratio).postprocess(img, output_type="pt")
    return latents, img[0]


# ------------------------------------------------------------------------- checking harness (original implementation)
class OriginalBlock(nn.Module):
    """Minimal copy of LTX2ImageTransformerBlock (DEVAIEXP/ltx2-image-diffusers, transformer_ltx2_image.py)."""

    def __init__(self, dim, num_attention_heads, attention_head_dim, cross_attention_dim, video_gated_attn,
                 video_cross_attn_adaln, eps, rope_type, ff_bias):
        super().__init__()
        self.video_cross_attn_adaln = video_cross_attn_adaln
        self.norm1 = RMSNorm(dim, eps=eps, elementwise_affine=False)
        self.attn1 = LTX2Attention(query_dim=dim, heads=num_attention_heads, kv_heads=num_attention_heads,
                                   dim_head=attention_head_dim, bias=True, cross_attention_dim=None, out_bias=True,
                                   qk_norm="rms_norm_across_heads", rope_type=rope_type,
                                   apply_gated_attention=video_gated_attn, processor=LTX2PerturbedAttnProcessor())
        self.norm2 = RMSNorm(dim, eps=eps, elementwise_affine=False)
        self.attn2 = LTX2Attention(query_dim=dim, cross_attention_dim=cross_attention_dim, heads=num_attention_heads,
                                   kv_heads=num_attention_heads, dim_head=attention_head_dim, bias=True, out_bias=True,
                                   qk_norm="rms_norm_across_heads", rope_type=rope_type,
                                   apply_gated_attention=video_gated_attn, processor=LTX2AudioVideoAttnProcessor())
        self.norm3 = RMSNorm(dim, eps=eps, elementwise_affine=False)
        self.ff = FeedForward(dim, activation_fn="gelu-approximate", bias=ff_bias)
        self.scale_shift_table = nn.Parameter(torch.randn(9 if video_cross_attn_adaln else 6, dim) / dim**0.5)
        self.prompt_scale_shift_table = nn.Parameter(torch.randn(2, dim))

    def forward(self, hidden_states, encoder_hidden_states, temb, temb_prompt, video_rotary_emb,
                encoder_attention_mask=None, perturbation_mask=None, all_perturbed=False):
        batch_size = hidden_states.size(0)
        n = self.scale_shift_table.shape[0]
        p = (self.scale_shift_table[None, None] + temb.view(batch_size, temb.size(1), n, -1)).unbind(dim=2)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = p[:6]
        if self.video_cross_attn_adaln:
            shift_text_q, scale_text_q, gate_text_q = p[6:9]
        if temb_prompt is not None:
            shift_text_kv, scale_text_kv = (self.prompt_scale_shift_table[None, None] + temb_prompt.view(
                batch_size, temb_prompt.size(1), 2, -1)).unbind(dim=2)
        else:
            shift_text_kv, scale_text_kv = self.prompt_scale_shift_table[None, None].unbind(dim=2)
        norm = self.norm1(hidden_states) * (1 + scale_msa) + shift_msa
        attn = self.attn1(hidden_states=norm, encoder_hidden_states=None, query_rotary_emb=video_rotary_emb,
                          perturbation_mask=perturbation_mask, all_perturbed=all_perturbed)
        hidden_states = hidden_states + attn * gate_msa
        norm = self.norm2(hidden_states)
        if self.video_cross_attn_adaln:
            norm = norm * (1 + scale_text_q) + shift_text_q
        encoder_hidden_states = encoder_hidden_states * (1 + scale_text_kv) + shift_text_kv
        attn = self.attn2(norm, encoder_hidden_states=encoder_hidden_states, attention_mask=encoder_attention_mask)
        if self.video_cross_attn_adaln:
            attn = attn * gate_text_q
        hidden_states = hidden_states + attn
        norm = self.norm3(hidden_states) * (1 + scale_mlp) + shift_mlp
        return hidden_states + self.ff(norm) * gate_mlp


class OriginalTransformer(nn.Module):
    """Minimal copy of LTX2ImageTransformer2DModel (__init__ modules and forward) of the original implementation."""

    def __init__(self, c):
        super().__init__()
        d = c.num_attention_heads * c.attention_head_dim
        self.proj_in = nn.Linear(c.in_channels, d)
        self.time_embed = LTX2AdaLayerNormSingle(d, num_mod_params=9 if c.cross_attn_mod else 6,
                                                 use_additional_conditions=False)
        self.scale_shift_table = nn.Parameter(torch.randn(2, d) / d**0.5)
        self.prompt_adaln = (LTX2AdaLayerNormSingle(d, num_mod_params=2, use_additional_conditions=False)
                             if c.cross_attn_mod and c.use_prompt_adaln_single else None)
        self.rope = LTX2AudioVideoRotaryPosEmbed(
            dim=d, patch_size=c.patch_size, patch_size_t=c.patch_size_t, base_num_frames=c.pos_embed_max_pos,
            base_height=c.base_height, base_width=c.base_width, scale_factors=c.vae_scale_factors,
            theta=c.rope_theta, causal_offset=c.causal_offset, modality="video",
            double_precision=c.rope_double_precision, rope_type=c.rope_type, num_attention_heads=c.num_attention_heads)
        self.transformer_blocks = nn.ModuleList([
            OriginalBlock(d, c.num_attention_heads, c.attention_head_dim, c.cross_attention_dim, c.gated_attn,
                          c.cross_attn_mod, c.norm_eps, c.rope_type, c.ff_bias) for _ in range(c.num_layers)])
        self.norm_out = nn.LayerNorm(d, eps=1e-6, elementwise_affine=False)
        self.proj_out = nn.Linear(d, c.out_channels)

    def forward(self, hidden_states, encoder_hidden_states, timestep, encoder_attention_mask, height, width,
                pag_applied_layers=None, perturbation_mask=None):
        batch_size = hidden_states.size(0)
        encoder_attention_mask = ((1 - encoder_attention_mask.to(hidden_states.dtype)) * -10000.0).unsqueeze(1)
        video_coords = self.rope.prepare_video_coords(batch_size, 1, height, width, hidden_states.device, fps=24.0)
        video_rotary_emb = self.rope(video_coords, device=hidden_states.device)
        hidden_states = self.proj_in(hidden_states)
        temb, embedded_timestep = self.time_embed(timestep.flatten(), batch_size=batch_size,
                                                  hidden_dtype=hidden_states.dtype)
        temb = temb.view(batch_size, -1, temb.size(-1))
        embedded_timestep = embedded_timestep.view(batch_size, -1, embedded_timestep.size(-1))
        temb_prompt = None
        if self.prompt_adaln is not None:
            temb_prompt, _ = self.prompt_adaln(timestep.flatten(), batch_size=batch_size,
                                               hidden_dtype=hidden_states.dtype)
            temb_prompt = temb_prompt.view(batch_size, -1, temb_prompt.size(-1))
        pag_applied_layers = pag_applied_layers or []
        if len(pag_applied_layers) > 0 and perturbation_mask is None:
            perturbation_mask = torch.zeros((batch_size,), device=hidden_states.device)
        if perturbation_mask is not None and perturbation_mask.ndim == 1:
            perturbation_mask = perturbation_mask[:, None, None]
        all_perturbed = torch.all(perturbation_mask == 0) if perturbation_mask is not None else False
        pag_blocks = set(pag_applied_layers)
        for block_idx, block in enumerate(self.transformer_blocks):
            hidden_states = block(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states, temb=temb,
                                  temb_prompt=temb_prompt, video_rotary_emb=video_rotary_emb,
                                  encoder_attention_mask=encoder_attention_mask,
                                  perturbation_mask=perturbation_mask if block_idx in pag_blocks else None,
                                  all_perturbed=all_perturbed if block_idx in pag_blocks else False)
        v = self.scale_shift_table[None, None] + embedded_timestep[:, :, None]
        hidden_states = self.norm_out(hidden_states) * (1 + v[:, :, 1]) + v[:, :, 0]
        return self.proj_out(hidden_states)


def check_against_original(tr, conn, embeds):
    """The composed transformer against the original's on shared weights: CFG+PAG batch of 3, mask [1, 1, 0]."""
    orig = OriginalTransformer(tr.config)
    orig.load_state_dict(tr.state_dict(), strict=True)
    g = torch.Generator().manual_seed(7)
    h, w = 4, 3
    x = torch.randn(3, h * w, tr.config.in_channels, generator=g)
    rows = [embeds["negative_prompt_embeds"], embeds["prompt_embeds"], embeds["prompt_embeds"]]
    masks = [embeds["negative_prompt_attention_mask"], embeds["prompt_attention_mask"], embeds["prompt_attention_mask"]]
    text, text_mask = conn(torch.cat(rows), torch.cat(masks))
    t = torch.full((3,), 637.5)
    pm = torch.tensor([1.0, 1.0, 0.0])
    want = orig(x, text, t, text_mask, h, w, [1], pm)
    got = tr(x, text, t, text_mask, h, w, {1}, pm)
    err = (got - want).abs().max().item()
    if err != 0.0:
        raise SystemExit(f"composed LTX2ImageTransformer2DModel differs from the original's by {err}")
    return {"what": "composed transformer vs original LTX2ImageTransformer2DModel (strict state dict), CFG+PAG batch",
            "max_abs_error": err, "keys": len(tr.state_dict())}


# ------------------------------------------------------------------------------------------------------ components
def image_connectors(text_layers):
    torch.manual_seed(0)
    return LTX2ImageTextConnectors(
        caption_channels=CAPTION, text_proj_in_factor=text_layers + 1, video_connector_num_attention_heads=2,
        video_connector_attention_head_dim=8, video_connector_num_layers=1, video_connector_num_learnable_registers=8,
        video_gated_attn=True, connector_rope_base_seq_len=32, rope_type="split", per_modality_projections=True,
        video_hidden_dim=16, proj_bias=True).eval()


def components():
    torch.manual_seed(0)
    tr = LTX2ImageTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
        num_layers=2, gated_attn=True, cross_attn_mod=True, rope_type="split", rope_double_precision=True)
    conn = image_connectors(TEXT_LAYERS)
    torch.manual_seed(0)
    vae = AutoencoderKLLTX2Video(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,), decoder_block_out_channels=(8,),
        layers_per_block=(1,), decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False), downsample_type=("spatial",),
        upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False, patch_size=1,
        patch_size_t=1, encoder_causal=True, decoder_causal=False)
    g = torch.Generator().manual_seed(1)
    vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=g) * 0.1)
    vae.latents_std.copy_(1.0 + torch.rand(vae.latents_std.shape, generator=g) * 0.5)
    vae.use_framewise_decoding = False
    return tr.eval(), conn.eval(), vae.eval(), FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER)


def prompt_embeds():
    g = torch.Generator().manual_seed(3)
    feat = CAPTION * (TEXT_LAYERS + 1)
    pos = torch.randn(1, SEQ, feat, generator=g)
    neg = torch.randn(1, SEQ, feat, generator=g)
    pos_mask = torch.ones(1, SEQ, dtype=torch.int64)
    pos_mask[:, :PAD] = 0
    neg_mask = torch.ones(1, SEQ, dtype=torch.int64)
    neg_mask[:, : SEQ - 2] = 0
    pos[:, :PAD] = 0.0
    neg[:, : SEQ - 2] = 0.0
    return {"prompt_embeds": pos, "prompt_attention_mask": pos_mask,
            "negative_prompt_embeds": neg, "negative_prompt_attention_mask": neg_mask}


def model_index(text):
    index = {"_class_name": "LTX2ImagePipeline", "_diffusers_version": diffusers.__version__,
             "transformer": ["diffusers", "LTX2ImageTransformer2DModel"],
             "connectors": ["diffusers", "LTX2ImageTextConnectors"], "vae": ["diffusers", "AutoencoderKLLTX2Video"],
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"]}
    if text:
        index["text_encoder"] = ["transformers", "Gemma3ForConditionalGeneration"]
        index["tokenizer"] = ["transformers", "GemmaTokenizer"]
    return json.dumps(index, indent=1)


def save_text_checkpoint(ck, tr, vae, sched):
    """checkpoint_text/: the image checkpoint with ltx2_text_fixtures' tiny Gemma-3 and tokenizer, saved whole."""
    assert CAPTION == gemma3_fixtures.TEXT_CONFIG["hidden_size"]
    conn = image_connectors(gemma3_fixtures.TEXT_CONFIG["num_hidden_layers"])
    model_bytes = tiny_gemma_tokenizer.train()
    tr.save_pretrained(ck / "transformer")
    conn.save_pretrained(ck / "connectors")
    vae.save_pretrained(ck / "vae")
    sched.save_pretrained(ck / "scheduler")
    ltx2_text_fixtures.text_encoder().save_pretrained(ck / "text_encoder")
    tiny_gemma_tokenizer.transformers_tokenizer(model_bytes).save_pretrained(ck / "tokenizer")
    (ck / "tokenizer" / "tokenizer.model").write_bytes(model_bytes)
    (ck / "model_index.json").write_text(model_index(True))
    return conn


def encode_text(ck, prompt, negative):
    """LTX2Pipeline._get_gemma_prompt_embeds (diffusers' own) on the text encoder and tokenizer loaded back."""
    pipe = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(ck / "tokenizer"),
                           text_encoder=Gemma3ForConditionalGeneration.from_pretrained(ck / "text_encoder").eval())
    kw = dict(num_videos_per_prompt=1, max_sequence_length=SEQ, device=torch.device("cpu"), dtype=torch.float32)
    pe, pm = LTX2Pipeline._get_gemma_prompt_embeds(pipe, prompt, **kw)
    ne, nm = LTX2Pipeline._get_gemma_prompt_embeds(pipe, [negative], **kw)
    return {"prompt_embeds": pe, "prompt_attention_mask": pm,
            "negative_prompt_embeds": ne, "negative_prompt_attention_mask": nm}


CASES = {
    "distilled": dict(sigmas=list(DISTILLED_SIGMA_VALUES), guidance_scale=1.0, guidance_rescale=0.7, pag_scale=0.0,
                      pag_blocks=[]),
    "base": dict(steps=4, guidance_scale=3.0, guidance_rescale=0.7, pag_scale=0.0, pag_blocks=[]),
    "base_pag": dict(steps=4, guidance_scale=3.0, guidance_rescale=0.7, pag_scale=0.2, pag_blocks=[1]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    embeds = prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    tr, conn, vae, sched = components()
    ck = out / "checkpoint"
    tr.save_pretrained(ck / "transformer")
    conn.save_pretrained(ck / "connectors")
    vae.save_pretrained(ck / "vae")
    sched.save_pretrained(ck / "scheduler")
    (ck / "model_index.json").write_text(model_index(False))
    conn_text = save_text_checkpoint(out / "checkpoint_text", tr, vae, sched)

    with torch.no_grad():
        original = check_against_original(tr, conn, embeds)
        cases = {}
        for name, s in CASES.items():
            latents, image = compose_image(tr, conn, vae, FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER),
                                           embeds, s, SEED)
            save_file({"latents": latents.contiguous(), "image": image.contiguous()}, out / f"image_{name}.safetensors")
            cases[name] = {"settings": s, "height": HEIGHT, "width": WIDTH, "shapes": {
                "latents": list(latents.shape), "image": list(image.shape)}}
        # From text: the prompt and the default negative prompt "" encoded, then the base case's pipeline.
        s = dict(CASES["base"], prompt=TEXT_PROMPT, negative_prompt="", max_sequence_length=SEQ)
        text_embeds = encode_text(out / "checkpoint_text", TEXT_PROMPT, "")
        latents, image = compose_image(tr, conn_text, vae, FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER),
                                       text_embeds, s, SEED)
        save_file(dict({k: v.contiguous() for k, v in text_embeds.items()}, latents=latents.contiguous(),
                       image=image.contiguous()), out / "image_text.safetensors")
        cases["text"] = {"settings": s, "height": HEIGHT, "width": WIDTH,
                         "token_counts": text_embeds["prompt_attention_mask"].sum(-1).tolist(),
                         "negative_token_counts": text_embeds["negative_prompt_attention_mask"].sum(-1).tolist(),
                         "shapes": {"latents": list(latents.shape), "image": list(image.shape)}}

    ref = {"reference": "diffusers (composed LTX-2 image variant)", "reference_version": diffusers.__version__,
           "torch_version": torch.__version__, "seed": SEED, "cases": cases, "original_check": original}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main()
