"""A tiny byte-level BPE tokenizer in the layout of Qwen2/Qwen3(-VL)'s tokenizer.json, trained offline.

The real Qwen3-VL tokenizer (151k tokens) is not shipped with the repository and nothing is fetched, so the parity
fixtures train a small one with the `tokenizers` library using exactly Qwen2's normaliser (NFC), pre-tokenizer
(the Qwen2 split regex, isolated, then ByteLevel without prefix space or regex), BPE model and the special tokens
the pipeline's template uses. `tokenizers` is the reference: the C++ tokenizer must give its ids.
"""

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# Qwen2's pre-tokenizer regex (tokenizer.json of Qwen2/Qwen2.5/Qwen3/Qwen3-VL): single digits, letters with one
# leading non-letter, punctuation runs with trailing newlines, whitespace with the look-ahead (?!\S).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
SYSTEM_PROMPT = "Comprehend and analyze the provided prompt."

TRAINING_TEXT = [
    SYSTEM_PROMPT,
    "system", "user", "assistant",
    "a cat sitting on a mat", "A photograph of an astronaut riding a horse on the moon",
    "The quick brown fox jumps over the lazy dog", "watercolor painting of a lighthouse at dusk, soft light",
    "blurry, low quality, watermark, text", "a red cube on a blue sphere", "portrait of a woman, 85mm, f/1.8",
    "一只猫坐在垫子上", "夕阳下的海边灯塔", "猫と犬", "고양이", "кошка сидит на коврике", "Ünïcödé café naïve",
    "emoji 🐱🚀✨", "numbers 1234567890 and 3.14159", "tabs\tand\nnewlines\r\n", "don't can't we'll you're I'm",
]


def train(vocab_size=800):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAINING_TEXT * 20, trainer)
    return tok
