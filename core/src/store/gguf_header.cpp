// Validation order and limits: see the header comment in ddo/store/gguf_header.hpp.
#include "ddo/store/gguf_header.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "ddo/error.hpp"
#include "ddo/store/ggml_type.hpp"
#include "ddo/util/utf8_text.hpp"

namespace ddo::store {

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF", little-endian
constexpr std::uint64_t kMaxNameBytes = 4096;

enum ValueType : std::uint32_t {
    u8_t = 0, i8_t = 1, u16_t = 2, i16_t = 3, u32_t = 4, i32_t = 5, f32_t = 6, bool_t = 7,
    string_t = 8, array_t = 9, u64_t = 10, i64_t = 11, f64_t = 12,
};

// Bytes of one scalar value of type t; 0 for a string or an array, -1 for an unknown type.
int scalar_size(std::uint32_t t) {
    switch (t) {
        case u8_t: case i8_t: case bool_t: return 1;
        case u16_t: case i16_t: return 2;
        case u32_t: case i32_t: case f32_t: return 4;
        case u64_t: case i64_t: case f64_t: return 8;
        case string_t: case array_t: return 0;
        default: return -1;
    }
}

// A bounds-checked little-endian reader over the header bytes.
class Cursor {
public:
    Cursor(std::span<const std::byte> b, const std::filesystem::path & file) : b_(b), file_(file) {}

    std::uint64_t pos() const noexcept { return pos_; }
    std::uint64_t left() const noexcept { return b_.size() - pos_; }

