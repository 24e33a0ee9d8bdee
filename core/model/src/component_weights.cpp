#include "ddo/model/component_weights.hpp"

#include <ATen/ATen.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <unordered_set>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/host_staging.hpp"
#include "ddo/platform/linux_admission.hpp"
#include "ddo/store/weight_encoding.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "ddo/torch/quant/decode.hpp"
#include "ddo/torch/tensor_views.hpp"
#include "ddo/util/format_bytes.hpp"
#include "scratch_pool.hpp"

namespace ddo::model {

namespace en = ddo::engine;
namespace pf = ddo::platform;

const at::Tensor & GroupTensors::at(std::string_view name) const {
    const auto it = map_.find(std::string(name));
    if (it == map_.end())
        throw RuntimeError("tensor " + std::string(name) + " is not in execution group " + group_ +
                           " (the plugin's group declaration and its state-dict mapping disagree)");
    return it->second;
}

Linear GroupTensors::linear(const std::string & module, bool bias) const {
    Linear l{at(module + ".weight"), std::nullopt, lora(module + ".weight")};
    if (bias) l.bias = at(module + ".bias");
    return l;
}

struct ComponentWeights::Impl {
    std::string component;
    at::ScalarType dtype = at::kFloat;
    std::optional<store::WeightStore> store;
    std::optional<store::ComponentEncodings> encodings;  // Note [Quantized weights]: how each tensor is stored
    std::vector<GroupSpec> specs;
    std::vector<std::string> declared;                                // every tensor the plugin declared
    std::map<std::size_t, std::vector<const store::EncodedTensor *>> in_group;  // engine group -> its tensors
    bool quantized = false;      // a declared tensor is stored quantized: decoded at each acquire
    bool cuda = false;           // the plan's device
    double dequant_s = 0;        // host time spent decoding quantized tensors (on CUDA: enqueueing the kernels)
    std::uint64_t dequant_count = 0;
    std::unique_ptr<en::ModelLayout> layout;
    std::vector<std::vector<std::size_t>> groups_of;  // declared group -> its engine groups (leaf: several)
    std::vector<std::vector<std::size_t>> shared_with;  // declared groups in the same engine group (itself included)
    std::map<std::size_t, std::size_t> held_by;          // engine group -> declared group whose leases hold it
    std::map<std::size_t, int> users;                    // engine group -> declared groups acquired and not released
    nlohmann::json placement;
    std::unique_ptr<en::Transport> transport;
    // Declared before the engine, which borrows them: destroyed after it.
    std::unique_ptr<pf::LinuxAdmission> admission;
    std::unique_ptr<pf::HostStaging> staging;
    std::unique_ptr<en::Engine> engine;
    std::map<std::size_t, std::vector<en::Lease>> leases;
    std::map<std::size_t, GroupTensors> tensors;
    // Note [Host decode kernels]: on the CPU, decoded and converted tensors are written into reused buffers.
    ScratchPool scratch;
    std::map<std::size_t, std::vector<at::Tensor>> scratch_of;  // declared group -> the buffers its tensors are in
    // Note [Converted residents]: resident engine groups converted once into the compute dtype (host transport).
    bool convert_once = false;
    std::string convert_once_reason;  // why not, when a group's dtype differs and convert_once is false
    std::map<std::size_t, std::map<std::string, at::Tensor>> converted;  // engine group -> its tensors, converted
    std::uint64_t converted_bytes = 0, released_file_bytes = 0;
    std::uint64_t converted_held = 0;  // converted_bytes of the runs before resume(): kept in `converted`
    std::uint64_t largest_conversion = 0;  // the most bytes one engine group's tensors take converted (0: none converts)
    std::uint64_t scratch_peak = 0;        // the CPU scratch pool's peak over a step's acquires (scratch_peak_of)
    bool begun = false, ended = false;
    std::function<void(const ComponentWeights &)> on_destroy;
    std::shared_ptr<ComponentLora> lora;  // Note [Applying LoRA]: the factors, on the device for the weights' life
    std::map<std::string, at::Tensor> lora_merged;  // lora.apply = "merge": resident weights with B·A added, kept

