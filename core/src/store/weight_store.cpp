#include "ddo/store/weight_store.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <optional>
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
    std::optional<GgufFile> gguf;
    // A replacing file (Note [Component files]): its offered tensors under their folder names, the index of each in
    // the file's own list, and how many it holds that belong to another component.
    std::optional<ComponentSource> source;  // set for a replacing file
    std::vector<TensorInfo> renamed;
    std::vector<std::size_t> stored_index;
    std::uint64_t not_offered = 0;
    std::string stripped_prefix;
    std::vector<const TensorInfo *> tensors;
    std::unordered_map<std::string, const TensorInfo *> by_name;
    std::unordered_map<const TensorInfo *, std::size_t> gguf_index;  // tensor -> its header.tensors index
    mutable std::atomic<std::uint64_t> gguf_direct_fallbacks{0};      // direct reads served from the mapping

    void index_one(const TensorInfo & t, const fs::path & file) {
        auto [it, fresh] = by_name.emplace(t.name, &t);
        if (!fresh)
            throw RuntimeError("tensor '" + t.name + "' is stored twice: in " + path_of(it->second->file_index).string() +
                               " and " + file.string() + "; the checkpoint is inconsistent - re-download it");
        tensors.push_back(&t);
    }
    const fs::path & path_of(std::uint32_t file_index) const {
        return gguf ? gguf->path() : files.at(file_index).path();
    }
    void index_gguf() {
        const auto & all = source ? renamed : gguf->tensors();
        for (std::size_t i = 0; i < all.size(); ++i) {
            index_one(all[i], gguf->path());
            gguf_index.emplace(&all[i], source ? stored_index[i] : i);
        }
    }

    void index_all() {
        if (gguf) return index_gguf();
        if (source) {
            for (const auto & t : renamed) index_one(t, files.front().path());
            return;
        }
        for (const auto & f : files)
            for (const auto & t : f.tensors()) index_one(t, f.path());
    }
};

std::string renamed(std::string name, const std::vector<std::pair<std::string, std::string>> & renames) {
    for (const auto & [from, to] : renames) {
        if (!from.empty() && from.front() == kAtStart) {
            const std::string_view head = std::string_view(from).substr(1);
            if (name.starts_with(head)) name.replace(0, head.size(), to);
            continue;
        }
        for (std::size_t at = name.find(from); at != std::string::npos; at = name.find(from, at + to.size()))
            name.replace(at, from.size(), to);
    }
    return name;
}

namespace {

// By its magic (ddo/store/gguf_header.hpp), else the file is read as safetensors.
bool is_gguf_file(const fs::path & file) {
    std::ifstream in(file, std::ios::binary);
    std::byte magic[4] = {};
    in.read(reinterpret_cast<char *>(magic), 4);
    return in.gcount() == 4 && is_gguf(magic);
}

// The first prefix of kSingleFilePrefixes that a tensor of a replacing file carries, or empty.
std::string file_prefix(const std::vector<TensorInfo> & tensors) {
    for (const char * p : kSingleFilePrefixes)
        for (const auto & t : tensors)
            if (t.name.size() > std::strlen(p) && t.name.starts_with(p)) return p;
    return {};
}

// A replacing file's tensor under the folder's name (Note [Component files]): the prefix stripped (a tensor without
// it belongs to another component), the source's renames applied, the dropped names left out.
std::optional<std::string> folder_name(std::string name, const std::string & prefix, const ComponentSource & source) {
    if (!prefix.empty()) {
        if (!name.starts_with(prefix)) return std::nullopt;
        name.erase(0, prefix.size());
    }
    name = renamed(std::move(name), source.renames);
    for (const auto & d : source.dropped)
        if (name.starts_with(d)) return std::nullopt;
    return name;
}

}  // namespace

WeightStore::WeightStore() : impl_(std::make_unique<Impl>()) {}
WeightStore::WeightStore(WeightStore &&) noexcept = default;
WeightStore & WeightStore::operator=(WeightStore &&) noexcept = default;
WeightStore::~WeightStore() = default;

WeightStore WeightStore::open_file(const fs::path & file) {
    WeightStore s;
    s.impl_->dir = file.parent_path();
    if (is_gguf_file(file)) s.impl_->gguf.emplace(GgufFile::open(file, 0));
    else s.impl_->files.push_back(SafetensorsFile::open(file, 0));
    s.impl_->index_all();
    return s;
}

