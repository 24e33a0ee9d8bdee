// SentencePieceTokenizer: libsentencepiece over tokenizer.model, with the added tokens, special tokens and padding
// of transformers' GemmaTokenizer (sentencepiece_tokenizer.hpp). The model's settings are read from the
// serialized ModelProto (sentencepiece_model.proto; Debian's libsentencepiece-dev ships no protobuf header) with a
// minimal wire-format reader: only the fields below are looked at.
#include "sentencepiece_tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "ddo/error.hpp"

namespace ddo::text {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// sentencepiece_model.proto: ModelProto {pieces = 1, trainer_spec = 2, normalizer_spec = 3},
// SentencePiece {piece = 1, score = 2, type = 3}, TrainerSpec {model_type = 3},
// NormalizerSpec {name = 1, precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
// escape_whitespaces = 5}. proto2 defaults: model_type UNIGRAM, type NORMAL, the three booleans true.
enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct ModelSettings {
    std::vector<std::pair<std::string, int>> pieces;  // piece, type
    std::uint64_t model_type = 1;                      // 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
    std::string normalizer_name;
    std::size_t charsmap_bytes = 0;
    bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

class WireReader {
public:
    WireReader(std::string_view bytes, const fs::path & file) : b_(bytes), file_(file) {}
    bool done() const { return i_ >= b_.size(); }
    // One field: number, wire type, and its varint value or its length-delimited bytes.
    void next(std::uint32_t & field, int & wire, std::uint64_t & value, std::string_view & bytes) {
        const std::uint64_t key = varint();
        field = std::uint32_t(key >> 3);
        wire = int(key & 7);
        switch (wire) {
        case 0: value = varint(); break;
        case 1: skip(8); break;
        case 2: {
            const std::uint64_t n = varint();
            if (n > b_.size() - i_) corrupt();
            bytes = b_.substr(i_, n);
            i_ += n;
            break;
        }
        case 5: skip(4); break;
        default: corrupt();
        }
    }

private:
    std::uint64_t varint() {
        std::uint64_t r = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (i_ >= b_.size()) corrupt();
            const auto c = std::uint8_t(b_[i_++]);
            r |= std::uint64_t(c & 0x7f) << shift;
            if (c < 0x80) return r;
        }
        corrupt();
    }
    void skip(std::size_t n) {
        if (n > b_.size() - i_) corrupt();
        i_ += n;
    }
    [[noreturn]] void corrupt() const {
        throw RuntimeError(file_.string() + ": not a valid SentencePiece model (truncated or corrupt protobuf); "
                           "replace tokenizer.model with the checkpoint's original file");
    }
    std::string_view b_;
    std::size_t i_ = 0;
    const fs::path & file_;
};

ModelSettings read_settings(const std::string & bytes, const fs::path & file) {
    ModelSettings s;
    WireReader top(bytes, file);
    std::uint32_t f;
    int w;
    std::uint64_t v = 0;
    std::string_view sub;
    while (!top.done()) {
        top.next(f, w, v, sub);
        if (w != 2) continue;
        WireReader r(sub, file);
        std::uint32_t g;
        int x;
        std::uint64_t u = 0;
        std::string_view t;
        if (f == 1) {
            std::string piece;
            int type = kNormal;
            while (!r.done()) {
                r.next(g, x, u, t);
                if (g == 1 && x == 2) piece = std::string(t);
                if (g == 3 && x == 0) type = int(u);
            }
            s.pieces.emplace_back(std::move(piece), type);
        } else if (f == 2) {
            while (!r.done()) {
                r.next(g, x, u, t);
                if (g == 3 && x == 0) s.model_type = u;
            }
        } else if (f == 3) {
            while (!r.done()) {
                r.next(g, x, u, t);
                if (g == 1 && x == 2) s.normalizer_name = std::string(t);
                if (g == 2 && x == 2) s.charsmap_bytes = t.size();
                if (g == 3 && x == 0) s.add_dummy_prefix = u != 0;
                if (g == 4 && x == 0) s.remove_extra_whitespaces = u != 0;
                if (g == 5 && x == 0) s.escape_whitespaces = u != 0;
            }
        }
    }
    return s;
}

[[noreturn]] void refuse(const fs::path & f, const std::string & key, const std::string & what) {
    throw UsageError(f.string() + ": " + key + " " + what +
                     "; ddo's Gemma tokenizer implements what transformers' GemmaTokenizer does (a byte-fallback BPE, "
                     "spaces as \u2581, no dummy prefix) and refuses the rest");
}

void check_settings(const ModelSettings & s, const fs::path & f) {
    static const char * const kTypes[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    if (s.model_type != 2)
        refuse(f, "trainer_spec.model_type", std::string("is ") + (s.model_type <= 4 ? kTypes[s.model_type] : "?") +
                                                 " (GemmaTokenizer runs the pieces as BPE; only BPE models agree)");
    if (s.normalizer_name != "identity" || s.charsmap_bytes != 0)
        refuse(f, "normalizer_spec.name", "is \"" + s.normalizer_name +
                                              "\" (only the identity normalisation is implemented, as Gemma's)");
    if (s.add_dummy_prefix) refuse(f, "normalizer_spec.add_dummy_prefix", "is true (GemmaTokenizer adds no prefix space)");
    if (s.remove_extra_whitespaces)
        refuse(f, "normalizer_spec.remove_extra_whitespaces", "is true (GemmaTokenizer keeps whitespace runs)");
    if (!s.escape_whitespaces)
        refuse(f, "normalizer_spec.escape_whitespaces", "is false (GemmaTokenizer writes spaces as \u2581)");
}

std::optional<json> read_json(const fs::path & f) {
    if (!fs::exists(f)) return std::nullopt;
    std::ifstream in(f);
    if (!in) throw UsageError(f.string() + ": cannot be read; check its permissions or remove it");
    try {
        return json::parse(in);
    } catch (const std::exception & e) {
        throw UsageError(f.string() + ": not valid JSON (" + e.what() + "); restore the file save_pretrained wrote");
    }
}

// A token setting of tokenizer_config.json: a string, {"content": ...} or null.
std::optional<std::string> token_setting(const json & cfg, const char * key) {
    if (!cfg.contains(key) || cfg.at(key).is_null()) return std::nullopt;
    const auto & v = cfg.at(key);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
    return std::nullopt;
}

// Offset of the first byte that is not part of valid UTF-8, or npos.
std::size_t invalid_utf8_at(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = std::uint8_t(s[i]);
        int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
        if (n < 0 || (n == 1 && c < 0xc2) || i + std::size_t(n) >= s.size() + (n == 0 ? 1 : 0)) return i;
        std::uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
        for (int k = 1; k <= n; ++k) {
            const auto d = std::uint8_t(s[i + std::size_t(k)]);
            if ((d >> 6) != 0x2) return i;
            cp = (cp << 6) | (d & 0x3f);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return i;
        i += std::size_t(n) + 1;
    }
    return std::string_view::npos;
}

}  // namespace

struct SentencePieceTokenizer::Impl {
    fs::path dir;
    sentencepiece::SentencePieceProcessor sp;
    // Added tokens by first byte, longest first (leftmost-longest matching).
    std::map<unsigned char, std::vector<std::pair<std::string, std::int64_t>>> added;
    std::map<std::string, std::int64_t, std::less<>> added_ids;
    std::int64_t bos = -1, eos = -1, pad = -1;
    bool add_bos = true, add_eos = false;
    std::size_t size = 0;

