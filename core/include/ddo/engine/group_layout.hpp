// The contiguous layout of each execution group: its tensors packed at 256-byte aligned offsets, so
// one copy of `bytes` moves the whole group (host staging -> slot). With Alignment::file (host placements) each
// tensor starts at 256k + (its file offset mod 64) instead: a copy then sits at the alignment the file mapping (and
// diffusers' from_pretrained, which computes on the mapping) gives it (Note [Mapped residents]).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddo/engine/execution_group.hpp"
#include "ddo/store/tensor_info.hpp"
#include "ddo/store/weight_store.hpp"

namespace ddo::engine {

inline constexpr std::uint64_t kGroupAlignment = 256;
// Alignment::file keeps each tensor's file offset mod kFileAlignment.
inline constexpr std::uint64_t kFileAlignment = 64;
enum class Alignment { slot, file };

struct TensorSlice {
    const store::TensorInfo * info = nullptr;  // borrowed from the TensorSource (outlives the layout)
    std::uint64_t offset = 0;                  // from the start of the group payload: 256-aligned (+ the file's
                                               // offset mod 64 with Alignment::file)
    std::uint64_t nbytes = 0;
    const std::string & name() const { return info->name; }
};

struct GroupLayout {
    std::size_t index = 0;           // execution order
    std::string name;                // "transformer_blocks.3" or "transformer_blocks.3/attn"
    std::string decl;                // the declared (block) group it came from
    std::string part;                // "" (block), "attn"/"mlp" (half), leaf module (leaf)
    std::uint64_t bytes = 0;         // payload size, a multiple of 256
    std::vector<TensorSlice> tensors;
    const TensorSlice * find(std::string_view tensor) const noexcept;
};

class ModelLayout {
public:
    // Resolves every tensor through source (throws RuntimeError naming a missing tensor and the
    // source) and lays each group out. Groups are split per `g` first (split_groups).
    static ModelLayout build(const std::vector<GroupDecl> & decls, const store::TensorSource & source,
                             Granularity g = Granularity::block, Alignment a = Alignment::slot);

    const std::vector<GroupLayout> & groups() const noexcept { return groups_; }
    const GroupLayout & group(std::size_t i) const { return groups_.at(i); }
    std::size_t size() const noexcept { return groups_.size(); }
    // Index of the group holding `tensor` (throws UsageError naming it when absent).
    std::size_t group_of(std::string_view tensor) const;
    // Index of a group by name (throws UsageError when absent).
    std::size_t index_of(std::string_view group_name) const;
    std::uint64_t total_bytes() const noexcept;
    std::uint64_t largest_group_bytes() const noexcept;
    Granularity granularity() const noexcept { return granularity_; }
    const store::TensorSource & source() const noexcept { return *source_; }

private:
    std::vector<GroupLayout> groups_;
    std::unordered_map<std::string, std::size_t> by_tensor_, by_name_;
    Granularity granularity_ = Granularity::block;
    const store::TensorSource * source_ = nullptr;
};

}  // namespace ddo::engine
