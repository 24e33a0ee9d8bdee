"""A tiny SentencePiece BPE model in the layout of Gemma 3's tokenizer.model, trained offline, and the transformers
GemmaTokenizer the LTX-2 pipeline loads for it (AutoTokenizer -> GemmaTokenizer, backed by tokenizer.json).

The real Gemma 3 tokenizer (262k pieces) is not shipped with the repository and nothing is fetched, so the parity
fixtures train a small one with the `sentencepiece` package using Gemma's trainer and normaliser settings (the ones
transformers' GemmaConverter lists: BPE, split by Unicode script / number / whitespace, whitespace-only pieces,
split digits, byte fallback; identity normalisation, no dummy prefix, no whitespace folding), Gemma's id layout
(<pad> 0, <eos> 1, <bos> 2, <unk> 3) and a few of its user-defined symbols (<mask>, [multimodal],
<start_of_turn>, <end_of_turn>, <start_of_image>, <end_of_image>, whitespace runs).

The transformers tokenizer is built the way transformers' SentencePiece conversion builds it (vocab from the pieces,
merges from generate_merges over that vocabulary, the user-defined symbols as added tokens, <start_of_turn> and
<end_of_turn> special as GemmaConverter marks them) without the protobuf package, which the venv does not carry:
the pieces are read with sentencepiece's own API.
"""

import io

import sentencepiece as spm

# Gemma's user-defined symbols (a few of them): matched in the text before BPE, each one piece.
USER_DEFINED = ["<mask>", "[multimodal]", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                "\u2581\u2581", "\u2581\u2581\u2581\u2581", "\n\n"]
SPECIAL_ADDED = {"<start_of_turn>", "<end_of_turn>"}  # GemmaConverter.special_tokens

TRAINING_TEXT = [
    "a cat sitting on a mat", "A photograph of an astronaut riding a horse on the moon",
    "The quick brown fox jumps over the lazy dog", "watercolor painting of a lighthouse at dusk, soft light",
    "blurry, low quality, watermark, text", "a red cube on a blue sphere", "portrait of a woman, 85mm, f/1.8",
    "A robot dancing in the rain, cinematic lighting, slow motion", "the camera pans left across a city at night",
    "一只猫坐在垫子上", "夕阳下的海边灯塔", "猫と犬", "고양이", "кошка сидит на коврике", "Ünïcödé café naïve",
    "numbers 1234567890 and 3.14159", "tabs\tand\nnewlines", "don't can't we'll you're I'm",
    "    indented code block\n        more indented", "Hello, World! How are you today?",
]


def train(vocab_size=600):
    """The serialized SentencePiece model (bytes of tokenizer.model)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT * 30), model_writer=model, vocab_size=vocab_size, model_type="bpe",
        character_coverage=0.9995,  # the rarest characters are left to byte fallback
        split_by_unicode_script=True, split_by_number=True, split_by_whitespace=True,
        treat_whitespace_as_suffix=False, allow_whitespace_only_pieces=True, split_digits=True, byte_fallback=True,
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", user_defined_symbols=USER_DEFINED, minloglevel=2)
    return model.getvalue()


def transformers_tokenizer(model_bytes):
    """GemmaTokenizer over the pieces of `model_bytes`, as transformers' SentencePiece conversion builds it."""
    from tokenizers import AddedToken
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import generate_merges

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    if "\t" not in vocab:  # GemmaSentencePieceExtractor: the byte-fallback tab doubles as "\t" for the merges
        vocab["\t"] = vocab.get("<0x09>")
    merges = generate_merges(vocab)
    added = [AddedToken(piece, normalized=False, special=piece in SPECIAL_ADDED) for piece in USER_DEFINED]
    tok = GemmaTokenizer(vocab=vocab, merges=merges, unk_token="<unk>", bos_token="<bos>", eos_token="<eos>",
                         pad_token="<pad>", mask_token="<mask>", add_bos_token=True, add_eos_token=False)
    tok.add_tokens(added)
    return tok
