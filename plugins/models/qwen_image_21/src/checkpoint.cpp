#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::qwen_image_21 {
namespace {

struct Fd {
    int fd = -1;
    explicit Fd(const std::filesystem::path & p) : fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC)) {}
    ~Fd() { if (fd >= 0) ::close(fd); }
};

void pread_all(int fd, void * dst, uint64_t bytes, uint64_t offset, const std::filesystem::path & path) {
    auto * p = static_cast<char *>(dst);
    while (bytes > 0) {
        ssize_t n = ::pread(fd, p, bytes, off_t(offset));
        if (n <= 0) throw RuntimeError(path.string() + ": read failed or file truncated; re-download or re-export it");
        p += n;
        bytes -= uint64_t(n);
        offset += uint64_t(n);
    }
}

bool parse_dtype(const std::string & s, at::ScalarType & t, size_t & size) {
    static const std::map<std::string, std::pair<at::ScalarType, size_t>> k{
        {"F32", {at::kFloat, 4}}, {"F16", {at::kHalf, 2}}, {"BF16", {at::kBFloat16, 2}}, {"F64", {at::kDouble, 8}},
        {"I64", {at::kLong, 8}},  {"I32", {at::kInt, 4}},  {"I16", {at::kShort, 2}},   {"I8", {at::kChar, 1}},
        {"U8", {at::kByte, 1}},   {"BOOL", {at::kBool, 1}}};
    auto it = k.find(s);
    if (it == k.end()) return false;
    t = it->second.first;
    size = it->second.second;
    return true;
}

std::string shape_str(at::IntArrayRef s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

}  // namespace

