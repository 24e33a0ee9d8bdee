#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/, docs/validation.md "Fuzzing").

Standard library only; deterministic. Run it after a format change and commit the result:
    python3 tests/fuzz/write_seed_corpus.py
The report_reader seeds are not written here: dry_run.json is a real `ddo-host --dry-run --report` of the fixture
plugin (see the docs), the others are cut from it by this script.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- safetensors
DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "U32": 4, "I32": 4, "U64": 8, "I64": 8, "F16": 2,
              "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)], laid out in order, as the safetensors writer does."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:  # the writer pads the header with spaces to a multiple of 8
        text += b" " * (-len(text) % 8)
    data = bytes(i % 251 for i in range(offset))
    return struct.pack("<Q", len(text)) + text + data


def write_safetensors():
    put("safetensors_header", "one_f32.safetensors", safetensors([("weight", "F32", [2, 2])]))
    put("safetensors_header", "dtypes_metadata.safetensors", safetensors(
        [("model.embed.weight", "BF16", [4, 3]), ("model.norm.weight", "F16", [3]), ("ids", "I64", [2]),
         ("mask", "BOOL", [5]), ("scale", "F32", []), ("empty", "F8_E4M3", [0, 7]), ("q", "U8", [3, 1, 2]),
         ("f8", "F8_E5M2", [2]), ("d", "F64", [1])],
        metadata={"format": "pt", "note": "tiny fuzz seed"}))
    put("safetensors_header", "empty.safetensors", safetensors([], pad=False))
    put("safetensors_header", "unpadded_u32.safetensors", safetensors(
        [("a", "U32", [2]), ("b", "I16", [3]), ("c", "I8", [1]), ("d", "U16", [1]), ("e", "U64", [1]),
         ("f", "I32", [1])], pad=False))


# ---------------------------------------------------------------- quantized layers (a config byte + a weights file)
# The first byte picks quantized_layer_fuzz.cpp's kConfigs: 0 int8, 1 uint8, 2 uint4, 3 int4, 4 float8_e4m3fn,
# 5 int8 with use_quantized_matmul, 6 no config (the self-described fp8 layouts).
def write_quantized_layers():
    def seed(name, config, tensors):
        put("quantized_layer", name, bytes([config]) + safetensors(tensors))
    seed("sdnq_int8.bin", 0, [("a.weight", "I8", [4, 8]), ("a.scale", "F32", [4, 1]), ("a.bias", "BF16", [4])])
    seed("sdnq_int8_no_scale.bin", 0, [("a.weight", "I8", [4, 8]), ("a.bias", "BF16", [4])])
    seed("sdnq_int8_grouped_svd.bin", 0, [("a.weight", "I8", [4, 2, 4]), ("a.scale", "F32", [4, 2, 1]),
                                         ("a.svd_up", "F32", [4, 2]), ("a.svd_down", "F32", [2, 8])])
    seed("sdnq_uint8_zero_point.bin", 1, [("a.weight", "U8", [4, 8]), ("a.scale", "BF16", [4, 1]),
                                          ("a.zero_point", "BF16", [4, 1])])
    seed("sdnq_uint4_packed.bin", 2, [("a.weight", "U8", [16]), ("a.scale", "F32", [4, 1]), ("a.zero_point", "F32", [4, 1])])
    seed("sdnq_int4_packed.bin", 3, [("a.weight", "U8", [16]), ("a.scale", "F32", [4, 1])])
    seed("sdnq_fp8.bin", 4, [("a.weight", "F8_E4M3", [4, 8]), ("a.scale", "F32", [4, 1])])
    seed("sdnq_fp8_no_scale.bin", 4, [("a.weight", "F8_E4M3", [4, 8]), ("b.weight", "F8_E4M3", [4, 8]),
                                      ("b.scale", "F32", [4, 1])])
    seed("sdnq_int8_qmm.bin", 5, [("a.weight", "I8", [32, 48]), ("a.scale", "F32", [1, 48])])
    seed("fp8_ltx.bin", 6, [("l.weight", "F8_E4M3", [4, 8]), ("l.weight_scale", "F32", []), ("l.input_scale", "F32", [])])
    seed("fp8_comfy.bin", 6, [("c.weight", "F8_E4M3", [4, 8]), ("c.scale_weight", "F32", []), ("c.comfy_quant", "U8", [2])])
    seed("fp8_cast.bin", 6, [("x.weight", "F8_E5M2", [4, 8])])


