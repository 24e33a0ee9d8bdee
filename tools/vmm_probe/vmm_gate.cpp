// The VMM gate (see vmm_gate.hpp). Each step appends {name, ok, detail} to "checks"; a failed step
// never stops the later ones unless they cannot run (no pool, no buffer).
#include "vmm_gate.hpp"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <vector>

#if DDO_HAVE_CUDA_HEADERS
#include "ddo/platform/cuda_driver.hpp"
#endif
#include "ddo/util/status_name.hpp"

namespace ddo::probe {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::string hex64(std::uint64_t v) {
    char buf[19];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string address(const void * p) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
    return buf;
}

std::vector<std::uint8_t> pattern(std::uint64_t bytes, std::uint64_t seed) {
    std::vector<std::uint8_t> data(bytes);
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto & b : data) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b = static_cast<std::uint8_t>(x);
    }
    return data;
}

nlohmann::json stats_json(const ddo_alloc_stats & s) {
    return {{"backend", s.backend == DDO_ALLOC_BACKEND_CUDA ? "cuda" : "host"},
            {"physical_bytes", s.physical_bytes}, {"virtual_bytes", s.virtual_bytes},
            {"bytes_in_use", s.bytes_in_use}, {"peak_bytes_in_use", s.peak_bytes_in_use},
            {"live_buffers", s.live_buffers}, {"leased_buffers", s.leased_buffers},
            {"pending_buffers", s.pending_buffers}, {"reserves", s.reserves}, {"releases", s.releases},
            {"reclaims", s.reclaims}, {"recreates", s.recreates}, {"trims", s.trims},
            {"trimmed_bytes", s.trimmed_bytes}, {"failures", s.failures}, {"refusals", s.refusals},
            {"ooms", s.ooms}, {"quarantines", s.quarantines}};
}

class Gate {
public:
    explicit Gate(const GateInput & in) : in_(in) {}

