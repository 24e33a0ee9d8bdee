// Validation order and limits: see the header comment in ddo/store/safetensors_file.hpp; the header itself is
// validated by parse_safetensors_header (safetensors_header.cpp).
#include "ddo/store/safetensors_file.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

#include "ddo/error.hpp"
#include "ddo/store/mapped_file.hpp"
#include "ddo/store/safetensors_header.hpp"
#include "ddo/util/stream_copy.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::store {

namespace {

constexpr std::uint64_t kDirectAlign = 4096;
constexpr std::uint64_t kBounceBytes = 8ull << 20;

void pread_all(int fd, std::uint64_t offset, std::uint64_t bytes, void * dst, const std::filesystem::path & file) {
    auto * p = static_cast<char *>(dst);
    while (bytes > 0) {
        ssize_t n = ::pread(fd, p, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 1ull << 30)),
                            static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw RuntimeError("read of " + file.string() + " at offset " + std::to_string(offset) +
                               " failed: " + std::strerror(errno));
        }
        if (n == 0)
            throw RuntimeError("read of " + file.string() + " at offset " + std::to_string(offset) +
                               ": unexpected end of file (the file was truncated after it was opened)");
        p += n;
        offset += static_cast<std::uint64_t>(n);
        bytes -= static_cast<std::uint64_t>(n);
    }
}

struct AlignedFree { void operator()(void * p) const noexcept { std::free(p); } };

}  // namespace

struct SafetensorsFile::Impl {
    std::filesystem::path path;
    UniqueFd fd;
    std::uint64_t file_size = 0;
    std::uint64_t data_offset = 0;
    std::vector<TensorInfo> tensors;
    std::map<std::string, std::string> metadata;
    std::once_flag map_once, direct_once;
    MappedFile map;
    std::string map_error;
    UniqueFd direct_fd;
    bool direct_unsupported = false;
    std::atomic<std::uint64_t> direct_fallbacks{0};
    std::mutex direct_mu;
    std::string direct_fallback_reason;  // why O_DIRECT was not used: its open's or its read's errno
};

SafetensorsFile::SafetensorsFile() : impl_(std::make_unique<Impl>()) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile &&) noexcept = default;
SafetensorsFile & SafetensorsFile::operator=(SafetensorsFile &&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path & path, std::uint32_t file_index) {
    SafetensorsFile f;
    Impl & m = *f.impl_;
    m.path = path;
    m.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!m.fd) throw RuntimeError("cannot open " + path.string() + ": " + std::strerror(errno) + "; check the path and permissions");
    struct stat st {};
    if (::fstat(m.fd.get(), &st) != 0) throw RuntimeError("cannot stat " + path.string() + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) refuse_safetensors(path, "not a regular file");
    m.file_size = static_cast<std::uint64_t>(st.st_size);

    unsigned char len_bytes[8] = {};
    if (m.file_size >= 8) pread_all(m.fd.get(), 0, 8, len_bytes, path);
    const std::uint64_t n = safetensors_header_length(len_bytes, m.file_size, path);
    std::string header(static_cast<std::size_t>(n), '\0');
    pread_all(m.fd.get(), 8, n, header.data(), path);
    SafetensorsHeader h = parse_safetensors_header(std::move(header), m.file_size, path, file_index);
    m.data_offset = h.data_offset;
    m.tensors = std::move(h.tensors);
    m.metadata = std::move(h.metadata);
    return f;
}

const std::filesystem::path & SafetensorsFile::path() const noexcept { return impl_->path; }
std::uint64_t SafetensorsFile::file_size() const noexcept { return impl_->file_size; }
std::uint64_t SafetensorsFile::data_offset() const noexcept { return impl_->data_offset; }
const std::vector<TensorInfo> & SafetensorsFile::tensors() const noexcept { return impl_->tensors; }
const std::map<std::string, std::string> & SafetensorsFile::metadata() const noexcept { return impl_->metadata; }
std::uint64_t SafetensorsFile::direct_fallbacks(std::string * reason) const {
    if (reason) {
        std::lock_guard lk(impl_->direct_mu);
        *reason = impl_->direct_fallback_reason;
    }
    return impl_->direct_fallbacks.load();
}