# ---------------------------------------------------------------- GGUF (ggml include/gguf.h; little-endian v3)
GGML_BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144), 14: (256, 210)}


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensors, kv=(), alignment=32, version=3):
    """tensors: [(name, ggml type, shape in PyTorch order)]; kv: [(key, gguf value type, packed value bytes)]."""
    out = b"GGUF" + struct.pack("<IqQ", version, len(tensors), len(kv))
    for key, vtype, value in kv:
        out += gguf_string(key) + struct.pack("<I", vtype) + value
    offset, sizes = 0, []
    for name, t, shape in tensors:
        block, size = GGML_BLOCK[t]
        ne = list(reversed(shape))
        n = ne[0] // block * size if ne else size
        for d in ne[1:]:
            n *= d
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
        out += struct.pack("<IQ", t, offset)
        sizes.append(n)
        offset += n + (-n % alignment)
    out += b"\0" * (-len(out) % alignment)
    for n in sizes:
        out += bytes(i % 251 for i in range(n)) + b"\0" * (-n % alignment)
    return out


def write_gguf():
    put("gguf_header", "f32_q8.gguf", gguf([("w", 0, [2, 3]), ("blk.0.attn_q.weight", 8, [2, 64])]))
    put("gguf_header", "kv_kinds.gguf", gguf(
        [("a", 30, [4]), ("b", 12, [1, 256]), ("c", 14, [256]), ("d", 1, [])],
        kv=[("general.architecture", 8, gguf_string("qwen_image")), ("general.alignment", 4, struct.pack("<I", 64)),
            ("u8", 0, b"\x07"), ("i16", 3, struct.pack("<h", -3)), ("f64", 12, struct.pack("<d", 0.25)),
            ("b", 7, b"\x01"), ("i64", 11, struct.pack("<q", -9)),
            ("arr", 9, struct.pack("<IQ", 8, 2) + gguf_string("x") + gguf_string("yz")),
            ("ints", 9, struct.pack("<IQ", 5, 3) + struct.pack("<iii", 1, -2, 3))],
        alignment=64))
    put("gguf_header", "empty_v2.gguf", gguf([], version=2))


# ---------------------------------------------------------------- artifact manifests
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def manifest_entry(name, kind, file, size, platform="linux-x86_64",
                   fingerprint="core=0.1.0;torch=2.15.0;cuda=13.0;cc=GNU-12.2.0"):
    return (f'\n[[artifact]]\nname = "{name}"\nkind = "{kind}"\nfile = "{file}"\nsize = {size}\n'
            f'sha256 = "{SHA}"\nplatform = "{platform}"\nfingerprint = "{fingerprint}"\n')


def write_manifests():
    head = "# Written by the build (cmake/write_manifest.cmake). Each [[artifact]] is verified before load.\n" \
           "schema_version = 1\n"
    put("artifact_manifest", "build.toml", head + manifest_entry("linear", "allocator", "libddo_alloc_linear.so", 16536)
        + manifest_entry("vmm", "allocator", "libddo_alloc_vmm.so", 203448)
        + manifest_entry("qwen_image_21", "model", "libddo_model_qwen_image_21.so", 9338776))
    put("artifact_manifest", "empty.toml", "schema_version = 1\n")
    # What write_artifact_manifest writes: basic strings only (Note in artifact_manifest.cpp), a subdirectory file.
    put("artifact_manifest", "drop_in.toml",
        "# Each [[artifact]] is verified before load (docs/architecture.md, Note [Artifact manifest]).\n"
        "schema_version = 1\n\n[[artifact]]\nname = \"my_model\"\nkind = \"model\"\nfile = \"sub/dir/libmy.so\"\n"
        f"size = 0\nsha256 = \"{SHA}\"\nplatform = \"linux-x86_64\"\nfingerprint = \"a \\\"quoted\\\" \\u00e9 fp\"\n")
    # The fuzz finding of stop 32: a value that starts with a newline, which toml++'s multi-line spelling lost.
    put("artifact_manifest", "fingerprint_leading_newline.toml",
        "# Each [[artifact]] is verified before load (docs/architecture.md, Note [Artifact manifest]).\n"
        "schema_version = 1\n\n[[artifact]]\nname = 'myWWWsizeWWWWWWWWWWWWWWWWWWWWWWWWWWWW_model'\nkind = 'model'\n"
        f"file = 'sub/dir/libmy.so'\nsize = 0\nsha256 = '6f9d8180884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'\n"
        "platform = 'linux-x86_64'\nfingerprint = \"\\na \\\"quoted\\\" \\u00e9 fp\"\n")


