// The offload engine (ddo/engine/engine.hpp): residents, slots, prefetch, leases, counters.
// Used from one compute thread; the transport's worker never touches engine state.
#include "ddo/engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "ddo/engine/allocator_pool.hpp"
#include "ddo/error.hpp"
#include "ddo/platform/host_staging.hpp"

namespace ddo::engine {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kLinkProbeBytes = 64ull << 20;  // one copy of each kind: long enough to hide latency, cheap
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Slot {
    PoolBuffer buf;
    long group = -1;
    FencePtr upload;   // the copy into the slot
    FencePtr readers;  // the compute that read it under the last lease
    int leases = 0;
    std::uint64_t stamp = 0;
};

struct Staging {
    HostBuffer buf;
    FencePtr last;  // the last copy out of this buffer
    bool locked = false;
};

// A host copy of a streamed group. `reg` (registration of buf's range) is declared after buf, so it is
// undone before the memory is freed.
struct HostCopy {
    HostBuffer buf;
    platform::HostRegistration reg;
    bool locked = false;  // pinned, or registered: the transport may copy from it directly
};
}  // namespace

struct Engine::Impl {
    Impl(const ModelLayout & l, Plan p, Transport & t, EngineOptions o) : layout(l), plan(std::move(p)), tr(t), opt(std::move(o)) {}
    const ModelLayout & layout;
    Plan plan;
    Transport & tr;
    EngineOptions opt;
    std::unique_ptr<AllocatorPool> pool;
    const ddo_allocator_vtable * vt = nullptr;
    std::vector<Slot> slots;
    std::vector<PoolBuffer> resident;
    std::vector<FencePtr> resident_fence;
    std::vector<std::vector<void *>> mapped;  // per group: tensor addresses in the file mapping (empty: copied)
    std::vector<HostCopy> host;
    std::vector<Staging> staging;
    std::size_t next_staging = 0;
    std::vector<std::size_t> streamed;
    std::vector<long> stream_pos;
    bool prepared = false, closed = false;
    std::string phase;
    EngineCounters c;
    TransportStats base;  // the transport's totals when the counters last restarted (restart_counters)
    std::uint64_t base_direct_fallbacks = 0;  // and the source's direct-read fallbacks
    double stall = 0;
    std::uint64_t live_leases = 0, tick = 0;
    std::vector<std::size_t> log;

    bool is_resident(std::size_t g) const { return plan.groups[g].residency == Residency::resident; }
    bool reads_into_destination() const { return tr.device_is_host() && opt.read_files_into_destination; }

    // Note [Mapped residents]: on a host transport a resident group is read where the file mapping has it.
    void map_residents() {
        if (!tr.device_is_host() || !opt.map_file_residents) return;
        for (std::size_t g = 0; g < layout.size(); ++g) {
            if (!is_resident(g)) continue;
            std::vector<void *> addrs;
            std::uint64_t bytes = 0;
            for (const auto & t : layout.group(g).tensors) {
                const void * a = layout.source().mapped(*t.info);
                const auto align = std::max<std::uint64_t>(1, store::dtype_size(t.info->dtype));
                if (!a || reinterpret_cast<std::uintptr_t>(a) % align != 0) {
                    addrs.clear();
                    break;
                }
                addrs.push_back(const_cast<void *>(a));  // read-only pages: weights are never written
                bytes += t.nbytes;
            }
            if (addrs.size() != layout.group(g).tensors.size() || addrs.empty()) continue;
            mapped[g] = std::move(addrs);
            c.mapped_bytes += bytes;
            ++c.mapped_groups;
        }
    }

    // Nothing streams and every resident upload finished: the staging buffers served their purpose.
    void release_idle_staging() {
        if (staging.empty() || !streamed.empty() || plan.route == Route::component) return;  // component re-uploads per phase
        for (const auto & f : resident_fence)
            if (f && !f->ready()) return;
        for (const auto & st : staging)
            if (st.last && !st.last->ready()) return;
        for (const auto & st : staging) c.staging_released_bytes += st.buf.bytes();
        staging.clear();
    }

