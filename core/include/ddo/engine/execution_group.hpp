// Execution groups: the unit of residency and of one copy. A model declares its groups at block
// granularity (name -> tensor names, in execution order); the engine can split them finer.
//
// How a model plugin declares its groups (e.g. a DiT with N transformer blocks):
//   std::vector<GroupDecl> decls;
//   decls.push_back({"head", {"img_in.weight", "img_in.bias", "time_text_embed...."}, {}});
//   for (int b = 0; b < N; ++b) {
//       GroupDecl g{"transformer_blocks." + std::to_string(b), {}, {}};
//       for (auto & t : attention_tensors(b)) { g.tensors.push_back(t); g.parts.push_back("attn"); }
//       for (auto & t : mlp_tensors(b))       { g.tensors.push_back(t); g.parts.push_back("mlp"); }
//       decls.push_back(std::move(g));
//   }
//   decls.push_back({"tail", {"norm_out.linear.weight", "proj_out.weight", ...}, {}});
// The declaration order is the execution order of one step; the step repeats it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddo::engine {

enum class Granularity {
    block,  // one group per declared group
    half,   // one group per consecutive run of equal `parts` labels (attention / MLP)
    leaf,   // one group per leaf module: tensors sharing the name up to the last '.' ("...to_q"), gathered
            // where the declaration lists them apart
};

std::string_view to_string(Granularity g) noexcept;
std::optional<Granularity> parse_granularity(std::string_view s) noexcept;

struct GroupDecl {
    std::string name;                  // "transformer_blocks.3"
    std::vector<std::string> tensors;  // full tensor names, in layout order
    std::vector<std::string> parts;    // empty, or one label per tensor ("attn", "mlp"); for `half`
};

// Splits declared groups at the requested granularity. Sub-group names: "<decl>/<part>" for half,
// "<decl>/<leaf module>" for leaf; block keeps the declared names. Order is preserved.
// Throws UsageError when parts has the wrong length or a tensor is named twice.
std::vector<GroupDecl> split_groups(const std::vector<GroupDecl> & decls, Granularity g);

}  // namespace ddo::engine
