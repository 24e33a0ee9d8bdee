"""Parity fixtures for ddo's C++ byte-level BPE tokenizer (plugins/models/text_models/src/bpe_tokenizer.cpp).

Usage: tokenizer_fixtures.py OUT_DIR

Trains the tiny Qwen2-layout tokenizer of tiny_qwen_tokenizer.py and writes, with the `tokenizers` library as the
reference (`Tokenizer.from_file(p).encode(text).ids`, add_special_tokens=True):
  tokenizer.json, corpus.json                  the trained tokenizer, exactly as Qwen2/Qwen3(-VL) lay it out
  tokenizer_variant.json, corpus_variant.json  legacy "a b" merges, ignore_merges, vocabulary entries that only
                                               ignore_merges reaches, added tokens with lstrip/rstrip, normalized,
                                               single_word
  tokenizer_<name>.json, corpus_<name>.json    one each for the other code paths (Split behaviours, invert, String
                                               patterns, anchors, GPT-2 ByteLevel regex, NFKC/NFD/NFKD, no normalizer,
                                               post-processors) and for the places where PCRE2/utf8proc differ from
                                               tokenizers' Oniguruma/normalisation tables (extra_merges,
                                               split_classes_removed)
  reference.json                               written last (marks a complete set): versions and the list of fixtures
Each corpus file: {"reference": "tokenizers", "reference_version": ..., "vocab_size": ..., "cases": [{"text", "ids"}]}.
Every tokenizer file is loaded back with Tokenizer.from_file and the ids come from that loaded tokenizer.
"""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors  # noqa: E402

from tiny_qwen_tokenizer import QWEN2_PATTERN, SYSTEM_PROMPT, train  # noqa: E402

QWEN_IMAGE_21_TEMPLATE = ("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
                          "<|im_start|>assistant\n")
SEED = 2101


