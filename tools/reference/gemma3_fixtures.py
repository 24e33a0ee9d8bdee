#!/usr/bin/env python3
"""Parity fixtures for ddo's Gemma-3 text encoder (plugins/models/text_models/src/gemma3_text_model.cpp) and its
SentencePiece tokenizer (sentencepiece_tokenizer.cpp): LTX-2's prompt path (models.md §5.8).

Usage: gemma3_fixtures.py OUT_DIR

The reference is transformers' Gemma3ForConditionalGeneration (the class LTX2Pipeline's text_encoder is; tiny,
random fp32, 4 decoder layers: sliding, sliding, full, sliding, with sliding_window 4 so the window matters on a
short prompt, linear RoPE scaling on the full layer, query_pre_attn_scalar != head_dim, grouped-query attention)
and the GemmaTokenizer AutoTokenizer loads from the saved tokenizer folder (transformers 5: backed by
tokenizer.json), over a SentencePiece model trained offline (tiny_gemma_tokenizer.py). Ids are what
LTX2Pipeline._get_gemma_prompt_embeds asks of the tokenizer (add_special_tokens=True, left padding to max_length,
truncation); hidden states are `text_encoder(input_ids, attention_mask, output_hidden_states=True).hidden_states`.

Files written:
  checkpoint/tokenizer/            tokenizer.model (the SentencePiece model), tokenizer.json, tokenizer_config.json
                                   (GemmaTokenizer.save_pretrained), as an LTX-2 checkpoint lays them out
  checkpoint/text_encoder/         Gemma3ForConditionalGeneration.save_pretrained (config.json, model.safetensors)
  text_config_only/config.json     the same text tower as a plain Gemma3TextConfig (no text_config nesting)
  broken_missing/, broken_shape/   text_encoder/ copies with layers.1.mlp.up_proj.weight removed / of a wrong shape
  tokenizer_cases.json             {"cases": [{"text", "ids"}]}: AutoTokenizer(text, add_special_tokens=True).input_ids
                                   for every string of the corpus, each also checked against the `sentencepiece`
                                   package (BOS + SentencePieceProcessor.encode) where no added token occurs
  padded_cases.json                {"cases": [{"prompts", "texts", "max_length", "ids", "mask"}]}: the pipeline's
                                   batch call (texts: the prompts after its strip(), what the tokenizer is given)
  text_encoder.safetensors         <case>.ids / <case>.mask / <case>.hidden.<i> for i = 0 .. num_layers (embedding
                                   output, each layer's output, the last after the final norm)
  reference.json                   written last (marks a complete set): versions, seed, configs, the cases
"""

import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import sentencepiece
import transformers
from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gemma_tokenizer  # noqa: E402

SEED = 0
VOCAB = 640  # > the tokenizer's 600 pieces, as Gemma 3's 262208 > 262144
TEXT_CONFIG = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=16, sliding_window=4,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                   max_position_embeddings=256, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                   pad_token_id=0, eos_token_id=1, bos_token_id=2)
VISION_CONFIG = dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                     patch_size=4)
# Prompts for the hidden-state cases: (name, prompts, max_length). One unpadded prompt, a left-padded batch where
# the sliding window (4) cuts the context, and a truncated one.
MODEL_CASES = [
    ("single", ["a robot dancing in the rain"], None),
    ("batch", ["a cat", "A photograph of an astronaut riding a horse on the moon", "猫と犬 🐱"], 20),
    ("truncated", ["The quick brown fox jumps over the lazy dog, cinematic lighting, slow motion"], 12),
]


