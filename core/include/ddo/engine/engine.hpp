// The offload engine: residents, a slot pool over the allocator, prefetch in the known execution
// order (also across the step boundary), leases with completion fences, counters.
//
// How a model plugin runs forward under the engine (see also execution_group.hpp, planner.hpp):
//
//   auto store  = ddo::store::WeightStore::open_component(ctx.model_dir / "transformer");
//   auto layout = ddo::engine::ModelLayout::build(my_group_decls(config), store, granularity);
//   auto caps   = ddo::engine::Capacities::observe_host();   // + transport.observe_device()
//   auto plan   = ddo::engine::plan_residency(layout, engine_config, caps);
//   auto transport = ddo::torch::make_cuda_transport(0);   // or ddo::engine::make_cpu_transport()
//   ddo::engine::Engine engine(layout, plan, allocator_vtable, *transport);
//   engine.begin_phase("denoise");                          // prepares host copies, uploads residents
//   for (int step = 0; step < steps; ++step)
//       for (std::size_t g = 0; g < layout.size(); ++g) {
//           ddo::engine::Lease lease = engine.acquire(g);   // waits (CPU) / orders the stream (CUDA)
//           auto w = ddo::torch::tensor_views(lease);       // name -> at::Tensor at the slot address
//           x = block_forward(x, w);                        // enqueue compute reading the slot
//           lease.release();                                // records the compute fence
//       }
//   engine.end_phase();                                     // outstanding owners must be 0
//   report["engine"] = engine.to_json();
//   engine.close();                                         // BUSY while a lease/upload is pending
//
// Groups must be acquired in execution order for prefetch to hit; any order is correct (a miss
// uploads on demand). A Lease must not outlive the Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/ddo_allocator_plugin.h"
#include "ddo/engine/engine_counters.hpp"
#include "ddo/engine/group_layout.hpp"
#include "ddo/engine/planner.hpp"
#include "ddo/engine/transport.hpp"

namespace ddo::platform {
class HostStaging;  // ddo/platform/host_staging.hpp
}

namespace ddo::engine {

struct TensorView {
    const store::TensorInfo * info = nullptr;
    void * data = nullptr;  // device address (host address on the CPU transport)
    std::span<const std::int64_t> shape() const { return info->shape; }
    store::DType dtype() const { return info->dtype; }
    std::uint64_t nbytes() const { return info->nbytes; }
};

class Engine;

class Lease {
public:
    Lease() = default;
    Lease(Lease && o) noexcept;
    Lease & operator=(Lease && o) noexcept;
    Lease(const Lease &) = delete;
    Lease & operator=(const Lease &) = delete;
    ~Lease();