def fixed_cases():
    c = []
    # ASCII sentences
    c += ["Hello world", "The quick brown fox jumps over the lazy dog.", "a cat sitting on a mat",
          "A photograph of an astronaut riding a horse on the moon", "portrait of a woman, 85mm, f/1.8",
          "blurry, low quality, watermark, text", "watercolor painting of a lighthouse at dusk, soft light",
          "UPPER CASE AND lower case AND MiXeD CaSe", "x", "ab", "Comprehend", "comprehension", "analyze",
          "assistant", "system", "user", "Hello, World! How are you today?", "snake_case and camelCase and kebab-case",
          "email@example.com https://example.org/path?q=1&r=2#frag", "C:\\Program Files\\ddo\\bin",
          "def f(x):\n    return x * 2\n", "if (a && b || !c) { return; }"]
    # CJK, Japanese, Korean, Cyrillic, other scripts
    c += ["一只猫坐在垫子上", "夕阳下的海边灯塔", "你好，世界！", "中文和English混合text", "猫と犬", "ひらがなとカタカナ",
          "東京タワーの夜景、きれいですね。", "고양이", "안녕하세요 세계", "한국어 문장입니다.", "кошка сидит на коврике",
          "Привет, мир!", "Съешь же ещё этих мягких французских булок", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם",
          "नमस्ते दुनिया", "สวัสดีชาวโลก", "Ünïcödé café naïve", "Straße façade jalapeño", "ǅemal ǈubljana", "ſtate 'ſ"]
    # emoji, ZWJ sequences, skin tones, flags, variation selectors
    c += ["emoji 🐱🚀✨", "🐱", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇫🇷", "❤️", "☺︎ vs ☺️", "a🐱b", "🐱 🐶  🐭",
          "👋🏻👋🏼👋🏽👋🏾👋🏿", "🧑🏽‍🚀 astronaut", "1️⃣ keycap", "😀😃😄😁"]
    # combining marks: decomposed forms NFC composes, and ones it cannot compose
    c += ["e\u0301", "cafe\u0301", "nai\u0308ve", "A\u030a", "\u212b", "\u1e9b\u0323", "o\u0302\u0323", "q\u0307\u0323",
          "x\u0301\u0302\u0303", "\u0301 starts with a mark", "\u0915\u094d\u0937", "\u1100\u1161\u11a8", "\uac00\u11a8",
          "Ω\u0301", "e\u0301\u0301", "\u0041\u0308\u0301", "ﬁ ligature", "①②③ ⅣⅤ", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３",
          "x²+y³", "½ ¼ ¾"]
    # letters and digits new in Unicode 15/16 (tokenizers' Oniguruma knows them, PCRE2 10.42 does not)
    c += ["CJK Ext H \U00031350\U00031351", "Ext I \U0002EBF0", "Garay \U00010D4A\U00010D4B \U00010D40",
          "Kawi \U00011F04\U00011F05", "Kaktovik \U0001D2C0\U0001D2C1", "Todhri \U000105C0", "\uA7CB\uA7DA",
          "Cyrillic \U0001E030x", "a\U00031350b1\U00011BF0"]
    # characters whose normalisation tokenizers' tables (Unicode 9) do not know but utf8proc's do
    c += ["\u32ff \uA7F2\uAB69", "\U0001FBF1\U0001FBF2\U0001FBF3", "\U00010781\U000107A2", "\U00011935\U00011930",
          "\U00011938", "a\u1df6\u0334", "a\u0334\u1df6", "\u0628\u0650\u08CA\u0651", "e\u0301\u08CA\u0316",
          "o\u1ABF\u0302\u0323", "\U0001E030\u0301"]
    # digit runs
    c += ["numbers 1234567890 and 3.14159", "0", "00", "2026", "1,000,000", "12345678901234567890", "v1.2.3-rc4",
          "٠١٢٣٤٥٦٧٨٩", "१२३", "3x3=9", "1e-5", "-42"]
    # whitespace runs
    c += ["", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "tabs\tand\nnewlines\r\n",
          "trailing spaces   ", "   leading spaces", "space before newline \nnext", "spaces   \n\n  between",
          "a\tb\t\tc", "a \t b", "line1\nline2\n\nline4", "a\u00a0b", "\u00a0\u00a0x", "a\u3000b", "\u3000", "a\u2009b",
          "a\u2028b\u2029c", "a\u0085b", "a\u0085", "a\u180eb", "a \u180e b", "a \u180e!", "\u180e!", "\u180e  x", " \u180e\u180e", "a\u200bb", "a\ufeffb", "\ufeffbom",
          "a\u2060b", "a\u000bb\u000cc", "a\u001cb\u001fc", "x \u00a0 y", "end with nbsp\u00a0", "a\x00b",
          "  \n", " \n ", "\n \n", "word \u3000 word", "\t\n\r\u00a0\u3000\u2003 mix"]
    # contractions, including upper case
    c += ["don't can't we'll you're I'm", "it's", "IT'S", "they've", "THEY'VE", "I'd", "I'D", "she'll", "SHE'LL",
          "we're", "WE'RE", "isn't", "ISN'T", "'s", "'S", "'t", "'ll", "'LL", "'m 'M 'd 'D 've 'Ve", "rock'n'roll",
          "O'Neil's", "''quoted''", "the dog's bone", "ʼs apostrophe", "’s curly"]
    # punctuation runs
    c += ["!!!", "???", "...", "?!?!", "---", "***bold***", "((nested))", "[brackets]{braces}<angles>", "a,b;c:d",
          "«quotes» „low“ “high”", "—dash–", "!!!\n\n", "...\r\n", ";\n", "foo!!!bar", "@#$%^&*()_+", "~`|\\/",
          "。、！？", "…", "¡Hola! ¿Qué tal?"]
    # special tokens embedded in text, partial special tokens
    c += ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
          "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "a<|im_start|>b", " <|im_start|> ",
          "<|im_start|><|im_end|>", "<|im_start|><|im_start|>", "<|vision_start|><|image_pad|><|vision_end|>",
          "<|video_pad|>x", "<|im_start", "|>", "<|", "<|im_start|", "im_start|>", "<|im_end|", "<|im_start |>",
          "<<|im_start|>>", "<|IM_START|>", "e<|im_end|>\u0301", "text<|endoftext|>", "<|endoftext|>\n\n"]
    # the Qwen-Image 2.1 template with several prompts
    for p in ["a cat sitting on a mat", "一只猫坐在垫子上", "", " ", "A photograph of an astronaut riding a horse "
              "on the moon, 4k, highly detailed", "portrait of a woman, 85mm, f/1.8\n\nbokeh", "emoji 🐱🚀✨",
              "watercolor painting of a lighthouse at dusk, soft light", "don't use <|im_end|> in prompts",
              "cafe\u0301 au lait", "  leading and trailing  "]:
        c.append(QWEN_IMAGE_21_TEMPLATE.format(p))
    # ignore_merges / variant hooks (vocabulary entries only the variant has, its added tokens)
    c += ["QwenImage", " QwenImage diffusion", "x <sep> y", "x<sep>y", "x  <sep>\t\ny", "<sep><sep>", " <sep>",
          "naïve", "nai\u0308ve and naïve", "NAÏVE", "cat concatenate a cat. cat", "cats cat_ cat1 'cat'"]
    # long inputs
    c.append(" ".join(["word"] * 300))
    c.append("a" * 500)
    c += ["aaa", "aaaa", "aaaaa", " aaa", "a   b", "x     y"]
    c.append(" " * 300 + "x")
    c.append("\n" * 50)
    c.append("猫" * 200)
    return c