    std::optional<std::int64_t> piece_id(std::string_view piece) const {
        const int id = sp.PieceToId(piece);
        if (id >= 0 && id < sp.GetPieceSize() && sp.IdToPiece(id) == piece) return id;
        return std::nullopt;
    }
    std::optional<std::int64_t> id_of(std::string_view token) const {
        if (auto it = added_ids.find(token); it != added_ids.end()) return it->second;
        return piece_id(token);
    }
    void add(const std::string & content, std::int64_t id) {
        if (content.empty() || added_ids.count(content)) return;
        added_ids.emplace(content, id);
        auto & v = added[static_cast<unsigned char>(content[0])];
        v.emplace_back(content, id);
        std::stable_sort(v.begin(), v.end(), [](const auto & a, const auto & b) { return a.first.size() > b.first.size(); });
        size = std::max(size, std::size_t(id) + 1);
    }
    void encode_piece(std::string_view text, std::vector<std::int64_t> & out) const {
        if (text.empty()) return;
        std::vector<int> ids;
        const auto st = sp.Encode(text, &ids);
        if (!st.ok()) throw RuntimeError((dir / "tokenizer.model").string() + ": SentencePiece could not encode (" +
                                         st.ToString() + ")");
        out.insert(out.end(), ids.begin(), ids.end());
    }
    std::vector<std::int64_t> encode_text(std::string_view s) const {
        std::vector<std::int64_t> out;
        std::size_t start = 0, i = 0;
        while (i < s.size()) {
            const auto it = added.find(static_cast<unsigned char>(s[i]));
            const std::pair<std::string, std::int64_t> * hit = nullptr;
            if (it != added.end())
                for (const auto & t : it->second)
                    if (s.compare(i, t.first.size(), t.first) == 0) {
                        hit = &t;
                        break;
                    }
            if (!hit) {
                ++i;
                continue;
            }
            encode_piece(s.substr(start, i - start), out);
            out.push_back(hit->second);
            i += hit->first.size();
            start = i;
        }
        encode_piece(s.substr(start), out);
        return out;
    }