# ---------------------------------------------------------------- presets (+ --set / DDO_* after a NUL)
PRESET_ARGS = [
    "capacities.resident_budget_gb=4\nDDO_TRANSFORMER_ROUTE=group_block\n",
    "components.vae.route=resident\nplugin.ltx2_video.stg_blocks=[28, 29]\nvae.tile_size=256\n",
    "capacities.host_registration=bounded\ncapacities.host_registration_ceiling_gb=2.5\n"
    "DDO_CAPACITIES_PIN_HOST_MEMORY=off\n",
    "planner.selection=largest\nplugin.ltx2_video.stg_scale=1.5\ncapacities.staging_slots=3\n",
]


def write_presets():
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "presets")) if n.endswith(".toml"))
    for i, n in enumerate(names):
        with open(os.path.join(ROOT, "presets", n), "rb") as f:
            text = f.read()
        put("preset", n, text + b"\0" + PRESET_ARGS[i % len(PRESET_ARGS)].encode())
    put("preset", "inherits_components_plugin.toml",
        'schema_version = 1\ndescription = "fuzz seed: inherits, per-component keys, a plugin table"\n'
        'inherits = ["low_ram_safe", "off"]\n\n[capacities]\nresident_budget_gb = 2.5\nstaging_slots = 3\n\n'
        '[components.transformer]\nroute = "dynamic"\nprefetch_depth = 2\nselection = "first"\n\n'
        '[components.vae]\nroute = "resident"\n\n[vae]\nstrategy = "tiled"\ntile_size = 256\ntile_overlap = 32\n\n'
        '[plugin.ltx2_video]\nstg_scale = 1.0\nstg_blocks = [28]\n'
        "\0DDO_VAE_TILE_SIZE=512\nplugin.qwen_image_21.use_kv_cache=false\n")
    # Step caching (issue 41): every cache.* key, each kind, the refusals StepCacheSettings::read makes.
    put("preset", "cache_mag.toml",
        'schema_version = 1\ndescription = "fuzz seed: MagCache with ratios"\n\n[cache]\nkind = "mag"\n'
        'threshold = 0.1\nmax_skip_steps = 2\nretention_ratio = 0.25\nmag_ratios = [1.0, 1.21, 0.98, 0.89]\n'
        'min_steps = 4\nallow_few_steps = false\n'
        "\0cache.threshold=0.2\nDDO_CACHE_MAX_SKIP_STEPS=3\n")
    put("preset", "cache_first_block.toml",
        'schema_version = 1\ndescription = "fuzz seed: FirstBlockCache"\n\n[cache]\nkind = "first_block"\n'
        'threshold = 0.05\n'
        "\0cache.calibrate=true\ncache.kind=\"mag\"\n")
    put("preset", "cache_refused.toml",
        'schema_version = 1\ndescription = "fuzz seed: a key of another kind"\n\n[cache]\nkind = "off"\n'
        'max_skip_steps = 4\n'
        "\0cache.mag_ratios=[1.0, 2.0]\ncache.calibrate=true\nDDO_CACHE_KIND=mag\n")
    put("preset", "cache_taylorseer.toml",
        'schema_version = 1\ndescription = "fuzz seed: TaylorSeer with identifiers"\n\n[cache]\nkind = "taylorseer"\n'
        'cache_interval = 4\ndisable_cache_before_step = 2\ndisable_cache_after_step = 16\nmax_order = 2\n'
        'taylor_factors_dtype = "fp16"\ncache_identifiers = [\'transformer_blocks\\.[0-9]+\\.attn\', "proj_out"]\n'
        'skip_predict_identifiers = \'transformer_blocks\\.2\\.img_mlp\'\n'
        "\0cache.use_lite_mode=true\ncache.cache_identifiers=(((a\nDDO_CACHE_MAX_ORDER=3\n")
    put("preset", "cache_sea.toml",
        'schema_version = 1\ndescription = "fuzz seed: SeaCache"\n\n[cache]\nkind = "sea"\nthreshold = 0.3\n'
        'residual_order = 0\nretention_steps = 2\ncache_end_steps = 2\nmax_consecutive_cached = 0\npower_exp = 2.5\n'
        "\0cache.residual_order=2\ncache.max_order=1\nDDO_CACHE_POWER_EXP=0\n")
    put("preset", "auto_self.toml",
        'schema_version = 1\ndescription = "fuzz seed: an auto preset"\n\n[auto]\nlinux = "one_shot_fast"\n'
        'wsl = "wsl_compat"\nother = "off"\n')