    void fill_group(std::size_t g, void * dst) const {
        const GroupLayout & gl = layout.group(g);
        auto * base = static_cast<char *>(dst);
        std::uint64_t pos = 0;
        for (const auto & s : gl.tensors) {
            if (s.offset > pos) std::memset(base + pos, 0, static_cast<std::size_t>(s.offset - pos));
            layout.source().read_tensor(*s.info, base + s.offset, plan.read_mode);
            pos = s.offset + s.nbytes;
        }
        if (gl.bytes > pos) std::memset(base + pos, 0, static_cast<std::size_t>(gl.bytes - pos));
    }

    void update_flags(Slot & s) {
        std::uint32_t f = 0;
        if (s.leases > 0) f |= DDO_ALLOC_FLAG_LEASED;
        if (s.upload && !s.upload->ready()) f |= DDO_ALLOC_FLAG_PENDING;
        s.buf.set_flags(f);
    }

    // Memory the plan wants pinned (a host copy or a staging buffer). With a HostStaging: its pinned route, and
    // on refusal or failure pageable memory, counted with the route's reason; the registration route is never
    // tried in its place (seed 000: one route's answer says nothing about the other). Without one: the
    // transport's allocate_host. See Note [Engine host staging].
    // Pinning off by choice (EngineOptions::pinned_route, or the staging's limits): no pinned route is asked.
    bool pinned_off() const { return !opt.pinned_route || (opt.staging && !opt.staging->limits().pinned_route); }

    HostBuffer pinned_or_fallback(std::uint64_t bytes, bool * locked) {
        if (pinned_off()) {  // deliberate: not a refusal, so not a fallback either
            *locked = false;
            return HostBuffer::pageable(bytes, 4096);
        }
        if (!opt.staging) {
            HostBuffer b = tr.allocate_host(bytes, true);
            *locked = b.pinned();
            return b;
        }
        auto r = opt.staging->allocate_pinned(bytes);
        if (r.value) {
            auto keep = std::make_shared<platform::PinnedBuffer>(std::move(r.value));
            void * p = keep->data();
            *locked = true;
            return HostBuffer(p, bytes, true, [keep](void *) mutable { keep.reset(); });
        }
        ++c.pinned_fallbacks;
        c.pinned_fallback_bytes += bytes;
        if (c.pinned_fallback_reasons.size() < 8 &&
            std::find(c.pinned_fallback_reasons.begin(), c.pinned_fallback_reasons.end(), r.reason) == c.pinned_fallback_reasons.end())
            c.pinned_fallback_reasons.push_back(r.reason);
        *locked = false;
        return HostBuffer::pageable(bytes, 4096);
    }

    Staging & next_staging_buffer(std::uint64_t bytes) {
        if (staging.empty()) throw RuntimeError("engine: a file upload needs staging buffers but the plan has none");
        Staging & st = staging[next_staging++ % staging.size()];
        if (st.buf.bytes() < bytes) throw RuntimeError("engine: staging buffer smaller than group payload");
        return st;
    }

    FencePtr submit(std::size_t g, void * dst, FencePtr slot_free, Residency src, bool resident_upload) {
        const GroupLayout & gl = layout.group(g);
        CopyJob job;
        job.group = g;
        job.group_name = gl.name;
        job.dst = dst;
        job.bytes = gl.bytes;
        job.source = src;
        job.slot_free = std::move(slot_free);
        Staging * st = nullptr;
        if (src == Residency::pinned || src == Residency::pageable) {
            job.src = host[g].buf.data();
            job.host_locked = host[g].locked;
        } else if (reads_into_destination()) {
            job.fill = [this, g](void * p) { fill_group(g, p); };  // staging stays null: filled in place
        } else {
            st = &next_staging_buffer(gl.bytes);
            job.fill = [this, g](void * p) { fill_group(g, p); };
            job.staging = st->buf.data();
            job.staging_free = st->last;
            job.host_locked = st->locked;
        }
        auto t0 = Clock::now();
        FencePtr f = tr.submit(std::move(job));
        c.upload_enqueue_s += seconds_since(t0);
        if (st) st->last = f;
        ++c.uploads;
        log.push_back(g);
        if (resident_upload) c.bytes_resident += gl.bytes;
        else if (src == Residency::pinned) c.bytes_from_pinned += gl.bytes;
        else if (src == Residency::pageable) c.bytes_from_pageable += gl.bytes;
        else c.bytes_from_file += gl.bytes;
        return f;
    }

