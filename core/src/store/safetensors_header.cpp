// Validation order and limits: see the header comments in ddo/store/safetensors_file.hpp and safetensors_header.hpp.
#include "ddo/store/safetensors_header.hpp"

#include <algorithm>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::store {

namespace {

constexpr std::size_t kMaxJsonDepth = 64;
constexpr std::size_t kMaxRank = 16;

[[noreturn]] void fail_tensor(const std::filesystem::path & file, const std::string & tensor, const std::string & what) {
    refuse_safetensors(file, "tensor '" + tensor + "': " + what);
}

// Nesting depth of a JSON text, ignoring brackets inside strings (guards the recursive parts of the
// JSON library against hostile nesting).
std::size_t json_depth(std::string_view s) {
    std::size_t depth = 0, max_depth = 0;
    bool in_str = false, esc = false;
    for (char c : s) {
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '{' || c == '[') max_depth = std::max(max_depth, ++depth);
        else if ((c == '}' || c == ']') && depth > 0) --depth;
    }
    return max_depth;
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t * out) {
    return __builtin_mul_overflow(a, b, out);
}

}  // namespace

void refuse_safetensors(const std::filesystem::path & file, const std::string & what) {
    throw RuntimeError("invalid safetensors file " + file.string() + ": " + what +
                       "; the file is corrupt, truncated or not a safetensors file - re-download or re-convert it");
}

std::uint64_t safetensors_header_length(const unsigned char (&prefix)[8], std::uint64_t file_size,
                                        const std::filesystem::path & path) {
    if (file_size < 8)
        refuse_safetensors(path, "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
    if (n < 2) refuse_safetensors(path, "header length " + std::to_string(n) + " is too small for a JSON object");
    if (n > kSafetensorsMaxHeaderBytes)
        refuse_safetensors(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                                     std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
    if (n > file_size - 8)
        refuse_safetensors(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                                     std::to_string(file_size) + " bytes)");
    return n;
}

SafetensorsHeader parse_safetensors_header(std::string header, std::uint64_t file_size,
                                           const std::filesystem::path & path, std::uint32_t file_index) {
    SafetensorsHeader m;
    if (header.size() > file_size || file_size - header.size() < 8)
        refuse_safetensors(path, "header length " + std::to_string(header.size()) + " runs past the end of the file (" +
                                     std::to_string(file_size) + " bytes)");
    m.data_offset = 8 + header.size();
    const std::uint64_t data_size = file_size - m.data_offset;

    // The format allows trailing spaces as padding.
    while (!header.empty() && header.back() == ' ') header.pop_back();
    if (header.empty() || header.front() != '{') refuse_safetensors(path, "header does not start with a JSON object");
    if (json_depth(header) > kMaxJsonDepth)
        refuse_safetensors(path, "header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");

    std::set<std::string> seen;
    std::string duplicate;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(header, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json & parsed) {
            if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
                const auto & k = parsed.get_ref<const std::string &>();
                if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
            }
            return true;
        });
    } catch (const nlohmann::json::exception & e) {
        refuse_safetensors(path, std::string("header is not valid JSON (") + e.what() + ")");
    }
    if (!duplicate.empty()) fail_tensor(path, duplicate, "named twice in the header");
    if (!j.is_object()) refuse_safetensors(path, "header is not a JSON object");

    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string & name = it.key();
        const auto & v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) refuse_safetensors(path, "__metadata__ is not an object of strings");
            for (auto mt = v.begin(); mt != v.end(); ++mt) {
                if (!mt.value().is_string()) refuse_safetensors(path, "__metadata__ entry '" + mt.key() + "' is not a string");
                m.metadata[mt.key()] = mt.value().get<std::string>();
            }
            continue;
        }
        if (!v.is_object()) fail_tensor(path, name, "entry is not an object");
        for (auto kt = v.begin(); kt != v.end(); ++kt)
            if (kt.key() != "dtype" && kt.key() != "shape" && kt.key() != "data_offsets")
                fail_tensor(path, name, "unknown field '" + kt.key() + "'");
        TensorInfo t;
        t.name = name;
        t.file_index = file_index;
        auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string()) fail_tensor(path, name, "missing or non-string dtype");
        auto parsed = parse_dtype(dt->get<std::string>());
        if (!parsed) fail_tensor(path, name, "unsupported dtype '" + dt->get<std::string>() + "'");
        t.dtype = *parsed;
        auto sh = v.find("shape");
        if (sh == v.end() || !sh->is_array()) fail_tensor(path, name, "missing or non-array shape");
        if (sh->size() > kMaxRank) fail_tensor(path, name, "rank " + std::to_string(sh->size()) + " exceeds " + std::to_string(kMaxRank));
        std::uint64_t numel = 1;
        for (const auto & d : *sh) {
            if (!d.is_number_unsigned()) fail_tensor(path, name, "shape holds a value that is not a non-negative integer");
            std::uint64_t dim = d.get<std::uint64_t>();
            if (dim > static_cast<std::uint64_t>(INT64_MAX) || mul_overflows(numel, dim, &numel))
                fail_tensor(path, name, "shape overflows 64 bits");
            t.shape.push_back(static_cast<std::int64_t>(dim));
        }
        std::uint64_t expect = 0;
        if (mul_overflows(numel, dtype_size(t.dtype), &expect)) fail_tensor(path, name, "byte size overflows 64 bits");
        auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            fail_tensor(path, name, "data_offsets is not a pair of non-negative integers");
        std::uint64_t begin = (*off)[0].get<std::uint64_t>(), end = (*off)[1].get<std::uint64_t>();
        if (begin > end) fail_tensor(path, name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] are reversed");
        if (end > data_size)
            fail_tensor(path, name, "data_offsets end " + std::to_string(end) + " lies past the data section (" +
                                        std::to_string(data_size) + " bytes): the file is truncated");
        if (end - begin != expect)
            fail_tensor(path, name, "shape x dtype is " + std::to_string(expect) + " bytes but data_offsets span " +
                                        std::to_string(end - begin));
        t.file_offset = m.data_offset + begin;
        t.nbytes = end - begin;
        m.tensors.push_back(std::move(t));
    }
    std::sort(m.tensors.begin(), m.tensors.end(), [](const TensorInfo & a, const TensorInfo & b) {
        return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
    });
    // Every non-empty interval against the furthest end reached so far: a zero-size tensor between two overlapping
    // ones (sorted between them) must not hide the overlap.
    const TensorInfo * reach = nullptr;
    for (const auto & b : m.tensors) {
        if (b.nbytes == 0) continue;
        if (reach && b.file_offset < reach->file_offset + reach->nbytes)
            fail_tensor(path, b.name, "overlaps tensor '" + reach->name + "'");
        if (!reach || b.file_offset + b.nbytes > reach->file_offset + reach->nbytes) reach = &b;
    }
    return m;
}

}  // namespace ddo::store