# ---------------------------------------------------------------- tokenizer.json
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = bytes_to_unicode()
TRAINING = ("a cat sitting on a mat. The quick brown fox jumps over the lazy dog; the cat and the hat. "
            "system user assistant Describe the image in detail. watercolor painting of a lighthouse at dusk")


def train_merges(words, count):
    """Plain BPE on byte-level words: the `count` most frequent pairs, merged in turn (ties: first seen)."""
    seqs = [[BYTE_CHARS[b] for b in w.encode()] for w in words]
    merges = []
    for _ in range(count):
        pairs = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
        if not pairs:
            break
        best = max(pairs, key=lambda p: pairs[p])
        merges.append(best)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if (s[i], s[i + 1]) == best:
                    s[i:i + 2] = [s[i] + s[i + 1]]
                i += 1
    return merges


def vocab_with(merges):
    vocab = {BYTE_CHARS[b]: i for i, b in enumerate(sorted(BYTE_CHARS, key=lambda b: ord(BYTE_CHARS[b])))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def added(content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False, id_=0):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def tokenizer(normalizer, pre_tokenizer, merges, added_tokens, post_processor, legacy_merges=False,
              ignore_merges=False):
    vocab = vocab_with(merges)
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [f"{a} {b}" if legacy_merges else [a, b] for a, b in merges]},
    }, ensure_ascii=False, separators=(",", ":"))


def write_tokenizers():
    words = [(" " if i else "") + w for i, w in enumerate(TRAINING.split(" "))]
    merges = train_merges(words, 48)
    # Qwen2/Qwen3(-VL): NFC, the Qwen2 split regex (isolated), then ByteLevel without prefix space or regex.
    put("bpe_tokenizer_json", "qwen_tiny.json", tokenizer(
        {"type": "NFC"},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        merges,
        [added("<|endoftext|>"), added("<|im_start|>"), added("<|im_end|>"), added("<|image_pad|>")],
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}))
    # Every other supported piece: normalizer sequence, String and Regex splits with Removed / Contiguous /
    # MergedWithPrevious and invert, ByteLevel with the GPT-2 regex, added tokens with lstrip / rstrip / single_word /
    # normalized, legacy "a b" merges, ignore_merges and a TemplateProcessing post-processor.
    put("bpe_tokenizer_json", "splits.json", tokenizer(
        {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}, {"type": "NFC"}]},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": ". "}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\p{N}+"}, "behavior": "Contiguous", "invert": True},
            {"type": "Split", "pattern": {"Regex": r"[,;]\s*"}, "behavior": "Removed", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
        merges[:32],
        [added("<mask>", lstrip=True, rstrip=True), added("cat", special=False, normalized=True, single_word=True),
         added("[SEP]", rstrip=True), added("ﬁ", special=False, normalized=True)],
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}},
                                                  {"SpecialToken": {"id": "</s>", "type_id": 0}}],
         "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                        "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        legacy_merges=True, ignore_merges=True))
    put("bpe_tokenizer_json", "merged_with_next.json", tokenizer(
        {"type": "NFKD"},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": r"^\S|$"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        merges[:16], [added("<|user|>", lstrip=True), added("  ", special=False)],
        {"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing", "single": [
            {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
            "special_tokens": {"<eos>": {"id": "<eos>", "ids": [3, 4], "tokens": ["<eos>"]}}}]}))
    texts = ["a cat sitting on a mat", "<|im_start|>user\nDescribe the image.<|im_end|>\n",
             "The cat, the hat; 123 and 4.5 ﬁne <mask> [SEP]  x", "  <|user|>  hello\tworld\r\n\nend ",
             "一只猫坐在垫子上 🐱🚀 Ünïcödé e\u0301"]
    for i, t in enumerate(texts):
        put("bpe_tokenizer_encode", f"text_{i}.txt", bytes([i % 3]) + t.encode())


