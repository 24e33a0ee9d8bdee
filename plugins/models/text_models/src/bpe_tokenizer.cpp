// Byte-level BPE of a Hugging Face tokenizer.json, following the `tokenizers` crate step by step:
// tokenizer/added_vocabulary.rs (added tokens), normalizers, pre_tokenizers/split.rs + tokenizer/normalizer.rs (split
// behaviours) + tokenizer/pattern.rs (regex matches), pre_tokenizers/byte_level.rs, models/bpe/model.rs + word.rs,
// processors/template.rs. What is supported and refused: bpe_tokenizer.hpp.
#include "bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::text {
namespace {

using Json = nlohmann::json;
constexpr auto npos = std::string::npos;

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---------------------------------------------------------------- UTF-8 and character classes
// Offset of the first byte that is not valid UTF-8, or npos. utf8proc_iterate refuses overlong forms, surrogates
// and code points above U+10FFFF.
std::size_t invalid_utf8_at(std::string_view s) {
    utf8proc_int32_t cp = 0;
    for (std::size_t i = 0; i < s.size();) {
        const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t *>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
        if (n <= 0) return i;
        i += static_cast<std::size_t>(n);
    }
    return npos;
}

std::size_t char_len(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
}

char32_t char_at(std::string_view s, std::size_t i) {
    utf8proc_int32_t cp = 0;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t *>(s.data() + i),
                     static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    return static_cast<char32_t>(cp);
}

std::size_t char_start_before(std::string_view s, std::size_t end) {  // start of the character ending at `end`
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    return i;
}

// Unicode White_Space: Rust's regex \s (added-token lstrip/rstrip) and Oniguruma's \s (Split regexes).
bool is_white_space(char32_t c) {
    return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// The same set as a PCRE2 class body. PCRE2 10.42's UCP \s is \p{Z} + \h + \v, which also holds U+180E (MONGOLIAN
// VOWEL SEPARATOR, no longer White_Space since Unicode 6.3); Oniguruma's \s does not, so \s and \S are rewritten.
constexpr const char * kWhiteSpaceClass =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Rust's regex \w (single_word): Alphabetic, marks, Nd, Pc, Join_Control. Alphabetic is approximated by L*, Nl and
// the So letters that are Other_Alphabetic (circled, parenthesised and squared Latin letters).
bool is_word_char(char32_t c) {
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC: return true;
    default:
        return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
               (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
    }
}

// Code points utf8proc 2.8 (Unicode 15) normalises but tokenizers' tables (unicode-normalization-alignments, Unicode 9)
// do not know: later compatibility/canonical decompositions (U+32FF, U+1E030.., U+1FBF0.., U+11938), combining classes
// of later marks (U+08CA.., U+1DF6..) and the composition U+11935 U+11930. tokenizers treats them as inert starters
// (no mapping, class 0), so ddo keeps them verbatim and normalises the text between them on its own. Found by
// normalising every code point, and every combining mark next to others, with both (tokenizers 0.23.3).
constexpr std::pair<char32_t, char32_t> kInertInReference[] = {
    {0x7FD, 0x7FD}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FE, 0x9FE}, {0xC3C, 0xC3C}, {0xD3B, 0xD3C}, {0xEBA, 0xEBA},
    {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0x32FF, 0x32FF}, {0xA7F2, 0xA7F4}, {0xA82C, 0xA82C},
    {0xAB69, 0xAB69}, {0x10781, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070},
    {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11935, 0x11935},
    {0x11938, 0x11938}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34},
    {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9}};

bool inert_in_reference(char32_t c) {
    const auto it = std::upper_bound(std::begin(kInertInReference), std::end(kInertInReference), c,
                                     [](char32_t v, const auto & r) { return v < r.first; });
    return it != std::begin(kInertInReference) && c <= std::prev(it)->second;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100 onwards in byte order.
const std::array<std::string, 256> & byte_chars() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const int cp = printable ? b : 256 + n++;
            utf8proc_uint8_t buf[4];
            const auto len = utf8proc_encode_char(cp, buf);
            t[b].assign(reinterpret_cast<const char *>(buf), static_cast<std::size_t>(len));
        }
        return t;
    }();
    return table;
}

// ---------------------------------------------------------------- loading helpers
struct Loader {
    std::string file;

