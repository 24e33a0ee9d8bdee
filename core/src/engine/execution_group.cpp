#include "ddo/engine/execution_group.hpp"

#include <unordered_map>
#include <unordered_set>

#include "ddo/error.hpp"

namespace ddo::engine {

std::string_view to_string(Granularity g) noexcept {
    switch (g) {
        case Granularity::block: return "block";
        case Granularity::half: return "half";
        case Granularity::leaf: return "leaf";
    }
    return "?";
}

std::optional<Granularity> parse_granularity(std::string_view s) noexcept {
    if (s == "block") return Granularity::block;
    if (s == "half" || s == "phase") return Granularity::half;
    if (s == "leaf") return Granularity::leaf;
    return std::nullopt;
}

namespace {
std::string leaf_of(const std::string & tensor) {
    auto dot = tensor.rfind('.');
    return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}
}  // namespace

std::vector<GroupDecl> split_groups(const std::vector<GroupDecl> & decls, Granularity g) {
    std::unordered_set<std::string> seen;
    for (const auto & d : decls) {
        if (!d.parts.empty() && d.parts.size() != d.tensors.size())
            throw UsageError("execution group '" + d.name + "' declares " + std::to_string(d.parts.size()) +
                             " part labels for " + std::to_string(d.tensors.size()) + " tensors; give one label per tensor or none");
        for (const auto & t : d.tensors)
            if (!seen.insert(t).second)
                throw UsageError("tensor '" + t + "' is declared in more than one execution group (again in '" + d.name + "')");
    }
    if (g == Granularity::block) return decls;
    std::vector<GroupDecl> out;
    for (const auto & d : decls) {
        auto label = [&](std::size_t i) { return g == Granularity::half ? (d.parts.empty() ? std::string() : d.parts[i]) : leaf_of(d.tensors[i]); };
        // leaf: a leaf module's tensors gather in one group, at its first tensor's place, wherever the declaration
        // lists them (a weight and its bias apart: Gemma-3's and Qwen3's attention biases follow every weight);
        // half: one group per consecutive run of a label.
        std::unordered_map<std::string, std::size_t> leaf_at;
        for (std::size_t i = 0; i < d.tensors.size(); ++i) {
            const std::string l = label(i);
            const std::string name = l.empty() ? d.name : d.name + "/" + l;
            std::size_t at = out.size();
            if (g == Granularity::leaf) {
                const auto [it, fresh] = leaf_at.emplace(l, out.size());
                at = it->second;
                if (fresh) out.push_back(GroupDecl{name, {}, {}});
            } else if (i == 0 || l != label(i - 1)) {
                out.push_back(GroupDecl{name, {}, {}});
            } else {
                at = out.size() - 1;
            }
            out[at].tensors.push_back(d.tensors[i]);
            out[at].parts.push_back(l);
        }
        if (d.tensors.empty()) out.push_back(GroupDecl{d.name, {}, {}});
    }
    return out;
}

}  // namespace ddo::engine