    nlohmann::json run() {
        out_["limits"] = {{"physical_bytes", 8 * kMiB}, {"virtual_bytes", 24 * kMiB}};
        ddo_alloc_config cfg{};
        cfg.struct_size = sizeof(cfg);
        cfg.backend = in_.backend;
        cfg.device = 0;
        cfg.physical_limit = 8 * kMiB;
        cfg.virtual_limit = 24 * kMiB;
        ddo_status s = vt().pool_create(&cfg, &pool_);
        if (!expect("pool_create", s, DDO_STATUS_OK)) {
            return finish();
        }
        ddo_alloc_stats st = stats();
        check("backend_in_use", st.backend == static_cast<std::uint32_t>(in_.backend),
              std::string("stats.backend = ") + (st.backend == DDO_ALLOC_BACKEND_CUDA ? "cuda" : "host"));

        ddo_alloc_buffer a{}, b{}, c{};
        if (!expect("reserve_a_4MiB", vt().reserve(pool_, 4 * kMiB, 256, &a), DDO_STATUS_OK) ||
            !expect("reserve_b_4MiB", vt().reserve(pool_, 4 * kMiB, 256, &b), DDO_STATUS_OK)) {
            return finish();
        }
        out_["buffers"] = {{{"name", "a"}, {"id", a.id}, {"address", address(a.ptr)}, {"bytes", a.bytes}},
                           {{"name", "b"}, {"id", b.id}, {"address", address(b.ptr)}, {"bytes", b.bytes}}};
        st = stats();
        check("capacity_after_two_buffers", st.physical_bytes == 8 * kMiB && st.virtual_bytes == 8 * kMiB,
              "physical " + std::to_string(st.physical_bytes) + ", virtual " + std::to_string(st.virtual_bytes));
        upload("a", a, 1);
        upload("b", b, 2);
        verify("payload_a_initial", a, 1);
        verify("payload_b_initial", b, 2);
        expect("third_4MiB_refused_by_physical_limit", vt().reserve(pool_, 4 * kMiB, 256, &c), DDO_STATUS_OUT_OF_MEMORY);

        // Leased and pending refusals, and the checked close while they hold.
        expect("lease_a", vt().set_flags(pool_, a.id, DDO_ALLOC_FLAG_LEASED), DDO_STATUS_OK);
        expect("pending_b", vt().set_flags(pool_, b.id, DDO_ALLOC_FLAG_PENDING), DDO_STATUS_OK);
        expect("release_leased_a_refused", vt().release(pool_, a.id), DDO_STATUS_BUSY);
        expect("reclaim_leased_a_refused", vt().reclaim(pool_, a.id), DDO_STATUS_BUSY);
        expect("release_pending_b_refused", vt().release(pool_, b.id), DDO_STATUS_BUSY);
        expect("reclaim_pending_b_refused", vt().reclaim(pool_, b.id), DDO_STATUS_BUSY);
        st = stats();
        check("lease_and_pending_counted", st.leased_buffers == 1 && st.pending_buffers == 1,
              "leased " + std::to_string(st.leased_buffers) + ", pending " + std::to_string(st.pending_buffers));
        expect("close_refused_while_leased_and_pending", vt().pool_close(pool_), DDO_STATUS_BUSY);
        expect("unlease_a", vt().set_flags(pool_, a.id, 0), DDO_STATUS_OK);
        expect("close_refused_while_pending", vt().pool_close(pool_), DDO_STATUS_BUSY);
        expect("upload_b_done", vt().set_flags(pool_, b.id, 0), DDO_STATUS_OK);

        // One 4 MiB release of physical backing and its recreation at the same address.
        expect("reclaim_b", vt().reclaim(pool_, b.id), DDO_STATUS_OK);
        st = stats();
        check("reclaim_returned_4MiB", st.physical_bytes == 4 * kMiB && st.virtual_bytes == 8 * kMiB,
              "physical " + std::to_string(st.physical_bytes) + ", virtual " + std::to_string(st.virtual_bytes));
        verify("payload_a_after_reclaim_of_b", a, 1);
        expect("recreate_b", vt().recreate(pool_, b.id), DDO_STATUS_OK);
        // The ABI hands out no new pointer: the buffer's original address must be backed again,
        // which writing and reading a fresh payload through it proves.
        upload("b_recreated", b, 3);
        const bool backed_again = verify("payload_b_after_recreate", b, 3);
        check("stable_address_b", backed_again, address(b.ptr) + " before reclaim and after recreate");
        verify("payload_a_after_recreate_of_b", a, 1);
        st = stats();
        check("capacity_after_recreate", st.physical_bytes == 8 * kMiB, "physical " + std::to_string(st.physical_bytes));

        // Idle trim keeps live payloads.
        std::uint64_t trimmed = 0;
        expect("trim_idle_with_live_buffers", vt().trim_idle(pool_, &trimmed), DDO_STATUS_OK);
        check("trim_idle_released_nothing_live", trimmed == 0, std::to_string(trimmed) + " bytes released");
        verify("payload_a_after_trim", a, 1);
        verify("payload_b_after_trim", b, 3);

        // Final ownership: release everything, trim, and require zero owners and zero failures.
        expect("release_a", vt().release(pool_, a.id), DDO_STATUS_OK);
        expect("release_b", vt().release(pool_, b.id), DDO_STATUS_OK);
        expect("trim_idle_after_release", vt().trim_idle(pool_, &trimmed), DDO_STATUS_OK);
        check("trim_idle_released_8MiB", trimmed == 8 * kMiB, std::to_string(trimmed) + " bytes released");
        st = stats();
        out_["final_counters"] = stats_json(st);
        check("final_owners_zero",
              st.live_buffers == 0 && st.leased_buffers == 0 && st.pending_buffers == 0 && st.physical_bytes == 0 &&
                  st.virtual_bytes == 0 && st.bytes_in_use == 0,
              "live " + std::to_string(st.live_buffers) + ", physical " + std::to_string(st.physical_bytes) +
                  ", virtual " + std::to_string(st.virtual_bytes));
        check("final_failures_zero", st.failures == 0 && st.quarantines == 0,
              "failures " + std::to_string(st.failures) + ", quarantines " + std::to_string(st.quarantines));
        check("refusals_counted", st.refusals == 6, std::to_string(st.refusals) + " BUSY answers (expected 6)");
        check("oom_counted", st.ooms == 1, std::to_string(st.ooms) + " (expected 1)");
        check("reclaim_recreate_counted", st.reclaims == 1 && st.recreates == 1,
              "reclaims " + std::to_string(st.reclaims) + ", recreates " + std::to_string(st.recreates));
        expect("close_after_release", vt().pool_close(pool_), DDO_STATUS_OK);
        pool_ = nullptr;
        return finish();
    }

private:
    const ddo_allocator_vtable & vt() const { return *in_.vt; }