    [[noreturn]] void fail(const std::string & key, const std::string & what) const {
        throw UsageError(file + ": " + key + ": " + what +
                         " (ddo's BPE tokenizer implements the byte-level BPE layout of Qwen2/Qwen3/Qwen3-VL; use "
                         "that model family's tokenizer.json, see bpe_tokenizer.hpp for what is supported)");
    }
    [[noreturn]] void unsupported(const std::string & key, const Json & value, const std::string & supported) const {
        fail(key, value.dump() + " is not supported (supported: " + supported + ")");
    }
    static const Json * get(const Json & obj, const char * key) {  // nullptr when absent or null
        const auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }
    bool flag(const Json & obj, const char * key, const std::string & path, bool dflt) const {
        const Json * v = get(obj, key);
        if (!v) return dflt;
        if (!v->is_boolean()) fail(path + "." + key, "expected true or false, got " + v->dump());
        return v->get<bool>();
    }
    std::string text(const Json & obj, const char * key, const std::string & path) const {
        const Json * v = get(obj, key);
        if (!v || !v->is_string()) fail(path + "." + key, "expected a string");
        return v->get<std::string>();
    }
    const Json & array(const Json & obj, const char * key, const std::string & path) const {
        const Json * v = get(obj, key);
        if (!v || !v->is_array()) fail(path + "." + key, "expected a list");
        return *v;
    }
    std::string type(const Json & obj, const std::string & path) const {
        if (!obj.is_object()) fail(path, "expected an object, got " + obj.dump());
        return text(obj, "type", path);
    }
};

// ---------------------------------------------------------------- PCRE2
struct CodeFree {
    void operator()(pcre2_code * c) const noexcept { pcre2_code_free(c); }
};
struct MatchDataFree {
    void operator()(pcre2_match_data * m) const noexcept { pcre2_match_data_free(m); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataFree>;

// Letters and numbers that tokenizers' Oniguruma (Unicode 16) has and PCRE2 10.42 (Unicode 14) does not: the
// difference of \p{L} and \p{N} over all code points, taken with tokenizers 0.23.3 (no code point is in PCRE2's set
// only). Other \p{...} properties are passed through and carry the same Unicode-version difference.
constexpr const char * kUnicode16Letters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65}\x{10D6F}-\x{10D85})"
    R"(\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7})"
    R"(\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155})"
    R"(\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr const char * kUnicode16Numbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
    R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

// An Oniguruma pattern (as tokenizers runs it) in PCRE2 syntax: \s \S \p{L} \P{L} \p{N} \P{N} become classes with
// Oniguruma's sets; \w \W \b \B (different Unicode classes), \h \H (hex digit in Oniguruma), negated escapes inside a
// class and nested/POSIX classes (different syntax) are refused.
std::string to_pcre2(std::string_view p, const Loader & ld, const std::string & key) {
    std::string out;
    bool in_class = false;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char d = p[++i];
            std::string body;  // the class body that replaces the escape, if any
            if (d == 's' || d == 'S') {
                body = kWhiteSpaceClass;
            } else if ((d == 'p' || d == 'P') && i + 1 < p.size()) {
                const std::string_view rest = p.substr(i + 1);
                const std::size_t len = rest.starts_with("{L}") || rest.starts_with("{N}") ? 3
                                        : rest.starts_with("L") || rest.starts_with("N") ? 1 : 0;
                if (len > 0) {
                    const bool letters = rest[len == 3 ? 1 : 0] == 'L';
                    body = std::string(letters ? "\\p{L}" : "\\p{N}") + (letters ? kUnicode16Letters : kUnicode16Numbers);
                    i += len;
                }
            } else if (std::string_view("wWbBhH").find(d) != npos) {
                ld.fail(key, std::string("the regex uses \\") + d +
                                 ", whose meaning differs between Oniguruma (tokenizers) and PCRE2");
            }
            const bool negated = d == 'S' || d == 'P';
            if (body.empty()) {
                out += c;
                out += d;
            } else if (!in_class) {
                out += (negated ? "[^" : "[") + body + "]";
            } else if (negated) {
                ld.fail(key, std::string("the regex uses \\") + d + " inside a character class, which is not supported");
            } else {
                out += body;
            }
        } else if (c == '[' && in_class) {
            ld.fail(key, "nested or POSIX character classes are not supported in the regex");
        } else if (c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is a literal
        } else {
            if (c == ']') in_class = false;
            out += c;
        }
    }
    return out;
}