    void upload_residents() {
        for (std::size_t g = 0; g < layout.size(); ++g) {
            if (!is_resident(g) || resident[g] || !mapped[g].empty()) continue;
            resident[g] = pool->reserve(layout.group(g).bytes, kGroupAlignment);
            c.device_bytes += resident[g].bytes();
            resident_fence[g] = submit(g, resident[g].data(), nullptr, Residency::file, true);
        }
    }

    void prepare() {
        ddo_alloc_config cfg{};
        cfg.struct_size = sizeof(cfg);
        cfg.backend = tr.device_is_host() ? DDO_ALLOC_BACKEND_HOST : DDO_ALLOC_BACKEND_CUDA;
        cfg.device = opt.device;
        cfg.physical_limit = opt.pool_physical_limit;
        std::vector<ddo_kv> kv;  // borrowed for the pool_create call; the strings live in opt
        for (const auto & [k, v] : opt.allocator_options) kv.push_back(ddo_kv{k.c_str(), v.c_str()});
        cfg.options = kv.empty() ? nullptr : kv.data();
        cfg.n_options = kv.size();
        pool = std::make_unique<AllocatorPool>(vt, cfg, opt.allocator_name);
        const std::size_t n = layout.size();
        resident.resize(n);
        resident_fence.assign(n, ready_fence());
        mapped.assign(n, {});
        map_residents();
        host.resize(n);
        stream_pos.assign(n, -1);
        std::uint64_t staging_bytes = 0;
        for (std::size_t g = 0; g < n; ++g) {
            const auto r = plan.groups[g].residency;
            const std::uint64_t b = layout.group(g).bytes;
            if ((r == Residency::resident && mapped[g].empty()) || r == Residency::file) staging_bytes = std::max(staging_bytes, b);
            if (r != Residency::resident) {
                stream_pos[g] = static_cast<long>(streamed.size());
                streamed.push_back(g);
            }
            if (r == Residency::pinned) {
                HostCopy & h = host[g];
                h.buf = pinned_or_fallback(b, &h.locked);
                fill_group(g, h.buf.data());
                c.host_copy_fill_bytes += b;
                (h.locked ? c.pinned_bytes : c.pageable_bytes) += b;
            } else if (r == Residency::pageable) {
                HostCopy & h = host[g];
                h.buf = tr.allocate_host(b, false);
                fill_group(g, h.buf.data());
                c.host_copy_fill_bytes += b;
                c.pageable_bytes += b;
                // Registration mode off: not attempted at all. bounded: HostStaging refuses past the ceiling.
                if (opt.staging && opt.staging->limits().registration != platform::RegistrationMode::off) {
                    auto reg = opt.staging->register_range(h.buf.data(), b);
                    if (reg.value) {
                        h.reg = std::move(reg.value);
                        h.locked = true;
                        c.registered_bytes += b;
                    }  // else: stays pageable; counted (with the reason) on the registration route only
                }
            }
        }
        if (staging_bytes > 0 && !reads_into_destination()) {
            const std::uint32_t k = std::max<std::uint32_t>(plan.staging_slots, 2);
            for (std::uint32_t i = 0; i < k; ++i) {
                Staging st;
                st.buf = pinned_or_fallback(staging_bytes, &st.locked);
                st.last = ready_fence();
                c.staging_bytes += staging_bytes;
                if (st.locked) c.staging_pinned_bytes += staging_bytes;
                staging.push_back(std::move(st));
            }
        }
        if (!streamed.empty()) {
            if (plan.slots < 2 || plan.slot_bytes == 0)
                throw UsageError("engine: the plan streams " + std::to_string(streamed.size()) + " groups but has " +
                                 std::to_string(plan.slots) + " slots; plan with slots >= 2");
            for (std::uint32_t i = 0; i < plan.slots; ++i) {
                Slot s;
                s.buf = pool->reserve(plan.slot_bytes, kGroupAlignment);
                // Host "device" memory: fault the pages in now, so the first uploads into each slot do
                // not pay them inside the step (and in upload_copy_s).
                if (tr.device_is_host()) std::memset(s.buf.data(), 0, static_cast<std::size_t>(s.buf.bytes()));
                c.device_bytes += s.buf.bytes();
                s.readers = ready_fence();
                slots.push_back(std::move(s));
            }
        }
        if (!opt.measure_link) c.link_reason = "not measured (EngineOptions::measure_link = false)";
        else if (slots.empty()) c.link_reason = "not measured: the plan streams nothing (no slots)";
        else c.link = tr.measure_link(slots[0].buf.data(), std::min<std::uint64_t>(slots[0].buf.bytes(), kLinkProbeBytes));
        if (plan.route != Route::component) upload_residents();
        prepared = true;
    }

