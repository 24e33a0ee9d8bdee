#!/usr/bin/env python3
"""Parity fixtures for quantized text encoders (issue 26; Note [Quantized weights]): the Qwen3-VL text tower of
qwen_image_21 and the Gemma-3 text encoder of LTX-2, each stored quantized by the ecosystem's own writers.

Usage: text_quant_fixtures.py OUT_DIR

The text encoders are the tiny ones the text fixture scripts build, with their builders and seeds:
qwen_image_21_text_fixtures.build_text_encoder (Qwen3VLForConditionalGeneration, hidden 16) with its BPE processor,
and ltx2_text_fixtures.text_encoder (Gemma3ForConditionalGeneration, hidden 32, the tower of gemma3_fixtures.py) with
the SentencePiece tokenizer of tiny_gemma_tokenizer.py. The Qwen tower's widths (16) are not whole Q8_0 blocks, so the
GGUF case runs a wider variant built by the same builder and seed (hidden 32, 4 heads of 8, intermediate 64). Cases:
  - sdnq_int8: sdnq 0.2.8 quantizes the text encoder (sdnq_post_load_quant, its default skip keys, every layer size
    allowed: the tiny layers are below sdnq's minimum) and save_sdnq_model writes it; sdnq_uint4_embedding (Qwen
    only): uint4 with quant_embedding and without sdnq's skip keys, so that the token embedding table is stored
    quantized too (sdnq leaves Gemma-3's scaled embedding dense: its class is not one sdnq quantizes). The reference
    is transformers' own SDNQ integration (sdnq registers it): <Class>.from_pretrained(<case>/checkpoint/text_encoder,
    dtype=float32), whose layers dequantize (no quantized matmul) and run dense;
  - fp8_scaled: every 2-D weight of the decoder layers stored F8_E4M3 with a 0-dim F32 `weight_scale` (Lightricks'
    layout: scale = 448 / amax, weight_scale = 1 / scale); transformers has no loader for it, so the reference is the
    dense model whose weights are those decoded as ltx_core's loader folds them, (q.float() * weight_scale) in fp32;
  - gguf_q8_0: gguf-py's GGUFWriter (gguf_writer.py) writes text_encoder/model.gguf beside config.json, the language
    model's tensors only (a text GGUF leaves the vision tower to a separate mmproj file): Q8_0 for every 2-D weight
    whose rows are whole 32-blocks (the embedding table included), F32 for the rest; tensor names are the model's
    state_dict names (transformers', not llama.cpp's). The reference is the model with those weights replaced by
    gguf-py's decode of the written file.
Each reference is the tensors the dense text parity tests compare: for Qwen, qwen_image_21_text_fixtures'
text_encoder_fixtures on a QwenImage21Pipeline holding only the text encoder and processor (ids, first layer, the last
layer before the final norm, the prompt embeddings after the template drop per prompt; a left-padded batch of two);
for Gemma-3, diffusers' LTX2Pipeline.encode_prompt (holding only text encoder and tokenizer) on a few of
ltx2_text_fixtures' cases (every hidden state stacked, so each layer and the final norm are compared).

Files written:
  qwen_<case>/checkpoint/          text_encoder/ (quantized) and processor/ (tokenizer.json ...), what
                                   PromptEncoder::open reads
  qwen_<case>/text_encoder.safetensors   the reference (text_encoder_fixtures' names)
  qwen_<case>/control.safetensors  dense.long.embeds: the dense tower's embeddings of the "long" prompt (a control:
                                   the quantization error is far above the tolerance)
  gemma3_<case>/checkpoint/        text_encoder/ (quantized) and tokenizer/ (tokenizer.model ...)
  gemma3_<case>/embeds.safetensors  <name>.prompt_embeds / .prompt_attention_mask [/ negative_*] per Gemma case
  gemma3_<case>/control.safetensors  dense.plain.prompt_embeds: the dense tower's (the control, as for Qwen)
  qwen_gguf_single/, gemma3_gguf_single/   the checkpoint whose text_encoder/ holds config.json only: the gguf_q8_0
                                   case's model.gguf is given as the text encoder's file (Note [Component files])
  reference.json                   written last: versions, cases (encoder, format, options, stored types), prompts
"""

import contextlib
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
from safetensors.torch import load_file, save_file