class Regex {
public:
    Regex(const std::string & onig_pattern, const Loader & ld, const std::string & key) {
        const std::string pattern = to_pcre2(onig_pattern, ld, key);
        int err = 0;
        PCRE2_SIZE at = 0;
        // Oniguruma's ^ and $ are line anchors: PCRE2_MULTILINE.
        code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at, nullptr));
        if (!code_) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            ld.fail(key, "PCRE2 cannot compile the regex " + Json(onig_pattern).dump() + ": " +
                             reinterpret_cast<const char *>(msg) + " at offset " + std::to_string(at));
        }
        pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // optional: pcre2_match falls back to the interpreter
    }

    // tokenizers' pattern.rs over onig's find_iter: every match as (start, end, true) with the gaps between as
    // (start, end, false). An empty match that ends where the previous match ended is skipped, moving on one character.
    void find_matches(std::string_view s, pcre2_match_data * md,
                      std::vector<std::tuple<std::size_t, std::size_t, bool>> & out) const {
        out.clear();
        std::size_t pos = 0, prev = 0, last_end = npos;
        while (pos <= s.size()) {
            int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                                 PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                                 PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                throw RuntimeError(std::string("BPE tokenizer: PCRE2 match failed: ") +
                                   reinterpret_cast<const char *>(msg));
            }
            const PCRE2_SIZE * ov = pcre2_get_ovector_pointer(md);
            const std::size_t b = ov[0], e = std::max(ov[0], ov[1]);
            if (b == e && e == last_end) {
                pos += pos < s.size() ? char_len(s, pos) : 1;
                continue;
            }
            if (prev != b) out.emplace_back(prev, b, false);
            out.emplace_back(b, e, true);
            prev = pos = last_end = e;
        }
        if (prev != s.size()) out.emplace_back(prev, s.size(), false);
    }

private:
    std::unique_ptr<pcre2_code, CodeFree> code_;
};

// ---------------------------------------------------------------- pieces of the pipeline
enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct SplitStep {
    Regex regex;
    Behavior behavior;
    bool invert;
};
struct ByteLevelStep {
    bool add_prefix_space;
    bool use_regex;
};
using PreStep = std::variant<SplitStep, ByteLevelStep>;

struct AddedToken {
    std::string content;
    bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
    bool operator==(const AddedToken &) const = default;
};

// Leftmost-longest literal matching (tokenizers' aho-corasick with MatchKind::LeftmostLongest).
struct AddedMatcher {
    struct Pattern {
        std::string text;
        std::int64_t id;
    };
    std::array<std::vector<Pattern>, 256> by_first_byte;  // longest first; equal texts keep their order

    void add(std::string text, std::int64_t id) {
        if (text.empty()) return;
        auto & v = by_first_byte[static_cast<unsigned char>(text[0])];
        const auto at = std::find_if(v.begin(), v.end(), [&](const Pattern & p) { return p.text.size() < text.size(); });
        v.insert(at, Pattern{std::move(text), id});
    }
    bool empty() const {
        return std::all_of(by_first_byte.begin(), by_first_byte.end(), [](const auto & v) { return v.empty(); });
    }
    // First match at or after `from`: (start, pattern), or start == npos.
    std::pair<std::size_t, const Pattern *> next(std::string_view s, std::size_t from) const {
        for (std::size_t i = from; i < s.size(); ++i)
            for (const Pattern & p : by_first_byte[static_cast<unsigned char>(s[i])])
                if (s.compare(i, p.text.size(), p.text) == 0) return {i, &p};
        return {npos, nullptr};
    }
};

struct Piece {
    std::string text;
    std::int64_t id = -1;  // >= 0: an added token, emitted as is
};

struct TemplateItem {
    bool sequence;                   // $A
    std::vector<std::int64_t> ids;   // a special token's ids
};

}  // namespace

struct BpeTokenizer::Impl {
    StringMap<std::int64_t> vocab;
    std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::int64_t>> merges;  // (a, b) -> (rank, a+b)
    bool ignore_merges = false;
    StringMap<std::int64_t> added_ids;
    std::unordered_map<std::int64_t, AddedToken> added_by_id;
    AddedMatcher raw_matcher, normalized_matcher;
    std::vector<utf8proc_option_t> normalizers;
    std::vector<PreStep> pre_steps;
    std::optional<Regex> gpt2;
    std::vector<std::vector<TemplateItem>> templates;

    void load_pre_tokenizer(const Json & j, const std::string & path, const Loader & ld);
    void load_model(const Json & m, const Loader & ld);
    void load_vocab(const Json & m, const Loader & ld);
    void load_merges(const Json & m, const Loader & ld);
    void load_added_tokens(const Json & list, const Loader & ld);

    static std::uint64_t pair_key(std::int64_t a, std::int64_t b) {
        return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
    }