def random_cases(n=40):
    rng = random.Random(SEED)
    fragments = ["cat", " the", "Hello", "'s", "'LL", "'re", "don't", "123", "4567", " ", "  ", "\t", "\n", "\n\n",
                 "\r\n", "\u00a0", "\u3000", "\u0085", "\u180e", "\u200b", "\ufeff", "<|im_start|>", "<|im_end|>",
                 "<|im_start", "|>", "e\u0301", "A\u030a", "👍🏽", "👩‍💻", "🐱", "猫", "고양이", "кошка", "!!!", "...",
                 ",", "?", "-", "(", ")", "naïve", "<sep>", "QwenImage"]
    ranges = [(0x20, 0x7e), (0xa0, 0xff), (0x300, 0x36f), (0x400, 0x4ff), (0x3040, 0x30ff), (0x4e00, 0x4fff),
              (0xac00, 0xacff), (0x1f300, 0x1f64f), (0x2000, 0x206f), (0x9, 0xd)]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 14)):
            if rng.random() < 0.55:
                parts.append(rng.choice(fragments))
            else:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5))))
        out.append("".join(parts))
    return out


def corpus():
    cases = fixed_cases() + random_cases()
    seen, unique = set(), []
    for s in cases:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def save_and_reference(out_dir, name, tokenizer_json, texts):
    """Writes tokenizer_json (a dict) as tokenizer<name>.json, loads it back and writes corpus<name>.json."""
    tok_file = "tokenizer%s.json" % name
    corpus_file = "corpus%s.json" % name
    write_json(os.path.join(out_dir, tok_file), tokenizer_json)
    tok = Tokenizer.from_file(os.path.join(out_dir, tok_file))
    cases = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
    write_json(os.path.join(out_dir, corpus_file), {
        "reference": "tokenizers", "reference_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases})
    return {"name": name.lstrip("_") or "trained", "tokenizer": tok_file, "corpus": corpus_file}


def variant_json(base):
    """Legacy merges, ignore_merges, two vocabulary entries that no merge reaches, extra added tokens."""
    tok = Tokenizer.from_str(json.dumps(base))
    tok.add_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("nai\u0308ve", normalized=True),
                    AddedToken("cat", single_word=True, normalized=False)])
    j = json.loads(tok.to_str())
    model = j["model"]
    model["merges"] = [a + " " + b for a, b in model["merges"]]
    model["ignore_merges"] = True
    # Whole words in the vocabulary that merges would split differently: only ignore_merges yields them. Their ids
    # collide with the added tokens' ids in the file; tokenizers re-assigns the added tokens (ids after the vocab).
    for w in ["ĠQwenImage", "Ġdiffusion"]:
        model["vocab"][w] = len(model["vocab"])
    return j


