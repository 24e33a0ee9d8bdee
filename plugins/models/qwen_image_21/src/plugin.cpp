// The qwen_image_21 plugin's C entry points (negotiate, get_vtable) and its `run`, which drives the pipeline
// from a ddo::RunContext. Every exception is caught here: none crosses the ABI.
#include <ATen/ATen.h>

#include <atomic>
#include <string>

#include "ddo/build_info.h"
#include "ddo/ddo_model_plugin.h"
#include "ddo/error.hpp"
#include "ddo/run_context.hpp"
#include "plugin_run.hpp"

namespace {

constexpr const char * kName = "qwen_image_21";
constexpr const char * kVersion = "0.1.0";
const char * const kAliases[] = {"qwen_image", nullptr};
const char * const kComponents[] = {"transformer", "vae", nullptr};
const char * const kOptions[] = {"plugin.qwen_image_21.*", nullptr};

std::atomic<const ddo_host_api *> g_host{nullptr};

ddo_status report(ddo_status status, const std::string & message) {
    const auto * host = g_host.load();
    if (host && host->set_error) host->set_error(host->host_ctx, int32_t(status), message.c_str());
    return status;
}

ddo_status run(ddo_run_context * c) {
    if (!c) return report(DDO_STATUS_INVALID_ARGUMENT, "qwen_image_21: run called without a run context");
    try {
        ddo::qwen_image_21::run_plugin(ddo::RunContext::from_c(c), [](int level, const std::string & msg) {
            const auto * host = g_host.load();
            if (host && host->log) host->log(host->host_ctx, level, kName, msg.c_str());
        });
        return DDO_STATUS_OK;
    } catch (const ddo::Error & e) {
        if (e.code() == ddo::ExitCode::interrupted) return report(DDO_STATUS_INTERRUPTED, e.what());
        if (e.code() == ddo::ExitCode::usage) return report(DDO_STATUS_INVALID_ARGUMENT, e.what());
        return report(DDO_STATUS_INTERNAL, e.what());
    } catch (const c10::Error & e) {
        return report(DDO_STATUS_INTERNAL, std::string("qwen_image_21: LibTorch error: ") + e.what_without_backtrace());
    } catch (const std::bad_alloc &) {
        return report(DDO_STATUS_OUT_OF_MEMORY, "qwen_image_21: out of host memory");
    } catch (const std::exception & e) {
        return report(DDO_STATUS_INTERNAL, std::string("qwen_image_21: ") + e.what());
    } catch (...) {
        return report(DDO_STATUS_INTERNAL, "qwen_image_21: unknown exception");
    }
}

const ddo_model_vtable kVtable{
    sizeof(ddo_model_vtable),
    DDO_ABI_VERSION_MINOR,
    "Qwen-Image 2.1 (single-stream DiT, RGBA VAE) from prompt embeddings",
    kComponents,
    kOptions,
    run,
};

}  // namespace

extern "C" {

DDO_PLUGIN_EXPORT ddo_status ddo_plugin_negotiate(uint32_t, uint32_t, ddo_plugin_info * info) {
    return ddo_plugin_info_fill(info, DDO_PLUGIN_KIND_MODEL, kName, kVersion, kAliases, DDO_BUILD_FINGERPRINT);
}

DDO_PLUGIN_EXPORT const void * ddo_plugin_get_vtable(const ddo_host_api * host) {
    g_host.store(host);
    return &kVtable;
}

}  // extern "C"
