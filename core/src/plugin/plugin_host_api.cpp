#include "ddo/plugin/plugin_host_api.hpp"

#include <spdlog/spdlog.h>

#include <deque>

namespace ddo {

namespace {

spdlog::level::level_enum to_spdlog_level(std::int32_t level) {
    switch (level) {
        case DDO_LOG_LEVEL_TRACE: return spdlog::level::trace;
        case DDO_LOG_LEVEL_DEBUG: return spdlog::level::debug;
        case DDO_LOG_LEVEL_INFO: return spdlog::level::info;
        case DDO_LOG_LEVEL_WARN: return spdlog::level::warn;
        case DDO_LOG_LEVEL_ERROR: return spdlog::level::err;
        default: return spdlog::level::info;
    }
}

std::mutex & contexts_mutex() {
    static std::mutex m;
    return m;
}

// Never destroyed: plugins hold &context.api_ for the rest of the process (Note [Plugin unloading]).
std::deque<PluginHostContext *> & contexts() {
    static auto * all = new std::deque<PluginHostContext *>();
    return *all;
}

}  // namespace

PluginHostContext::PluginHostContext(const std::string & plugin_name) : name_(plugin_name) {
    const std::string logger_name = "plugin." + plugin_name;
    logger_ = spdlog::get(logger_name);
    if (!logger_) {
        logger_ = spdlog::default_logger()->clone(logger_name);
        spdlog::register_logger(logger_);
    }
    api_.struct_size = sizeof(ddo_host_api);
    api_.abi_minor = DDO_ABI_VERSION_MINOR;
    api_.host_ctx = this;
    api_.log = &PluginHostContext::log_callback;
    api_.set_error = &PluginHostContext::set_error_callback;
}

PluginHostContext & PluginHostContext::create(const std::string & plugin_name) {
    std::lock_guard lock(contexts_mutex());
    auto * context = new PluginHostContext(plugin_name);  // process lifetime, see contexts()
    contexts().push_back(context);
    return *context;
}

std::string PluginHostContext::last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
}

std::int32_t PluginHostContext::last_status() const {
    std::lock_guard lock(mutex_);
    return last_status_;
}

void PluginHostContext::clear_error() {
    std::lock_guard lock(mutex_);
    last_error_.clear();
    last_status_ = DDO_STATUS_OK;
}

// Both callbacks are entered from plugin code through a C function pointer: nothing may escape.
void PluginHostContext::log_callback(void * host_ctx, std::int32_t level, const char * /*plugin*/,
                                     const char * msg) {
    try {
        auto * self = static_cast<PluginHostContext *>(host_ctx);
        if (self == nullptr) return;
        self->logger_->log(to_spdlog_level(level), "{}", msg != nullptr ? msg : "(null message)");
    } catch (...) {
        // A failed log line must not take the plugin down with it.
    }
}

void PluginHostContext::set_error_callback(void * host_ctx, std::int32_t status, const char * msg) {
    try {
        auto * self = static_cast<PluginHostContext *>(host_ctx);
        if (self == nullptr) return;
        std::lock_guard lock(self->mutex_);
        self->last_error_ = msg != nullptr ? msg : "(no message)";
        self->last_status_ = status;
    } catch (...) {
        // Out of memory copying the message: the status alone is still returned by the plugin.
    }
}

}  // namespace ddo
