#include "ddo/engine/execution_group.hpp"

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
        for (std::size_t i = 0; i < d.tensors.size(); ++i) {
            std::string l = label(i);
            if (out.empty() || i == 0 || l != label(i - 1)) {
                GroupDecl sub;
                sub.name = l.empty() ? d.name : d.name + "/" + l;
                out.push_back(std::move(sub));
            }
            out.back().tensors.push_back(d.tensors[i]);
            out.back().parts.push_back(l);
        }
        if (d.tensors.empty()) out.push_back(GroupDecl{d.name, {}, {}});
    }
    return out;
}

}  // namespace ddo::engine
