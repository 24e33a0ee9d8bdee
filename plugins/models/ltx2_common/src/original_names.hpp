// LTX-2's original tensor names (Lightricks' ltx-core checkpoints and their single-file fp8 / GGUF releases) as the
// diffusers names this code reads: the rename table of diffusers' convert_ltx2_transformer_to_diffusers (0.42.1),
// for a transformer file given with --transformer FILE (Note [Component files] in docs/architecture.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ddo/store/component_source.hpp"

namespace ddo::ltx2 {

// `source` with the DiT's renames and the connector tensors of the original file dropped when it is the
// "transformer" component replaced by a file; unchanged otherwise.
store::ComponentSource with_original_names(store::ComponentSource source, const std::string & component);

// The DiT's rename table alone (ComponentSource::renames): also how Lightricks' LoRAs, keyed by the original module
// names, find the modules they adapt (ModelRun::set_original_names; Note [Applying LoRA]).
std::vector<std::pair<std::string, std::string>> original_name_renames();

}  // namespace ddo::ltx2
