// Where a transformer block's weights come from while it runs (one block = one execution group). The pipeline
// asks for block i, runs it, and hands it back; a source decides whether the weights stay resident, are read
// from the checkpoint each time (disk), or come from the engine's slots (dynamic).
#pragma once

#include <memory>
#include <string>

#include "checkpoint.hpp"
#include "transformer.hpp"

namespace ddo::qwen_image_21 {

class BlockSource {
public:
    virtual ~BlockSource() = default;
    virtual const TransformerBlockWeights & acquire(int64_t index) = 0;
    virtual void release(int64_t index) = 0;
    virtual std::string route() const = 0;
    // Bytes of block weights moved to the compute device or read from disk so far.
    virtual uint64_t bytes_streamed() const = 0;
};

// All blocks loaded once onto the device.
std::unique_ptr<BlockSource> make_resident_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                  at::Device device);
// Each acquire reads the block's tensors from the checkpoint file(s) (pread) and moves them to the device.
std::unique_ptr<BlockSource> make_disk_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                              at::Device device);
// Planner-lite until the core engine's dynamic route is linked: all blocks are read once into host memory; the
// blocks that fit in resident_budget_bytes (spread over the stack) are kept on the device, every other block is
// copied into one of `slots` preallocated device slots (round robin) when it runs.
std::unique_ptr<BlockSource> make_dynamic_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                 at::Device device, uint64_t resident_budget_bytes, int slots);
// Payload of one block in the checkpoint (bytes as stored).
uint64_t block_payload_bytes(const TensorFile & f, const TransformerConfig & c, int64_t index);

}  // namespace ddo::qwen_image_21