    std::string normalize_run(std::string s) const {
        for (const utf8proc_option_t opts : normalizers) {
            if (s.empty()) break;
            utf8proc_uint8_t * out = nullptr;
            const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(s.data()),
                                        static_cast<utf8proc_ssize_t>(s.size()), &out, opts);
            const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
            if (n < 0) throw RuntimeError(std::string("BPE tokenizer: utf8proc: ") + utf8proc_errmsg(n));
            s.assign(reinterpret_cast<const char *>(out), static_cast<std::size_t>(n));
        }
        return s;
    }
    // The normalizer chain, keeping the code points tokenizers' tables treat as inert (see kInertInReference) as they
    // are: each stretch between them is normalised on its own.
    std::string normalize(const std::string & s) const {
        if (normalizers.empty()) return s;
        std::string out;
        std::size_t run = 0;
        for (std::size_t i = 0; i < s.size(); i += char_len(s, i)) {
            if (static_cast<unsigned char>(s[i]) < 0xC0 || !inert_in_reference(char_at(s, i))) continue;
            out += normalize_run(s.substr(run, i - run));
            out.append(s, i, char_len(s, i));
            run = i + char_len(s, i);
        }
        return out + normalize_run(s.substr(run));
    }

    // added_vocabulary.rs find_matches + split_with_indices: cut `s` around the added tokens `m` finds.
    void split_added(const std::string & s, const AddedMatcher & m, std::vector<Piece> & out) const {
        std::size_t start_offset = 0;
        for (auto [start, p] = m.next(s, 0); p; std::tie(start, p) = m.next(s, start + p->text.size())) {
            const AddedToken & tok = added_by_id.at(p->id);
            std::size_t b = start, e = start + p->text.size();
            if (tok.single_word) {
                const bool start_space = b == 0 || !is_word_char(char_at(s, char_start_before(s, b)));
                const bool stop_space = e == s.size() || !is_word_char(char_at(s, e));
                if (!start_space || !stop_space) continue;  // the search still resumes after this match
            }
            if (tok.lstrip) {  // absorb the whitespace before, unless a previous match already took it
                std::size_t nb = b;
                while (nb > 0 && is_white_space(char_at(s, char_start_before(s, nb)))) nb = char_start_before(s, nb);
                b = std::max(nb, start_offset);
            }
            if (tok.rstrip)
                while (e < s.size() && is_white_space(char_at(s, e))) e += char_len(s, e);
            if (start_offset < b) out.push_back({s.substr(start_offset, b - start_offset)});
            out.push_back({s.substr(b, e - b), p->id});
            start_offset = e;
        }
        if (start_offset < s.size()) out.push_back({s.substr(start_offset)});
    }

    // normalizer.rs split: the matches of one Split step, kept, removed or merged per its behaviour.
    static void split(const Regex & regex, Behavior behavior, bool invert, const std::string & s,
                      pcre2_match_data * md, std::vector<std::string> & out) {
        std::vector<std::tuple<std::size_t, std::size_t, bool>> matches, splits;  // (start, end, is_match | remove)
        regex.find_matches(s, md, matches);
        bool previous_match = false;
        auto fold = [&](auto first, auto last, bool at_end) {
            for (auto it = first; it != last; ++it) {
                auto [b, e, is_match] = *it;
                if (invert) is_match = !is_match;
                switch (behavior) {
                case Behavior::isolated: splits.emplace_back(b, e, false); break;
                case Behavior::removed: splits.emplace_back(b, e, is_match); break;
                case Behavior::contiguous:
                case Behavior::merged_with_previous:
                case Behavior::merged_with_next: {
                    const bool merge = behavior == Behavior::contiguous ? is_match == previous_match
                                                                        : is_match && !previous_match;
                    if (!merge || splits.empty()) splits.emplace_back(b, e, false);
                    else if (at_end) std::get<0>(splits.back()) = b;  // merged with next: extend its start
                    else std::get<1>(splits.back()) = e;             // extend the previous split's end
                }
                }
                previous_match = is_match;
            }
        };
        if (behavior == Behavior::merged_with_next) {  // folds from the end, extending starts
            fold(matches.rbegin(), matches.rend(), true);
            std::reverse(splits.begin(), splits.end());
        } else {
            fold(matches.begin(), matches.end(), false);
        }
        for (const auto & [b, e, remove] : splits)
            if (!remove && e > b) out.push_back(s.substr(b, e - b));
    }

    void pre_tokenize(const std::string & piece, pcre2_match_data * md, std::vector<std::string> & words) const {
        words.assign(1, piece);
        std::vector<std::string> next, parts;
        for (const PreStep & step : pre_steps) {
            next.clear();
            for (const std::string & w : words) {
                if (const auto * sp = std::get_if<SplitStep>(&step)) {
                    split(sp->regex, sp->behavior, sp->invert, w, md, next);
                    continue;
                }
                const auto & bl = std::get<ByteLevelStep>(step);
                const std::string s = bl.add_prefix_space && w[0] != ' ' ? " " + w : w;
                parts.clear();
                if (bl.use_regex) split(*gpt2, Behavior::isolated, false, s, md, parts);
                else parts.push_back(s);
                for (const std::string & part : parts) {
                    std::string mapped;
                    for (const char c : part) mapped += byte_chars()[static_cast<unsigned char>(c)];
                    next.push_back(std::move(mapped));
                }
            }
            words.swap(next);
        }
    }

    // model.rs tokenize + word.rs merge_all: apply merges by rank (lowest first, leftmost on ties) with a heap whose
    // stale entries are skipped, exactly as tokenizers does.
    void bpe(const std::string & word, std::vector<std::int64_t> & ids) const {
        if (ignore_merges)
            if (const auto it = vocab.find(word); it != vocab.end()) return ids.push_back(it->second);
        struct Symbol {
            std::int64_t id;
            std::ptrdiff_t prev, next;
            std::size_t len;
        };
        std::vector<Symbol> sym;
        for (std::size_t i = 0; i < word.size();) {
            const std::size_t len = char_len(word, i);
            // Not in the vocabulary: dropped (unk_token is null).
            if (const auto it = vocab.find(std::string_view(word).substr(i, len)); it != vocab.end()) {
                if (!sym.empty()) sym.back().next = static_cast<std::ptrdiff_t>(sym.size());
                sym.push_back({it->second, static_cast<std::ptrdiff_t>(sym.size()) - 1, -1, len});
            }
            i += len;
        }
        struct Merge {
            std::uint32_t rank;
            std::size_t pos;
            std::int64_t new_id;
            bool operator<(const Merge & o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::priority_queue<Merge> queue;
        auto push = [&](std::size_t pos, std::int64_t a, std::int64_t b) {
            if (const auto it = merges.find(pair_key(a, b)); it != merges.end())
                queue.push({it->second.first, pos, it->second.second});
        };
        for (std::size_t i = 0; i + 1 < sym.size(); ++i) push(i, sym[i].id, sym[i + 1].id);
        while (!queue.empty()) {
            const Merge top = queue.top();
            queue.pop();
            Symbol & cur = sym[top.pos];
            if (cur.len == 0 || cur.next == -1) continue;
            const Symbol right = sym[static_cast<std::size_t>(cur.next)];
            const auto it = merges.find(pair_key(cur.id, right.id));
            if (it == merges.end() || it->second.second != top.new_id) continue;  // stale entry
            sym[static_cast<std::size_t>(cur.next)].len = 0;
            cur.id = top.new_id;
            cur.len += right.len;
            cur.next = right.next;
            if (right.next >= 0) sym[static_cast<std::size_t>(right.next)].prev = static_cast<std::ptrdiff_t>(top.pos);
            if (cur.prev >= 0) push(static_cast<std::size_t>(cur.prev), sym[static_cast<std::size_t>(cur.prev)].id, cur.id);
            if (cur.next >= 0) push(top.pos, cur.id, sym[static_cast<std::size_t>(cur.next)].id);
        }
        for (const Symbol & s : sym)
            if (s.len != 0) ids.push_back(s.id);
    }
};

namespace {

void load_normalizer(const Json & j, const std::string & path, const Loader & ld, std::vector<utf8proc_option_t> & out) {
    if (j.is_null()) return;
    const std::string type = ld.type(j, path);
    const auto base = static_cast<utf8proc_option_t>(UTF8PROC_STABLE);
    if (type == "NFC") out.push_back(static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE));
    else if (type == "NFD") out.push_back(static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE));
    else if (type == "NFKC") out.push_back(static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
    else if (type == "NFKD") out.push_back(static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
    else if (type == "Sequence") {
        const Json & list = ld.array(j, "normalizers", path);
        for (std::size_t i = 0; i < list.size(); ++i)
            load_normalizer(list[i], path + ".normalizers[" + std::to_string(i) + "]", ld, out);
    } else ld.unsupported(path + ".type", type, "NFC, NFD, NFKC, NFKD, Sequence, null");
}

}  // namespace

void BpeTokenizer::Impl::load_pre_tokenizer(const Json & j, const std::string & path, const Loader & ld) {
    if (j.is_null()) return;
    const std::string type = ld.type(j, path);
    if (type == "Sequence") {
        const Json & list = ld.array(j, "pretokenizers", path);
        for (std::size_t i = 0; i < list.size(); ++i)
            load_pre_tokenizer(list[i], path + ".pretokenizers[" + std::to_string(i) + "]", ld);
    } else if (type == "ByteLevel") {
        const ByteLevelStep step{ld.flag(j, "add_prefix_space", path, true), ld.flag(j, "use_regex", path, true)};
        if (step.use_regex && !gpt2)
            gpt2.emplace(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", ld, path);
        pre_steps.emplace_back(step);
    } else if (type == "Split") {
        const Json * pattern = Loader::get(j, "pattern");
        if (!pattern || !pattern->is_object() || pattern->size() != 1)
            ld.fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
        std::string regex;
        if (const Json * r = Loader::get(*pattern, "Regex"); r && r->is_string()) regex = r->get<std::string>();
        else if (const Json * s = Loader::get(*pattern, "String"); s && s->is_string()) {
            for (const char c : s->get<std::string>()) {  // a literal: escape every ASCII punctuation character
                if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)) && c != ' ')
                    regex += '\\';
                regex += c;
            }
        } else ld.fail(path + ".pattern", "expected {\"Regex\": string} or {\"String\": string}");
        static const std::pair<const char *, Behavior> kBehaviors[] = {
            {"Removed", Behavior::removed}, {"Isolated", Behavior::isolated},
            {"MergedWithPrevious", Behavior::merged_with_previous}, {"MergedWithNext", Behavior::merged_with_next},
            {"Contiguous", Behavior::contiguous}};
        const std::string name = ld.text(j, "behavior", path);
        const auto b = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                                    [&](const auto & kv) { return name == kv.first; });
        if (b == std::end(kBehaviors))
            ld.unsupported(path + ".behavior", name, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
        pre_steps.emplace_back(SplitStep{Regex(regex, ld, path + ".pattern"), b->second, ld.flag(j, "invert", path, false)});
    } else {
        ld.unsupported(path + ".type", type, "Sequence, Split, ByteLevel, null");
    }
}