    template <class T>
    T read(const char * what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    // A string (u64 length + bytes), which must be UTF-8 (as gguf-py decodes it): it reaches reports and errors.
    std::string string(const std::string & what) {
        const auto n = read<std::uint64_t>(what.c_str());
        need(n, what.c_str());
        std::string s(reinterpret_cast<const char *>(b_.data() + pos_), std::size_t(n));
        if (const auto bad = first_invalid_utf8(s))
            refuse_gguf(file_, what + " at offset " + std::to_string(pos_) + " is not UTF-8 (byte " + std::to_string(bad->offset) + ")");
        pos_ += n;
        return s;
    }
    void need(std::uint64_t n, const char * what) const {
        if (n > left())
            refuse_gguf(file_, std::string("the header is truncated: ") + what + " needs " + std::to_string(n) +
                                   " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(left()) + " remain");
    }

private:
    std::span<const std::byte> b_;
    const std::filesystem::path & file_;
    std::uint64_t pos_ = 0;
};

nlohmann::json read_scalar(Cursor & c, std::uint32_t t, const std::string & key) {
    switch (t) {
        case u8_t: return c.read<std::uint8_t>("a u8 value");
        case i8_t: return c.read<std::int8_t>("an i8 value");
        case u16_t: return c.read<std::uint16_t>("a u16 value");
        case i16_t: return c.read<std::int16_t>("an i16 value");
        case u32_t: return c.read<std::uint32_t>("a u32 value");
        case i32_t: return c.read<std::int32_t>("an i32 value");
        case f32_t: return c.read<float>("an f32 value");
        case bool_t: {
            const auto v = c.read<std::uint8_t>("a bool value");
            return v != 0;
        }
        case string_t: return c.string("the string value of key '" + key + "'");
        case u64_t: return c.read<std::uint64_t>("a u64 value");
        case i64_t: return c.read<std::int64_t>("an i64 value");
        case f64_t: return c.read<double>("an f64 value");
        default: return nullptr;
    }
}

nlohmann::json read_value(Cursor & c, std::uint32_t t, const std::string & key, const std::filesystem::path & file) {
    if (scalar_size(t) < 0) refuse_gguf(file, "key '" + key + "' has value type " + std::to_string(t) + ", which GGUF does not define");
    if (t != array_t) return read_scalar(c, t, key);
    const auto et = c.read<std::uint32_t>("an array's element type");
    const auto n = c.read<std::uint64_t>("an array's length");
    const int es = scalar_size(et);
    if (es < 0) refuse_gguf(file, "key '" + key + "' is an array of type " + std::to_string(et) + ", which GGUF does not define");
    if (et == array_t) refuse_gguf(file, "key '" + key + "' is an array of arrays, which GGUF readers do not accept");
    // Each element takes at least its scalar size (a string at least its 8-byte length): a length that cannot fit
    // the bytes left is refused before anything is allocated.
    const std::uint64_t min_elem = es > 0 ? std::uint64_t(es) : 8;
    if (n > c.left() / min_elem)
        refuse_gguf(file, "key '" + key + "' claims " + std::to_string(n) + " array elements, more than the header holds");
    nlohmann::json a = nlohmann::json::array();
    for (std::uint64_t i = 0; i < n; ++i) a.push_back(read_scalar(c, et, key));
    return a;
}

std::uint64_t read_alignment(const nlohmann::json & meta, const std::filesystem::path & file) {
    const auto it = meta.find("general.alignment");
    if (it == meta.end()) return kGgufDefaultAlignment;
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > UINT32_MAX)
        refuse_gguf(file, "general.alignment must be a u32");
    const auto a = it->get<std::uint64_t>();
    if (a == 0 || (a & (a - 1)) != 0) refuse_gguf(file, "general.alignment = " + std::to_string(a) + " is not a power of two");
    return a;
}

GgufTensorInfo read_tensor_info(Cursor & c, const std::filesystem::path & file) {
    GgufTensorInfo t;
    t.name = c.string("a tensor name");
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
        refuse_gguf(file, "a tensor name of " + std::to_string(t.name.size()) + " bytes (1.." + std::to_string(kMaxNameBytes) + " allowed)");
    const auto n_dims = c.read<std::uint32_t>("a tensor's n_dims");
    if (n_dims > kGgufMaxDims)
        refuse_gguf(file, "tensor '" + t.name + "' has " + std::to_string(n_dims) + " dims, more than GGML's " + std::to_string(kGgufMaxDims));
    std::vector<std::int64_t> ne(n_dims);
    for (auto & d : ne) {
        d = c.read<std::int64_t>("a tensor dim");
        if (d < 0) refuse_gguf(file, "tensor '" + t.name + "' has a negative dim " + std::to_string(d));
    }
    t.type = c.read<std::uint32_t>("a tensor type");
    const auto tt = ggml_type_traits(t.type);
    if (!tt)
        refuse_gguf(file, "tensor '" + t.name + "' has " + ggml_type_label(t.type) + "; ddo decodes " +
                              std::string(ggml_decodable_types()));
    const std::uint64_t row = n_dims ? std::uint64_t(ne[0]) : 1;
    if (row % tt->block_elems != 0)
        refuse_gguf(file, "tensor '" + t.name + "' (" + std::string(tt->name) + ") has rows of " + std::to_string(row) +
                              " elements, not a multiple of the type's block of " + std::to_string(tt->block_elems));
    std::uint64_t bytes = 0;
    bool overflow = __builtin_mul_overflow(row / tt->block_elems, std::uint64_t(tt->block_bytes), &bytes);
    for (std::size_t i = 1; i < ne.size(); ++i) overflow = __builtin_mul_overflow(bytes, std::uint64_t(ne[i]), &bytes) || overflow;
    if (overflow) refuse_gguf(file, "tensor '" + t.name + "' has a byte size that overflows 64 bits");
    t.nbytes = bytes;
    t.shape.assign(ne.rbegin(), ne.rend());
    t.file_offset = c.read<std::uint64_t>("a tensor offset");  // relative to the data section until placed
    return t;
}

// Places each tensor after the data section's start and checks alignment, bounds and overlap.
void place_tensors(GgufHeader & h, std::uint64_t file_size, const std::filesystem::path & file) {
    std::vector<const GgufTensorInfo *> by_offset;
    for (auto & t : h.tensors) {
        if (t.file_offset % h.alignment != 0)
            refuse_gguf(file, "tensor '" + t.name + "' starts at data offset " + std::to_string(t.file_offset) +
                                  ", not a multiple of the alignment " + std::to_string(h.alignment));
        std::uint64_t begin = 0, end = 0;
        if (__builtin_add_overflow(h.data_offset, t.file_offset, &begin) || __builtin_add_overflow(begin, t.nbytes, &end) ||
            end > file_size)
            refuse_gguf(file, "tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes at data offset " +
                                  std::to_string(t.file_offset) + ") ends past the end of the file (" +
                                  std::to_string(file_size) + " bytes): the file is truncated");
        t.file_offset = begin;
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](auto a, auto b) { return a->file_offset < b->file_offset; });
    const GgufTensorInfo * prev = nullptr;
    for (const auto * t : by_offset) {
        if (t->nbytes == 0) continue;
        if (prev && t->file_offset < prev->file_offset + prev->nbytes)
            refuse_gguf(file, "tensors '" + prev->name + "' and '" + t->name + "' overlap");
        prev = t;
    }
}

}  // namespace