import diffusers
import transformers
from diffusers import LTX2Pipeline, QwenImage21Pipeline
from sdnq import save_sdnq_model, sdnq_post_load_quant
from transformers import AutoTokenizer, Gemma3ForConditionalGeneration, Qwen3VLForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_writer  # noqa: E402
import ltx2_text_fixtures as lt  # noqa: E402  (the tiny Gemma-3 text encoder and the encode_prompt cases)
import qwen_image_21_text_fixtures as qt  # noqa: E402  (the tiny Qwen3-VL text encoder, processor, fixtures)
import tiny_gemma_tokenizer  # noqa: E402

SEED = 0
SDNQ_CASES = {
    "sdnq_int8": dict(weights_dtype="int8"),
    # Qwen3VLForConditionalGeneration declares embed_tokens tied to lm_head (untied in this config), so sdnq's skip
    # keys would keep the table dense: without them, only lm_head (never read) is left out.
    "sdnq_uint4_embedding": dict(weights_dtype="uint4", quant_embedding=True, add_skip_keys=False,
                                 modules_to_not_convert=["lm_head"]),
}
# The Qwen GGUF case's tower: every width a whole number of Q8_0 blocks (q/o 4 x 8 = 32, k/v 2 x 8, MLP 64).
QWEN_WIDE_TEXT_CONFIG = dict(qt.TEXT_CONFIG, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                             num_key_value_heads=2)
QWEN_WIDE_VISION_CONFIG = dict(qt.VISION_CONFIG, out_hidden_size=32)
# ltx2_text_fixtures' encode_prompt cases run on every Gemma-3 case: one prompt, one truncated, a left-padded batch,
# guidance with negative prompts.
GEMMA_CASES = ("plain", "long", "batch", "guided_negative")


@contextlib.contextmanager
def qwen_config(text_config, vision_config):
    """qt.build_text_encoder reads the module's TEXT_CONFIG / VISION_CONFIG: the wide variant swaps them for the call
    (the builder, its seed and its randomisation unchanged)."""
    saved = qt.TEXT_CONFIG, qt.VISION_CONFIG
    qt.TEXT_CONFIG, qt.VISION_CONFIG = text_config, vision_config
    try:
        yield
    finally:
        qt.TEXT_CONFIG, qt.VISION_CONFIG = saved


def q8_0_or_f32(name, t):
    return Q.Q8_0 if t.dim() == 2 and t.shape[1] % 32 == 0 else Q.F32


def stored_types(path):
    _, types = gguf_writer.read_dense(path)
    return {k: sum(1 for v in types.values() if v == k) for k in sorted(set(types.values()))}


def sdnq_text_encoder(model, cls, te_dir, opts):
    q = sdnq_post_load_quant(copy.deepcopy(model), torch_dtype=torch.float32, minimum_allowed_numel=0,
                             minimum_allowed_channel_size=0, **opts)
    save_sdnq_model(q, str(te_dir))
    ref = cls.from_pretrained(str(te_dir), dtype=torch.float32).eval()
    assert any(hasattr(m, "sdnq_dequantizer") for m in ref.modules()), \
        f"{te_dir}: transformers did not load the SDNQ checkpoint through sdnq's integration"
    return ref


def fp8_text_encoder(model, te_dir):
    """Lightricks' scaled fp8 on every 2-D weight of the decoder layers; returns the dense model of the decoded
    weights and how many tensors were stored fp8."""
    model.save_pretrained(te_dir, safe_serialization=True)
    path = te_dir / "model.safetensors"
    state = load_file(str(path))
    decoded = {}
    for name, w in list(state.items()):
        if not (".layers." in name and "language_model" in name and name.endswith(".weight") and w.dim() == 2):
            continue
        scale = 448.0 / w.float().abs().max()
        qw = (w.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        ws = (1.0 / scale).reshape(()).to(torch.float32)
        state[name], state[name[:-len(".weight")] + ".weight_scale"] = qw, ws
        decoded[name] = (qw.to(torch.float32) * ws).to(w.dtype)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata={"format": "pt"})
    ref = copy.deepcopy(model)
    # The saved names and the module's may differ by the checkpoint conversion (transformers 5 saves Gemma-3's tower
    # as language_model.model.*): map by suffix after the layer index, which is unique within the tower.
    own = {n: n for n in ref.state_dict()}
    by_tail = {n[n.index(".layers."):]: n for n in own if ".layers." in n and "language_model" in n}
    with torch.no_grad():
        params = dict(ref.named_parameters())
        for name, w in decoded.items():
            params[by_tail[name[name.index(".layers."):]]].copy_(w)
    assert decoded, "no decoder weight was stored fp8"
    return ref.eval(), len(decoded)


