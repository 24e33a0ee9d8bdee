#include "ddo/model/tensor_file.hpp"

#include <algorithm>

#include "ddo/error.hpp"
#include "ddo/store/dtype.hpp"
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
    for (const auto & f : t.store_->files()) t.metadata_.insert(f.metadata().begin(), f.metadata().end());
    return t;
}

TensorFile TensorFile::open_component(const std::filesystem::path & dir) {
    TensorFile t;
    t.origin_ = dir;
    t.store_ = std::make_shared<const store::WeightStore>(store::WeightStore::open_component(dir));
    for (const auto & f : t.store_->files()) t.metadata_.insert(f.metadata().begin(), f.metadata().end());
    return t;
}

std::string TensorFile::describe_files() const {
    std::string r;
    for (const auto & f : store_->files()) r += (r.empty() ? "" : ", ") + f.path().string();
    return r;
}

bool TensorFile::contains(const std::string & name) const { return store_->find(name) != nullptr; }

std::vector<std::string> TensorFile::names() const {
    std::vector<std::string> r;
    for (const auto * t : store_->tensors()) r.push_back(t->name);
    std::sort(r.begin(), r.end());
    return r;
}

const store::TensorInfo & TensorFile::entry(const std::string & name) const {
    const auto * t = store_->find(name);
    if (!t)
        throw RuntimeError(origin_.string() + ": tensor '" + name +
                           "' is missing from the checkpoint; re-export it with diffusers save_pretrained");
    return *t;
}

const std::filesystem::path & TensorFile::file_of(const std::string & name) const {
    return store_->files().at(entry(name).file_index).path();
}
std::vector<int64_t> TensorFile::shape_of(const std::string & name) const { return entry(name).shape; }
at::ScalarType TensorFile::dtype_of(const std::string & name) const { return torch::to_scalar_type(entry(name).dtype); }
uint64_t TensorFile::nbytes_of(const std::string & name) const { return entry(name).nbytes; }

at::Tensor TensorFile::read(const std::string & name) const {
    const auto & e = entry(name);
    auto t = at::empty(e.shape, at::TensorOptions().dtype(torch::to_scalar_type(e.dtype)));
    store_->read_tensor(e, t.data_ptr(), store::ReadMode::pread);  // RuntimeError naming file, tensor and errno
    return t;
}

void TensorFile::check(const std::string & name, at::IntArrayRef shape) const {
    if (!contains(name))
        throw RuntimeError(origin_.string() + ": tensor '" + name + "' is missing from the checkpoint (" +
                           describe_files() + "); re-export it with diffusers save_pretrained");
    const auto & e = entry(name);
    const auto & file = file_of(name);
    if (!at::isFloatingType(torch::to_scalar_type(e.dtype)))
        throw RuntimeError(file.string() + ": tensor '" + name + "' has dtype " + std::string(store::dtype_name(e.dtype)) +
                           ", expected a floating type (F32, BF16 or F16); the checkpoint is not one this model reads");
    if (at::IntArrayRef(e.shape) != shape)
        throw RuntimeError(file.string() + ": tensor '" + name + "' has shape " + shape_str(e.shape) + ", expected " +
                           shape_str(shape) + " from the component's config.json; the config contradicts the weights");
}

at::Tensor TensorFile::weight(const std::string & name, at::IntArrayRef shape, at::ScalarType dtype) const {
    check(name, shape);
    auto t = read(name);
    return t.scalar_type() == dtype ? t : t.to(dtype);
}

}  // namespace ddo::model