    ddo_alloc_stats stats() {
        ddo_alloc_stats s{};
        s.struct_size = sizeof(s);
        vt().get_stats(pool_, &s);
        return s;
    }

    bool check(const std::string & name, bool ok, const std::string & detail) {
        out_["checks"].push_back({{"name", name}, {"ok", ok}, {"detail", detail}});
        all_ok_ = all_ok_ && ok;
        return ok;
    }

    bool expect(const std::string & name, ddo_status got, ddo_status want) {
        std::string detail = std::string(status_name(got)) + (got == want ? "" : std::string(" (expected ") + status_name(want) + ")");
        if (got != DDO_STATUS_OK && in_.last_error) {
            const std::string why = in_.last_error();
            if (!why.empty()) {
                detail += ": " + why;
            }
        }
        return check(name, got == want, detail);
    }

    void upload(const std::string & name, const ddo_alloc_buffer & buf, std::uint64_t seed) {
        const auto data = pattern(buf.bytes, seed);
        bool ok = true;
        std::string detail = std::to_string(buf.bytes) + " bytes";
        if (in_.backend == DDO_ALLOC_BACKEND_HOST) {
            std::memcpy(buf.ptr, data.data(), buf.bytes);
        } else {
#if DDO_HAVE_CUDA_HEADERS
            const auto * d = ddo::platform::CudaDriver::get(&detail);
            CUresult rc = d ? d->api().memcpy_htod(reinterpret_cast<CUdeviceptr>(buf.ptr), data.data(), buf.bytes)
                            : CUDA_ERROR_NOT_INITIALIZED;
            ok = rc == CUDA_SUCCESS;
            if (!ok && d) {
                detail = "cuMemcpyHtoD: " + d->describe(rc);
            }
#else
            ok = false;
            detail = "probe built without CUDA headers";
#endif
        }
        check("upload_" + name, ok, detail);
    }

    bool verify(const std::string & name, const ddo_alloc_buffer & buf, std::uint64_t seed) {
        const auto want_data = pattern(buf.bytes, seed);
        const std::uint64_t want = XXH3_64bits(want_data.data(), want_data.size());
        std::uint64_t got = 0;
        std::string error;
        if (in_.backend == DDO_ALLOC_BACKEND_HOST) {
            got = XXH3_64bits(buf.ptr, buf.bytes);
        } else {
#if DDO_HAVE_CUDA_HEADERS
            std::vector<std::uint8_t> back(buf.bytes);
            const auto * d = ddo::platform::CudaDriver::get(&error);
            CUresult rc = d ? d->api().memcpy_dtoh(back.data(), reinterpret_cast<CUdeviceptr>(buf.ptr), buf.bytes)
                            : CUDA_ERROR_NOT_INITIALIZED;
            if (rc != CUDA_SUCCESS && d) {
                error = "cuMemcpyDtoH: " + d->describe(rc);
            }
            got = XXH3_64bits(back.data(), back.size());
#else
            error = "probe built without CUDA headers";
#endif
        }
        out_["payloads"][name] = {{"xxh3_expected", hex64(want)}, {"xxh3_actual", hex64(got)}};
        return check(name, error.empty() && got == want, error.empty() ? "xxh3 " + hex64(got) : error);
    }

    nlohmann::json finish() {
        if (pool_ != nullptr) {
            // A failed gate still returns what it can: clear flags, then close.
            for (auto & b : out_["buffers"]) {
                vt().set_flags(pool_, b["id"].get<std::uint64_t>(), 0);
            }
            vt().pool_close(pool_);
            pool_ = nullptr;
        }
        out_["passed"] = all_ok_;
        return out_;
    }

    GateInput in_;
    ddo_alloc_pool * pool_ = nullptr;
    nlohmann::json out_ = {{"checks", nlohmann::json::array()}, {"buffers", nlohmann::json::array()}};
    bool all_ok_ = true;
};

}  // namespace

nlohmann::json run_vmm_gate(const GateInput & input) { return Gate(input).run(); }

}  // namespace ddo::probe
