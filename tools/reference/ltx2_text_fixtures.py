#!/usr/bin/env python3
"""Parity fixtures for ddo's LTX-2 prompt encoder (plugins/models/ltx2_common/src/prompt_encoder.cpp): the
LTX2Pipeline's prompt handling between the Gemma-3 tokenizer / text tower and the connectors (models.md §5.8).

Usage: ltx2_text_fixtures.py OUT_DIR

The reference is diffusers' own LTX2Pipeline.encode_prompt (which calls _get_gemma_prompt_embeds), called on an
LTX2Pipeline loaded with LTX2Pipeline.from_pretrained from the tiny LTX-2.0 checkpoint this script saves. Its parts
are imported, not copied: the tiny Gemma-3 text tower of gemma3_fixtures.py (TEXT_CONFIG, VISION_CONFIG,
randomise: random fp32, 4 decoder layers, hidden 32), the SentencePiece tokenizer of tiny_gemma_tokenizer.py, and
the tiny LTX-2.0 video VAE, audio VAE, DiT, connectors, HiFi-GAN vocoder and scheduler of ltx2_pipeline_fixtures.py
(its connectors built for this text tower: text_proj_in_factor = 4 layers + 1).

Files written:
  checkpoint_text/               the whole tiny LTX-2.0 checkpoint WITH its text encoder: LTX2Pipeline.save_pretrained
                                 (model_index.json, scheduler/, vae/, audio_vae/, connectors/, transformer/,
                                 vocoder/, text_encoder/ = Gemma3ForConditionalGeneration config.json +
                                 model.safetensors, tokenizer/ = tokenizer.json + tokenizer_config.json) plus
                                 tokenizer/tokenizer.model (the SentencePiece model the tokenizer was converted from)
  refuse_gemma4/                 text_encoder/config.json of transformers' Gemma4UnifiedConfig (LTX-2.5's text
                                 encoder, model_type gemma4_unified) and tokenizer/ as above, no model_index.json:
                                 to be refused naming text_encoder/config.json and model_type
  refuse_gemma4_index/           the same with checkpoint_text's model_index.json naming
                                 Gemma4UnifiedForConditionalGeneration: refused naming model_index.json and
                                 text_encoder
  refuse_no_text_encoder/        model_index.json whose text_encoder is [null, null] (a checkpoint saved without it)
  embeds.safetensors             per case of reference.json "cases": <case>.prompt_embeds [B*n, L, 32 * 5] and
                                 <case>.prompt_attention_mask [B*n, L] int64, and for guided cases
                                 <case>.negative_prompt_embeds / <case>.negative_prompt_attention_mask, exactly as
                                 encode_prompt returns them (fp32)
  pipeline_text.safetensors      LTX2Pipeline(prompt=PROMPT, negative_prompt="", 2 steps, 32x32, 5 frames, seed 0)
                                 per run <run>.latents / <run>.audio_latents (output_type "latent", de-normalised),
                                 <run>.frames [F, 3, H, W] in [0, 1] and <run>.audio [2, samples] (output_type "pt"),
                                 runs "guidance_1" (no guidance: the negative prompt is not encoded) and
                                 "guidance_3" (CFG 3 on video and audio)
  reference.json                 written last (marks a complete set): versions, seed, the cases (prompts, negative,
                                 max_sequence_length, num_videos_per_prompt, guidance, token counts), the runs'
                                 settings and output shapes, and "python_whitespace": every code point for which
                                 Python's str.isspace() is true (what the pipeline's strip() removes)
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
from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline
from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma4UnifiedConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma3_fixtures  # noqa: E402
import ltx2_pipeline_fixtures  # noqa: E402
import tiny_gemma_tokenizer  # noqa: E402

SEED = 0
PROMPT = "a robot dancing in the rain"
LONG = ("A cinematic shot of a lighthouse at dusk. The camera slowly pans left while waves crash on the rocks below; "
        "seagulls fly overhead and the light sweeps across the water.")
# (name, prompt(s), negative prompt, guidance, max_sequence_length, num_videos_per_prompt). A str prompt is passed
# as a str, a list as a list (encode_prompt treats both). negative None = the pipeline's default ("" when guided).
CASES = [
    ("plain", PROMPT, None, False, 16, 1),
    ("whitespace", " \t\u3000a cat on a mat \n\u00a0\u2009", None, False, 16, 1),  # Unicode whitespace stripped
    ("not_whitespace", "\u200ba cat\ufeff", None, False, 16, 1),                  # U+200B / U+FEFF are kept
    ("empty", "", None, False, 16, 1),
    ("long", LONG, None, False, 16, 1),                                           # truncated at 16
    ("batch", ["a cat", "  A photograph of an astronaut riding a horse on the moon\n"], None, False, 32, 1),
    ("videos_per_prompt", ["a cat", "猫と犬 🐱"], None, False, 16, 2),
    ("guided_default_negative", PROMPT, None, True, 16, 1),
    ("guided_negative", ["a cat", PROMPT], ["blurry, low quality", "  watermark "], True, 16, 1),
    ("guided_one_negative", ["a cat", PROMPT], "blurry, low quality", True, 16, 2),  # a str: one per prompt
]
RUNS = {"guidance_1": dict(guidance_scale=1.0, audio_guidance_scale=1.0),
        "guidance_3": dict(guidance_scale=3.0, audio_guidance_scale=3.0)}


def text_encoder():
    # gemma3_fixtures.main()'s tiny Gemma-3 (its config and randomisation).
    torch.manual_seed(SEED)
    cfg = Gemma3Config(text_config=gemma3_fixtures.TEXT_CONFIG, vision_config=gemma3_fixtures.VISION_CONFIG,
                       mm_tokens_per_image=4, image_token_index=gemma3_fixtures.VOCAB - 1, boi_token_index=8,
                       eoi_token_index=9)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    gemma3_fixtures.randomise(model)
    return model


def save_checkpoint(out, model_bytes):
    p = ltx2_pipeline_fixtures
    assert p.CAPTION == gemma3_fixtures.TEXT_CONFIG["hidden_size"]
    p.TEXT_LAYERS = gemma3_fixtures.TEXT_CONFIG["num_hidden_layers"]  # connectors(): caption * (layers + 1) inputs
    a = p.audio_vae()
    pipe = LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**p.LTX2_SCHEDULER), vae=p.video_vae(), audio_vae=a,
        text_encoder=text_encoder(), tokenizer=tiny_gemma_tokenizer.transformers_tokenizer(model_bytes),
        connectors=p.connectors(False), transformer=p.transformer(False),
        vocoder=p.vocoder(False, a.config.output_channels * a.config.mel_bins))
    ckpt = out / "checkpoint_text"
    pipe.save_pretrained(ckpt)
    (ckpt / "tokenizer" / "tokenizer.model").write_bytes(model_bytes)
    return ckpt


def refusal_checkpoints(out, ckpt):
    index = json.loads((ckpt / "model_index.json").read_text())
    g4 = out / "refuse_gemma4"
    shutil.copytree(ckpt / "tokenizer", g4 / "tokenizer")
    (g4 / "text_encoder").mkdir(parents=True)
    Gemma4UnifiedConfig().to_json_file(g4 / "text_encoder" / "config.json")
    shutil.copytree(g4, out / "refuse_gemma4_index")
    (out / "refuse_gemma4_index" / "model_index.json").write_text(json.dumps(
        dict(index, text_encoder=["transformers", "Gemma4UnifiedForConditionalGeneration"]), indent=2) + "\n")
    none = out / "refuse_no_text_encoder"
    none.mkdir()
    (none / "model_index.json").write_text(json.dumps(dict(index, text_encoder=[None, None]), indent=2) + "\n")


def main():
    out = Path(sys.argv[1])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)

    ckpt = save_checkpoint(out, tiny_gemma_tokenizer.train())
    refusal_checkpoints(out, ckpt)
    pipe = LTX2Pipeline.from_pretrained(ckpt)  # what a user loads: AutoTokenizer -> GemmaTokenizer
    pipe.set_progress_bar_config(disable=True)

    tensors, cases = {}, []
    for name, prompt, negative, guided, max_len, n in CASES:
        with torch.no_grad():
            pe, pm, ne, nm = pipe.encode_prompt(prompt=prompt, negative_prompt=negative,
                                                do_classifier_free_guidance=guided, num_videos_per_prompt=n,
                                                max_sequence_length=max_len, device=torch.device("cpu"))
        tensors[f"{name}.prompt_embeds"] = pe.contiguous()
        tensors[f"{name}.prompt_attention_mask"] = pm.contiguous()
        if guided:
            tensors[f"{name}.negative_prompt_embeds"] = ne.contiguous()
            tensors[f"{name}.negative_prompt_attention_mask"] = nm.contiguous()
        cases.append({"name": name, "prompts": [prompt] if isinstance(prompt, str) else prompt,
                      "negative_prompts": None if negative is None else
                      ([negative] if isinstance(negative, str) else negative),
                      "guided": guided, "max_sequence_length": max_len, "num_videos_per_prompt": n,
                      "token_counts": pm.sum(-1).tolist(),
                      "negative_token_counts": nm.sum(-1).tolist() if guided else None})
    save_file(tensors, out / "embeds.safetensors", metadata={"reference": "diffusers"})

    runs, outputs = {}, {}
    for run, guidance in RUNS.items():
        settings = dict(ltx2_pipeline_fixtures.PLAIN, **guidance)
        o = ltx2_pipeline_fixtures.run(pipe, {"prompt": PROMPT, "negative_prompt": ""}, settings, True)
        outputs.update({f"{run}.{k}": v for k, v in o.items()})
        runs[run] = {"prompt": PROMPT, "negative_prompt": "", "settings": settings,
                     "audio_sample_rate": pipe.vocoder.config.output_sampling_rate,
                     "shapes": {k: list(v.shape) for k, v in o.items()}}
    save_file(outputs, out / "pipeline_text.safetensors", metadata={"reference": "diffusers"})

    ref = {"reference": "diffusers", "reference_version": diffusers.__version__,
           "transformers_version": transformers.__version__, "torch_version": torch.__version__, "seed": SEED,
           "dtype": "float32", "text_config": gemma3_fixtures.TEXT_CONFIG,
           "features": gemma3_fixtures.TEXT_CONFIG["hidden_size"] * (gemma3_fixtures.TEXT_CONFIG["num_hidden_layers"] + 1),
           "cases": cases, "runs": runs,
           "python_whitespace": [c for c in range(0x110000) if chr(c).isspace()]}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"ltx2_text fixtures: diffusers {diffusers.__version__}, transformers {transformers.__version__} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