def gguf_text_encoder(model, te_dir):
    te_dir.mkdir(parents=True)
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]  # as save_pretrained writes it (the plugins check the class)
    config.save_pretrained(te_dir)
    path = te_dir / "model.gguf"
    # The language model alone, as a text GGUF holds it (llama.cpp writes the vision tower to a separate mmproj file;
    # Qwen3-VL's 5-D patch embedding is not even a GGML tensor): the text path reads nothing else.
    gguf_writer.write(path, {n: t for n, t in model.state_dict().items() if ".language_model." in n}, q8_0_or_f32)
    dense, _ = gguf_writer.read_dense(path)
    ref = copy.deepcopy(model)
    missing, unexpected = ref.load_state_dict(dense, strict=False)
    assert not unexpected and not any(".language_model." in m for m in missing), (missing, unexpected)
    return ref.eval(), stored_types(path)


def encoder_case(model, cls, case, te_dir):
    """The case's text_encoder/ under te_dir; the reference model and what the case stores."""
    if case in SDNQ_CASES:
        return sdnq_text_encoder(model, cls, te_dir, SDNQ_CASES[case]), dict(SDNQ_CASES[case], method="sdnq")
    if case == "fp8_scaled":
        ref, n = fp8_text_encoder(model, te_dir)
        return ref, {"layout": "weight F8_E4M3 + weight_scale", "fp8_tensors": n}
    ref, types = gguf_text_encoder(model, te_dir)
    return ref, {"gguf_types": types}


