// Validation order and limits: see the header comment in ddo/store/safetensors_file.hpp.
#include "ddo/store/safetensors_file.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/store/mapped_file.hpp"
#include "ddo/util/stream_copy.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::store {

namespace {

constexpr std::size_t kMaxJsonDepth = 64;
constexpr std::size_t kMaxRank = 16;
constexpr std::uint64_t kDirectAlign = 4096;
constexpr std::uint64_t kBounceBytes = 8ull << 20;

[[noreturn]] void fail(const std::filesystem::path & file, const std::string & what) {
    throw RuntimeError("invalid safetensors file " + file.string() + ": " + what +
                       "; the file is corrupt, truncated or not a safetensors file - re-download or re-convert it");
}

[[noreturn]] void fail_tensor(const std::filesystem::path & file, const std::string & tensor, const std::string & what) {
    fail(file, "tensor '" + tensor + "': " + what);
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
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
    m.file_size = static_cast<std::uint64_t>(st.st_size);
    if (m.file_size < 8) fail(path, "file is " + std::to_string(m.file_size) + " bytes, shorter than the 8-byte header length");

    unsigned char len_bytes[8];
    pread_all(m.fd.get(), 0, 8, len_bytes, path);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    if (n < 2) fail(path, "header length " + std::to_string(n) + " is too small for a JSON object");
    if (n > kMaxHeaderBytes) fail(path, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
    if (n > m.file_size - 8) fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(m.file_size) + " bytes)");
    m.data_offset = 8 + n;
    const std::uint64_t data_size = m.file_size - m.data_offset;

    std::string header(static_cast<std::size_t>(n), '\0');
    pread_all(m.fd.get(), 8, n, header.data(), path);
    // The format allows trailing spaces as padding.
    while (!header.empty() && header.back() == ' ') header.pop_back();
    if (header.empty() || header.front() != '{') fail(path, "header does not start with a JSON object");
    if (json_depth(header) > kMaxJsonDepth) fail(path, "header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");

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
        fail(path, std::string("header is not valid JSON (") + e.what() + ")");
    }
    if (!duplicate.empty()) fail_tensor(path, duplicate, "named twice in the header");
    if (!j.is_object()) fail(path, "header is not a JSON object");

    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string & name = it.key();
        const auto & v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail(path, "__metadata__ is not an object of strings");
            for (auto mt = v.begin(); mt != v.end(); ++mt) {
                if (!mt.value().is_string()) fail(path, "__metadata__ entry '" + mt.key() + "' is not a string");
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
    return f;
}

const std::filesystem::path & SafetensorsFile::path() const noexcept { return impl_->path; }
std::uint64_t SafetensorsFile::file_size() const noexcept { return impl_->file_size; }
std::uint64_t SafetensorsFile::data_offset() const noexcept { return impl_->data_offset; }
const std::vector<TensorInfo> & SafetensorsFile::tensors() const noexcept { return impl_->tensors; }
const std::map<std::string, std::string> & SafetensorsFile::metadata() const noexcept { return impl_->metadata; }
std::uint64_t SafetensorsFile::direct_fallbacks() const noexcept { return impl_->direct_fallbacks.load(); }

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
            if (!m.direct_fd) m.direct_unsupported = true;
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
                if (n < 0 && errno == EINVAL) { ok = false; break; }
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
