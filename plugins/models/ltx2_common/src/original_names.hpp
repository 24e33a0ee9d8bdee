// LTX-2's original tensor names (Lightricks' ltx-core checkpoints and their single-file fp8 / GGUF releases) as the
// diffusers names this code reads: the rename table of diffusers' convert_ltx2_transformer_to_diffusers (0.42.1),
// for a transformer file given with --transformer FILE (Note [Component files] in docs/architecture.md).
#pragma once

#include <string>

#include "ddo/store/component_source.hpp"

namespace ddo::ltx2 {

// `source` with the DiT's renames and the connector tensors of the original file dropped when it is the
// "transformer" component replaced by a file; unchanged otherwise.
store::ComponentSource with_original_names(store::ComponentSource source, const std::string & component);

}  // namespace ddo::ltx2