std::uint64_t GgufTensorInfo::numel() const noexcept {
    std::uint64_t n = 1;
    for (auto d : shape) n *= std::uint64_t(d);
    return n;
}

void refuse_gguf(const std::filesystem::path & file, const std::string & what) {
    throw RuntimeError("invalid GGUF file " + file.string() + ": " + what +
                       "; the file is corrupt, truncated or not a GGUF file - re-download or re-convert it");
}

bool is_gguf(std::span<const std::byte> bytes) noexcept {
    std::uint32_t m = 0;
    if (bytes.size() < 4) return false;
    std::memcpy(&m, bytes.data(), 4);
    return m == kMagic;
}

GgufHeader parse_gguf_header(std::span<const std::byte> bytes, std::uint64_t file_size, const std::filesystem::path & file) {
    if (bytes.size() > file_size) bytes = bytes.first(std::size_t(file_size));
    Cursor c(bytes, file);
    if (!is_gguf(bytes)) refuse_gguf(file, "it does not begin with the GGUF magic");
    c.read<std::uint32_t>("the magic");
    GgufHeader h;
    h.version = c.read<std::uint32_t>("the version");
    if ((h.version & 0xFFFFu) == 0 && h.version != 0)
        refuse_gguf(file, "version " + std::to_string(h.version) + " is a big-endian file, which ddo does not read");
    if (h.version < 2 || h.version > 3)
        refuse_gguf(file, "version " + std::to_string(h.version) + " (ddo reads GGUF versions 2 and 3)");
    const auto n_tensors = c.read<std::int64_t>("the tensor count");
    const auto n_kv = c.read<std::int64_t>("the key count");
    // A key-value takes >= 13 bytes (8-byte length, 4-byte type, a 1-byte value), a tensor info >= 24.
    if (n_kv < 0 || std::uint64_t(n_kv) > c.left() / 13)
        refuse_gguf(file, "it claims " + std::to_string(n_kv) + " keys, more than the header holds");
    if (n_tensors < 0 || std::uint64_t(n_tensors) > c.left() / 24)
        refuse_gguf(file, "it claims " + std::to_string(n_tensors) + " tensors, more than the header holds");
    for (std::int64_t i = 0; i < n_kv; ++i) {
        std::string key = c.string("a key");
        const auto t = c.read<std::uint32_t>("a value type");
        auto v = read_value(c, t, key, file);
        if (h.metadata.contains(key)) refuse_gguf(file, "key '" + key + "' appears twice");
        h.metadata[key] = std::move(v);
    }
    h.alignment = read_alignment(h.metadata, file);
    std::set<std::string> names;
    h.tensors.reserve(std::size_t(n_tensors));
    for (std::int64_t i = 0; i < n_tensors; ++i) {
        h.tensors.push_back(read_tensor_info(c, file));
        if (!names.insert(h.tensors.back().name).second)
            refuse_gguf(file, "tensor '" + h.tensors.back().name + "' appears twice");
    }
    const std::uint64_t end = c.pos();
    h.data_offset = (end + h.alignment - 1) / h.alignment * h.alignment;
    if (h.data_offset > file_size)
        refuse_gguf(file, "the data section would begin at " + std::to_string(h.data_offset) + ", past the end of the file");
    place_tensors(h, file_size, file);
    return h;
}

}  // namespace ddo::store
