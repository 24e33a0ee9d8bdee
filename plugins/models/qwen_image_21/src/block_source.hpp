// Where a transformer block's weights come from while it runs (one block = one engine execution group). The
// pipeline asks for block i, runs it, and hands it back. Every executed route (resident, dynamic, disk,
// group_block, group_leaf) goes through the core offload engine (make_engine_blocks); the in-plugin resident
// source (make_resident_blocks) remains only as the parity tests' independent reference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/preset/resolved_settings.hpp"

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
    // Ends the phase (engine: end_phase, returns the outstanding owners, which must be 0).
    virtual uint64_t finish() { return 0; }
    // Report counters: {"route", "bytes_streamed", ...} (+ "engine": Engine::to_json() for the engine source).
    virtual nlohmann::json report() const { return {{"route", route()}, {"bytes_streamed", bytes_streamed()}}; }
};

// The preset's view of one component, mapped onto the engine's EngineConfig, its EngineOptions and a HostStaging.
struct EngineBlocksOptions {
    Route route = Route::dynamic;                    // resident | dynamic | disk | group_block | group_leaf
    // resident/device/pinned budgets, RAM headroom, staging slots, prefetch depth, selection, host registration
    // (mode + ceiling); allocator and allocator_backend are decided by the caller (the device it passes).
    Capacities capacities;
    const ddo_allocator_vtable * allocator = nullptr;  // borrowed; must outlive the source
    std::string allocator_name = "linear";
    // The allocator plugin's own options (preset plugin.<allocator_name>.*), as strings, for ddo_alloc_config.
    std::vector<std::pair<std::string, std::string>> allocator_options;
    // Build a HostStaging from the capacities (backend = the transport's: cuda on CUDA, host (mlock) on the CPU)
    // with Linux admission on /proc and /sys, and hand it to the engine. False: the transport's pinned memory as
    // before and no registration (the report says so).
    bool host_staging = true;
    // What the caller requested vs used (allocator backend, device, allocator options): recorded as-is under
    // report()["placement"].
    nlohmann::json placement = nlohmann::json::object();
};

// Every block is one execution group ("transformer_blocks.<i>"; group_leaf splits it into leaf groups, all
// acquired together for the block). CPU device: the CPU transport and the allocator's host backend; CUDA: the ATen
// CUDA transport and the allocator's cuda backend. Weights are viewed in place (no copy) when the checkpoint dtype
// is `dt`, else converted per acquire. Host staging: see EngineBlocksOptions::host_staging and docs/presets.md.
// Throws UsageError for a route the engine does not run here (component) or a missing allocator.
std::unique_ptr<BlockSource> make_engine_blocks(const std::filesystem::path & transformer_dir, const TransformerConfig & c,
                                                at::ScalarType dt, at::Device device, const EngineBlocksOptions & o);

// Reference (tests): all blocks loaded once onto the device, outside the engine.
std::unique_ptr<BlockSource> make_resident_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                  at::Device device);
// Payload of one block in the checkpoint (bytes as stored).
uint64_t block_payload_bytes(const TensorFile & f, const TransformerConfig & c, int64_t index);

}  // namespace ddo::qwen_image_21