    std::size_t group() const noexcept { return group_; }
    const GroupLayout & layout() const;
    // Start of the contiguous group payload; null for a group read in place from the file mapping (mapped()):
    // its tensors are where the file has them, so use view() / tensor_data().
    void * data() const noexcept { return data_; }
    bool mapped() const noexcept { return mapped_ != nullptr; }
    // Address of one of the group's tensors (a slice of layout().tensors).
    void * tensor_data(const TensorSlice & slice) const;
    int device_ordinal() const noexcept;             // -1: host memory (CPU transport)
    // Throws UsageError naming the tensor and the group when the tensor is not in this group.
    TensorView view(std::string_view tensor) const;
    // Ends the lease: records the compute fence that guards the slot's reuse. Idempotent.
    void release();
    explicit operator bool() const noexcept { return engine_ != nullptr; }

private:
    friend class Engine;
    Lease(Engine * e, std::size_t group, int slot, void * data, const std::vector<void *> * mapped = nullptr) noexcept
        : engine_(e), group_(group), slot_(slot), data_(data), mapped_(mapped) {}
    Engine * engine_ = nullptr;
    std::size_t group_ = 0;
    int slot_ = -1;  // -1: resident
    void * data_ = nullptr;
    const std::vector<void *> * mapped_ = nullptr;  // per tensor slice, for a group read in place
};

struct EngineOptions {
    int device = 0;                      // CUDA ordinal (ignored by the CPU transport)
    std::uint64_t pool_physical_limit = 0;
    std::string allocator_name = "linear";
    // The allocator plugin's own options (preset `plugin.<allocator>.*`), passed as ddo_kv to pool_create.
    std::vector<std::pair<std::string, std::string>> allocator_options;
    // Borrowed, may be null; must outlive the engine. When given, host copies planned `pinned` and the disk
    // staging buffers come from its pinned route (a refusal or failure falls back to pageable memory, counted in
    // pinned_fallbacks with the reason), and host copies planned `pageable` are registered through its
    // registration route per its mode (full: all, bounded: up to the ceiling, off: none). Its backend must be the
    // transport's: `host` (mlock) on a host-memory transport, `cuda` on the CUDA transport. Null: the transport's
    // allocate_host (cudaHostAlloc on CUDA) as before, and no registration. See Note [Engine host staging].
    platform::HostStaging * staging = nullptr;
    // false (or a staging whose limits().pinned_route is off): pinning is off by choice (e.g. the preset's
    // capacities.pin_host_memory = false). Every buffer the plan wants pinned (host copies planned `pinned`, the
    // disk staging buffers) is pageable, and no pinned memory is asked for: neither the staging's pinned route nor
    // the transport's pinned allocate_host. Not a refusal: pinned_fallbacks stays 0. pinned_route_reason says why
    // (reported in host_staging_reason when there is no staging; the staging reports its own limits).
    bool pinned_route = true;
    std::string pinned_route_reason;
    // Host transport only: a resident (or component) group whose tensors the source has in a read-only file mapping
    // (TensorSource::mapped, suitably aligned) is read in place: no pool buffer, no copy, no fresh pages, as
    // diffusers uses a mapped safetensors file. false: every resident group is copied into the pool.
    // Note [Mapped residents] in docs/architecture.md.
    bool map_file_residents = true;
    // Host transport only: a group read from the file (the disk route, residents that are not mapped) is read
    // straight into its slot or resident buffer, one copy, with no staging buffers at all. false: file -> staging
    // -> destination, the path the CUDA transport must take (the staging contract tests use it on the CPU).
    bool read_files_into_destination = true;
    // When the plan streams: time one host -> device copy (up to 64 MiB, into the first slot before anything uses
    // it) from pinned and from pageable memory, reported as counters.link (Transport::measure_link).
    bool measure_link = true;
};

class Engine {
public:
    // layout, allocator and transport are borrowed and must outlive the engine.
    // Throws UsageError for a plan that does not match the layout, RuntimeError on allocator failure.
    Engine(const ModelLayout & layout, Plan plan, const ddo_allocator_vtable * allocator,
           Transport & transport, EngineOptions options = {});
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;
    // Drains and closes; a refused close is counted and the pool leaked, never freed under a reader.
    ~Engine();

    // Builds host copies (pinned/pageable) and uploads residents on the first call; `component`
    // uploads every group here. Idempotent per phase.
    void begin_phase(std::string_view name);
    // Lease of group i: resident address, or a slot holding it (prefetched: hit; else upload: miss).
    // Starts the uploads of the next prefetch_depth streamed groups in execution order (wrapping
    // into the next step). Throws RuntimeError when the upload failed (naming the group).
    Lease acquire(std::size_t group);
    // Group i does not run in this pass (a step cache reuses its output; Note [Step caching]): nothing is acquired or
    // uploaded for it, and what a prefetch already put in a slot stays there for the next pass that runs it. Returns
    // the group's payload when it streams (counted in bytes_skipped), 0 for a resident group.
    std::uint64_t skip(std::size_t group);
    // Drains uploads, frees `component` buffers, records outstanding owners (returned; must be 0).
    std::uint64_t end_phase();
    // OK, or DDO_STATUS_BUSY while a lease or upload is pending (counted as a close refusal).
    ddo_status close() noexcept;
    // A new run on this engine, kept loaded since the last one (`ddo-host serve`, Note [Serving]): the counters of
    // what moved and waited (bytes moved, uploads and their times, hits, misses, stalls, failures, phase ends) start
    // again from 0, so the run's report shows its own; what the engine holds (device, host-copy, staging and mapped
    // bytes, the link measurement) stays. Between phases only: UsageError while a lease or upload is outstanding.
    void restart_counters();

    const Plan & plan() const noexcept;
    const ModelLayout & layout() const noexcept;
    Transport & transport() noexcept;
    EngineCounters counters() const;
    // {"plan":..., "counters":..., "allocator": stats, "host_staging": HostStaging::to_json() or null with
    //  "host_staging_reason"}
    nlohmann::json to_json() const;
    // The groups whose uploads were started, in order (tests check prefetch order).
    std::vector<std::size_t> upload_log() const;

private:
    friend class Lease;
    void release_lease(Lease & l) noexcept;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ddo::engine
