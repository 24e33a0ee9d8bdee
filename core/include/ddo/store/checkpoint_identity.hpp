// Checkpoint identity for the run report: which weights a run used, cheaply enough to record on every run.
// Per component folder: its config file's SHA-256 and, per safetensors or GGUF file, its size and the XXH3-128 of its
// header (safetensors: the 8-byte length + the JSON; GGUF: every byte before the data section: every tensor's name,
// dtype, shape and offsets). Header hashes identify
// a checkpoint's layout, not its values: a changed weight value leaves them equal, a changed shape or dtype does
// not. The full content hash (SHA-256 + XXH3-128 of every byte) is opt-in (--hash-weights) and its cost in
// seconds is recorded beside it. docs/metrics.md, "checkpoint.identity".
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::store {

struct IdentityOptions {
    bool hash_weights = false;  // also hash every byte of every safetensors file (reads the whole checkpoint)
};

// {"folder" (the folder's name), "config": {"file", "sha256"} | null, "files": [{"file", "size", "header_bytes", "header_xxh3_128",
//  ["sha256", "xxh3_128"]}], ["hash_weights_s"]}. Files are the component's *.safetensors (sorted by name) and
// its *.safetensors.index.json (sha256). Throws RuntimeError naming the file when a header cannot be read.
nlohmann::json component_identity(const std::filesystem::path & folder, const IdentityOptions & options = {});

// The whole checkpoint: {"model_index": {"file", "sha256"} | null, "components": {name: component_identity}}
// for the named component folders under `model_dir` (those absent are recorded as null with the reason). A component
// in `replaced` (--transformer FILE) adds "replaced_by": the file's entry, its "file" the absolute path.
nlohmann::json checkpoint_identity(const std::filesystem::path & model_dir, const std::vector<std::string> & components,
                                   const IdentityOptions & options = {},
                                   const std::map<std::string, std::filesystem::path> & replaced = {});

// One safetensors or GGUF file: {"file" (its name), "size", "header_bytes", "header_xxh3_128", ["sha256", "xxh3_128"]}
// (the last two with options.hash_weights). Throws RuntimeError naming the file when its header cannot be read.
nlohmann::json file_identity(const std::filesystem::path & file, const IdentityOptions & options = {});

// An input file (prompt embeddings, latents, condition images): {"file", "size", "sha256"}.
nlohmann::json input_identity(const std::filesystem::path & file);

}  // namespace ddo::store