def extra_jsons(base):
    """Other code paths of the C++ tokenizer, each a small change of the trained tokenizer."""
    def with_pre(pre):
        j = json.loads(json.dumps(base))
        t = Tokenizer.from_str(json.dumps(j))
        t.pre_tokenizer = pre
        return json.loads(t.to_str())

    def byte_level():
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)

    out = {}
    for behavior in ["removed", "merged_with_previous", "merged_with_next"]:
        out["split_" + behavior] = with_pre(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior=behavior, invert=False), byte_level()]))
    # The Qwen2 regex matches everything; Contiguous needs gaps between matches to differ from Isolated.
    out["split_contiguous"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[aeiou]|\s"), behavior="contiguous", invert=False), byte_level()]))
    out["split_invert"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_previous", invert=True), byte_level()]))
    out["split_string"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_next", invert=False),
        pre_tokenizers.Split(".", behavior="isolated", invert=False), byte_level()]))
    out["split_anchors"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"^\p{L}+|\p{N}+$|\s"), behavior="removed", invert=False), byte_level()]))
    # Merges that make regex-engine differences show as ids. U+180E (MONGOLIAN VOWEL SEPARATOR) is \s for PCRE2 but
    # not for Oniguruma: "a \u180e!" is one Qwen2 piece " \u180e!" for Oniguruma, three for a plain PCRE2 \s. And
    # overlapping equal pairs ("aaa", three spaces): tokenizers merges the leftmost first.
    j = json.loads(json.dumps(base))
    mvs = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str("\u180e")[0][0]
    for a, b in [(mvs[0], mvs[1]), (mvs[:2], mvs[2]), ("Ġ", mvs), (mvs, "!"), ("Ġ" + mvs, "!"),
                 ("a", "a"), ("aa", "a"), ("Ġ", "Ġ"), ("ĠĠ", "Ġ")]:
        if a + b not in j["model"]["vocab"]:
            j["model"]["vocab"][a + b] = len(j["model"]["vocab"])
        j["model"]["merges"].append([a, b])
    out["extra_merges"] = j
    # Letters, numbers and whitespace removed: every code point the two regex engines classify differently shows.
    out["split_classes_removed"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}|\s+"), behavior="removed", invert=False), byte_level()]))
    out["byte_level_gpt2"] = with_pre(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True))
    out["split_then_gpt2"] = with_pre(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\n"), behavior="merged_with_previous", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)]))
    t = Tokenizer.from_str(json.dumps(base))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.NFKC()])
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|im_start|> $A <|im_end|>",
                                      special_tokens=[("<|im_start|>", 1), ("<|im_end|>", 2)])])
    out["nfkc_template"] = json.loads(t.to_str())
    t = Tokenizer.from_str(json.dumps(base))
    t.normalizer = normalizers.NFKD()
    t.post_processor = processors.ByteLevel(trim_offsets=True)
    out["nfkd"] = json.loads(t.to_str())
    t = Tokenizer.from_str(json.dumps(base))
    t.normalizer = None
    t.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>",
                                                     special_tokens=[("<|endoftext|>", 0)])
    out["no_normalizer"] = json.loads(t.to_str())
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tokenizer_fixtures.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    ref = os.path.join(out_dir, "reference.json")
    if os.path.exists(ref):
        os.remove(ref)
    texts = corpus()
    assert len(texts) >= 200, len(texts)
    base = json.loads(train().to_str())
    fixtures = [save_and_reference(out_dir, "", base, texts),
                save_and_reference(out_dir, "_variant", variant_json(base), texts)]
    for name, j in extra_jsons(base).items():
        fixtures.append(save_and_reference(out_dir, "_" + name, j, texts))
    write_json(ref, {"reference": "tokenizers", "reference_version": tokenizers.__version__, "cases": len(texts),
                     "fixtures": fixtures})
    print("tokenizer fixtures: %d strings, %d tokenizers -> %s" % (len(texts), len(fixtures), out_dir))


if __name__ == "__main__":
    main()