WeightStore WeightStore::open(const ComponentSource & source) {
    if (!source.replaced()) return open_component(source.dir);
    if (!fs::is_regular_file(source.file))
        throw UsageError(source.file.string() + " is not a file; --transformer / --text-encoder take a .safetensors "
                         "or .gguf file that replaces the component's weights");
    WeightStore s;
    Impl & m = *s.impl_;
    m.dir = source.dir;
    if (fs::exists(source.dir / "config.json")) m.config = read_json_file(source.dir / "config.json");
    if (is_gguf_file(source.file)) m.gguf.emplace(GgufFile::open(source.file, 0));
    else m.files.push_back(SafetensorsFile::open(source.file, 0));
    const auto & stored = m.gguf ? m.gguf->tensors() : m.files.front().tensors();
    m.stripped_prefix = file_prefix(stored);
    for (std::size_t i = 0; i < stored.size(); ++i) {
        auto name = folder_name(stored[i].name, m.stripped_prefix, source);
        if (!name) {
            ++m.not_offered;
            continue;
        }
        m.renamed.push_back(stored[i]);
        m.renamed.back().name = std::move(*name);
        m.stored_index.push_back(i);
    }
    m.source = source;
    m.index_all();
    return s;
}

WeightStore WeightStore::open_component(const fs::path & dir) {
    if (!fs::is_directory(dir))
        throw RuntimeError("component directory " + dir.string() + " does not exist; check model_dir and the component name");
    WeightStore s;
    Impl & m = *s.impl_;
    m.dir = dir;
    if (fs::exists(dir / "config.json")) m.config = read_json_file(dir / "config.json");

    std::vector<fs::path> indexes, singles, pickles, ggufs;
    for (const auto & e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (name.ends_with(".safetensors.index.json")) indexes.push_back(e.path());
        else if (name.ends_with(".safetensors")) singles.push_back(e.path());
        else if (name.ends_with(".gguf")) ggufs.push_back(e.path());
        else if (name.ends_with(".bin") || name.ends_with(".pt") || name.ends_with(".pth") || name.ends_with(".ckpt"))
            pickles.push_back(e.path());
    }
    if (indexes.empty() && singles.empty() && !ggufs.empty()) {
        if (ggufs.size() > 1)
            throw RuntimeError("component directory " + dir.string() + " holds " + std::to_string(ggufs.size()) +
                               " *.gguf files and no *.safetensors; keep one (or point --transformer at the file)");
        m.gguf.emplace(GgufFile::open(ggufs.front(), 0));
        m.index_all();
        return s;
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
const GgufFile * WeightStore::gguf() const noexcept { return impl_->gguf ? &*impl_->gguf : nullptr; }
const std::string & WeightStore::stripped_prefix() const noexcept { return impl_->stripped_prefix; }
std::uint64_t WeightStore::not_offered() const noexcept { return impl_->not_offered; }

std::optional<std::string> WeightStore::offered_name(std::string_view stored) const {
    if (!impl_->source) return std::string(stored);
    return folder_name(std::string(stored), impl_->stripped_prefix, *impl_->source);
}

const GgufTensorInfo * WeightStore::gguf_tensor(const TensorInfo & info) const noexcept {
    const auto it = impl_->gguf_index.find(&info);
    return it == impl_->gguf_index.end() ? nullptr : &impl_->gguf->header().tensors[it->second];
}

const fs::path & WeightStore::file_path(std::uint32_t file_index) const { return impl_->path_of(file_index); }

std::vector<fs::path> WeightStore::file_paths() const {
    if (impl_->gguf) return {impl_->gguf->path()};
    std::vector<fs::path> r;
    for (const auto & f : impl_->files) r.push_back(f.path());
    return r;
}

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
    if (impl_->gguf) {  // Note [Component files]: out of its mapping
        if (mode == ReadMode::direct) ++impl_->gguf_direct_fallbacks;
        return impl_->gguf->read_tensor(info, dst);
    }
    if (info.file_index >= impl_->files.size())
        throw RuntimeError("tensor '" + info.name + "' does not belong to " + impl_->dir.string());
    impl_->files[info.file_index].read_tensor(info, dst, mode);
}

std::string WeightStore::describe() const { return impl_->dir.string(); }

const void * WeightStore::mapped(const TensorInfo & info) const {
    if (impl_->gguf) return impl_->gguf->mapped(info);
    if (info.file_index >= impl_->files.size()) return nullptr;
    return impl_->files[info.file_index].mapped(info);
}

std::uint64_t WeightStore::direct_fallbacks(std::string * reason) const {
    std::uint64_t n = 0;
    if (impl_->gguf) {
        n = impl_->gguf_direct_fallbacks.load();
        if (n > 0 && reason && reason->empty())
            *reason = impl_->gguf->path().string() + ": a GGUF file is read out of its mapping, not with O_DIRECT";
        return n;
    }
    for (const auto & f : files()) {
        std::string why;
        const std::uint64_t k = f.direct_fallbacks(&why);
        n += k;
        if (reason && k > 0 && reason->empty()) *reason = f.path().string() + ": " + why;
    }
    return n;
}

}  // namespace ddo::store
