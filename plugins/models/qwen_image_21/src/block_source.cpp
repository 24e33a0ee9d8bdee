#include "block_source.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "ddo/engine/cpu_transport.hpp"
#include "ddo/engine/engine.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/host_staging.hpp"
#include "ddo/platform/linux_admission.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/cuda_transport.hpp"
#include "ddo/torch/tensor_views.hpp"

namespace ddo::qwen_image_21 {
namespace {

uint64_t weights_bytes(const TransformerBlockWeights & w) {
    uint64_t b = 0;
    for (const auto * t : {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.norm_q, &w.norm_k, &w.mlp_proj, &w.mlp_gate,
                           &w.mlp_out})
        b += uint64_t(t->numel()) * t->element_size();
    return b;
}

TransformerBlockWeights to_device(TransformerBlockWeights w, at::Device d) {
    for (auto * t : {&w.to_q, &w.to_k, &w.to_v, &w.to_out, &w.norm_q, &w.norm_k, &w.mlp_proj, &w.mlp_gate, &w.mlp_out})
        *t = t->to(d);
    return w;
}

class ResidentBlocks final : public BlockSource {
public:
    ResidentBlocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt, at::Device d) {
        for (int64_t i = 0; i < c.num_layers; ++i) {
            blocks_.push_back(to_device(load_transformer_block(f, c, i, dt), d));
            if (d.is_cuda()) bytes_ += weights_bytes(blocks_.back());
        }
    }
    const TransformerBlockWeights & acquire(int64_t i) override { return blocks_.at(size_t(i)); }
    void release(int64_t) override {}
    std::string route() const override { return "resident"; }
    uint64_t bytes_streamed() const override { return bytes_; }

private:
    std::vector<TransformerBlockWeights> blocks_;
    uint64_t bytes_ = 0;
};

class EngineBlocks final : public BlockSource {
public:
    EngineBlocks(const std::filesystem::path & dir, const TransformerConfig & c, at::ScalarType dt, at::Device d,
                 const EngineBlocksOptions & o)
        : c_(c), dt_(dt), store_(store::WeightStore::open_component(dir)) {
        namespace en = ddo::engine;
        if (!o.allocator)
            throw UsageError(std::string("qwen_image_21: the transformer route '") + to_string(o.route) +
                             "' runs through the offload engine, which needs an allocator plugin; none was loaded "
                             "(capacities.allocator = '" + o.allocator_name + "'; list them with: ddo-host plugins)");
        const Route route = o.route;
        if (route == Route::component)
            throw UsageError(std::string("qwen_image_21: transformer route '") + to_string(o.route) +
                             "' is not run by this plugin (resident, dynamic, disk, group_block and group_leaf are); "
                             "choose one with --set components.transformer.route=disk");
        const auto gran = route == Route::group_leaf ? en::Granularity::leaf : en::Granularity::block;
        std::vector<en::GroupDecl> decls;
        for (int64_t i = 0; i < c.num_layers; ++i) {
            en::GroupDecl g{"transformer_blocks." + std::to_string(i), {}, {}};
            for (auto & [n, shape] : block_tensor_specs(c, i)) g.tensors.push_back(n);
            decls.push_back(std::move(g));
        }
        layout_ = std::make_unique<en::ModelLayout>(en::ModelLayout::build(decls, store_, gran));
        // Groups of each block (leaf granularity: several, in order).
        groups_of_.resize(size_t(c.num_layers));
        for (std::size_t g = 0; g < layout_->size(); ++g) {
            const auto & name = layout_->group(g).name;
            const auto dot = name.find('.');
            groups_of_.at(std::stoul(name.substr(dot + 1))).push_back(g);  // "transformer_blocks.<i>[/leaf]"
        }

        const auto & k = o.capacities;
        en::EngineConfig cfg;
        cfg.route = route;
        cfg.resident_budget = Capacities::gib_to_bytes(k.resident_budget_gb);
        if (k.device_budget_gb > 0) cfg.device_budget = Capacities::gib_to_bytes(k.device_budget_gb);
        if (k.pinned_host_budget_gb > 0) cfg.pinned_budget = Capacities::gib_to_bytes(k.pinned_host_budget_gb);
        // capacities.pin_host_memory = false: nothing pinned at all, so the planner plans no group `pinned`
        // (0 here is an explicit budget of none; the preset's 0 is auto).
        const std::string pin_off_reason = "capacities.pin_host_memory = false";
        if (!k.pin_host_memory) cfg.pinned_budget = 0;
        cfg.ram_headroom = Capacities::gib_to_bytes(k.ram_headroom_gb);
        // slots = prefetch depth + 1 (>= 2, >= staging slots); group_block/group_leaf: the planner uses 2.
        cfg.slots = uint32_t(std::max<int64_t>({2, int64_t(k.prefetch_depth) + 1, int64_t(k.staging_slots)}));
        cfg.staging_slots = uint32_t(std::max(2, k.staging_slots));
        cfg.policy = k.selection == Selection::first     ? en::SelectionPolicy::first
                     : k.selection == Selection::largest ? en::SelectionPolicy::largest
                                                         : en::SelectionPolicy::spread;
        auto caps = en::Capacities::observe_host();
        if (d.is_cuda()) {
            transport_ = ddo::torch::make_cuda_transport(int(d.index() < 0 ? 0 : d.index()));
        } else {
            transport_ = en::make_cpu_transport();
            caps.device_free = caps.device_total = caps.usable_host_ram();  // host memory stands in for the device
        }
        en::EngineOptions eo;
        eo.device = d.is_cuda() ? int(std::max<c10::DeviceIndex>(0, d.index())) : 0;
        eo.allocator_name = o.allocator_name;
        eo.allocator_options = o.allocator_options;
        if (!k.pin_host_memory) {  // also without a HostStaging: no cudaHostAlloc from the transport
            eo.pinned_route = false;
            eo.pinned_route_reason = pin_off_reason;
        }
        placement_ = o.placement;
        if (o.host_staging) {
            // Pinned route (unless pin_host_memory = false): host copies planned pinned + the disk staging buffers; limit = the pinned-host budget
            // (0 = auto: no limit of its own; admission, RLIMIT_MEMLOCK on the host backend, and the planner's
            // pinned budget bound it). Registration route: pageable host copies, per host_registration.
            namespace pf = ddo::platform;
            pf::StagingLimits limits;
            // pin_host_memory = false: the pinned route is off (the engine never asks it; the report says why).
            limits.pinned_route = k.pin_host_memory;
            if (!k.pin_host_memory) limits.pinned_route_reason = pin_off_reason;
            limits.pinned_limit = k.pinned_host_budget_gb > 0 ? Capacities::gib_to_bytes(k.pinned_host_budget_gb) : 0;
            limits.registration = k.host_registration == HostRegistration::off       ? pf::RegistrationMode::off
                                  : k.host_registration == HostRegistration::bounded ? pf::RegistrationMode::bounded
                                                                                      : pf::RegistrationMode::full;
            limits.registration_ceiling = Capacities::gib_to_bytes(k.host_registration_ceiling_gb);
            limits.ram_headroom = Capacities::gib_to_bytes(k.ram_headroom_gb);
            const auto backend = d.is_cuda() ? pf::StagingBackend::cuda : pf::StagingBackend::host;
            admission_ = std::make_unique<pf::LinuxAdmission>();  // the real /proc and /sys
            std::string why;
            staging_ = pf::HostStaging::create(backend, limits, admission_.get(), &why);
            if (!staging_) {
                if (limits.registration == pf::RegistrationMode::bounded && limits.registration_ceiling == 0)
                    throw UsageError("capacities.host_registration = \"bounded\" needs capacities.host_registration_ceiling_gb > 0; " + why);
                // CUDA staging without a usable driver API: the engine runs on the transport's pinned memory.
                placement_["host_staging"] = {{"created", false}, {"reason", why}};
            } else {
                placement_["host_staging"] = {{"created", true}, {"backend", pf::to_string(backend)}};
                eo.staging = staging_.get();
            }
        } else {
            placement_["host_staging"] = {{"created", false}, {"reason", "disabled by the caller (EngineBlocksOptions::host_staging = false)"}};
        }
        engine_ = std::make_unique<en::Engine>(*layout_, en::plan_residency(*layout_, cfg, caps), o.allocator,
                                               *transport_, eo);
    }
    ~EngineBlocks() override {
        leases_.clear();
        if (engine_ && begun_ && !ended_) engine_->end_phase();
    }
    const TransformerBlockWeights & acquire(int64_t i) override {
        if (!begun_) {  // host copies and resident uploads happen here, not in a dry run
            engine_->begin_phase("denoise");
            begun_ = true;
        }
        auto & held = leases_[i];
        held.clear();
        std::unordered_map<std::string, at::Tensor> views;
        const auto & groups = groups_of_.at(size_t(i));
        for (std::size_t g : groups) {
            held.push_back(engine_->acquire(g));
            const auto group = ddo::torch::tensor_views(held.back());  // named: .all() refers into it
            if (groups.size() == 1) {
                for (const auto & [n, t] : group.all()) views.emplace(n, t);  // in place, no copy
            } else {
                // Leaf groups (group_leaf: one group ahead, 2 slots): the block's leaves do not fit the slots at
                // once, so each leaf is copied out of its slot and the slot handed back before the next leaf.
                for (const auto & [n, t] : group.all()) views.emplace(n, t.to(dt_, /*non_blocking=*/false, /*copy=*/true));
                held.back().release();
            }
        }
        weights_[i] = block_weights_from(
            [&](const std::string & n) {
                const auto it = views.find(n);
                if (it == views.end())
                    throw RuntimeError("qwen_image_21: tensor " + n + " is not in the engine groups of block " +
                                       std::to_string(i));
                const auto & t = it->second;
                return t.scalar_type() == dt_ ? t : t.to(dt_);
            },
            c_, i);
        return weights_[i];
    }
    void release(int64_t i) override {
        weights_.erase(i);
        auto it = leases_.find(i);
        if (it == leases_.end()) return;
        for (auto & l : it->second) l.release();
        leases_.erase(it);
    }
    std::string route() const override { return to_string(engine_->plan().route); }
    uint64_t bytes_streamed() const override {
        const auto k = engine_->counters();
        return k.bytes_resident + k.bytes_from_pinned + k.bytes_from_pageable + k.bytes_from_file;
    }
    uint64_t finish() override {
        leases_.clear();
        weights_.clear();
        if (!begun_ || ended_) return 0;
        ended_ = true;
        return engine_->end_phase();
    }
    nlohmann::json report() const override {
        auto j = BlockSource::report();
        j["execution_groups"] = layout_->size();
        j["placement"] = placement_;
        j["engine"] = engine_->to_json();
        return j;
    }

private:
    TransformerConfig c_;
    at::ScalarType dt_;
    store::WeightStore store_;
    std::unique_ptr<ddo::engine::ModelLayout> layout_;
    std::vector<std::vector<std::size_t>> groups_of_;
    nlohmann::json placement_;
    std::unique_ptr<ddo::engine::Transport> transport_;
    // Declared before the engine, which borrows them: destroyed after it.
    std::unique_ptr<ddo::platform::LinuxAdmission> admission_;
    std::unique_ptr<ddo::platform::HostStaging> staging_;
    std::unique_ptr<ddo::engine::Engine> engine_;
    std::map<int64_t, std::vector<ddo::engine::Lease>> leases_;
    std::map<int64_t, TransformerBlockWeights> weights_;
    bool begun_ = false, ended_ = false;
};

}  // namespace

std::unique_ptr<BlockSource> make_engine_blocks(const std::filesystem::path & transformer_dir, const TransformerConfig & c,
                                                at::ScalarType dt, at::Device device, const EngineBlocksOptions & o) {
    return std::make_unique<EngineBlocks>(transformer_dir, c, dt, device, o);
}

uint64_t block_payload_bytes(const TensorFile & f, const TransformerConfig & c, int64_t index) {
    uint64_t b = 0;
    for (auto & [n, s] : block_tensor_specs(c, index)) b += f.nbytes_of(n);
    return b;
}

std::unique_ptr<BlockSource> make_resident_blocks(const TensorFile & f, const TransformerConfig & c, at::ScalarType dt,
                                                  at::Device device) {
    return std::make_unique<ResidentBlocks>(f, c, dt, device);
}

}  // namespace ddo::qwen_image_21
