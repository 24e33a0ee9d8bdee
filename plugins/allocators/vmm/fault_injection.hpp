// FaultInjectingBackend: wraps a backend and fails the Nth call of a chosen primitive, so the
// failure, rollback and quarantine paths of the pool are testable on any machine. Enabled only by
// the pool options "fault.<primitive> = N" (primitives: reserve_range, free_range, create_chunk,
// release_chunk, map, unmap); never set by shipped presets.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "vmm_backend.hpp"

namespace ddo::vmm {

enum class Primitive : int { reserve_range, free_range, create_chunk, release_chunk, map, unmap, count };

// Primitive for an option suffix, or Primitive::count when unknown.
Primitive primitive_from_name(std::string_view name);

class FaultInjectingBackend final : public VmmBackend {
public:
    explicit FaultInjectingBackend(std::unique_ptr<VmmBackend> inner) : inner_(std::move(inner)) {}
    // Fails the nth (1-based) call of p; 0 disables.
    void fail_nth(Primitive p, std::uint64_t nth) { fail_at_[static_cast<int>(p)] = nth; }

    std::uint32_t kind() const override { return inner_->kind(); }
    const char * name() const override { return inner_->name(); }
    std::uint64_t granularity() const override { return inner_->granularity(); }
    BackendResult reserve_range(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t * out) override {
        return injected(Primitive::reserve_range) ? fault("reserve_range") : inner_->reserve_range(bytes, alignment, out);
    }
    BackendResult free_range(std::uintptr_t addr, std::uint64_t bytes) override {
        return injected(Primitive::free_range) ? fault("free_range") : inner_->free_range(addr, bytes);
    }
    BackendResult create_chunk(std::uint64_t bytes, std::uint64_t * out) override {
        return injected(Primitive::create_chunk) ? fault("create_chunk") : inner_->create_chunk(bytes, out);
    }
    BackendResult release_chunk(std::uint64_t handle, std::uint64_t bytes) override {
        return injected(Primitive::release_chunk) ? fault("release_chunk") : inner_->release_chunk(handle, bytes);
    }
    BackendResult map(std::uintptr_t addr, std::uint64_t bytes, std::uint64_t handle) override {
        return injected(Primitive::map) ? fault("map") : inner_->map(addr, bytes, handle);
    }
    BackendResult unmap(std::uintptr_t addr, std::uint64_t bytes) override {
        return injected(Primitive::unmap) ? fault("unmap") : inner_->unmap(addr, bytes);
    }

private:
    bool injected(Primitive p) {
        const int i = static_cast<int>(p);
        return ++calls_[i] == fail_at_[i];
    }
    static BackendResult fault(const char * what) {
        return BackendResult::failure(DDO_STATUS_UNAVAILABLE, std::string("injected fault in ") + what +
                                                                  " (pool option fault." + what + ")");
    }

    std::unique_ptr<VmmBackend> inner_;
    std::array<std::uint64_t, static_cast<int>(Primitive::count)> calls_{};
    std::array<std::uint64_t, static_cast<int>(Primitive::count)> fail_at_{};
};

inline Primitive primitive_from_name(std::string_view name) {
    static constexpr std::array<std::string_view, static_cast<int>(Primitive::count)> names{
        "reserve_range", "free_range", "create_chunk", "release_chunk", "map", "unmap"};
    for (int i = 0; i < static_cast<int>(Primitive::count); ++i) {
        if (names[i] == name) {
            return static_cast<Primitive>(i);
        }
    }
    return Primitive::count;
}

}  // namespace ddo::vmm