    int find_slot(std::size_t g) const {
        for (std::size_t i = 0; i < slots.size(); ++i)
            if (slots[i].group == static_cast<long>(g)) return static_cast<int>(i);
        return -1;
    }

    int pick_victim(const std::vector<std::size_t> & keep) const {
        int best = -1;
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const Slot & s = slots[i];
            if (s.leases > 0) continue;
            if (s.group >= 0 && std::find(keep.begin(), keep.end(), static_cast<std::size_t>(s.group)) != keep.end()) continue;
            if (s.group < 0) return static_cast<int>(i);
            if (best < 0 || s.stamp < slots[best].stamp) best = static_cast<int>(i);
        }
        return best;
    }

    void start_upload(int si, std::size_t g) {
        Slot & s = slots[si];
        s.group = static_cast<long>(g);
        s.stamp = ++tick;
        s.upload = submit(g, s.buf.data(), s.readers, plan.groups[g].residency, false);
        update_flags(s);
    }

    void prefetch(std::size_t g) {
        const long pos = stream_pos[g];
        if (pos < 0) return;
        const std::size_t S = streamed.size();
        std::vector<std::size_t> keep{g};
        for (std::uint32_t k = 1; k <= plan.prefetch_depth && k < S; ++k) {
            const std::size_t next = streamed[(static_cast<std::size_t>(pos) + k) % S];  // wraps into the next step
            keep.push_back(next);
            if (find_slot(next) >= 0) continue;
            const int v = pick_victim(keep);
            if (v < 0) break;
            start_upload(v, next);
        }
    }

    std::uint64_t pending_uploads() const {
        std::uint64_t n = 0;
        for (const auto & s : slots) if (s.upload && !s.upload->ready()) ++n;
        for (const auto & f : resident_fence) if (f && !f->ready()) ++n;
        return n;
    }

    void refresh_flags() {
        for (auto & s : slots) if (s.buf) update_flags(s);
    }
};

// ---- Lease ----

Lease::Lease(Lease && o) noexcept
    : engine_(std::exchange(o.engine_, nullptr)), group_(o.group_), slot_(o.slot_), data_(o.data_), mapped_(o.mapped_) {}

Lease & Lease::operator=(Lease && o) noexcept {
    if (this != &o) {
        release();
        engine_ = std::exchange(o.engine_, nullptr);
        group_ = o.group_;
        slot_ = o.slot_;
        data_ = o.data_;
        mapped_ = o.mapped_;
    }
    return *this;
}

Lease::~Lease() { release(); }

const GroupLayout & Lease::layout() const {
    if (!engine_) throw UsageError("lease: used after release");
    return engine_->impl_->layout.group(group_);
}

int Lease::device_ordinal() const noexcept { return engine_ ? engine_->impl_->tr.device_ordinal() : -1; }

TensorView Lease::view(std::string_view tensor) const {
    const GroupLayout & gl = layout();
    const TensorSlice * s = gl.find(tensor);
    if (!s) throw UsageError("tensor '" + std::string(tensor) + "' is not in execution group '" + gl.name + "'; acquire the group that holds it");
    return TensorView{s->info, tensor_data(*s)};
}

void * Lease::tensor_data(const TensorSlice & slice) const {
    if (mapped_) {
        const GroupLayout & gl = layout();
        return (*mapped_).at(std::size_t(&slice - gl.tensors.data()));
    }
    return static_cast<char *>(data_) + slice.offset;
}

void Lease::release() {
    if (!engine_) return;
    Engine * e = std::exchange(engine_, nullptr);
    e->release_lease(*this);
}

