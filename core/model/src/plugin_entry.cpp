#include "ddo/model/plugin_entry.hpp"

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

ddo_status report(const ddo_host_api * host, ddo_status status, const std::string & message) noexcept {
    if (host && host->set_error) host->set_error(host->host_ctx, int32_t(status), message.c_str());
    return status;
}

}  // namespace

ddo_status run_guarded(const PluginDefinition & p, const ddo_host_api * host, ddo_run_context * c) noexcept {
    const std::string name = p.name;
    if (!c) return report(host, DDO_STATUS_INVALID_ARGUMENT, name + ": run called without a run context");
    try {
        ModelRun run(RunContext::from_c(c), name, [host, name](int level, const std::string & msg) {
            if (host && host->log) host->log(host->host_ctx, level, name.c_str(), msg.c_str());
        });
        p.run(run);
        return DDO_STATUS_OK;
    } catch (const Error & e) {
        if (e.code() == ExitCode::interrupted) return report(host, DDO_STATUS_INTERRUPTED, e.what());
        if (e.code() == ExitCode::usage) return report(host, DDO_STATUS_INVALID_ARGUMENT, e.what());
        return report(host, DDO_STATUS_INTERNAL, e.what());
    } catch (const c10::Error & e) {
        return report(host, DDO_STATUS_INTERNAL, name + ": LibTorch error: " + e.what_without_backtrace());
    } catch (const std::bad_alloc &) {
        return report(host, DDO_STATUS_OUT_OF_MEMORY, name + ": out of host memory");
    } catch (const std::exception & e) {
        return report(host, DDO_STATUS_INTERNAL, name + ": " + e.what());
    } catch (...) {
        return report(host, DDO_STATUS_INTERNAL, name + ": unknown exception");
    }
}

}  // namespace ddo::model
