#include "ddo/store/weight_store.hpp"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/store/diffusers_checkpoint.hpp"

namespace ddo::store {

namespace fs = std::filesystem;

struct WeightStore::Impl {
    fs::path dir;
    nlohmann::json config = nlohmann::json::object();
    std::vector<SafetensorsFile> files;
    std::vector<const TensorInfo *> tensors;
    std::unordered_map<std::string, const TensorInfo *> by_name;

    void index_all() {
        for (const auto & f : files)
            for (const auto & t : f.tensors()) {
                auto [it, fresh] = by_name.emplace(t.name, &t);
                if (!fresh)
                    throw RuntimeError("tensor '" + t.name + "' is stored twice: in " + files[it->second->file_index].path().string() +
                                       " and " + f.path().string() + "; the checkpoint is inconsistent - re-download it");
                tensors.push_back(&t);
            }
    }
};

WeightStore::WeightStore() : impl_(std::make_unique<Impl>()) {}
WeightStore::WeightStore(WeightStore &&) noexcept = default;
WeightStore & WeightStore::operator=(WeightStore &&) noexcept = default;
WeightStore::~WeightStore() = default;

WeightStore WeightStore::open_file(const fs::path & file) {
    WeightStore s;
    s.impl_->dir = file.parent_path();
    s.impl_->files.push_back(SafetensorsFile::open(file, 0));
    s.impl_->index_all();
    return s;
}

WeightStore WeightStore::open_component(const fs::path & dir) {
    if (!fs::is_directory(dir))
        throw RuntimeError("component directory " + dir.string() + " does not exist; check model_dir and the component name");
    WeightStore s;
    Impl & m = *s.impl_;
    m.dir = dir;
    if (fs::exists(dir / "config.json")) m.config = read_json_file(dir / "config.json");

    std::vector<fs::path> indexes, singles, pickles;
    for (const auto & e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (name.ends_with(".safetensors.index.json")) indexes.push_back(e.path());
        else if (name.ends_with(".safetensors")) singles.push_back(e.path());
        else if (name.ends_with(".bin") || name.ends_with(".pt") || name.ends_with(".pth") || name.ends_with(".ckpt"))
            pickles.push_back(e.path());
    }
    if (indexes.empty() && singles.empty() && !pickles.empty()) {
        std::sort(pickles.begin(), pickles.end());
        throw RuntimeError("component directory " + dir.string() + " holds pickled PyTorch weights (" +
                           pickles.front().filename().string() +
                           (pickles.size() > 1 ? " and " + std::to_string(pickles.size() - 1) + " more" : "") +
                           ") and no *.safetensors; ddo does not read pickles (loading one runs its code). Re-save the "
                           "component as safetensors in Python: load it (from_pretrained(DIR, use_safetensors=False); "
                           "an old TorchAO-quantized one with torchao >= 0.16) and save_pretrained(OUT, "
                           "safe_serialization=True)");
    }
    std::sort(indexes.begin(), indexes.end());
    std::sort(singles.begin(), singles.end());
    if (indexes.size() > 1)
        throw RuntimeError("component directory " + dir.string() + " holds " + std::to_string(indexes.size()) +
                           " *.safetensors.index.json files; keep one");
    if (!indexes.empty()) {
        const fs::path idx_path = indexes.front();
        nlohmann::json idx = read_json_file(idx_path);
        auto wm = idx.find("weight_map");
        if (!idx.is_object() || wm == idx.end() || !wm->is_object())
            throw RuntimeError("sharded index " + idx_path.string() + " has no \"weight_map\" object; re-download the checkpoint");
        std::map<std::string, std::uint32_t> shard_index;
        std::vector<std::pair<std::string, std::string>> entries;
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it.value().is_string())
                throw RuntimeError("sharded index " + idx_path.string() + ": weight_map entry for tensor '" + it.key() + "' is not a file name");
            const std::string shard = it.value().get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
                throw RuntimeError("sharded index " + idx_path.string() + ": tensor '" + it.key() + "' names shard '" + shard +
                                   "' outside the component directory; the index is hostile or corrupt");
            if (!shard_index.count(shard)) {
                auto n = static_cast<std::uint32_t>(shard_index.size());
                shard_index[shard] = n;
            }
            entries.emplace_back(it.key(), shard);
        }
        std::vector<std::string> names(shard_index.size());
        for (auto & [f, i] : shard_index) names[i] = f;
        for (std::uint32_t i = 0; i < names.size(); ++i) {
            const fs::path p = dir / names[i];
            if (!fs::exists(p))
                throw RuntimeError("shard " + p.string() + " named by " + idx_path.string() + " is missing; re-download the checkpoint");
            m.files.push_back(SafetensorsFile::open(p, i));
        }
        m.index_all();
        for (const auto & [tensor, shard] : entries) {
            auto it = m.by_name.find(tensor);
            if (it == m.by_name.end() || m.files[it->second->file_index].path().filename() != shard)
                throw RuntimeError("sharded index " + idx_path.string() + " places tensor '" + tensor + "' in " + shard +
                                   " but that shard does not hold it; re-download the checkpoint");
        }
        if (m.by_name.size() != entries.size())
            for (const auto * t : m.tensors)
                if (!wm->contains(t->name))
                    throw RuntimeError("tensor '" + t->name + "' in " + m.files[t->file_index].path().string() +
                                       " is not listed in " + idx_path.string() + "; the index is stale");
        return s;
    }
    fs::path single;
    for (const char * pref : {"diffusion_pytorch_model.safetensors", "model.safetensors"})
        if (fs::exists(dir / pref)) { single = dir / pref; break; }
    if (single.empty() && singles.size() == 1) single = singles.front();
    if (single.empty())
        throw RuntimeError("component directory " + dir.string() + (singles.empty() ? " holds no *.safetensors file" :
                           " holds several *.safetensors files and no *.safetensors.index.json") + "; check the checkpoint layout");
    m.files.push_back(SafetensorsFile::open(single, 0));
    m.index_all();
    return s;
}