    void check_vocab(const json & model, const fs::path & tj_file) const;
    void add_listed_tokens(const json & list, const fs::path & tj_file);
    void load_added_tokens(const std::vector<std::pair<std::string, int>> & pieces);
    void load_config();
};

namespace {

std::string read_model_bytes(const fs::path & model_file) {
    std::ifstream in(model_file, std::ios::binary);
    if (!in) throw UsageError(model_file.string() + ": cannot read the SentencePiece model; the checkpoint's "
                              "tokenizer/ folder must hold the tokenizer.model it was released with");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// tokenizer.json's model.vocab must name the pieces of tokenizer.model (same tokenizer); model.type absent or null
// is BPE, as tokenizers' default.
void SentencePieceTokenizer::Impl::check_vocab(const json & m, const fs::path & tj_file) const {
    const auto type_it = m.find("type");
    const bool bpe = type_it == m.end() || type_it->is_null() || *type_it == "BPE";
    if (!bpe) refuse(tj_file, "model.type", "is " + type_it->dump() + " (only BPE is implemented)");
    if (!m.contains("vocab") || !m.at("vocab").is_object()) return;
    for (const auto & [piece, id_json] : m.at("vocab").items()) {
        const int id = id_json.get<int>();
        const bool same = id >= 0 && id < sp.GetPieceSize() && sp.IdToPiece(id) == piece;
        // GemmaSentencePieceExtractor maps a missing "\t" onto the byte-fallback piece <0x09>.
        const bool tab_alias = piece == "\t" && id >= 0 && id < sp.GetPieceSize() && sp.IdToPiece(id) == "<0x09>";
        if (!same && !tab_alias)
            throw UsageError(tj_file.string() + ": model.vocab[\"" + piece + "\"] is id " + std::to_string(id) +
                             " but tokenizer.model gives that piece id " + std::to_string(sp.PieceToId(piece)) +
                             "; tokenizer.json and tokenizer.model are not from the same tokenizer");
    }
}

void SentencePieceTokenizer::Impl::add_listed_tokens(const json & list, const fs::path & tj_file) {
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto & t = list[i];
        const std::string key = "added_tokens[" + std::to_string(i) + "]";
        for (const char * flag : {"lstrip", "rstrip", "single_word", "normalized"})
            if (t.value(flag, false))
                refuse(tj_file, key + "." + flag, "is true (only added tokens matched as written are implemented)");
        const std::string content = t.at("content").get<std::string>();
        const auto id = t.at("id").get<std::int64_t>();
        const auto piece = piece_id(content);
        if (piece && *piece != id)
            refuse(tj_file, key + ".id", "is " + std::to_string(id) + " for \"" + content +
                                             "\" but tokenizer.model gives it id " + std::to_string(*piece));
        if (!piece && id < sp.GetPieceSize())
            refuse(tj_file, key + ".id", "is " + std::to_string(id) + " for \"" + content +
                                             "\", a piece id of tokenizer.model that names another piece");
        add(content, id);
    }
}

// Added tokens: tokenizer.json's list when present (what the pipeline's tokenizer splits out), else the model's
// control, unknown and user-defined pieces (what transformers' conversion of tokenizer.model declares).
void SentencePieceTokenizer::Impl::load_added_tokens(const std::vector<std::pair<std::string, int>> & pieces) {
    const fs::path tj_file = dir / "tokenizer.json";
    if (const auto tj = read_json(tj_file)) {
        if (tj->contains("model")) check_vocab(tj->at("model"), tj_file);
        if (tj->contains("added_tokens")) add_listed_tokens(tj->at("added_tokens"), tj_file);
        return;
    }
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        const int type = pieces[i].second;
        if (type == kControl || type == kUnknown || type == kUserDefined) add(pieces[i].first, std::int64_t(i));
    }
}

void SentencePieceTokenizer::Impl::load_config() {
    const fs::path cfg_file = dir / "tokenizer_config.json";
    const json cfg = read_json(cfg_file).value_or(json::object());
    if (cfg.contains("add_bos_token")) add_bos = cfg.at("add_bos_token").get<bool>();
    if (cfg.contains("add_eos_token")) add_eos = cfg.at("add_eos_token").get<bool>();
    if (cfg.value("truncation_side", std::string("right")) != "right")
        refuse(cfg_file, "truncation_side", "is \"" + cfg.at("truncation_side").get<std::string>() +
                                                "\" (only \"right\" is implemented)");
    const auto resolve = [&](const char * key, const std::string & fallback) -> std::int64_t {
        const std::string token = token_setting(cfg, key).value_or(fallback);
        const auto id = id_of(token);
        if (!id) refuse(cfg_file, key, "is \"" + token + "\", which is neither a piece nor an added token");
        return *id;
    };
    const auto piece_or = [&](int id, const char * name) { return id >= 0 ? sp.IdToPiece(id) : std::string(name); };
    bos = resolve("bos_token", piece_or(sp.bos_id(), "<bos>"));
    eos = resolve("eos_token", piece_or(sp.eos_id(), "<eos>"));
    // LTX2Pipeline: `if tokenizer.pad_token is None: tokenizer.pad_token = tokenizer.eos_token`.
    pad = cfg.contains("pad_token") ? (token_setting(cfg, "pad_token") ? resolve("pad_token", "") : eos)
                                    : resolve("pad_token", piece_or(sp.pad_id(), "<pad>"));
}

SentencePieceTokenizer SentencePieceTokenizer::from_dir(const fs::path & dir) {
    auto impl = std::make_unique<Impl>();
    impl->dir = dir;
    const fs::path model_file = dir / "tokenizer.model";
    const std::string bytes = read_model_bytes(model_file);
    const ModelSettings settings = read_settings(bytes, model_file);
    check_settings(settings, model_file);
    if (const auto st = impl->sp.LoadFromSerializedProto(bytes); !st.ok())
        throw RuntimeError(model_file.string() + ": libsentencepiece refused the model (" + st.ToString() +
                           "); replace tokenizer.model with the checkpoint's original file");
    impl->size = std::size_t(impl->sp.GetPieceSize());
    impl->load_added_tokens(settings.pieces);
    impl->load_config();
    return SentencePieceTokenizer(std::move(impl));
}

std::vector<std::int64_t> SentencePieceTokenizer::encode(std::string_view utf8) const {
    if (const auto at = invalid_utf8_at(utf8); at != std::string_view::npos)
        throw UsageError("prompt: not valid UTF-8 at byte " + std::to_string(at) + "; pass the prompt as UTF-8 text");
    std::vector<std::int64_t> ids;
    if (impl_->add_bos) ids.push_back(impl_->bos);
    const auto body = impl_->encode_text(utf8);
    ids.insert(ids.end(), body.begin(), body.end());
    if (impl_->add_eos) ids.push_back(impl_->eos);
    return ids;
}

SentencePieceTokenizer::Padded SentencePieceTokenizer::encode_left_padded(const std::vector<std::string> & texts,
                                                                          std::int64_t max_length) const {
    const std::int64_t specials = std::int64_t(impl_->add_bos) + std::int64_t(impl_->add_eos);
    if (max_length < std::max<std::int64_t>(specials, 1))
        throw UsageError("tokenizer max_length " + std::to_string(max_length) + " leaves no room for the " +
                         std::to_string(specials) + " special token(s) " + (impl_->dir / "tokenizer_config.json").string() +
                         " adds; use a larger max_sequence_length");
    Padded p;
    p.batch = std::int64_t(texts.size());
    p.length = max_length;
    p.ids.assign(std::size_t(p.batch * max_length), impl_->pad);
    p.mask.assign(std::size_t(p.batch * max_length), 0);
    for (std::size_t b = 0; b < texts.size(); ++b) {
        if (const auto at = invalid_utf8_at(texts[b]); at != std::string_view::npos)
            throw UsageError("prompt " + std::to_string(b) + ": not valid UTF-8 at byte " + std::to_string(at) +
                             "; pass the prompt as UTF-8 text");
        auto body = impl_->encode_text(texts[b]);
        if (std::int64_t(body.size()) > max_length - specials) body.resize(std::size_t(max_length - specials));
        std::vector<std::int64_t> row;
        if (impl_->add_bos) row.push_back(impl_->bos);
        row.insert(row.end(), body.begin(), body.end());
        if (impl_->add_eos) row.push_back(impl_->eos);
        const std::size_t off = b * std::size_t(max_length) + std::size_t(max_length) - row.size();
        std::copy(row.begin(), row.end(), p.ids.begin() + std::ptrdiff_t(off));
        std::fill(p.mask.begin() + std::ptrdiff_t(off), p.mask.begin() + std::ptrdiff_t(off + row.size()), 1);
    }
    return p;
}

std::optional<std::int64_t> SentencePieceTokenizer::token_id(std::string_view token) const { return impl_->id_of(token); }
std::int64_t SentencePieceTokenizer::bos_id() const noexcept { return impl_->bos; }
std::int64_t SentencePieceTokenizer::pad_id() const noexcept { return impl_->pad; }
std::size_t SentencePieceTokenizer::vocab_size() const noexcept { return impl_->size; }

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer &&) noexcept = default;
SentencePieceTokenizer & SentencePieceTokenizer::operator=(SentencePieceTokenizer &&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

}  // namespace ddo::text