const TensorInfo * SafetensorsFile::find(std::string_view name) const noexcept {
    for (const auto & t : impl_->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

const TensorInfo & SafetensorsFile::at(std::string_view name) const {
    if (const auto * t = find(name)) return *t;
    throw RuntimeError("tensor '" + std::string(name) + "' is not in " + impl_->path.string() +
                       "; check the model plugin's tensor names against the checkpoint");
}

const void * SafetensorsFile::mapped(const TensorInfo & info, std::string * why) const {
    Impl & m = *impl_;
    std::call_once(m.map_once, [&] {
        try { m.map = MappedFile(m.path); } catch (const std::exception & e) { m.map_error = e.what(); }
    });
    if (!m.map_error.empty()) {
        if (why) *why = m.map_error;
        return nullptr;
    }
    if (m.map.size() < info.file_offset + info.nbytes) {
        if (why) *why = m.path.string() + " is shorter than its header says (it shrank after it was opened)";
        return nullptr;
    }
    return m.map.bytes().data() + info.file_offset;
}

void SafetensorsFile::read(std::uint64_t offset, std::uint64_t bytes, void * dst, ReadMode mode) const {
    Impl & m = *impl_;
    if (offset > m.file_size || bytes > m.file_size - offset)
        throw RuntimeError("read of " + m.path.string() + " [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                           ") lies outside the file (" + std::to_string(m.file_size) + " bytes)");
    if (bytes == 0) return;
    if (mode == ReadMode::mmap) {
        std::call_once(m.map_once, [&] {
            try { m.map = MappedFile(m.path); } catch (const std::exception & e) { m.map_error = e.what(); }
        });
        if (!m.map_error.empty()) throw RuntimeError(m.map_error);
        if (m.map.size() < offset + bytes)
            throw RuntimeError("read of " + m.path.string() + ": the file shrank after it was opened");
        stream_copy(dst, m.map.bytes().data() + offset, static_cast<std::size_t>(bytes));
        return;
    }
    if (mode == ReadMode::direct) {
        std::call_once(m.direct_once, [&] {
            m.direct_fd = UniqueFd(::open(m.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
            if (!m.direct_fd) {
                m.direct_unsupported = true;
                std::lock_guard lk(m.direct_mu);
                m.direct_fallback_reason = "open with O_DIRECT failed: " + std::string(std::strerror(errno));
            }
        });
        if (!m.direct_unsupported) {
            thread_local std::unique_ptr<void, AlignedFree> bounce(std::aligned_alloc(kDirectAlign, kBounceBytes));
            if (!bounce) throw RuntimeError("cannot allocate the O_DIRECT bounce buffer for " + m.path.string());
            auto * out = static_cast<char *>(dst);
            std::uint64_t pos = offset, left = bytes;
            bool ok = true;
            while (left > 0 && ok) {
                std::uint64_t a0 = pos & ~(kDirectAlign - 1);
                std::uint64_t skip = pos - a0;
                std::uint64_t want = std::min<std::uint64_t>(kBounceBytes, (skip + left + kDirectAlign - 1) & ~(kDirectAlign - 1));
                ssize_t n;
                do { n = ::pread(m.direct_fd.get(), bounce.get(), static_cast<std::size_t>(want), static_cast<off_t>(a0)); }
                while (n < 0 && errno == EINTR);
                if (n < 0 && errno == EINVAL) {
                    ok = false;
                    std::lock_guard lk(m.direct_mu);
                    m.direct_fallback_reason = "O_DIRECT read refused (EINVAL: the file system does not take aligned direct reads)";
                    break;
                }
                if (n < 0)
                    throw RuntimeError("O_DIRECT read of " + m.path.string() + " at offset " + std::to_string(a0) +
                                       " failed: " + std::strerror(errno));
                if (static_cast<std::uint64_t>(n) <= skip)
                    throw RuntimeError("O_DIRECT read of " + m.path.string() + " at offset " + std::to_string(pos) +
                                       ": unexpected end of file (the file was truncated after it was opened)");
                std::uint64_t take = std::min<std::uint64_t>(left, static_cast<std::uint64_t>(n) - skip);
                std::memcpy(out, static_cast<char *>(bounce.get()) + skip, static_cast<std::size_t>(take));
                out += take; pos += take; left -= take;
            }
            if (ok) return;
        }
        m.direct_fallbacks.fetch_add(1);
    }
    pread_all(m.fd.get(), offset, bytes, dst, m.path);
}

void SafetensorsFile::read_tensor(const TensorInfo & info, void * dst, ReadMode mode) const {
    try {
        read(info.file_offset, info.nbytes, dst, mode);
    } catch (const RuntimeError & e) {
        throw RuntimeError("tensor '" + info.name + "': " + e.what());
    }
}

}  // namespace ddo::store
