// PluginHostContext: the host services one plugin sees (ddo_host_api): a log callback that writes
// to the spdlog logger "plugin.<name>", and set_error, which copies the plugin's last failure.
// Contexts live for the whole process, like the plugins (Note [Plugin unloading]).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ddo/ddo_plugin_abi.h"

namespace spdlog {
class logger;
}

namespace ddo {

class PluginHostContext {
public:
    // Returns a context with process lifetime (never freed: the plugin keeps the api pointer).
    // Uses the registered spdlog logger "plugin.<plugin_name>" when there is one, else registers a
    // new one sharing the default logger's sinks and level.
    static PluginHostContext & create(const std::string & plugin_name);

    const ddo_host_api * api() const noexcept { return &api_; }
    const std::string & plugin_name() const noexcept { return name_; }
    std::shared_ptr<spdlog::logger> logger() const { return logger_; }

    // The last message passed to set_error ("" when none) and its status.
    std::string last_error() const;
    std::int32_t last_status() const;
    void clear_error();

    PluginHostContext(const PluginHostContext &) = delete;
    PluginHostContext & operator=(const PluginHostContext &) = delete;

private:
    explicit PluginHostContext(const std::string & plugin_name);
    static void log_callback(void * host_ctx, std::int32_t level, const char * plugin, const char * msg);
    static void set_error_callback(void * host_ctx, std::int32_t status, const char * msg);

    std::string name_;
    std::shared_ptr<spdlog::logger> logger_;
    ddo_host_api api_{};
    mutable std::mutex mutex_;
    std::string last_error_;
    std::int32_t last_status_ = DDO_STATUS_OK;
};

}  // namespace ddo
