#include "ddo/engine/allocator_pool.hpp"

#include <utility>

#include "ddo/error.hpp"
#include "ddo/util/status_name.hpp"

namespace ddo::engine {

PoolBuffer::PoolBuffer(PoolBuffer && o) noexcept : pool_(std::exchange(o.pool_, nullptr)), buf_(o.buf_) {}

PoolBuffer & PoolBuffer::operator=(PoolBuffer && o) noexcept {
    if (this != &o) {
        release();
        pool_ = std::exchange(o.pool_, nullptr);
        buf_ = o.buf_;
    }
    return *this;
}

PoolBuffer::~PoolBuffer() { release(); }

void PoolBuffer::set_flags(std::uint32_t flags) {
    if (!pool_ || !pool_->pool_) return;
    ddo_status s = pool_->vt_->set_flags(pool_->pool_, buf_.id, flags);
    if (s != DDO_STATUS_OK)
        throw RuntimeError("allocator '" + pool_->name_ + "': set_flags on buffer " + std::to_string(buf_.id) + " answered " + status_name(s));
}

ddo_status PoolBuffer::release() noexcept {
    if (!pool_) return DDO_STATUS_OK;
    if (!pool_->pool_) { pool_ = nullptr; return DDO_STATUS_OK; }
    ddo_status s = pool_->vt_->release(pool_->pool_, buf_.id);
    if (s == DDO_STATUS_BUSY) {
        ++pool_->refusals_;
        ++pool_->quarantined_;  // withheld: a reader may still use it
    }
    pool_ = nullptr;
    return s;
}

AllocatorPool::AllocatorPool(const ddo_allocator_vtable * vtable, const ddo_alloc_config & config, std::string name)
    : vt_(vtable), name_(std::move(name)) {
    if (!vt_ || vt_->struct_size < sizeof(ddo_allocator_vtable) || !vt_->pool_create)
        throw RuntimeError("allocator '" + name_ + "': no usable vtable; check the allocator plugin");
    ddo_status s = vt_->pool_create(&config, &pool_);
    if (s != DDO_STATUS_OK || !pool_) {
        std::string hint;
        if (s == DDO_STATUS_UNAVAILABLE) hint = " (no usable device; see the plugin's reason, or use the host backend)";
        if (s == DDO_STATUS_INVALID_ARGUMENT && config.n_options > 0 && config.options) {
            hint = " (check its pool options, preset plugin." + name_ + ".*:";
            for (std::size_t i = 0; i < config.n_options; ++i)
                hint += std::string(i ? ", " : " ") + (config.options[i].key ? config.options[i].key : "(null)");
            hint += ")";
        }
        throw RuntimeError("allocator '" + name_ + "': pool_create answered " + std::string(status_name(s)) + hint);
    }
}

AllocatorPool::~AllocatorPool() {
    if (close() == DDO_STATUS_BUSY) ++quarantined_;  // leaked on purpose
}

PoolBuffer AllocatorPool::reserve(std::uint64_t bytes, std::uint64_t alignment) {
    if (!pool_) throw RuntimeError("allocator '" + name_ + "': reserve after close");
    ddo_alloc_buffer b{};
    ddo_status s = vt_->reserve(pool_, bytes, alignment, &b);
    if (s != DDO_STATUS_OK)
        throw RuntimeError("allocator '" + name_ + "': reserve of " + std::to_string(bytes) + " bytes answered " + status_name(s) +
                           (s == DDO_STATUS_OUT_OF_MEMORY ? "; lower the device budget or the slot count" : ""));
    return PoolBuffer(this, b);
}

ddo_status AllocatorPool::close() noexcept {
    if (!pool_) return DDO_STATUS_OK;
    ddo_status s = vt_->pool_close(pool_);
    if (s == DDO_STATUS_OK) pool_ = nullptr;
    else if (s == DDO_STATUS_BUSY) ++refusals_;
    return s;
}

ddo_alloc_stats AllocatorPool::stats() const {
    ddo_alloc_stats st{};
    st.struct_size = sizeof(st);
    if (pool_ && vt_->get_stats) {
        ddo_status s = vt_->get_stats(pool_, &st);
        if (s != DDO_STATUS_OK) throw RuntimeError("allocator '" + name_ + "': get_stats answered " + std::string(status_name(s)));
    }
    return st;
}

}  // namespace ddo::engine
