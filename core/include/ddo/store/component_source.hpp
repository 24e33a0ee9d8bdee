// Where one component's weights come from: its diffusers folder (config.json and the weights beside it), or a single
// file that replaces the folder's weights (`ddo-host --transformer FILE`, `--text-encoder FILE`: a .safetensors or
// .gguf in diffusers names or under the original checkpoint's prefix), as stable-diffusion.cpp's --diffusion-model
// and ComfyUI's loaders take one. The folder still gives config.json. Note [Component files] in docs/architecture.md.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ddo::store {

inline constexpr char kAtStart = '\x01';

struct ComponentSource {
    std::filesystem::path dir;   // the component folder: its config.json, and its weights unless `file` is set
    std::filesystem::path file;  // a single .safetensors or .gguf that replaces the folder's weights; empty: none
    // A file's original names -> the folder's (the model's rename table, e.g. LTX-2's "patchify_proj" -> "proj_in"):
    // each pair replaces every occurrence of `first` by `second`, in order, after the prefix is stripped; a `first`
    // that begins with '\x01' (kAtStart) replaces only at the start of a name.
    std::vector<std::pair<std::string, std::string>> renames;
    // Names (after renaming) of tensors that belong to another component in the original file (LTX-2's
    // "video_embeddings_connector." in the DiT): not offered.
    std::vector<std::string> dropped;

    ComponentSource(std::filesystem::path folder) : dir(std::move(folder)) {}  // NOLINT: a folder is a source
    ComponentSource(std::filesystem::path folder, std::filesystem::path weights)
        : dir(std::move(folder)), file(std::move(weights)) {}

    bool replaced() const noexcept { return !file.empty(); }
};

// `name` with a rename table applied (ComponentSource::renames: each pair in order, every occurrence, or only at the
// start for a `first` beginning with kAtStart). Defined in weight_store.cpp.
std::string renamed(std::string name, const std::vector<std::pair<std::string, std::string>> & renames);

// The ddo-host flag that gives a component's file: "text_encoder" -> "text-encoder" (--text-encoder FILE).
inline std::string component_flag(std::string component) {
    for (auto & ch : component)
        if (ch == '_') ch = '-';
    return component;
}

// The prefixes a single file's tensor names may carry before the diffusers names (ComfyUI and the original
// checkpoints save the DiT under "model.diffusion_model."): the first one any tensor of the file carries is stripped,
// and a tensor without it belongs to another component of a combined file (its VAE, its text encoder): not offered.
inline constexpr const char * kSingleFilePrefixes[] = {"model.diffusion_model.", "diffusion_model."};

}  // namespace ddo::store
