#include "ddo/store/gguf_file.hpp"

#include <cstring>
#include <unordered_map>

#include "ddo/error.hpp"

#include "ddo/store/ggml_type.hpp"
#include "ddo/store/mapped_file.hpp"

namespace ddo::store {

struct GgufFile::Impl {
    std::filesystem::path path;
    MappedFile map;
    GgufHeader header;
    std::vector<TensorInfo> stored;
    std::unordered_map<std::string_view, std::size_t> index;  // name -> header.tensors index
};

namespace {

std::optional<DType> plain_dtype(std::uint32_t type) {
    switch (static_cast<GgmlType>(type)) {
        case GgmlType::f32: return DType::f32;
        case GgmlType::f16: return DType::f16;
        case GgmlType::bf16: return DType::bf16;
        case GgmlType::f64: return DType::f64;
        case GgmlType::i8: return DType::i8;
        case GgmlType::i16: return DType::i16;
        case GgmlType::i32: return DType::i32;
        case GgmlType::i64: return DType::i64;
        default: return std::nullopt;
    }
}

}  // namespace

TensorInfo gguf_stored_tensor(const GgufTensorInfo & t, std::uint32_t file_index) {
    TensorInfo s;
    s.name = t.name;
    s.file_offset = t.file_offset;
    s.nbytes = t.nbytes;
    s.file_index = file_index;
    if (const auto d = plain_dtype(t.type)) {
        s.dtype = *d;
        s.shape = t.shape;
    } else {
        s.dtype = DType::u8;
        s.shape = {std::int64_t(t.nbytes)};
    }
    return s;
}

GgufFile::GgufFile() : impl_(std::make_unique<Impl>()) {}
GgufFile::GgufFile(GgufFile &&) noexcept = default;
GgufFile & GgufFile::operator=(GgufFile &&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path & path, std::uint32_t file_index) {
    GgufFile f;
    auto & m = *f.impl_;
    m.path = path;
    m.map = MappedFile(path);
    m.header = parse_gguf_header(m.map.bytes(), m.map.size(), path);
    m.stored.reserve(m.header.tensors.size());
    for (std::size_t i = 0; i < m.header.tensors.size(); ++i) {
        m.stored.push_back(gguf_stored_tensor(m.header.tensors[i], file_index));
        m.index.emplace(m.header.tensors[i].name, i);
    }
    return f;
}

const std::filesystem::path & GgufFile::path() const noexcept { return impl_->path; }
std::uint64_t GgufFile::file_size() const noexcept { return impl_->map.size(); }
const GgufHeader & GgufFile::header() const noexcept { return impl_->header; }
const std::vector<TensorInfo> & GgufFile::tensors() const noexcept { return impl_->stored; }

const GgufTensorInfo * GgufFile::gguf(std::string_view name) const noexcept {
    const auto it = impl_->index.find(name);
    return it == impl_->index.end() ? nullptr : &impl_->header.tensors[it->second];
}

std::span<const std::byte> GgufFile::bytes(const GgufTensorInfo & t) const noexcept {
    return impl_->map.bytes().subspan(std::size_t(t.file_offset), std::size_t(t.nbytes));
}

const void * GgufFile::mapped(const TensorInfo & info) const {
    const auto all = impl_->map.bytes();
    if (info.file_offset > all.size() || info.nbytes > all.size() - info.file_offset)
        throw RuntimeError(impl_->path.string() + ": tensor '" + info.name + "' lies outside the file (" +
                           std::to_string(all.size()) + " bytes); the file changed after it was opened - re-run");
    return all.data() + info.file_offset;
}

void GgufFile::read_tensor(const TensorInfo & info, void * dst) const {
    std::memcpy(dst, mapped(info), std::size_t(info.nbytes));
}

}  // namespace ddo::store
