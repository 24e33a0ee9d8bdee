#include "ddo/model/tensor_file.hpp"

#include <algorithm>
#include <set>

#include "ddo/error.hpp"
#include "ddo/store/dtype.hpp"
#include "ddo/torch/quant/decode.hpp"
#include "ddo/torch/tensor_views.hpp"

namespace ddo::model {

std::string shape_str(at::IntArrayRef s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

TensorFile TensorFile::open_file(const std::filesystem::path & path) {
    TensorFile t;
    t.origin_ = path;
    t.store_ = std::make_shared<const store::WeightStore>(store::WeightStore::open_file(path));
    t.encodings_ = std::make_shared<const store::ComponentEncodings>(store::ComponentEncodings::detect(*t.store_));
    for (const auto & f : t.store_->files()) t.metadata_.insert(f.metadata().begin(), f.metadata().end());
    return t;
}

TensorFile TensorFile::open_component(const store::ComponentSource & source) {
    TensorFile t;
    t.origin_ = source.replaced() ? source.file : source.dir;
    t.replacing_ = source.file;
    t.store_ = std::make_shared<const store::WeightStore>(store::WeightStore::open(source));
    t.encodings_ = std::make_shared<const store::ComponentEncodings>(store::ComponentEncodings::detect(*t.store_));
    for (const auto & f : t.store_->files()) t.metadata_.insert(f.metadata().begin(), f.metadata().end());
    return t;
}

std::string TensorFile::describe_files() const {
    std::string r;
    for (const auto & f : store_->file_paths()) r += (r.empty() ? "" : ", ") + f.string();
    return r;
}

void TensorFile::require_known(const std::vector<std::string> & known, const std::string & model) const {
    if (!replaced()) return;
    const std::set<std::string> want(known.begin(), known.end());
    std::vector<std::string> unknown;
    for (const auto & n : names())
        if (!want.count(n)) unknown.push_back(n);
    if (unknown.empty()) return;
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(unknown.size(), 5); ++i) first += (i ? ", " : "") + unknown[i];
    const auto & pre = store_->stripped_prefix();
    throw UsageError(replacing_.string() + ": " + std::to_string(unknown.size()) + " of its " +
                     std::to_string(names().size()) + " tensors are not " + model + " tensors (" + first +
                     (unknown.size() > 5 ? ", ..." : "") + ")" +
                     (pre.empty() ? std::string() : " after the prefix '" + pre + "' was stripped") +
                     "; point the flag at a file of this model in diffusers names (or under model.diffusion_model.)");
}

bool TensorFile::contains(const std::string & name) const { return encodings_->find(name) != nullptr; }

std::vector<std::string> TensorFile::names() const { return encodings_->names(); }

const store::EncodedTensor & TensorFile::entry(const std::string & name) const {
    const auto * t = encodings_->find(name);
    if (!t)
        throw RuntimeError(origin_.string() + ": tensor '" + name +
                           "' is missing from the checkpoint; re-export it with diffusers save_pretrained");
    return *t;
}

const std::filesystem::path & TensorFile::file_of(const std::string & name) const {
    return store_->file_path(entry(name).parts.front()->file_index);
}
std::vector<int64_t> TensorFile::shape_of(const std::string & name) const { return entry(name).shape; }
at::ScalarType TensorFile::dtype_of(const std::string & name) const {
    const auto & e = entry(name);
    if (e.encoding == store::Encoding::dense) return torch::to_scalar_type(e.parts.front()->dtype);
    return e.encoding == store::Encoding::ggml ? at::kFloat : at::kBFloat16;
}
uint64_t TensorFile::nbytes_of(const std::string & name) const { return entry(name).stored_bytes(); }
bool TensorFile::quantized() const { return encodings_->quantized(); }
nlohmann::json TensorFile::quantization() const { return encodings_->summary(); }

at::Tensor TensorFile::read_as(const std::string & name, at::ScalarType dtype) const {
    const auto & e = entry(name);
    std::vector<at::Tensor> parts;
    for (const auto * p : e.parts) {
        auto t = at::empty(p->shape, at::TensorOptions().dtype(torch::to_scalar_type(p->dtype)));
        store_->read_tensor(*p, t.data_ptr(), store::ReadMode::pread);  // RuntimeError naming file, tensor and errno
        parts.push_back(std::move(t));
    }
    return torch::quant::decode(e, parts, dtype);
}

at::Tensor TensorFile::read(const std::string & name) const { return read_as(name, dtype_of(name)); }

bool TensorFile::contains_stored(const std::string & stored_name) const { return store_->find(stored_name) != nullptr; }

at::Tensor TensorFile::read_stored(const std::string & stored_name) const {
    const auto & p = store_->at(stored_name);  // RuntimeError naming the folder and tensor
    auto t = at::empty(p.shape, at::TensorOptions().dtype(torch::to_scalar_type(p.dtype)));
    store_->read_tensor(p, t.data_ptr(), store::ReadMode::pread);
    return t;
}

void TensorFile::check(const std::string & name, at::IntArrayRef shape) const {
    if (!contains(name))
        throw RuntimeError(origin_.string() + ": tensor '" + name + "' is missing from the checkpoint (" +
                           describe_files() + "); re-export it with diffusers save_pretrained");
    const auto & e = entry(name);
    const auto & file = file_of(name);
    const auto stored = e.parts.front()->dtype;
    if (e.encoding == store::Encoding::dense && !at::isFloatingType(torch::to_scalar_type(stored)))
        throw RuntimeError(file.string() + ": tensor '" + name + "' has dtype " + std::string(store::dtype_name(stored)) +
                           ", expected a floating type (F32, BF16 or F16) or a quantized encoding ddo reads (SDNQ, "
                           "TorchAO FP8, scaled FP8, GGUF); the checkpoint is not one this model reads");
    if (at::IntArrayRef(e.shape) != shape)
        throw RuntimeError(file.string() + ": tensor '" + name + "' has shape " + shape_str(e.shape) + ", expected " +
                           shape_str(shape) + " from the component's config.json; the config contradicts the weights");
}

at::Tensor TensorFile::weight(const std::string & name, at::IntArrayRef shape, at::ScalarType dtype) const {
    check(name, shape);
    return read_as(name, dtype);
}

}  // namespace ddo::model
