#!/usr/bin/env python3
"""Parity fixtures for LTX-2 checkpoints of other configurations than ltx2_pipeline_fixtures.py's, which diffusers'
own LTX2Pipeline runs (issue 40 items 7 and 8): tiny random LTX-2.3 / 2.0 checkpoints, each run whole by
LTX2Pipeline and saved with save_pretrained.

Usage: ltx2_checkpoint_fixtures.py OUT_DIR

The components are ltx2_pipeline_fixtures.py's (each after torch.manual_seed(0)) but for the video VAE, built here
with the changes each case needs, and the text encoder of the biased case (gemma3_fixtures.py's tiny Gemma-3 with
attention_bias = true, every parameter random, the biases included). Cases (reference.json "cases"):

  encoder_unused      checkpoint_encoder_unused/: LTX-2.3 with a video VAE whose ENCODER ddo cannot run
                      (block_out_channels (12,): the downsampler maps 4 x 4 channels to 12 by group means, which the
                      reference builds and never runs in text-to-video); the plain settings (2 steps, 32x32, 5 frames)
  off_grid            checkpoint_23/: the LTX-2.3 checkpoint of ltx2_pipeline_fixtures.py; num_frames = 12 on the VAE's
                      temporal ratio 2: the latent grid floors the video to 11 frames, the audio lasts 12 / fps
  gemma_bias          checkpoint_gemma_bias/: the LTX-2.0 checkpoint of ltx2_text_fixtures.py with a Gemma-3 text
                      encoder of attention_bias = true, run from the prompt PROMPT (max_sequence_length 16, no
                      guidance); gemma_bias.prompt_embeds / prompt_attention_mask are encode_prompt's output
  decode_timestep     checkpoint_tcond/: LTX-2.3 with a timestep-conditioned video VAE; decode_timestep 0.05 with
                      decode_noise_scale 0.025 (case decode_timestep) and with the default noise scale (= the
                      timestep, case decode_timestep_default): the decode noise is the generator's third draw
  decode_timestep_0   the same checkpoint with decode_timestep 0 (noise drawn, scaled by 0)

Files: <case>.safetensors per case: latents / audio_latents (output_type "latent": de-normalised, unpacked) and
frames [F, 3, H, W] in [0, 1] / audio [2, samples] (output_type "pt"); prompt_embeds.safetensors (the embeddings of
ltx2_pipeline_fixtures.py, the cases run from embeddings); reference.json (written last): versions, seed, every
case's checkpoint, settings, prompt and output shapes.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import diffusers
import transformers
from diffusers import AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler, LTX2Pipeline
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma3_fixtures  # noqa: E402
import ltx2_pipeline_fixtures  # noqa: E402
import tiny_gemma_tokenizer  # noqa: E402

SEED = 0
PROMPT = "a robot dancing in the rain"
P = ltx2_pipeline_fixtures


def video_vae(**changes):
    # ltx2_pipeline_fixtures.video_vae() with `changes` to its constructor arguments.
    args = dict(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,), decoder_block_out_channels=(8,),
        layers_per_block=(1,), decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False), downsample_type=("spatial",),
        upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False, patch_size=1,
        patch_size_t=1, encoder_causal=True, decoder_causal=False)
    args.update(changes)
    torch.manual_seed(0)
    vae = AutoencoderKLLTX2Video(**args)
    g = torch.Generator().manual_seed(1)
    vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=g) * 0.1)
    vae.latents_std.copy_(1.0 + torch.rand(vae.latents_std.shape, generator=g) * 0.5)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    return vae


def pipeline_23(vae):
    a = P.audio_vae()
    return LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, audio_vae=a, text_encoder=None, tokenizer=None,
        connectors=P.connectors(True), transformer=P.transformer(True),
        vocoder=P.vocoder(True, a.config.output_channels * a.config.mel_bins))


def gemma_bias_pipeline(model_bytes):
    torch.manual_seed(SEED)
    text = dict(gemma3_fixtures.TEXT_CONFIG, attention_bias=True)
    cfg = Gemma3Config(text_config=text, vision_config=gemma3_fixtures.VISION_CONFIG, mm_tokens_per_image=4,
                       image_token_index=gemma3_fixtures.VOCAB - 1, boi_token_index=8, eoi_token_index=9)
    te = Gemma3ForConditionalGeneration(cfg).eval()
    gemma3_fixtures.randomise(te)
    layers = text["num_hidden_layers"]
    saved_layers = P.TEXT_LAYERS
    P.TEXT_LAYERS = layers  # connectors(): caption * (layers + 1) inputs
    try:
        a = P.audio_vae()
        pipe = LTX2Pipeline(
            scheduler=FlowMatchEulerDiscreteScheduler(**P.LTX2_SCHEDULER), vae=P.video_vae(), audio_vae=a,
            text_encoder=te, tokenizer=tiny_gemma_tokenizer.transformers_tokenizer(model_bytes),
            connectors=P.connectors(False), transformer=P.transformer(False),
            vocoder=P.vocoder(False, a.config.output_channels * a.config.mel_bins))
    finally:
        P.TEXT_LAYERS = saved_layers
    return pipe


def run(pipe, inputs, settings, extra=None):
    """ltx2_pipeline_fixtures.run with pipeline arguments `extra` (decode_timestep, ...) on the "pt" call only."""
    out = {}
    lat = pipe(**inputs, **settings, generator=torch.Generator().manual_seed(SEED), output_type="latent")
    out["latents"] = lat.frames[0].contiguous()
    out["audio_latents"] = lat.audio[0].contiguous()
    res = pipe(**inputs, **settings, **(extra or {}), generator=torch.Generator().manual_seed(SEED), output_type="pt")
    out["frames"] = res.frames[0].contiguous()
    out["audio"] = res.audio[0].float().contiguous()
    return out


def main():
    out = Path(sys.argv[1])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)

    embeds = P.prompt_embeds()
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    positive = {k: v for k, v in embeds.items() if not k.startswith("negative_")}
    cases = {}

    def record(name, ckpt, pipe, inputs, settings, extra=None, prompt=None):
        tensors = run(pipe, inputs, settings, extra)
        save_file(tensors, out / f"{name}.safetensors", metadata={"reference": "diffusers"})
        cases[name] = {"checkpoint": ckpt, "settings": settings, "pipeline_args": extra or {}, "prompt": prompt,
                       "audio_sample_rate": pipe.vocoder.config.output_sampling_rate,
                       "shapes": {k: list(v.shape) for k, v in tensors.items()}}

    # encoder_unused: 4 latent channels x 4 (spatial space-to-depth) cannot be averaged into 12.
    pipe = pipeline_23(video_vae(block_out_channels=(12,)))
    pipe.save_pretrained(out / "checkpoint_encoder_unused")
    record("encoder_unused", "checkpoint_encoder_unused", pipe, positive, P.PLAIN)

    # off_grid: 12 frames on temporal ratio 2.
    pipe = pipeline_23(P.video_vae())
    pipe.save_pretrained(out / "checkpoint_23")
    record("off_grid", "checkpoint_23", pipe, positive, dict(P.PLAIN, num_frames=12))

    # decode_timestep: a timestep-conditioned VAE.
    pipe = pipeline_23(video_vae(timestep_conditioning=True))
    pipe.save_pretrained(out / "checkpoint_tcond")
    record("decode_timestep", "checkpoint_tcond", pipe, positive, P.PLAIN,
           dict(decode_timestep=0.05, decode_noise_scale=0.025))
    record("decode_timestep_default", "checkpoint_tcond", pipe, positive, P.PLAIN, dict(decode_timestep=0.05))
    record("decode_timestep_0", "checkpoint_tcond", pipe, positive, P.PLAIN, dict(decode_timestep=0.0))

    # gemma_bias: the biased text encoder, from the prompt.
    model_bytes = tiny_gemma_tokenizer.train()
    pipe = gemma_bias_pipeline(model_bytes)
    ckpt = out / "checkpoint_gemma_bias"
    pipe.save_pretrained(ckpt)
    (ckpt / "tokenizer" / "tokenizer.model").write_bytes(model_bytes)
    pipe = LTX2Pipeline.from_pretrained(ckpt)  # what a user loads
    pipe.set_progress_bar_config(disable=True)
    biases = [n for n, _ in pipe.text_encoder.named_parameters() if n.endswith("q_proj.bias")]
    assert biases, "the Gemma-3 text encoder has no attention bias"
    with torch.no_grad():
        pe, pm, _, _ = pipe.encode_prompt(prompt=PROMPT, do_classifier_free_guidance=False, max_sequence_length=16,
                                          device=torch.device("cpu"))
    save_file({"prompt_embeds": pe.contiguous(), "prompt_attention_mask": pm.contiguous()},
              out / "gemma_bias_embeds.safetensors", metadata={"reference": "diffusers"})
    record("gemma_bias", "checkpoint_gemma_bias", pipe, {"prompt": PROMPT}, P.PLAIN, prompt=PROMPT)

    ref = {"reference": "diffusers", "reference_version": diffusers.__version__,
           "transformers_version": transformers.__version__, "torch_version": torch.__version__, "seed": SEED,
           "cases": cases}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"ltx2_checkpoint fixtures: diffusers {diffusers.__version__} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