// ---- Engine ----

Engine::Engine(const ModelLayout & layout, Plan plan, const ddo_allocator_vtable * allocator, Transport & transport, EngineOptions options)
    : impl_(std::make_unique<Impl>(layout, std::move(plan), transport, std::move(options))) {
    if (impl_->plan.groups.size() != layout.size())
        throw UsageError("engine: the plan has " + std::to_string(impl_->plan.groups.size()) + " groups, the layout " +
                         std::to_string(layout.size()) + "; plan this layout");
    if (!allocator) throw UsageError("engine: no allocator vtable; load an allocator plugin (e.g. linear)");
    if (auto * st = impl_->opt.staging) {
        const bool host_backend = st->backend() == platform::StagingBackend::host;
        if (host_backend != transport.device_is_host())
            throw UsageError(std::string("engine: host staging backend '") + platform::to_string(st->backend()) +
                             "' does not page-lock memory for the " + transport.name() + " transport; use backend '" +
                             (transport.device_is_host() ? "host" : "cuda") + "' (the transport's own)");
    }
    impl_->vt = allocator;
    impl_->c.transport = transport.name();
}

Engine::~Engine() {
    try { impl_->tr.drain(); } catch (...) { ++impl_->c.failures; }  // counted: nothing can be thrown from here
    if (!impl_->closed && close() != DDO_STATUS_OK) {
        // Leases outlived the engine (a caller bug): leak the device memory rather than free it under a reader.
        for (auto & s : impl_->slots) (void)s.buf.release();
    }
}

void Engine::begin_phase(std::string_view name) {
    Impl & m = *impl_;
    if (m.closed) throw UsageError("engine: begin_phase after close");
    m.phase = std::string(name);
    if (!m.prepared) m.prepare();
    if (m.plan.route == Route::component) m.upload_residents();
}

Lease Engine::acquire(std::size_t g) {
    Impl & m = *impl_;
    if (m.closed) throw UsageError("engine: acquire after close");
    if (g >= m.layout.size()) throw UsageError("engine: group index " + std::to_string(g) + " out of range (" + std::to_string(m.layout.size()) + " groups)");
    if (!m.prepared) m.prepare();
    if (m.is_resident(g) && !m.mapped[g].empty()) {
        ++m.c.hits;
        ++m.live_leases;
        return Lease(this, g, -1, nullptr, &m.mapped[g]);
    }
    if (m.is_resident(g)) {
        m.release_idle_staging();
        if (!m.resident[g]) throw UsageError("engine: resident group '" + m.layout.group(g).name + "' is not loaded; call begin_phase first");
        ++m.c.hits;
        try { m.stall += m.tr.compute_wait(*m.resident_fence[g]); }
        catch (...) { ++m.c.failures; throw; }
        ++m.live_leases;
        return Lease(this, g, -1, m.resident[g].data());
    }
    int si = m.find_slot(g);
    if (si >= 0) ++m.c.hits;
    else {
        ++m.c.misses;
        si = m.pick_victim({g});
        if (si < 0)
            throw RuntimeError("engine: no free slot for group '" + m.layout.group(g).name + "': all " + std::to_string(m.slots.size()) +
                               " slots are leased; release a lease before acquiring the next group, or raise slots");
        m.start_upload(si, g);
    }
    Slot & s = m.slots[si];
    ++s.leases;
    m.prefetch(g);
    try {
        m.stall += m.tr.compute_wait(*s.upload);
    } catch (...) {
        --s.leases;
        s.group = -1;
        ++m.c.failures;
        m.update_flags(s);
        throw;
    }
    m.update_flags(s);
    ++m.live_leases;
    return Lease(this, g, si, s.buf.data());
}

std::uint64_t Engine::skip(std::size_t g) {
    Impl & m = *impl_;
    if (m.closed) throw UsageError("engine: skip after close");
    if (g >= m.layout.size()) throw UsageError("engine: group index " + std::to_string(g) + " out of range (" + std::to_string(m.layout.size()) + " groups)");
    if (!m.prepared) m.prepare();
    ++m.c.skipped_groups;
    if (m.is_resident(g)) return 0;
    const std::uint64_t b = m.layout.group(g).bytes;
    m.c.bytes_skipped += b;
    return b;
}