void TensorFile::add_file(const std::filesystem::path & path, const std::vector<std::string> * only) {
    Fd f(path);
    if (f.fd < 0) throw RuntimeError(path.string() + ": cannot open the safetensors file; check the checkpoint path");
    const auto fsize = std::filesystem::file_size(path);
    uint64_t n = 0;
    if (fsize < 8) throw RuntimeError(path.string() + ": not a safetensors file (shorter than 8 bytes)");
    pread_all(f.fd, &n, 8, 0, path);
    if (n < 2 || n > (100ull << 20) || 8 + n > fsize)
        throw RuntimeError(path.string() + ": invalid safetensors header length; the file is damaged");
    std::string header(n, '\0');
    pread_all(f.fd, header.data(), n, 8, path);
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(header);
    } catch (const std::exception & e) {
        throw RuntimeError(path.string() + ": safetensors header is not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw RuntimeError(path.string() + ": safetensors header is not a JSON object");
    const size_t index = files_.size();
    files_.push_back(path);
    for (auto & [name, v] : j.items()) {
        if (name == "__metadata__") {
            if (v.is_object())
                for (auto & [k, mv] : v.items())
                    if (mv.is_string()) metadata_[k] = mv.get<std::string>();
            continue;
        }
        if (only && std::find(only->begin(), only->end(), name) == only->end()) continue;
        Entry e;
        e.file = index;
        size_t esize = 0;
        try {
            e.dtype_name = v.at("dtype").get<std::string>();
            e.shape = v.at("shape").get<std::vector<int64_t>>();
            auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
            if (off.size() != 2) throw std::runtime_error("data_offsets must have 2 entries");
            e.begin = 8 + n + off[0];
            e.end = 8 + n + off[1];
        } catch (const std::exception & ex) {
            throw RuntimeError(path.string() + ": tensor '" + name + "' has a malformed header entry (" + ex.what() + ")");
        }
        if (!parse_dtype(e.dtype_name, e.dtype, esize))
            throw RuntimeError(path.string() + ": tensor '" + name + "' has unsupported dtype " + e.dtype_name);
        uint64_t numel = 1;
        for (auto d : e.shape) {
            if (d < 0) throw RuntimeError(path.string() + ": tensor '" + name + "' has a negative dimension");
            numel *= uint64_t(d);
        }
        if (e.end < e.begin || e.end > fsize || (e.end - e.begin) != numel * esize)
            throw RuntimeError(path.string() + ": tensor '" + name +
                               "' has data offsets that do not match its shape and dtype or lie outside the file");
        entries_[name] = std::move(e);
    }
}

TensorFile TensorFile::open_file(const std::filesystem::path & path) {
    TensorFile t;
    t.origin_ = path;
    t.add_file(path, nullptr);
    return t;
}

TensorFile TensorFile::open_component(const std::filesystem::path & dir) {
    TensorFile t;
    t.origin_ = dir;
    const auto single = dir / "diffusion_pytorch_model.safetensors";
    const auto index = dir / "diffusion_pytorch_model.safetensors.index.json";
    if (std::filesystem::exists(single)) {
        t.add_file(single, nullptr);
    } else if (std::filesystem::exists(index)) {
        nlohmann::json j;
        try {
            std::ifstream in(index);
            j = nlohmann::json::parse(in);
        } catch (const std::exception & e) {
            throw RuntimeError(index.string() + ": not valid JSON (" + e.what() + ")");
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
            throw RuntimeError(index.string() + ": missing the 'weight_map' object");
        std::map<std::string, std::vector<std::string>> by_file;
        for (auto & [name, file] : j["weight_map"].items()) by_file[file.get<std::string>()].push_back(name);
        for (auto & [file, names] : by_file) {
            t.add_file(dir / file, &names);
            for (auto & n : names)
                if (!t.entries_.count(n))
                    throw RuntimeError((dir / file).string() + ": tensor '" + n + "' is listed in " + index.string() +
                                       " but missing from the shard");
        }
    } else {
        throw RuntimeError(dir.string() + ": no diffusion_pytorch_model.safetensors (or its .index.json); " +
                           "point --model at a diffusers-layout checkpoint");
    }
    return t;
}

std::string TensorFile::describe_files() const {
    std::string r;
    for (const auto & f : files_) r += (r.empty() ? "" : ", ") + f.string();
    return r;
}

bool TensorFile::contains(const std::string & name) const { return entries_.count(name) != 0; }

std::vector<std::string> TensorFile::names() const {
    std::vector<std::string> r;
    for (auto & [k, v] : entries_) r.push_back(k);
    return r;
}

const TensorFile::Entry & TensorFile::entry(const std::string & name) const {
    auto it = entries_.find(name);
    if (it == entries_.end())
        throw RuntimeError(origin_.string() + ": tensor '" + name +
                           "' is missing from the checkpoint; re-export it with diffusers save_pretrained");
    return it->second;
}

const std::filesystem::path & TensorFile::file_of(const std::string & name) const { return files_[entry(name).file]; }
std::vector<int64_t> TensorFile::shape_of(const std::string & name) const { return entry(name).shape; }
at::ScalarType TensorFile::dtype_of(const std::string & name) const { return entry(name).dtype; }
uint64_t TensorFile::nbytes_of(const std::string & name) const {
    const auto & e = entry(name);
    return e.end - e.begin;
}

at::Tensor TensorFile::read(const std::string & name) const {
    const auto & e = entry(name);
    auto t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    Fd f(files_[e.file]);
    if (f.fd < 0) throw RuntimeError(files_[e.file].string() + ": cannot open (reading tensor '" + name + "')");
    pread_all(f.fd, t.data_ptr(), e.end - e.begin, e.begin, files_[e.file]);
    return t;
}

void TensorFile::check(const std::string & name, at::IntArrayRef shape) const {
    if (!contains(name))
        throw RuntimeError(origin_.string() + ": tensor '" + name + "' is missing from the checkpoint (" +
                           describe_files() + "); re-export it with diffusers save_pretrained");
    const auto & e = entry(name);
    const auto & file = files_[e.file];
    if (!at::isFloatingType(e.dtype))
        throw RuntimeError(file.string() + ": tensor '" + name + "' has dtype " + e.dtype_name +
                           ", expected a floating type (F32, BF16 or F16); the checkpoint is not a Qwen-Image 2.1 one");
    if (at::IntArrayRef(e.shape) != shape)
        throw RuntimeError(file.string() + ": tensor '" + name + "' has shape " + shape_str(e.shape) + ", expected " +
                           shape_str(shape) + " from the component's config.json; the config contradicts the weights");
}

at::Tensor TensorFile::weight(const std::string & name, at::IntArrayRef shape, at::ScalarType dtype) const {
    check(name, shape);
    auto t = read(name);
    return t.scalar_type() == dtype ? t : t.to(dtype);
}

}  // namespace ddo::qwen_image_21