const fs::path & WeightStore::directory() const noexcept { return impl_->dir; }
const nlohmann::json & WeightStore::config() const { return impl_->config; }
const std::vector<SafetensorsFile> & WeightStore::files() const noexcept { return impl_->files; }
const std::vector<const TensorInfo *> & WeightStore::tensors() const noexcept { return impl_->tensors; }

const TensorInfo * WeightStore::find(std::string_view name) const {
    auto it = impl_->by_name.find(std::string(name));
    return it == impl_->by_name.end() ? nullptr : it->second;
}

const TensorInfo & WeightStore::at(std::string_view name) const {
    if (const auto * t = find(name)) return *t;
    throw RuntimeError("tensor '" + std::string(name) + "' is not in the checkpoint " + impl_->dir.string() +
                       "; check the model plugin's tensor names against the checkpoint");
}

void WeightStore::read_tensor(const TensorInfo & info, void * dst, ReadMode mode) const {
    if (info.file_index >= impl_->files.size())
        throw RuntimeError("tensor '" + info.name + "' does not belong to " + impl_->dir.string());
    impl_->files[info.file_index].read_tensor(info, dst, mode);
}

std::string WeightStore::describe() const { return impl_->dir.string(); }

const void * WeightStore::mapped(const TensorInfo & info) const {
    if (info.file_index >= impl_->files.size()) return nullptr;
    return impl_->files[info.file_index].mapped(info);
}

std::uint64_t WeightStore::direct_fallbacks(std::string * reason) const {
    std::uint64_t n = 0;
    for (const auto & f : files()) {
        std::string why;
        const std::uint64_t k = f.direct_fallbacks(&why);
        n += k;
        if (reason && k > 0 && reason->empty()) *reason = f.path().string() + ": " + why;
    }
    return n;
}

}  // namespace ddo::store