namespace {

void load_post_processor(const Json & j, const std::string & path, const Loader & ld,
                         std::vector<std::vector<TemplateItem>> & out) {
    if (j.is_null()) return;
    const std::string type = ld.type(j, path);
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
        const Json & list = ld.array(j, "processors", path);
        for (std::size_t i = 0; i < list.size(); ++i)
            load_post_processor(list[i], path + ".processors[" + std::to_string(i) + "]", ld, out);
        return;
    }
    if (type != "TemplateProcessing") ld.unsupported(path + ".type", type, "TemplateProcessing, ByteLevel, Sequence, null");
    const Json * specials = Loader::get(j, "special_tokens");
    const Json & single = ld.array(j, "single", path);
    std::vector<TemplateItem> items;
    for (std::size_t i = 0; i < single.size(); ++i) {
        const std::string key = path + ".single[" + std::to_string(i) + "]";
        if (const Json * seq = single[i].is_object() ? Loader::get(single[i], "Sequence") : nullptr) {
            if (ld.text(*seq, "id", key + ".Sequence") != "A") ld.fail(key + ".Sequence.id", "the single template has only A");
            items.push_back({true, {}});
        } else if (const Json * sp = single[i].is_object() ? Loader::get(single[i], "SpecialToken") : nullptr) {
            const std::string name = ld.text(*sp, "id", key + ".SpecialToken");
            const Json * entry = specials && specials->is_object() ? Loader::get(*specials, name.c_str()) : nullptr;
            if (!entry) ld.fail(path + ".special_tokens", "has no entry " + Json(name).dump());
            const Json & ids = ld.array(*entry, "ids", path + ".special_tokens." + name);
            items.push_back({false, ids.get<std::vector<std::int64_t>>()});
        } else {
            ld.fail(key, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
    }
    out.push_back(std::move(items));
}

}  // namespace

void BpeTokenizer::Impl::load_model(const Json & m, const Loader & ld) {
    if (!m.is_object()) ld.fail("model", "expected an object");
    if (const Json * type = Loader::get(m, "type"); type && *type != "BPE") ld.unsupported("model.type", *type, "BPE");
    if (const Json * v = Loader::get(m, "unk_token")) ld.fail("model.unk_token", v->dump() + " is not supported (only null)");
    // model.rs merge_word prepends the prefix and appends the suffix with format!: "" adds nothing, as null.
    for (const char * key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (const Json * v = Loader::get(m, key); v && *v != "")
            ld.fail(std::string("model.") + key, v->dump() + " is not supported (only null or \"\")");
    // fuse_unk only fuses unk ids: with unk_token null (the only one supported) true behaves as false.
    ld.flag(m, "fuse_unk", "model", false);
    if (ld.flag(m, "byte_fallback", "model", false)) ld.fail("model.byte_fallback", "true is not supported (only false)");
    if (const Json * d = Loader::get(m, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
        ld.fail("model.dropout", d->dump() + " is not supported (only null or 0)");
    ignore_merges = ld.flag(m, "ignore_merges", "model", false);
    load_vocab(m, ld);
    load_merges(m, ld);
}

void BpeTokenizer::Impl::load_vocab(const Json & m, const Loader & ld) {
    const Json * vocab_json = Loader::get(m, "vocab");
    if (!vocab_json || !vocab_json->is_object()) ld.fail("model.vocab", "expected an object {token: id}");
    for (const auto & [token, id] : vocab_json->items()) {
        if (!id.is_number_unsigned() || id.get<std::uint64_t>() > 0xFFFFFFFFu)
            ld.fail("model.vocab." + token, "expected an id in [0, 2^32), got " + id.dump());
        vocab.emplace(token, id.get<std::int64_t>());
    }
}

void BpeTokenizer::Impl::load_merges(const Json & m, const Loader & ld) {
    const Json & list = ld.array(m, "merges", "model");
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string key = "model.merges[" + std::to_string(i) + "]";
        std::string a, b;
        if (list[i].is_string()) {  // legacy "a b"
            const std::string line = list[i].get<std::string>();
            const auto sp = line.find(' ');
            if (sp == npos || line.find(' ', sp + 1) != npos) ld.fail(key, "expected \"a b\", got " + list[i].dump());
            a = line.substr(0, sp);
            b = line.substr(sp + 1);
        } else if (list[i].is_array() && list[i].size() == 2 && list[i][0].is_string() && list[i][1].is_string()) {
            a = list[i][0].get<std::string>();
            b = list[i][1].get<std::string>();
        } else {
            ld.fail(key, "expected [a, b] or \"a b\", got " + list[i].dump());
        }
        const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
        if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end())
            ld.fail(key, "names a token that is not in model.vocab");
        merges[pair_key(ia->second, ib->second)] = {static_cast<std::uint32_t>(i), iab->second};
    }
}

// The ids tokenizers gives added tokens when it loads a file (serialization.rs -> add_tokens): a token already in the
// vocabulary keeps that id, a new one gets the next id after the vocabulary; the file's "id" fields are not used.
void BpeTokenizer::Impl::load_added_tokens(const Json & list, const Loader & ld) {
    std::vector<AddedToken> tokens, specials, classics;
    std::unordered_set<std::string> special_set;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string key = "added_tokens[" + std::to_string(i) + "]";
        if (!list[i].is_object()) ld.fail(key, "expected an object");
        tokens.push_back({ld.text(list[i], "content", key), ld.flag(list[i], "single_word", key, false),
                          ld.flag(list[i], "lstrip", key, false), ld.flag(list[i], "rstrip", key, false),
                          ld.flag(list[i], "normalized", key, true), ld.flag(list[i], "special", key, false)});
        if (tokens.back().special && !tokens.back().content.empty() && special_set.insert(tokens.back().content).second)
            specials.push_back(tokens.back());
    }
    const auto vocab_size = static_cast<std::int64_t>(vocab.size());
    for (const AddedToken & tok : tokens) {
        if (tok.content.empty() ||
            std::any_of(added_by_id.begin(), added_by_id.end(), [&](const auto & kv) { return kv.second == tok; }))
            continue;
        std::int64_t id;
        if (const auto a = added_ids.find(tok.content); a != added_ids.end()) id = a->second;
        else if (const auto v = vocab.find(tok.content); v != vocab.end()) id = v->second;
        else if (added_ids.empty()) id = vocab_size;
        else {
            std::int64_t max = 0;
            for (const auto & kv : added_ids) max = std::max(max, kv.second);
            id = max >= vocab_size || vocab_size == 0 ? max + 1 : vocab_size;
        }
        added_ids[tok.content] = id;
        added_by_id[id] = tok;
        if (!special_set.count(tok.content)) classics.push_back(tok);
    }
    for (const auto * group : {&specials, &classics})
        for (const AddedToken & tok : *group) {
            const std::int64_t id = added_ids.at(tok.content);
            if (tok.normalized) normalized_matcher.add(normalize(tok.content), id);
            else raw_matcher.add(tok.content, id);
        }
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer &&) noexcept = default;
BpeTokenizer & BpeTokenizer::operator=(BpeTokenizer &&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::from_file(const std::filesystem::path & tokenizer_json) {
    const Loader ld{tokenizer_json.string()};
    std::error_code ec;
    if (!std::filesystem::is_regular_file(tokenizer_json, ec))
        throw UsageError(ld.file + ": tokenizer file not found: pass the model's tokenizer.json (Hugging Face "
                         "tokenizers format, e.g. the checkpoint's tokenizer/tokenizer.json)");
    std::ifstream in(tokenizer_json, std::ios::binary);
    std::string text;
    try {
        if (!in) throw std::runtime_error("cannot open it");
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (in.bad()) throw std::runtime_error("cannot read it");
    } catch (const std::exception & e) {
        throw UsageError(ld.file + ": cannot read the tokenizer file as JSON (" + e.what() +
                         "): pass an intact tokenizer.json (re-download or re-save it with tokenizers)");
    }
    return from_json(text, ld.file);
}

BpeTokenizer BpeTokenizer::from_json(std::string_view tokenizer_json_text, const std::string & source) {
    const Loader ld{source};
    Json j;
    try {
        j = Json::parse(tokenizer_json_text);
    } catch (const std::exception & e) {
        throw UsageError(ld.file + ": cannot read the tokenizer file as JSON (" + e.what() +
                         "): pass an intact tokenizer.json (re-download or re-save it with tokenizers)");
    }
    if (!j.is_object()) ld.fail("(top level)", "expected a JSON object");
    auto t = std::make_unique<Impl>();
    try {
        for (const char * key : {"truncation", "padding"})
            if (const Json * v = Loader::get(j, key)) ld.fail(key, v->dump() + " is not supported (only null)");
        if (const Json * n = Loader::get(j, "normalizer")) load_normalizer(*n, "normalizer", ld, t->normalizers);
        if (const Json * p = Loader::get(j, "pre_tokenizer")) t->load_pre_tokenizer(*p, "pre_tokenizer", ld);
        const Json * model = Loader::get(j, "model");
        if (!model) ld.fail("model", "missing");
        t->load_model(*model, ld);
        if (const Json * a = Loader::get(j, "added_tokens")) {
            if (!a->is_array()) ld.fail("added_tokens", "expected a list");
            t->load_added_tokens(*a, ld);
        }
        if (const Json * p = Loader::get(j, "post_processor")) load_post_processor(*p, "post_processor", ld, t->templates);
    } catch (const Json::exception & e) {
        throw UsageError(ld.file + ": malformed tokenizer.json (" + e.what() + ")");
    }
    return BpeTokenizer(std::move(t));
}

std::vector<std::int64_t> BpeTokenizer::encode(std::string_view utf8) const {
    if (const std::size_t bad = invalid_utf8_at(utf8); bad != npos)
        throw UsageError("BPE tokenizer: the text is not valid UTF-8 at byte offset " + std::to_string(bad) +
                         ": pass UTF-8 text");
    const Impl & t = *impl_;
    // 1. Added tokens that match the raw text; 2. normalise the rest and cut out the normalized added tokens.
    std::vector<Piece> raw, pieces;
    t.split_added(std::string(utf8), t.raw_matcher, raw);
    for (Piece & p : raw) {
        if (p.id >= 0) {
            pieces.push_back(std::move(p));
            continue;
        }
        const std::string n = t.normalize(p.text);
        t.split_added(n, t.normalized_matcher, pieces);
    }
    // 3. Pre-tokenize and BPE every other piece.
    const MatchData md(pcre2_match_data_create(1, nullptr));
    if (!md) throw RuntimeError("BPE tokenizer: out of memory (pcre2_match_data_create)");
    std::vector<std::int64_t> ids;
    std::vector<std::string> words;
    for (const Piece & p : pieces) {
        if (p.id >= 0) {
            ids.push_back(p.id);
            continue;
        }
        t.pre_tokenize(p.text, md.get(), words);
        for (const std::string & w : words) t.bpe(w, ids);
    }
    // 4. Post-processors (the `single` templates), in order.
    for (const auto & items : t.templates) {
        std::vector<std::int64_t> out;
        for (const TemplateItem & it : items) {
            const auto & src = it.sequence ? ids : it.ids;
            out.insert(out.end(), src.begin(), src.end());
        }
        ids.swap(out);
    }
    return ids;
}

std::optional<std::int64_t> BpeTokenizer::token_id(std::string_view token) const {
    if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
    if (const auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
    return std::nullopt;
}

std::size_t BpeTokenizer::vocab_size() const noexcept {
    std::size_t n = impl_->vocab.size();
    for (const auto & kv : impl_->added_ids) n += impl_->vocab.count(kv.first) == 0 ? 1 : 0;
    return n;
}

}  // namespace ddo::text