void Engine::release_lease(Lease & l) noexcept {
    Impl & m = *impl_;
    if (m.live_leases > 0) --m.live_leases;
    if (l.slot_ < 0) return;
    Slot & s = m.slots[l.slot_];
    if (s.leases > 0) --s.leases;
    try {
        s.readers = m.tr.compute_fence();
        m.update_flags(s);
    } catch (...) {
        ++m.c.failures;
    }
}

std::uint64_t Engine::end_phase() {
    Impl & m = *impl_;
    try { m.tr.drain(); } catch (...) { ++m.c.failures; }
    m.refresh_flags();
    if (m.plan.route == Route::component && m.live_leases == 0) {
        m.tr.compute_fence()->host_wait();
        for (std::size_t g = 0; g < m.resident.size(); ++g)
            if (m.resident[g]) {
                m.c.device_bytes -= m.resident[g].bytes();
                if (m.resident[g].release() == DDO_STATUS_BUSY) ++m.c.quarantines;
                m.resident_fence[g] = ready_fence();
            }
    }
    const std::uint64_t owners = m.live_leases + m.pending_uploads();
    m.c.phase_end_owners.emplace_back(m.phase.empty() ? "phase" : m.phase, owners);
    m.phase.clear();
    return owners;
}

void Engine::restart_counters() {
    Impl & m = *impl_;
    m.refresh_flags();
    if (m.live_leases > 0 || m.pending_uploads() > 0)
        throw UsageError("engine: restart_counters with " + std::to_string(m.live_leases + m.pending_uploads()) +
                         " lease(s) or upload(s) outstanding; end the phase first");
    EngineCounters held;
    held.transport = m.c.transport;
    held.mapped_bytes = m.c.mapped_bytes;
    held.mapped_groups = m.c.mapped_groups;
    held.pinned_bytes = m.c.pinned_bytes;
    held.pageable_bytes = m.c.pageable_bytes;
    held.registered_bytes = m.c.registered_bytes;
    held.staging_bytes = m.c.staging_bytes;
    held.staging_pinned_bytes = m.c.staging_pinned_bytes;
    held.pinned_fallbacks = m.c.pinned_fallbacks;
    held.pinned_fallback_bytes = m.c.pinned_fallback_bytes;
    held.pinned_fallback_reasons = m.c.pinned_fallback_reasons;
    held.device_bytes = m.c.device_bytes;
    held.quarantines = m.c.quarantines;
    held.link = m.c.link;
    held.link_reason = m.c.link_reason;
    m.c = std::move(held);
    m.base = m.tr.stats();
    std::string why;
    m.base_direct_fallbacks = m.layout.source().direct_fallbacks(&why);
    m.stall = 0;
    m.log.clear();
}

ddo_status Engine::close() noexcept {
    Impl & m = *impl_;
    if (m.closed) return DDO_STATUS_OK;
    try {
        m.refresh_flags();
    } catch (const std::exception & e) {
        ++m.c.failures;
        if (m.c.failure_reasons.size() < 8) m.c.failure_reasons.push_back(std::string("close: refreshing slot flags: ") + e.what());
    } catch (...) {
        ++m.c.failures;
    }
    if (m.live_leases > 0 || m.pending_uploads() > 0) {
        ++m.c.close_refusals;
        return DDO_STATUS_BUSY;
    }
    try {
        m.tr.drain();
        m.tr.compute_fence()->host_wait();
    } catch (...) {
        ++m.c.failures;
    }
    for (auto & s : m.slots) {
        try {
            s.buf.set_flags(0);
        } catch (const std::exception & e) {
            ++m.c.failures;
            if (m.c.failure_reasons.size() < 8) m.c.failure_reasons.push_back(std::string("close: clearing slot flags: ") + e.what());
        } catch (...) {
            ++m.c.failures;
        }
        if (s.buf.release() == DDO_STATUS_BUSY) ++m.c.quarantines;
    }
    m.slots.clear();
    for (auto & b : m.resident) if (b && b.release() == DDO_STATUS_BUSY) ++m.c.quarantines;
    m.resident.clear();
    m.host.clear();
    m.staging.clear();
    ddo_status s = m.pool ? m.pool->close() : DDO_STATUS_OK;
    if (s == DDO_STATUS_BUSY) { ++m.c.close_refusals; return s; }
    m.closed = true;
    return s;
}