def qwen_pipeline(text_encoder, processor):
    pipe = QwenImage21Pipeline(scheduler=None, vae=None, text_encoder=text_encoder, processor=processor,
                               transformer=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def ltx2_text_pipeline(text_encoder, tok_dir):
    """LTX2Pipeline holding only its text path (encode_prompt reads nothing else); the tokenizer as
    LTX2Pipeline.from_pretrained loads it (AutoTokenizer -> GemmaTokenizer)."""
    pipe = LTX2Pipeline(scheduler=None, vae=None, audio_vae=None, text_encoder=text_encoder,
                        tokenizer=AutoTokenizer.from_pretrained(tok_dir), connectors=None, transformer=None,
                        vocoder=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_qwen_processor(processor, proc):
    processor.tokenizer.save_pretrained(proc)
    processor.image_processor.save_pretrained(proc)
    (proc / "chat_template.jinja").write_text(qt.CHAT_TEMPLATE)


def qwen_cases(out):
    processor = qt.build_processor()
    tiny = qt.build_text_encoder(processor.tokenizer)
    with qwen_config(QWEN_WIDE_TEXT_CONFIG, QWEN_WIDE_VISION_CONFIG):
        wide = qt.build_text_encoder(processor.tokenizer)
    # Saved before any prompt is encoded: the pipeline's left-padded calls leave padding set on the fast tokenizer,
    # which save_pretrained would write into tokenizer.json (QwenImage21Pipeline.save_pretrained saves it unused).
    proc = out / "qwen_processor"
    save_qwen_processor(processor, proc)
    cases = {}
    for case in ("sdnq_int8", "sdnq_uint4_embedding", "fp8_scaled", "gguf_q8_0"):
        model = wide if case == "gguf_q8_0" else tiny
        ckpt = out / f"qwen_{case}" / "checkpoint"
        ref, info = encoder_case(model, Qwen3VLForConditionalGeneration, case, ckpt / "text_encoder")
        shutil.copytree(proc, ckpt / "processor")
        meta = {}
        qt.text_encoder_fixtures(out / f"qwen_{case}", qwen_pipeline(ref, processor), meta)
        with torch.no_grad():  # the control: the dense tower's embeddings, which the quantized ones must differ from
            dense = qwen_pipeline(model, processor).encode_prompt(prompt=qt.PROMPTS["long"], device="cpu")[0]
        save_file({"dense.long.embeds": dense.contiguous()}, str(out / f"qwen_{case}" / "control.safetensors"))
        cases[f"qwen_{case}"] = dict(info, encoder="qwen3_vl", text_config=QWEN_WIDE_TEXT_CONFIG
                                     if case == "gguf_q8_0" else qt.TEXT_CONFIG)
    single = out / "qwen_gguf_single" / "checkpoint"
    (single / "text_encoder").mkdir(parents=True)
    shutil.copy(out / "qwen_gguf_q8_0" / "checkpoint" / "text_encoder" / "config.json", single / "text_encoder")
    shutil.copytree(proc, single / "processor")
    shutil.rmtree(proc)
    return cases, {"prompts": qt.PROMPTS, "batch_prompts": meta["batch_prompts"], "drop_idx": meta["drop_idx"]}


def gemma_cases(out):
    model_bytes = tiny_gemma_tokenizer.train()
    model = lt.text_encoder()
    cases, listed = {}, [c for c in lt.CASES if c[0] in GEMMA_CASES]
    for case in ("sdnq_int8", "fp8_scaled", "gguf_q8_0"):
        ckpt = out / f"gemma3_{case}" / "checkpoint"
        tok_dir = ckpt / "tokenizer"
        tiny_gemma_tokenizer.transformers_tokenizer(model_bytes).save_pretrained(tok_dir)
        (tok_dir / "tokenizer.model").write_bytes(model_bytes)
        ref, info = encoder_case(model, Gemma3ForConditionalGeneration, case, ckpt / "text_encoder")
        pipe = ltx2_text_pipeline(ref, tok_dir)
        tensors = {}
        for name, prompt, negative, guided, max_len, n in listed:
            with torch.no_grad():
                pe, pm, ne, nm = pipe.encode_prompt(prompt=prompt, negative_prompt=negative,
                                                    do_classifier_free_guidance=guided, num_videos_per_prompt=n,
                                                    max_sequence_length=max_len, device=torch.device("cpu"))
            tensors[f"{name}.prompt_embeds"] = pe.contiguous()
            tensors[f"{name}.prompt_attention_mask"] = pm.contiguous()
            if guided:
                tensors[f"{name}.negative_prompt_embeds"] = ne.contiguous()
                tensors[f"{name}.negative_prompt_attention_mask"] = nm.contiguous()
        save_file(tensors, str(out / f"gemma3_{case}" / "embeds.safetensors"), metadata={"reference": "diffusers"})
        name, prompt, _, _, max_len, _ = listed[0]
        with torch.no_grad():  # the control: the dense tower's embeddings, which the quantized ones must differ from
            dense = ltx2_text_pipeline(model, tok_dir).encode_prompt(
                prompt=prompt, do_classifier_free_guidance=False, max_sequence_length=max_len,
                device=torch.device("cpu"))[0]
        save_file({f"dense.{name}.prompt_embeds": dense.contiguous()},
                  str(out / f"gemma3_{case}" / "control.safetensors"))
        cases[f"gemma3_{case}"] = dict(info, encoder="gemma3", text_config=lt.gemma3_fixtures.TEXT_CONFIG)
    single = out / "gemma3_gguf_single" / "checkpoint"
    (single / "text_encoder").mkdir(parents=True)
    shutil.copy(out / "gemma3_gguf_q8_0" / "checkpoint" / "text_encoder" / "config.json", single / "text_encoder")
    shutil.copytree(out / "gemma3_gguf_q8_0" / "checkpoint" / "tokenizer", single / "tokenizer")
    gemma_meta = [{"name": name, "prompts": [p] if isinstance(p, str) else p,
                   "negative_prompts": None if neg is None else ([neg] if isinstance(neg, str) else neg),
                   "guided": guided, "max_sequence_length": max_len, "num_videos_per_prompt": n}
                  for name, p, neg, guided, max_len, n in listed]
    return cases, gemma_meta


def main():
    out = Path(sys.argv[1])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    qwen, qwen_meta = qwen_cases(out)
    gemma, gemma_meta = gemma_cases(out)
    ref = {"reference": "transformers", "reference_version": transformers.__version__,
           "diffusers_version": diffusers.__version__, "torch_version": torch.__version__,
           "sdnq_version": importlib.metadata.version("sdnq"), "gguf_version": importlib.metadata.version("gguf"),
           "seed": SEED, "dtype": "float32", "cases": {**qwen, **gemma}, "qwen": qwen_meta, "gemma3_cases": gemma_meta}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False, default=list) + "\n")
    print(f"text quant fixtures: transformers {transformers.__version__}, sdnq {ref['sdnq_version']}, "
          f"gguf {ref['gguf_version']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