    ~Impl() {
        tensors.clear();
        scratch_of.clear();
        converted.clear();
        leases.clear();
        if (engine && begun && !ended) engine->end_phase();
    }
};

ComponentWeights::ComponentWeights() : impl_(std::make_unique<Impl>()) {}
ComponentWeights::~ComponentWeights() {
    if (impl_ && impl_->on_destroy) {
        try {
            impl_->on_destroy(*this);
        } catch (...) {  // a report that cannot be updated must not turn unwinding into terminate()
        }
    }
}

void ComponentWeights::set_on_destroy(std::function<void(const ComponentWeights &)> hook) {
    impl_->on_destroy = std::move(hook);
}

namespace {

// Note [Converted residents]: on a host transport a resident group whose file dtype differs from the compute dtype is
// converted once, at its first acquire, and its file pages are given back; the plan budgets it at its converted size.
// Quantized tensors likewise: decoded once and kept decoded (Note [Quantized weights]). Only when that plan keeps
// every group resident: otherwise groups are converted (decoded) at each acquire (one block's copy at a time), as on
// CUDA, where the conversion runs at device bandwidth and device memory is what is short.
// The one rule for which tensors are converted, on every path (acquire converts a view whose dtype is not `dtype`).
bool needs_conversion(at::ScalarType st, at::ScalarType dtype) { return st != dtype; }

struct ConversionPlan {
    en::Plan plan;
    bool convert_once = false;
    std::string reason;  // why groups in another dtype are converted at each acquire; empty when none are
};

// Each engine group's bytes once converted: its declared tensors (`in_group`) in `dtype` where they are quantized or
// in another dtype, else as stored (and never less than the group's stored bytes).
// `largest_conversion`: the most bytes one group's converted tensors alone take (0 when none converts).
std::vector<std::uint64_t> converted_bytes_of(const en::ModelLayout & layout,
                                              const std::map<std::size_t, std::vector<const store::EncodedTensor *>> & in_group,
                                              at::ScalarType dtype, bool & differs, std::uint64_t & largest_conversion) {
    std::vector<std::uint64_t> converted(layout.size());
    for (std::size_t g = 0; g < layout.size(); ++g) {
        std::uint64_t b = 0, conversion = 0;
        const auto it = in_group.find(g);
        for (const auto * e : it == in_group.end() ? std::vector<const store::EncodedTensor *>{} : it->second) {
            const auto * t = e->parts.front();
            const bool convert = e->encoding != store::Encoding::dense ||
                                 needs_conversion(ddo::torch::to_scalar_type(t->dtype), dtype);
            differs = differs || convert;
            const std::uint64_t as_converted = std::uint64_t(c10::multiply_integers(e->shape)) * at::elementSize(dtype);
            b += convert ? as_converted : e->stored_bytes();
            if (convert) conversion += as_converted;
        }
        converted[g] = std::max(b, layout.group(g).bytes);
        largest_conversion = std::max(largest_conversion, conversion);
    }
    return converted;
}

ConversionPlan plan_with_conversions(const en::ModelLayout & layout, const std::vector<std::uint64_t> & converted,
                                     bool differs, const en::EngineConfig & cfg, const en::Capacities & caps,
                                     bool host_transport, bool quantized) {
    if (!differs) return {en::plan_residency(layout, cfg, caps), false, {}};
    // Note [Quantized weights]: groups are planned, moved and kept at their stored bytes and decoded at each acquire,
    // unless every group fits as a resident once decoded.
    const std::string each = quantized ? "quantized tensors are planned at their stored size and decoded into the compute "
                                         "dtype at each acquire"
                                       : "converted at each acquire";
    if (!host_transport)
        return {en::plan_residency(layout, cfg, caps), false,
                quantized ? "CUDA: " + each + ", on the device (device memory holds them stored)"
                          : "CUDA: converted at each acquire, on the device (device memory holds the file's dtype)"};
    if (cfg.route != Route::resident && cfg.route != Route::component && cfg.route != Route::dynamic)
        return {en::plan_residency(layout, cfg, caps), false,
                "route " + std::string(to_string(cfg.route)) + " keeps no residents: " + each};
    en::EngineConfig wide = cfg;
    wide.resident_bytes = converted;
    std::string why;
    try {
        en::Plan p = en::plan_residency(layout, wide, caps);
        if (std::all_of(p.groups.begin(), p.groups.end(), [](const en::GroupDecision & g) { return g.residency == en::Residency::resident; })) {
            p.notes.push_back(std::string(quantized ? "residents decoded once" : "residents converted once") +
                              " into the compute dtype (Note [Converted residents]): budgeted at " + format_mib(p.resident_bytes));
            return {std::move(p), true, {}};
        }
        why = "at the compute dtype's size not every group fits as a resident: " + each;
    } catch (const ddo::Error & e) {
        why = std::string("at the compute dtype's size the plan fails (") + e.what() + "): " + each;
    }
    return {en::plan_residency(layout, cfg, caps), false, why};
}

// A resident group's declared tensors (`tensors`, their parts in `views`) converted or decoded into `dtype` once
// (dense ones already in it stay views), by the same rule and the same decoders as at each acquire; the file pages of
// the converted ones' parts are handed back (MADV_DONTNEED on the read-only mapping: nothing reads them again, and a
// read would fault them in from the page cache). Adds what it converted and released to the counters; the decode
// time to `dequant_s`.
std::map<std::string, at::Tensor> convert_resident(const en::Lease & lease, const ddo::torch::GroupTensors & views,
                                                   const std::vector<const store::EncodedTensor *> & tensors,
                                                   at::ScalarType dtype, std::uint64_t & converted_bytes,
                                                   std::uint64_t & released_bytes, double & dequant_s) {
    std::map<std::string, at::Tensor> out;
    const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
    for (const auto * e : tensors) {
        std::vector<at::Tensor> parts;
        for (const auto * p : e->parts) parts.push_back(views.at(p->name));
        const bool dense = e->encoding == store::Encoding::dense;
        if (dense && !needs_conversion(parts.front().scalar_type(), dtype)) {
            out.emplace(e->name, parts.front());
            continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto c = dense ? parts.front().to(dtype, /*non_blocking=*/false, /*copy=*/true)
                       : ddo::torch::quant::decode(*e, parts, dtype);
        if (!dense) dequant_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        converted_bytes += c.nbytes();
        for (const auto & t : parts) {
            if (!lease.mapped()) break;
            const auto a = reinterpret_cast<std::uintptr_t>(t.data_ptr());
            const std::uintptr_t lo = (a + page - 1) / page * page, hi = (a + t.nbytes()) / page * page;
            if (hi > lo && ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED) == 0) released_bytes += hi - lo;
        }
        out.emplace(e->name, std::move(c));
    }
    return out;
}

en::EngineConfig engine_config(const ComponentPlan & p) {
    const auto & k = p.capacities;
    en::EngineConfig cfg;
    cfg.route = p.route;
    // 0 is auto (docs/presets.md): no budget of its own, so the planner balances the residents against the device
    // capacity (what the device budget leaves after the slots). Passing it on as "0 bytes" streamed everything.
    if (k.resident_budget_gb > 0) cfg.resident_budget = Capacities::gib_to_bytes(k.resident_budget_gb);
    if (k.device_budget_gb > 0) cfg.device_budget = Capacities::gib_to_bytes(k.device_budget_gb);
    if (k.pinned_host_budget_gb > 0) cfg.pinned_budget = Capacities::gib_to_bytes(k.pinned_host_budget_gb);
    // capacities.pin_host_memory = false: nothing pinned at all, so the planner plans no group `pinned` (0 here is
    // an explicit budget of none; the preset's 0 is auto).
    if (!k.pin_host_memory) cfg.pinned_budget = 0;
    cfg.ram_headroom = Capacities::gib_to_bytes(k.ram_headroom_gb);
    // slots = prefetch depth + 1 (>= 2, >= staging slots); group_block/group_leaf: the planner uses 2.
    cfg.slots = uint32_t(std::max<int64_t>({2, int64_t(k.prefetch_depth) + 1, int64_t(k.staging_slots)}));
    cfg.prefetch_depth = uint32_t(p.prefetch_depth());
    cfg.staging_slots = uint32_t(std::max(2, k.staging_slots));
    cfg.policy = k.selection == Selection::first     ? en::SelectionPolicy::first
                 : k.selection == Selection::largest ? en::SelectionPolicy::largest
                                                     : en::SelectionPolicy::spread;
    return cfg;
}

constexpr const char * kPinOffReason = "capacities.pin_host_memory = false";

}  // namespace

// A declared tensor from the stored tensors of its engine group (`views`): a dense one as the view (converted when its
// dtype differs; copied out when `copy`, for leaf groups whose slot is handed back), a quantized one decoded into
// the compute dtype (Note [Quantized weights]). On the CPU what is written goes into a buffer of the component's
// scratch pool, added to `taken` (Note [Host decode kernels]); on CUDA into fresh memory of the caching allocator.
static at::Tensor decoded(ComponentWeights::Impl & m, const store::EncodedTensor & e, const ddo::torch::GroupTensors & views,
                          bool copy, std::vector<at::Tensor> & taken) {
    std::vector<at::Tensor> parts;
    for (const auto * p : e.parts) parts.push_back(views.at(p->name));
    const auto & t = parts.front();
    const bool dense = e.encoding == store::Encoding::dense;
    if (dense && !copy && !needs_conversion(t.scalar_type(), m.dtype)) return t;  // in place when the dtype matches
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor r;
    if (!m.cuda && (copy || ddo::torch::quant::decodes_into(e, t.scalar_type(), m.dtype))) {
        // A dense copy out of a leaf slot keeps the tensor's file alignment (mod 64), as every other route presents
        // it (Note [Mapped residents]): kernels' results can depend on it (a 64-aligned copy of an SDNQ uint4 + SVD
        // DiT's dense tensors moved LTX-2's latents by 3e-6 on an AVX-512 machine).
        const std::size_t offset = dense && !needs_conversion(t.scalar_type(), m.dtype)
                                       ? std::size_t(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64)
                                       : 0;
        r = m.scratch.take(dense ? t.sizes() : at::IntArrayRef(e.shape), m.dtype, t.device(), offset);
        ddo::torch::quant::decode_into(e, parts, r);
        taken.push_back(r);
    } else if (dense) {
        return t.to(m.dtype, /*non_blocking=*/false, /*copy=*/copy);
    } else {
        r = ddo::torch::quant::decode(e, parts, m.dtype);
    }
    if (!dense) {
        m.dequant_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++m.dequant_count;
    }
    return r;
}

// The CPU's memory for tensors converted (decoded) at each acquire, as `decoded` takes it (Note [Memory forecast]):
// the scratch pool's peak replayed over a step (each declared group acquired and released in turn, in declared
// order; twice, so that the pool's cap has settled), plus the most one group decodes into fresh memory (encodings
// decode_into does not write in place). A leaf group's dense copies are counted without their alignment offset.
static std::uint64_t scratch_peak_of(const ComponentWeights::Impl & m) {
    std::vector<std::vector<std::uint64_t>> taken(m.specs.size());
    std::uint64_t fresh = 0;
    for (std::size_t i = 0; i < m.specs.size(); ++i) {
        std::uint64_t fresh_here = 0;
        const auto add = [&](const store::EncodedTensor & e, bool copy) {
            const auto part = ddo::torch::to_scalar_type(e.parts.front()->dtype);
            const bool dense = e.encoding == store::Encoding::dense;
            if (dense && !copy && !needs_conversion(part, m.dtype)) return;
            const std::uint64_t bytes = std::uint64_t(c10::multiply_integers(e.shape)) * at::elementSize(m.dtype);
            if (copy || ddo::torch::quant::decodes_into(e, part, m.dtype)) taken[i].push_back(bytes);
            else fresh_here += bytes;
        };
        if (m.shared_with.at(i).size() > 1) {
            for (const auto & n : m.specs[i].tensors)
                if (const auto * e = m.encodings->find(n)) add(*e, false);
        } else {
            const auto & engine_groups = m.groups_of.at(i);
            for (std::size_t g : engine_groups)
                if (const auto it = m.in_group.find(g); it != m.in_group.end())
                    for (const auto * e : it->second) add(*e, engine_groups.size() > 1);
        }
        fresh = std::max(fresh, fresh_here);
    }
    return ScratchPool::replay_peak(taken, 2) + fresh;
}

// Note [Applying LoRA], lora.apply = "merge": the adapted weights of resident engine group `g` among `out`'s tensors
// replaced by W + B·A (computed in float32, stored in the weight's dtype), made at the group's first acquire and kept
// for the weights' life; their deltas are no longer handed out. Streamed groups keep the run-time term.
static void merge_lora_into_resident(ComponentWeights::Impl & m, std::size_t g,
                                     std::unordered_map<std::string, at::Tensor> & map,
                                     std::unordered_set<std::string> & merged_names) {
    if (!m.lora || !m.lora->merge || m.engine->plan().groups.at(g).residency != en::Residency::resident) return;
    for (const auto * e : m.in_group[g]) {
        const auto * d = m.lora->find(e->name);
        const auto it = map.find(e->name);
        if (!d || it == map.end()) continue;
        auto & merged = m.lora_merged[e->name];
        if (!merged.defined()) {
            const auto t0 = std::chrono::steady_clock::now();
            const auto & w = it->second;
            merged = (w.to(at::kFloat) + at::matmul(d->up.to(at::kFloat), d->down.to(at::kFloat)))
                         .to(w.scalar_type())
                         .contiguous();
            m.lora->merged_bytes += std::uint64_t(merged.nbytes());
            m.lora->merge_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            d->merged = true;
        }
        it->second = merged;
        merged_names.insert(e->name);
    }
}

// The engine's group declarations: `per` consecutive declared groups each (decl_of: declared group -> engine
// declaration), every declared tensor as the stored tensors that encode it (Note [Quantized weights]). Records the
// declared tensors and whether any is quantized.
static std::vector<en::GroupDecl> engine_decls(ComponentWeights::Impl & m, std::size_t per, std::vector<std::size_t> & decl_of) {
    std::vector<en::GroupDecl> decls;
    for (std::size_t first = 0; first < m.specs.size(); first += per) {
        en::GroupDecl d{m.specs[first].name, {}, {}};
        for (std::size_t i = first; i < std::min(first + per, m.specs.size()); ++i) {
            if (i > first) d.name += "+" + m.specs[i].name;
            for (const auto & t : m.specs[i].tensors) {
                const auto * e = m.encodings->find(t);
                if (!e) {  // the layout names it missing, as for any tensor not in the checkpoint
                    d.tensors.push_back(t);
                    continue;
                }
                m.quantized = m.quantized || e->encoding != store::Encoding::dense;
                for (const auto * p : e->parts) d.tensors.push_back(p->name);
                m.declared.push_back(t);
            }
            decl_of[i] = decls.size();
        }
        decls.push_back(std::move(d));
    }
    return decls;
}

std::unique_ptr<ComponentWeights> ComponentWeights::open(const store::ComponentSource & source, std::vector<GroupSpec> groups,
                                                         const ComponentPlan & plan, at::ScalarType compute_dtype,
                                                         std::shared_ptr<ComponentLora> lora) {
    std::unique_ptr<ComponentWeights> self(new ComponentWeights());
    auto & m = *self->impl_;
    m.component = plan.component;
    m.dtype = compute_dtype;
    m.lora = std::move(lora);
    if (!plan.allocator)
        throw UsageError(plan.component + ": route '" + to_string(plan.route) +
                         "' runs through the offload engine, which needs an allocator plugin; none was loaded "
                         "(capacities.allocator = '" + plan.allocator_requested + "'" +
                         (plan.allocator_error.empty() ? std::string() : ": " + plan.allocator_error) +
                         "; list them with: ddo-host plugins)");
    m.store.emplace(store::WeightStore::open(source));
    m.encodings.emplace(store::ComponentEncodings::detect(*m.store));
    m.specs = std::move(groups);
    const auto gran = plan.route == Route::group_leaf ? en::Granularity::leaf : en::Granularity::block;
    // group_block with blocks_per_group = N: N consecutive declared groups form one engine group ("a+b"), held
    // while any of them is acquired (Note [Blocks per group]).
    const std::size_t per = plan.route == Route::group_block ? std::size_t(std::max(1, plan.blocks_per_group)) : 1;
    std::vector<std::size_t> decl_of(m.specs.size());
    const auto decls = engine_decls(m, per, decl_of);
    // Note [Mapped residents]: on the host every route presents a tensor at its file alignment (mod 64), as the
    // in-place residents and diffusers' from_pretrained do, so that routes agree bitwise; device copies stay
    // 256-aligned.
    const auto align = plan.placement.cuda ? en::Alignment::slot : en::Alignment::file;
    m.layout = std::make_unique<en::ModelLayout>(en::ModelLayout::build(decls, *m.store, gran, align));
    for (const auto & t : m.declared) {
        const auto * e = m.encodings->find(t);
        m.in_group[m.layout->group_of(e->parts.front()->name)].push_back(e);
    }
    std::map<std::string, std::size_t> decl_index;
    for (std::size_t d = 0; d < decls.size(); ++d) decl_index.emplace(decls[d].name, d);
    std::vector<std::vector<std::size_t>> groups_of_decl(decls.size());
    for (std::size_t g = 0; g < m.layout->size(); ++g) groups_of_decl.at(decl_index.at(m.layout->group(g).decl)).push_back(g);
    m.groups_of.resize(m.specs.size());
    m.shared_with.resize(m.specs.size());
    for (std::size_t i = 0; i < m.specs.size(); ++i) {
        m.groups_of[i] = groups_of_decl[decl_of[i]];
        for (std::size_t j = 0; j < m.specs.size(); ++j)
            if (decl_of[j] == decl_of[i]) m.shared_with[i].push_back(j);
    }

    const auto & k = plan.capacities;
    auto cfg = engine_config(plan);
    for (const auto & name : plan.resident_first)  // the engine groups of each named declared group
        for (std::size_t i = 0; i < m.specs.size(); ++i)
            if (m.specs[i].name == name) cfg.resident_first.insert(cfg.resident_first.end(), m.groups_of[i].begin(), m.groups_of[i].end());
    const c10::Device d = plan.placement.device();
    auto caps = en::Capacities::observe_host();
    if (d.is_cuda()) {
        m.transport = ddo::torch::make_cuda_transport(plan.placement.index);
    } else {
        m.transport = en::make_cpu_transport();
        caps.device_free = caps.device_total = caps.usable_host_ram();  // host memory stands in for the device
        caps.device_source = "host memory, the CPU transport's device: " + caps.describe_host_ram();
    }
    if (plan.machine_device_bytes) {  // planned for another machine's device (Note [Memory forecast])
        caps.device_free = caps.device_total = *plan.machine_device_bytes;
        caps.device_source = "the machine planned for: " + plan.machine_device_source;
    }
    if (m.lora && caps.device_free) {
        // Note [Applying LoRA]: the factors stay on the device for the weights' life (on CUDA they are allocated
        // already, and the device query sees them).
        *caps.device_free -= std::min(*caps.device_free, m.lora->bytes);
        caps.device_source += "; less " + format_mib(m.lora->bytes) + " of LoRA factors";
    }
    en::EngineOptions eo;
    eo.device = d.is_cuda() ? plan.placement.index : 0;
    eo.allocator_name = plan.allocator_name;
    eo.allocator_options = plan.allocator_options;
    if (!k.pin_host_memory) {  // also without a HostStaging: no cudaHostAlloc from the transport
        eo.pinned_route = false;
        eo.pinned_route_reason = kPinOffReason;
    }
    m.placement = plan.placement_json();
    // Pinned route (unless pin_host_memory = false): host copies planned pinned + the disk staging buffers; limit =
    // the pinned-host budget (0 = auto: admission, RLIMIT_MEMLOCK on the host backend and the planner's pinned
    // budget bound it). Registration route: pageable host copies, per host_registration. Note [Engine host staging].
    pf::StagingLimits limits;
    limits.pinned_route = k.pin_host_memory;
    if (!k.pin_host_memory) limits.pinned_route_reason = kPinOffReason;
    limits.pinned_limit = k.pinned_host_budget_gb > 0 ? Capacities::gib_to_bytes(k.pinned_host_budget_gb) : 0;
    limits.registration = k.host_registration == HostRegistration::off       ? pf::RegistrationMode::off
                          : k.host_registration == HostRegistration::bounded ? pf::RegistrationMode::bounded
                                                                              : pf::RegistrationMode::full;
    limits.registration_ceiling = Capacities::gib_to_bytes(k.host_registration_ceiling_gb);
    limits.ram_headroom = Capacities::gib_to_bytes(k.ram_headroom_gb);
    const auto backend = d.is_cuda() ? pf::StagingBackend::cuda : pf::StagingBackend::host;
    m.admission = std::make_unique<pf::LinuxAdmission>();  // the real /proc and /sys
    std::string why;
    m.staging = pf::HostStaging::create(backend, limits, m.admission.get(), &why);
    if (!m.staging) {
        if (limits.registration == pf::RegistrationMode::bounded && limits.registration_ceiling == 0)
            throw UsageError("capacities.host_registration = \"bounded\" needs capacities.host_registration_ceiling_gb > 0; " + why);
        // CUDA staging without a usable driver API: the engine runs on the transport's pinned memory.
        m.placement["host_staging"] = {{"created", false}, {"reason", why}};
    } else {
        m.placement["host_staging"] = {{"created", true}, {"backend", pf::to_string(backend)}};
        eo.staging = m.staging.get();
    }
    m.cuda = d.is_cuda();
    bool differs = false;
    const auto converted = converted_bytes_of(*m.layout, m.in_group, m.dtype, differs, m.largest_conversion);
    m.scratch_peak = scratch_peak_of(m);
    auto planned = [&] {
        try {
            return plan_with_conversions(*m.layout, converted, differs, cfg, caps, !d.is_cuda(), m.quantized);
        } catch (const RuntimeError & e) {
            // A machine the user declared (--device-memory, --machine) that cannot hold what the route needs is the
            // request's (exit 2), not this machine's.
            if (plan.machine_device_bytes) throw UsageError(plan.component + ": " + e.what());
            throw;
        }
    }();
    m.convert_once = planned.convert_once;
    m.convert_once_reason = planned.reason;
    m.engine = std::make_unique<en::Engine>(*m.layout, std::move(planned.plan), plan.allocator, *m.transport, eo);
    return self;
}

const std::string & ComponentWeights::component() const noexcept { return impl_->component; }
std::size_t ComponentWeights::size() const noexcept { return impl_->specs.size(); }

void ComponentWeights::begin_phase(std::string_view name) {
    auto & m = *impl_;
    if (m.begun) return;
    m.engine->begin_phase(name);  // host copies and resident uploads happen here, never in a dry run
    m.begun = true;
}

const GroupTensors & ComponentWeights::acquire(std::size_t i) {
    auto & m = *impl_;
    begin_phase(m.component);
    if (m.tensors.count(i)) release(i);
    GroupTensors out;
    out.group_ = m.specs.at(i).name;
    out.lora_ = m.lora.get();
    if (m.lora)
        for (const auto & n : m.specs.at(i).tensors)
            if (const auto * d = m.lora->find(n)) d->handed_out = true;
    const auto & engine_groups = m.groups_of.at(i);
    const auto & mine = m.specs.at(i).tensors;
    const bool merged = m.shared_with.at(i).size() > 1;
    if (merged) {
        // Note [Blocks per group]: one engine group for several declared ones: lease it once, view only this
        // declared group's tensors, keep the lease until the last of them is released.
        const std::size_t g = engine_groups.front();
        // An engine group kept for its next members but left for another one: hand it back first.
        for (auto it = m.held_by.begin(); it != m.held_by.end();) {
            if (it->first != g && m.users[it->first] == 0) {
                for (auto & l : m.leases[it->second]) l.release();
                m.leases.erase(it->second);
                m.users.erase(it->first);
                it = m.held_by.erase(it);
            } else {
                ++it;
            }
        }
        if (!m.held_by.count(g)) {
            m.held_by[g] = i;
            m.leases[i].push_back(m.engine->acquire(g));
        }
        ++m.users[g];
        const auto views = ddo::torch::tensor_views(m.leases.at(m.held_by.at(g)).front());
        m.scratch.begin_group();
        for (const auto & n : mine) out.map_.emplace(n, decoded(m, *m.encodings->find(n), views, false, m.scratch_of[i]));
        merge_lora_into_resident(m, g, out.map_, out.merged_);
        m.scratch.end_group();
        auto [it, inserted] = m.tensors.insert_or_assign(i, std::move(out));
        (void)inserted;
        return it->second;
    }
    auto & held = m.leases[i];
    held.clear();
    auto & taken = m.scratch_of[i];
    m.scratch.begin_group();
    for (std::size_t g : engine_groups) {
        held.push_back(m.engine->acquire(g));  // a converted resident is acquired too: the engine counts its hits
        if (auto c = m.converted.find(g); c != m.converted.end()) {
            for (const auto & [n, t] : c->second) out.map_.emplace(n, t);
            merge_lora_into_resident(m, g, out.map_, out.merged_);
            continue;
        }
        const auto views = ddo::torch::tensor_views(held.back());  // named: .all() refers into it
        if (m.convert_once && engine_groups.size() == 1 && m.engine->plan().groups.at(g).residency == en::Residency::resident) {
            auto & c = m.converted[g] = convert_resident(held.back(), views, m.in_group[g], m.dtype, m.converted_bytes,
                                                         m.released_file_bytes, m.dequant_s);
            for (const auto * e : m.in_group[g]) m.dequant_count += e->encoding != store::Encoding::dense;
            for (const auto & [n, t] : c) out.map_.emplace(n, t);
        } else if (engine_groups.size() == 1) {
            for (const auto * e : m.in_group[g]) out.map_.emplace(e->name, decoded(m, *e, views, false, taken));
        } else {
            // Leaf groups (group_leaf: one group ahead, 2 slots): a group's leaves do not fit the slots at once, so
            // each leaf is copied out of its slot and the slot handed back before the next leaf. A quantized
            // tensor's parts share its leaf (one module).
            for (const auto * e : m.in_group[g]) out.map_.emplace(e->name, decoded(m, *e, views, true, taken));
            held.back().release();
        }
        merge_lora_into_resident(m, g, out.map_, out.merged_);
    }
    m.scratch.end_group();
    auto [it, inserted] = m.tensors.insert_or_assign(i, std::move(out));
    (void)inserted;
    return it->second;
}

void ComponentWeights::release(std::size_t i) {
    auto & m = *impl_;
    if (!m.tensors.erase(i)) return;
    if (auto s = m.scratch_of.find(i); s != m.scratch_of.end()) {  // its tensors are gone: the buffers are free
        for (auto & t : s->second) m.scratch.give(std::move(t));
        m.scratch_of.erase(s);
    }
    if (m.shared_with.at(i).size() > 1) {
        const std::size_t g = m.groups_of.at(i).front();
        if (--m.users[g] > 0) return;  // another declared group of this engine group still uses the lease
        // Kept until its last member is released (the next member, acquired next, finds it held).
        if (i != m.shared_with.at(i).back()) return;
        const std::size_t holder = m.held_by.at(g);
        for (auto & l : m.leases[holder]) l.release();
        m.leases.erase(holder);
        m.held_by.erase(g);
        m.users.erase(g);
        return;
    }
    auto it = m.leases.find(i);
    if (it == m.leases.end()) return;
    for (auto & l : it->second) l.release();
    m.leases.erase(it);
}

std::uint64_t ComponentWeights::skip(std::size_t i) {
    auto & m = *impl_;
    begin_phase(m.component);
    if (i >= m.specs.size())
        throw UsageError(m.component + ": group index " + std::to_string(i) + " out of range (" +
                         std::to_string(m.specs.size()) + " groups)");
    if (m.tensors.count(i))
        throw UsageError(m.component + ": group '" + m.specs[i].name + "' is skipped while acquired; release it first");
    const auto & members = m.shared_with.at(i);
    if (members.size() > 1) {
        // Note [Blocks per group]: the engine group is skipped when none of its members ran in this pass; a lease a
        // member of this pass holds for the next ones is returned when its last member is skipped (as release would).
        const std::size_t g = m.groups_of.at(i).front();
        if (m.held_by.count(g)) {
            if (i == members.back() && m.users[g] == 0) {
                const std::size_t holder = m.held_by.at(g);
                for (auto & l : m.leases[holder]) l.release();
                m.leases.erase(holder);
                m.held_by.erase(g);
                m.users.erase(g);
            }
            return 0;
        }
        return i == members.back() ? m.engine->skip(g) : 0;
    }
    std::uint64_t bytes = 0;
    for (std::size_t g : m.groups_of.at(i)) bytes += m.engine->skip(g);
    return bytes;
}

std::string ComponentWeights::route() const { return to_string(impl_->engine->plan().route); }

std::uint64_t ComponentWeights::bytes_streamed() const {
    const auto k = impl_->engine->counters();
    return k.bytes_moved_total();
}

ComponentWeights::Progress ComponentWeights::progress() const {
    const auto k = impl_->engine->counters();
    return {k.bytes_moved_total(), k.stall_s, k.stall_s ? std::string() : k.stall_reason};
}

// The end of a run on these weights, shared by finish and park: the handed-out tensors and every lease returned, the
// engine phase ended (its outstanding owners returned). What was converted, decoded or merged once is the caller's.
static std::uint64_t end_run(ComponentWeights::Impl & m) {
    m.tensors.clear();
    m.scratch_of.clear();
    m.leases.clear();
    m.held_by.clear();
    m.users.clear();
    if (!m.begun || m.ended) return 0;
    m.ended = true;
    return m.engine->end_phase();
}

std::uint64_t ComponentWeights::finish() {
    auto & m = *impl_;
    m.tensors.clear();  // before the buffers they may view
    m.scratch_of.clear();
    m.scratch.clear();
    m.converted.clear();
    m.lora_merged.clear();
    return end_run(m);
}

std::uint64_t ComponentWeights::park() {
    auto & m = *impl_;
    if (m.engine->plan().route == Route::component) return finish();  // its residents go at the phase end
    return end_run(m);
}

void ComponentWeights::resume() {
    auto & m = *impl_;
    m.engine->restart_counters();
    m.begun = m.ended = false;
    m.dequant_s = 0;
    m.dequant_count = 0;
    m.converted_held += m.converted_bytes;
    m.converted_bytes = 0;
    m.released_file_bytes = 0;
}

nlohmann::json ComponentWeights::held() const {
    const auto & m = *impl_;
    const auto & plan = m.engine->plan();
    const auto k = m.engine->counters();
    std::uint64_t groups = 0, bytes = 0;
    if (plan.route != Route::component)
        for (std::size_t g = 0; g < plan.groups.size(); ++g)
            if (plan.groups[g].residency == en::Residency::resident) {
                ++groups;
                bytes += m.layout->group(g).bytes;
            }
    return {{"resident_groups", groups},
            {"resident_bytes", bytes},
            {"mapped_bytes", k.mapped_bytes},
            {"host_copy_bytes", k.pinned_bytes + k.pageable_bytes},
            {"converted_groups", m.converted.size()},
            {"converted_bytes", m.converted.empty() ? 0 : m.converted_held + m.converted_bytes}};
}

Footprint ComponentWeights::planned_footprint() const {
    const auto & p = impl_->engine->plan();
    Footprint f;
    f.device = p.resident_bytes + std::uint64_t(p.slots) * p.slot_bytes + (impl_->lora ? impl_->lora->bytes : 0);
    // Groups converted (decoded) at each acquire: their tensors in the compute dtype. On the CPU in the scratch pool's
    // buffers (Note [Host decode kernels]): its peak, replayed over a step's acquires. On CUDA fresh allocations of the
    // caching allocator, one group's set live beside the next group's conversion: twice (Note [Memory forecast]).
    if (!impl_->convert_once) f.device += impl_->cuda ? 2 * impl_->largest_conversion : impl_->scratch_peak;
    // The disk route stages file reads on CUDA only: the host transport reads into the slot itself.
    const std::uint64_t staging = impl_->cuda && p.file_bytes > 0 ? std::uint64_t(std::max<std::uint32_t>(p.staging_slots, 2)) * p.slot_bytes : 0;
    f.host = p.pinned_bytes + p.pageable_bytes + staging;
    return f;
}

Footprint ComponentWeights::footprint() const {
    const auto & m = *impl_;
    const auto k = m.engine->counters();
    Footprint f;
    // Residents converted once (Note [Converted residents]) are LibTorch tensors, counted on the measured side as such;
    // their mapped file pages are handed back as each is converted, so they count for nothing here.
    f.device = k.device_bytes + (m.convert_once ? 0 : k.mapped_bytes - std::min(k.mapped_bytes, m.released_file_bytes));
    f.host = k.pinned_bytes + k.pageable_bytes + (k.staging_bytes - std::min(k.staging_bytes, k.staging_released_bytes));
    return f;
}

nlohmann::json ComponentWeights::conversion_json() const {
    const auto & m = *impl_;
    return {{"dtype", std::string(c10::toString(m.dtype))},
            {"once", m.convert_once},
            {"reason", m.convert_once || m.convert_once_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.convert_once_reason)},
            {"converted_bytes", m.converted_bytes},
            {"released_file_bytes", m.released_file_bytes}};
}

nlohmann::json ComponentWeights::quantization_json() const {
    const auto & m = *impl_;
    auto q = m.encodings->summary(m.declared, std::uint32_t(at::elementSize(m.dtype)));
    q["dequant_s"] = m.dequant_s;
    q["dequant_count"] = m.dequant_count;
    q["dequant_clock"] = m.cuda
                             ? "host steady clock around the decode calls: on CUDA it measures their enqueueing, the "
                               "kernels run on the compute stream"
                             : "host steady clock around the decode calls (CPU: the decode itself)";
    return q;
}

nlohmann::json ComponentWeights::report() const {
    return {{"route", route()},
            {"bytes_streamed", bytes_streamed()},
            {"execution_groups", impl_->layout->size()},
            {"placement", impl_->placement},
            {"conversion", conversion_json()},
            {"quantization", quantization_json()},
            {"lora", impl_->lora ? impl_->lora->to_json() : nlohmann::json(nullptr)},
            {"scratch", impl_->cuda ? nlohmann::json(nullptr) : impl_->scratch.to_json()},
            {"engine", impl_->engine->to_json()}};
}

}  // namespace ddo::model