const Plan & Engine::plan() const noexcept { return impl_->plan; }
const ModelLayout & Engine::layout() const noexcept { return impl_->layout; }
Transport & Engine::transport() noexcept { return impl_->tr; }
std::vector<std::size_t> Engine::upload_log() const { return impl_->log; }

EngineCounters Engine::counters() const {
    const Impl & m = *impl_;
    EngineCounters c = m.c;
    const TransportStats ts = m.tr.stats();
    c.upload_copy_s = ts.copy_s - m.base.copy_s;
    c.upload_event_s = ts.event_s ? std::optional<double>(*ts.event_s - m.base.event_s.value_or(0)) : std::nullopt;
    c.upload_event_reason = ts.event_reason;
    c.failures += ts.failures - m.base.failures;
    c.direct_fallbacks = m.layout.source().direct_fallbacks(&c.direct_fallback_reason) - m.base_direct_fallbacks;
    if (m.tr.device_is_host() && m.c.hits + m.c.misses == 0) c.stall_reason = "no group was acquired yet: nothing ran";
    else if (m.tr.device_is_host()) c.stall_s = m.stall;
    else c.stall_reason = "compute waits on upload events on the device and the host never blocks; see upload_event_s";
    if (m.pool) {
        c.quarantines += m.pool->quarantined();
        if (!m.pool->closed()) {
            try {
                const auto st = m.pool->stats();
                c.failures += st.failures;
                c.quarantines += st.quarantines;
            } catch (const std::exception & e) {  // the pool's own failures are unknown: say so, never a silent 0
                ++c.failures;
                if (c.failure_reasons.size() < 8) c.failure_reasons.push_back(std::string("allocator stats unreadable: ") + e.what());
            } catch (...) {
                ++c.failures;
                if (c.failure_reasons.size() < 8) c.failure_reasons.push_back("allocator stats unreadable (unknown exception)");
            }
        }
    }
    c.outstanding_owners = m.live_leases + m.pending_uploads();
    return c;
}

nlohmann::json Engine::to_json() const {
    nlohmann::json j;
    j["plan"] = impl_->plan.to_json();
    j["counters"] = counters().to_json();
    nlohmann::json a;
    a["name"] = impl_->opt.allocator_name;
    if (impl_->pool && !impl_->pool->closed()) {
        try {
            const auto st = impl_->pool->stats();
            a["backend"] = st.backend == DDO_ALLOC_BACKEND_CUDA ? "cuda" : "host";
            a["bytes_in_use"] = st.bytes_in_use;
            a["peak_bytes_in_use"] = st.peak_bytes_in_use;
            a["live_buffers"] = st.live_buffers;
            a["refusals"] = st.refusals;
            a["ooms"] = st.ooms;
        } catch (const std::exception & e) {
            a["stats"] = nullptr;
            a["stats_reason"] = e.what();
        }
    } else {
        a["stats"] = nullptr;
        a["stats_reason"] = impl_->pool ? "pool closed" : "pool not created (no phase began)";
    }
    j["allocator"] = a;
    if (impl_->opt.staging) {
        j["host_staging"] = impl_->opt.staging->to_json();
        j["host_staging_reason"] = nullptr;
    } else {
        j["host_staging"] = nullptr;
        j["host_staging_reason"] =
            impl_->opt.pinned_route
                ? "no host staging was given to the engine: pinned memory comes from the transport (" + impl_->tr.name() +
                      ": " + (impl_->tr.device_is_host() ? "ordinary memory standing in for pinned" : "cudaHostAlloc") +
                      "), and nothing is registered"
                : "no host staging was given to the engine, and pinning is off (" +
                      (impl_->opt.pinned_route_reason.empty() ? std::string("EngineOptions::pinned_route = false")
                                                              : impl_->opt.pinned_route_reason) +
                      "): host copies and staging buffers are pageable, and nothing is registered";
    }
    return j;
}

}  // namespace ddo::engine