def corpus():
    c = []
    c += ["a cat sitting on a mat", "A photograph of an astronaut riding a horse on the moon", "a robot dancing",
          "The quick brown fox jumps over the lazy dog.", "watercolor painting of a lighthouse at dusk, soft light",
          "blurry, low quality, watermark, text", "portrait of a woman, 85mm, f/1.8", "Hello, World!", "x", "ab",
          "UPPER CASE AND lower case AND MiXeD CaSe", "snake_case and camelCase and kebab-case", "don't can't I'm",
          "email@example.com https://example.org/path?q=1&r=2#frag", "C:\\Program Files\\ddo", "if (a && b) { f(); }",
          "the camera pans left across a city at night", "slow motion, cinematic", "a red cube on a blue sphere",
          "sitting", "sit", "ting", "lighthouse", "astronautastronaut", "moonmoon moon", "catcatcat"]
    # whitespace runs (the user-defined ▁▁ / ▁▁▁▁ / \n\n pieces, tabs, other Unicode spaces)
    c += ["", " ", "  ", "   ", "    ", "     ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r",
          "a  b", "a   b", "a    b", "a     b", "  leading", "trailing  ", " a ", "a\tb", "a\t\tb", "a\nb",
          "a\n\nb", "a\n\n\nb", "line1\nline2\n\nline4", "    indented code block\n        more indented",
          "a\u00a0b", "a\u3000b", "a\u2009b", "a\u2028b", "\u00a0", "a\u200bb", "a\ufeffb", "x \u00a0 y",
          "spaces   \n\n  between", "\t\n\r mix", " \n ", "\n \n"]
    # Unicode: accents, scripts, combining marks, compatibility forms (identity normalisation keeps them)
    c += ["Ünïcödé café naïve", "Straße façade jalapeño", "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "ﬁ ligature",
          "①②③ ⅣⅤ", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３", "x²+y³", "½ ¼ ¾", "кошка сидит на коврике", "Привет, мир!",
          "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ǅemal", "ſtate",
          "\u0301 starts with a mark", "o\u0302\u0323", "Ω\u0301"]
    # CJK, Japanese, Korean
    c += ["一只猫坐在垫子上", "夕阳下的海边灯塔", "你好，世界！", "中文和English混合text", "猫と犬", "ひらがなとカタカナ",
          "東京タワーの夜景、きれいですね。", "고양이", "안녕하세요 세계", "한국어 문장입니다.", "猫", "犬猫", "灯塔灯塔"]
    # emoji (byte fallback: none are pieces of the tiny model)
    c += ["emoji 🐱🚀✨", "🐱", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇫🇷", "❤️", "a🐱b", "🐱 🐶  🐭", "😀😃😄😁",
          "1️⃣ keycap"]
    # digits (split digits: every digit its own piece)
    c += ["numbers 1234567890 and 3.14159", "0", "00", "2026", "1,000,000", "12345678901234567890", "v1.2.3-rc4",
          "٠١٢٣٤٥٦٧٨٩", "१२३", "3x3=9", "1e-5", "-42", "85mm", "f/1.8"]
    # bytes the model lacks (byte fallback), control characters
    c += ["a\x00b", "\x01\x02\x03", "\x7f", "tab\x0bvt\x0cff", "\x1b[31mred\x1b[0m", "\u0080\u009f", "\ufffd",
          "\U0010ffff", "\U0001f9ff", "\u2603 snowman", "⚡", "€100", "£5", "¥", "©®™", "\u00ad soft hyphen"]
    # added tokens: the control ones (<bos> ...) and the user-defined symbols, as the tokenizer files declare them
    c += ["<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<bos>a cat", "a cat<eos>", "<start_of_turn>user\nhi<end_of_turn>",
          "<start_of_turn>model\n", "[multimodal]", "<start_of_image><end_of_image>", "a<mask>b", "<bos><bos>",
          "<start_of_turn", "start_of_turn>", "<<bos>>", "< bos >", "<BOS>", "x<unk>y", "<end_of_turn>\n\n"]
    # longer prompts
    c += ["A cinematic shot of a lighthouse at dusk. The camera slowly pans left while waves crash on the rocks "
          "below; seagulls fly overhead and the light sweeps across the water.",
          "Ein Hund läuft über eine Wiese, im Hintergrund Berge. 一只狗在草地上奔跑。 犬が草原を走っている。 🐕🌄",
          "\n".join(["line %d: %s" % (i, "x" * i) for i in range(8)])]
    # generated: each training sentence with extra spaces, upper-cased, concatenated
    for s in tiny_gemma_tokenizer.TRAINING_TEXT:
        c += [s.upper(), s.replace(" ", "  "), s + " " + s[::-1], "  " + s + "\n\n"]
    return c


def randomise(model):
    # Default init (zeros for Gemma's (1 + w) norms, std 0.02) would hide a wrong norm or scale: randomise all.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.3 * torch.randn_like(p))
            elif p.dim() > 1:
                p.copy_(torch.randn_like(p) * p.shape[-1] ** -0.5)
            else:
                p.copy_(0.1 * torch.randn_like(p))


