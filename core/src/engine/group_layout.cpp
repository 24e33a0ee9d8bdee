#include "ddo/engine/group_layout.hpp"
#include "ddo/store/dtype.hpp"

#include <algorithm>

#include "ddo/error.hpp"

namespace ddo::engine {

const TensorSlice * GroupLayout::find(std::string_view tensor) const noexcept {
    for (const auto & s : tensors)
        if (s.info->name == tensor) return &s;
    return nullptr;
}

ModelLayout ModelLayout::build(const std::vector<GroupDecl> & decls, const store::TensorSource & source, Granularity g,
                               Alignment a) {
    ModelLayout m;
    m.granularity_ = g;
    m.source_ = &source;
    // Remember which declared group each split group came from.
    std::unordered_map<std::string, std::string> decl_of_tensor;
    for (const auto & d : decls)
        for (const auto & t : d.tensors) decl_of_tensor[t] = d.name;
    auto split = split_groups(decls, g);
    for (auto & d : split) {
        GroupLayout gl;
        gl.index = m.groups_.size();
        gl.name = d.name;
        gl.decl = d.tensors.empty() ? d.name : decl_of_tensor[d.tensors.front()];
        gl.part = (g == Granularity::block || d.parts.empty()) ? std::string() : d.parts.front();
        std::uint64_t off = 0;
        for (const auto & t : d.tensors) {
            const store::TensorInfo * info = source.find(t);
            if (!info)
                throw RuntimeError("execution group '" + d.name + "' names tensor '" + t + "', which is not in " +
                                   source.describe() + "; the model plugin and the checkpoint disagree");
            // A file offset off its dtype's alignment keeps the slot's (a view must be dtype-aligned).
            const std::uint64_t r = info->file_offset % kFileAlignment;
            const bool keep = a == Alignment::file && r % std::max<std::uint64_t>(1, store::dtype_size(info->dtype)) == 0;
            const std::uint64_t at = off + (keep ? r : 0);
            gl.tensors.push_back(TensorSlice{info, at, info->nbytes});
            off = (at + info->nbytes + kGroupAlignment - 1) / kGroupAlignment * kGroupAlignment;
            m.by_tensor_[t] = gl.index;
        }
        gl.bytes = std::max<std::uint64_t>(off, kGroupAlignment);
        if (!m.by_name_.emplace(gl.name, gl.index).second)
            throw UsageError("execution group name '" + gl.name + "' is declared twice");
        m.groups_.push_back(std::move(gl));
    }
    return m;
}

std::size_t ModelLayout::group_of(std::string_view tensor) const {
    auto it = by_tensor_.find(std::string(tensor));
    if (it == by_tensor_.end()) throw UsageError("tensor '" + std::string(tensor) + "' is in no execution group");
    return it->second;
}

std::size_t ModelLayout::index_of(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    if (it == by_name_.end()) throw UsageError("no execution group named '" + std::string(name) + "'");
    return it->second;
}

std::uint64_t ModelLayout::total_bytes() const noexcept {
    std::uint64_t s = 0;
    for (const auto & g : groups_) s += g.bytes;
    return s;
}

std::uint64_t ModelLayout::largest_group_bytes() const noexcept {
    std::uint64_t s = 0;
    for (const auto & g : groups_) s = std::max(s, g.bytes);
    return s;
}

}  // namespace ddo::engine
