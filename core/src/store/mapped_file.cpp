#include "ddo/store/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <utility>

#include "ddo/error.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::store {

MappedFile::MappedFile(const std::filesystem::path & path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw RuntimeError("cannot open " + path.string() + ": " + std::strerror(errno) + "; check the path and permissions");
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw RuntimeError("cannot stat " + path.string() + ": " + std::strerror(errno));
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) return;
    void * p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) {
        size_ = 0;
        throw RuntimeError("cannot mmap " + path.string() + ": " + std::strerror(errno) + "; use read_mode = \"pread\"");
    }
    data_ = static_cast<const std::byte *>(p);
}

MappedFile::MappedFile(MappedFile && o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile & MappedFile::operator=(MappedFile && o) noexcept {
    if (this != &o) {
        if (data_) ::munmap(const_cast<std::byte *>(data_), size_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<std::byte *>(data_), size_);
}

}  // namespace ddo::store