def tokenizer_fixtures(out, model_bytes):
    tok_dir = out / "checkpoint" / "tokenizer"
    tiny_gemma_tokenizer.transformers_tokenizer(model_bytes).save_pretrained(tok_dir)
    (tok_dir / "tokenizer.model").write_bytes(model_bytes)
    tok = AutoTokenizer.from_pretrained(tok_dir)  # what LTX2Pipeline.from_pretrained loads
    sp = sentencepiece.SentencePieceProcessor(model_file=str(tok_dir / "tokenizer.model"))
    added = [t for t in tok.get_added_vocab()]
    cases = []
    for text in corpus():
        ids = tok(text, add_special_tokens=True).input_ids
        if not any(a in text for a in added):
            want = [sp.bos_id()] + sp.encode(text)
            assert ids == want, f"transformers and sentencepiece differ on {text!r}: {ids} vs {want}"
        cases.append({"text": text, "ids": ids})
    assert len(cases) >= 200, len(cases)
    (out / "tokenizer_cases.json").write_text(json.dumps({"reference": "transformers",
                                                          "reference_version": transformers.__version__,
                                                          "tokenizer_class": type(tok).__name__,
                                                          "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    return tok


def pipeline_tokenize(tok, prompts, max_length):
    # LTX2Pipeline._get_gemma_prompt_embeds: left padding, pad = eos when missing, strip, max_length, truncation.
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    prompts = [p.strip() for p in prompts]
    if max_length is None:
        return tok(prompts, add_special_tokens=True, return_tensors="pt")
    return tok(prompts, padding="max_length", max_length=max_length, truncation=True, add_special_tokens=True,
               return_tensors="pt")


def main():
    out = Path(sys.argv[1])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model_bytes = tiny_gemma_tokenizer.train()
    tok = tokenizer_fixtures(out, model_bytes)

    padded = []
    for prompts, max_length in [(["a cat", "a robot dancing in the rain", ""], 10), (["  padded  "], 6),
                                (["The quick brown fox jumps over the lazy dog"], 5), (["x"], 1), (["exact"], 2)]:
        enc = pipeline_tokenize(tok, prompts, max_length)
        padded.append({"prompts": prompts, "texts": [p.strip() for p in prompts], "max_length": max_length, "ids": enc.input_ids.tolist(),
                       "mask": enc.attention_mask.tolist()})
    (out / "padded_cases.json").write_text(json.dumps({"cases": padded}, ensure_ascii=False, indent=1) + "\n")

    torch.manual_seed(SEED)
    cfg = Gemma3Config(text_config=TEXT_CONFIG, vision_config=VISION_CONFIG, mm_tokens_per_image=4,
                       image_token_index=VOCAB - 1, boi_token_index=8, eoi_token_index=9)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    randomise(model)
    te = out / "checkpoint" / "text_encoder"
    model.save_pretrained(te, safe_serialization=True)
    Gemma3TextConfig(**TEXT_CONFIG).save_pretrained(out / "text_config_only")

    weights = load_file(te / "model.safetensors")
    # transformers 5 saves Gemma3ForConditionalGeneration's text tower as language_model.model.* (4.x checkpoints
    # may hold model.language_model.*)
    victim = next(n for n in weights if n.endswith("layers.1.mlp.up_proj.weight"))
    for name, change in [("broken_missing", lambda w: w.pop(victim)),
                         ("broken_shape", lambda w: w.__setitem__(victim, w[victim][:-1].clone()))]:
        (out / name).mkdir()
        shutil.copy(te / "config.json", out / name / "config.json")
        w = dict(weights)
        change(w)
        save_file(w, out / name / "model.safetensors", metadata={"format": "pt"})

    tensors = {}
    meta_cases = []
    for name, prompts, max_length in MODEL_CASES:
        enc = pipeline_tokenize(tok, prompts, max_length)
        with torch.no_grad():
            o = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, output_hidden_states=True)
            # the last hidden state is after the final norm (what LTX-2 stacks)
            lm = model.model.language_model
            direct = lm(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
        hs = o.hidden_states
        assert len(hs) == TEXT_CONFIG["num_hidden_layers"] + 1
        assert torch.equal(hs[-1], direct)
        tensors[f"{name}.ids"] = enc.input_ids.contiguous()
        tensors[f"{name}.mask"] = enc.attention_mask.contiguous()
        for i, h in enumerate(hs):
            tensors[f"{name}.hidden.{i}"] = h.contiguous()
        meta_cases.append({"name": name, "prompts": prompts, "max_length": max_length,
                           "length": int(enc.input_ids.shape[1])})
    save_file(tensors, out / "text_encoder.safetensors", metadata={"reference": "transformers"})

    meta = {"reference": "transformers", "reference_version": transformers.__version__,
            "torch_version": torch.__version__, "sentencepiece_version": sentencepiece.__version__, "seed": SEED,
            "dtype": "float32", "classes": ["Gemma3ForConditionalGeneration", type(tok).__name__],
            "text_config": TEXT_CONFIG, "num_hidden_states": TEXT_CONFIG["num_hidden_layers"] + 1,
            "model_cases": meta_cases, "broken_tensor": victim}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    print(f"gemma3 fixtures: transformers {transformers.__version__}, sentencepiece {sentencepiece.__version__} "
          f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