# ---------------------------------------------------------------- reports (cut from the real dry-run report)
def write_reports():
    path = os.path.join(CORPUS, "report_reader", "dry_run.json")
    if not os.path.exists(path):
        print("skipping report_reader: write corpus/report_reader/dry_run.json first (docs/validation.md)")
        return
    with open(path) as f:
        r = json.load(f)
    put("report_reader", "minimal.json", json.dumps({"schema_version": 1, "status": "completed", "phases": []}))
    failed = dict(r, status="failed", exit_code=4, error={"message": "fuzz seed: a failed run", "kind": "runtime"})
    put("report_reader", "failed.json", json.dumps(failed))
    # A streamed component as the qwen plugin records it (trimmed; run_report_host_test's example), outputs, steps.
    streamed = dict(r, dry_run=False, outputs=[{"path": "/ddo/out/image.png", "sha256": "ab" * 32,
                                                "facts": {"width": 64, "video": {"codec": "h264", "frames": 9}}}],
                    steps=[{"phase": "denoise", "index": i, "host_wall_s": 0.01 * i} for i in range(17)],
                    adjustments=[{"key": "workload.steps", "requested": 40, "effective": 20, "reason": "seed"}])
    streamed["counters"] = {"transformer": {"route": "dynamic", "bytes_streamed": 787968, "engine": {
        "plan": {"route": "dynamic", "slots": 2, "slot_bytes": 41472,
                 "groups": [{"residency": "resident"}, {"residency": "pageable"}, {"residency": "file"}]},
        "counters": {"bytes_moved": {"resident": 82944, "pinned": 0, "pageable": 705024, "file": 0}, "uploads": 19,
                     "hits": 23, "misses": 1, "stall_s": 0.0036},
        "host_staging": {"backend": "host",
                         "limits": {"pinned_route": "off", "pinned_route_reason": "capacities.pin_host_memory = false",
                                    "registration": "off"},
                         "pinned": {"attempts": 0, "successes": 0, "refusals": 0, "failures": 0, "bytes_total": 0},
                         "registration": {"attempts": 2, "successes": 1, "refusals": 1, "failures": 0,
                                          "bytes_total": 4096}}}},
        "vae": {"engine": {"plan": {"route": "resident", "groups": []}, "host_staging_reason": "resident route"}}}
    put("report_reader", "streamed.json", json.dumps(streamed))


# ---------------------------------------------------------------- ddo-host serve request bodies
def write_serve_requests():
    # First byte: 0 = POST /v1/jobs, 1 = POST /v1/images/generations; then the body.
    jobs = [{"prompt": "a cat", "width": 256, "height": 256, "steps": 4, "seed": 0, "guidance_scale": 4.0},
            {"prompt": "waves", "negative_prompt": "blurry", "frames": 9, "fps": 24, "num_images": 1, "strength": 0.5,
             "set": {"components.transformer.resident_budget_gb": 0.0001, "workload.sigmas": [1.0, 0.5],
                     "plugin.ltx2_video.stg_blocks": [28], "vae.strategy": "tiled"}},
            {"prompt": "x", "seed": -1, "width": None},
            # Condition images: a plain base64 PNG signature, a data URL, a keyframe object.
            {"prompt": "edit", "images": ["iVBORw0KGgo=", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==",
                                          {"b64_json": "/9j/4AAQSkZJRg==", "frame": 8}]}]
    for i, j in enumerate(jobs):
        put("serve_request", f"job_{i}.bin", b"\x00" + json.dumps(j).encode())
    oai = [{"model": "qwen_image", "prompt": "a lighthouse", "n": 1, "size": "256x256", "response_format": "b64_json",
            "user": "u", "negative_prompt": "blurry", "seed": 7, "steps": 3, "guidance_scale": 4,
            "ddo": {"capacities.staging_slots": 2}},
           {"prompt": "\u00e9\u4e2d", "size": "64x64"}]
    for i, j in enumerate(oai):
        put("serve_request", f"openai_{i}.bin", b"\x01" + json.dumps(j).encode())


def main():
    write_safetensors()
    write_quantized_layers()
    write_gguf()
    write_manifests()
    write_presets()
    write_tokenizers()
    write_reports()
    write_serve_requests()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(CORPUS) for f in fs)
    print(f"corpus: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
