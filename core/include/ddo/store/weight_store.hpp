// One diffusers component directory (e.g. <model>/transformer): its config.json and its weights,
// either one *.safetensors file, a sharded set named by *.safetensors.index.json ("weight_map"), or one *.gguf file;
// or a single file that replaces the folder's weights (ddo/store/component_source.hpp).
// Every shard is validated; a tensor named twice, a weight_map entry that points to a missing shard or
// to a shard without that tensor are errors (ddo::RuntimeError naming the files and tensor).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/store/component_source.hpp"
#include "ddo/store/gguf_file.hpp"
#include "ddo/store/read_mode.hpp"
#include "ddo/store/safetensors_file.hpp"
#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

// Where group payload bytes come from (a checkpoint, or a synthetic in-memory model).
class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual const TensorInfo * find(std::string_view name) const = 0;
    // Copies the tensor's bytes into dst (dst holds info.nbytes). Thread-safe. Throws RuntimeError.
    virtual void read_tensor(const TensorInfo & info, void * dst, ReadMode mode) const = 0;
    // A stable name for errors and reports (the directory or "synthetic").
    virtual std::string describe() const = 0;
    // The tensor's bytes in place in a read-only mapping that lives as long as the source, or null when the source
    // has none (an in-memory source, a file that cannot be mapped). The engine reads resident groups on a host
    // transport through it instead of copying them (Note [Mapped residents] in docs/architecture.md).
    virtual const void * mapped(const TensorInfo & info) const {
        (void)info;
        return nullptr;
    }
    // Reads asked for with ReadMode::direct that went through buffered pread instead, and (reason) why; 0 for a
    // source without files.
    virtual std::uint64_t direct_fallbacks(std::string * reason) const {
        (void)reason;
        return 0;
    }
};

class WeightStore final : public TensorSource {
public:
    // dir: a component directory. Looks for, in order: *.safetensors.index.json (sharded),
    // diffusion_pytorch_model.safetensors, model.safetensors, the only *.safetensors present, the only *.gguf present.
    static WeightStore open_component(const std::filesystem::path & dir);
    // A single file, safetensors or GGUF (by its magic; no config.json needed).
    static WeightStore open_file(const std::filesystem::path & file);
    // The component's folder, or (source.file set) the folder's config.json with the file's tensors, named as the
    // folder's would be (component_source.hpp: the prefix stripped, the source's renames applied, names of another
    // component left out).
    static WeightStore open(const ComponentSource & source);

    const std::filesystem::path & directory() const noexcept;
    const nlohmann::json & config() const;  // config.json (empty object when absent)
    const std::vector<SafetensorsFile> & files() const noexcept;  // the safetensors files (none for a GGUF store)
    const GgufFile * gguf() const noexcept;                          // the GGUF file, or null
    // The GGUF description (type, PyTorch-order shape) of a tensor of tensors() in a GGUF store; null otherwise.
    const GgufTensorInfo * gguf_tensor(const TensorInfo & info) const noexcept;
    const std::filesystem::path & file_path(std::uint32_t file_index) const;  // the file holding a TensorInfo
    std::vector<std::filesystem::path> file_paths() const;
    // A replacing single file (Note [Component files]): the prefix stripped from its names, or empty; how many of its
    // tensors belong to another component and are not offered; the name a stored name is offered under (nullopt: not
    // offered; the name itself for a folder).
    const std::string & stripped_prefix() const noexcept;
    std::uint64_t not_offered() const noexcept;
    std::optional<std::string> offered_name(std::string_view stored) const;
    const std::vector<const TensorInfo *> & tensors() const noexcept;  // every tensor, all shards

    const TensorInfo * find(std::string_view name) const override;
    const TensorInfo & at(std::string_view name) const;  // throws RuntimeError naming dir and tensor
    void read_tensor(const TensorInfo & info, void * dst, ReadMode mode) const override;
    std::uint64_t direct_fallbacks(std::string * reason) const override;
    std::string describe() const override;
    const void * mapped(const TensorInfo & info) const override;

    WeightStore(WeightStore &&) noexcept;
    WeightStore & operator=(WeightStore &&) noexcept;
    ~WeightStore() override;

private:
    WeightStore();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::store
