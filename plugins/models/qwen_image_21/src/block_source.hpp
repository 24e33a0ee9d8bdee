// Where a transformer block's weights come from while it runs (one block = one execution group of the model kit's
// ComponentWeights). The pipeline asks for block i, runs it, and hands it back. Every executed route (resident,
// dynamic, disk, group_block, group_leaf) goes through the core offload engine (engine_blocks); the in-plugin
// resident source (make_resident_blocks) remains only as the parity tests' independent reference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/model/component_weights.hpp"

#include "checkpoint.hpp"
#include "transformer.hpp"

namespace ddo::qwen_image_21 {

class BlockSource {
public:
    virtual ~BlockSource() = default;
    virtual const TransformerBlockWeights & acquire(int64_t index) = 0;
    virtual void release(int64_t index) = 0;
    // Block `index` does not run in this pass (a step cache reuses it): the bytes of its weights not streamed.
    virtual uint64_t skip(int64_t /*index*/) { return 0; }
    virtual std::string route() const = 0;
    // Bytes of block weights moved to the compute device or read from disk so far.
    virtual uint64_t bytes_streamed() const = 0;
    // Ends the phase (engine: end_phase, returns the outstanding owners, which must be 0).
    virtual uint64_t finish() { return 0; }
    // Report counters: {"route", "bytes_streamed", ...} (+ "engine": Engine::to_json() for the engine source).
    virtual nlohmann::json report() const { return {{"route", route()}, {"bytes_streamed", bytes_streamed()}}; }
};

// Every block is one execution group of component "transformer" ("transformer_blocks.<i>"; group_leaf splits it
// into leaf groups, all acquired together for the block).
std::vector<model::GroupSpec> transformer_groups(const TransformerConfig & c);

// Block weights from the kit's engine-backed weights of the transformer (borrowed: must outlive the source; the
// run unloads them). Weights are viewed in place when the checkpoint dtype is the compute dtype, else converted
// per acquire.
std::unique_ptr<BlockSource> engine_blocks(model::ComponentWeights & weights, const TransformerConfig & c);

// The same, owning the weights: opened from `transformer_dir` (or a file replacing its weights) on `plan` (tests, tools).
std::unique_ptr<BlockSource> make_engine_blocks(const store::ComponentSource & transformer_dir, const TransformerConfig & c,
                                                at::ScalarType dt, const model::ComponentPlan & plan);

// Reference (tests): all blocks loaded once onto the device, outside the engine.
std::unique_ptr<BlockSource> make_resident_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                  at::Device device);
// Payload of one block in the checkpoint (bytes as stored).
uint64_t block_payload_bytes(const TensorFile & f, const TransformerConfig & c, int64_t index);

}  // namespace ddo::qwen_image_21
