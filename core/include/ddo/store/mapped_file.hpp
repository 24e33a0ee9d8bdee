// RAII read-only mmap of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace ddo::store {

class MappedFile {
public:
    MappedFile() = default;
    // Throws ddo::RuntimeError naming the file when it cannot be opened or mapped.
    explicit MappedFile(const std::filesystem::path & path);
    MappedFile(MappedFile && o) noexcept;
    MappedFile & operator=(MappedFile && o) noexcept;
    MappedFile(const MappedFile &) = delete;
    MappedFile & operator=(const MappedFile &) = delete;
    ~MappedFile();

    std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
    std::uint64_t size() const noexcept { return size_; }

private:
    const std::byte * data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace ddo::store
