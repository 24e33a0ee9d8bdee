#include "ddo/store/checkpoint_identity.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <span>

#include "ddo/error.hpp"
#include "ddo/store/gguf_file.hpp"
#include "ddo/store/gguf_header.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo::store {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::uint64_t kMaxHeader = 100ull << 20;  // the safetensors format's own limit

void pread_exact(int fd, void * dst, std::size_t n, off_t offset, const fs::path & file) {
    auto * p = static_cast<char *>(dst);
    while (n > 0) {
        const ssize_t r = ::pread(fd, p, n, offset);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            throw RuntimeError(file.string() + ": cannot read the safetensors header (" +
                               (r < 0 ? std::string(std::strerror(errno)) : std::string("file truncated")) +
                               "); re-download or re-export the checkpoint");
        p += r;
        n -= std::size_t(r);
        offset += r;
    }
}

// A GGUF file's header: every byte before its data section (tensor names, types, shapes, offsets, metadata).
std::string gguf_header_bytes(int fd, const fs::path & file) {
    const auto g = GgufFile::open(file);  // validated; RuntimeError naming the file
    std::string bytes(std::size_t(g.header().data_offset), '\0');
    pread_exact(fd, bytes.data(), bytes.size(), 0, file);
    return bytes;
}

}  // namespace

json file_identity(const fs::path & file, const IdentityOptions & o) {
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw RuntimeError(file.string() + ": cannot open (" + std::strerror(errno) + "); check the checkpoint path");
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec || size < 8) throw RuntimeError(file.string() + ": not a safetensors or GGUF file (shorter than 8 bytes)");
    unsigned char len_bytes[8];
    pread_exact(fd.get(), len_bytes, 8, 0, file);
    std::string bytes;
    std::uint64_t header_bytes = 0;  // safetensors: the JSON's length; GGUF: every byte before the data
    if (is_gguf(std::as_bytes(std::span(len_bytes)))) {
        bytes = gguf_header_bytes(fd.get(), file);
        header_bytes = bytes.size();
    } else {
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
        if (n > kMaxHeader || 8 + n > size)
            throw RuntimeError(file.string() + ": invalid safetensors header length " + std::to_string(n) +
                               "; the file is damaged");
        bytes.assign(8 + n, '\0');
        std::copy(len_bytes, len_bytes + 8, bytes.begin());
        pread_exact(fd.get(), bytes.data() + 8, n, 8, file);
        header_bytes = n;
    }
    json e = {{"file", file.filename().string()}, {"size", size}, {"header_bytes", header_bytes},
              {"header_xxh3_128", xxh3_128_hex(bytes.data(), bytes.size())}};
    if (o.hash_weights) {
        const auto d = digest_fd(fd.get(), file);
        e["sha256"] = d.sha256;
        e["xxh3_128"] = d.xxh3_128;
    }
    return e;
}

namespace {

json config_entry(const fs::path & file) {
    if (!fs::exists(file)) return nullptr;
    const auto sha = file_sha256(file);
    if (!sha) throw RuntimeError(file.string() + ": cannot be read; check its permissions");
    return {{"file", file.filename().string()}, {"sha256", *sha}};
}

}  // namespace

json component_identity(const fs::path & folder, const IdentityOptions & o) {
    const auto t0 = std::chrono::steady_clock::now();
    json j = {{"folder", folder.filename().string()}, {"files", json::array()}};  // path-free: copies compare equal
    // diffusers: config.json; schedulers: scheduler_config.json; transformers: config.json too.
    json cfg = config_entry(folder / "config.json");
    if (cfg.is_null()) cfg = config_entry(folder / "scheduler_config.json");
    j["config"] = cfg;
    std::vector<fs::path> weights, indexes;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(folder, ec)) {
        const auto name = e.path().filename().string();
        if (name.ends_with(".safetensors") || name.ends_with(".gguf")) weights.push_back(e.path());
        else if (name.ends_with(".safetensors.index.json")) indexes.push_back(e.path());
    }
    if (ec) throw RuntimeError(folder.string() + ": cannot list the component folder (" + ec.message() + ")");
    std::sort(weights.begin(), weights.end());
    std::sort(indexes.begin(), indexes.end());
    for (const auto & w : weights) j["files"].push_back(file_identity(w, o));
    for (const auto & i : indexes) j["files"].push_back(config_entry(i));
    if (o.hash_weights)
        j["hash_weights_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return j;
}

json checkpoint_identity(const fs::path & model_dir, const std::vector<std::string> & components,
                         const IdentityOptions & o, const std::map<std::string, fs::path> & replaced) {
    json j = {{"model_index", config_entry(model_dir / "model_index.json")}, {"components", json::object()}};
    for (const auto & c : components) {
        const auto folder = model_dir / c;
        if (const auto r = replaced.find(c); r != replaced.end()) {
            // Note [Component files]: the folder gives config.json, the file every weight.
            json e = fs::is_directory(folder) ? component_identity(folder, o)
                                              : json{{"folder", c}, {"config", nullptr}, {"files", json::array()}};
            e["replaced_by"] = file_identity(r->second, o);
            e["replaced_by"]["file"] = fs::absolute(r->second).string();
            j["components"][c] = std::move(e);
            continue;
        }
        if (!fs::is_directory(folder)) {
            j["components"][c] = nullptr;
            j["components_missing"][c] = folder.string() + " is not a directory";
            continue;
        }
        j["components"][c] = component_identity(folder, o);
    }
    return j;
}

json input_identity(const fs::path & file) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    const auto sha = file_sha256(file);
    if (ec || !sha) throw RuntimeError(file.string() + ": cannot be read; check the path given on the command line");
    return {{"file", fs::absolute(file).string()}, {"size", size}, {"sha256", *sha}};
}

}  // namespace ddo::store
