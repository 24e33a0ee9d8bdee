// NVML through dlopen: no link-time dependency, so the host runs on machines without a driver and
// the report says why GPU fields are null.
#include <dlfcn.h>

#include "ddo/report/memory_probes.hpp"

namespace ddo::report {

namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st *;
struct nvmlMemory_t {
    unsigned long long total, free, used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
}  // namespace

struct NvmlProbe::Impl {
    void * lib = nullptr;
    bool initialized = false;
    nvmlDevice_t device = nullptr;
    std::string reason;
    nvmlReturn_t (*shutdown)() = nullptr;
    nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t *) = nullptr;
    std::optional<std::string> name, driver, cuda;
};

NvmlProbe::NvmlProbe(const std::string & library, unsigned device_index) : impl_(std::make_unique<Impl>()) {
    auto & m = *impl_;
    if (library.empty()) {
        m.reason = "NVML disabled";
        return;
    }
    m.lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!m.lib) {
        const char * e = dlerror();
        m.reason = "NVML not loadable (" + library + "): " + (e ? e : "unknown error");
        return;
    }
    auto sym = [&](const char * n) { return dlsym(m.lib, n); };
    auto init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
    m.shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
    auto get_handle = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t *)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    m.get_memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t *)>(sym("nvmlDeviceGetMemoryInfo"));
    auto get_name = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char *, unsigned)>(sym("nvmlDeviceGetName"));
    auto get_driver = reinterpret_cast<nvmlReturn_t (*)(char *, unsigned)>(sym("nvmlSystemGetDriverVersion"));
    auto get_cuda = reinterpret_cast<nvmlReturn_t (*)(int *)>(sym("nvmlSystemGetCudaDriverVersion_v2"));
    if (!init || !m.shutdown || !get_handle || !m.get_memory) {
        m.reason = "NVML library " + library + " lacks required symbols";
        return;
    }
    if (nvmlReturn_t rc = init(); rc != kNvmlSuccess) {
        m.reason = "nvmlInit_v2 failed (NVML return " + std::to_string(rc) + "): no driver or no GPU";
        return;
    }
    m.initialized = true;
    if (nvmlReturn_t rc = get_handle(device_index, &m.device); rc != kNvmlSuccess) {
        m.reason = "no GPU at index " + std::to_string(device_index) + " (NVML return " + std::to_string(rc) + ")";
        m.device = nullptr;
        return;
    }
    char buf[256] = {};
    if (get_name && get_name(m.device, buf, sizeof buf) == kNvmlSuccess) m.name = buf;
    if (get_driver && get_driver(buf, sizeof buf) == kNvmlSuccess) m.driver = buf;
    int v = 0;
    if (get_cuda && get_cuda(&v) == kNvmlSuccess) m.cuda = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

NvmlProbe::~NvmlProbe() {
    if (impl_->initialized && impl_->shutdown) impl_->shutdown();
    // The library stays loaded (unloading NVML while other threads may call it is not worth the risk).
}

bool NvmlProbe::available() const { return impl_->device != nullptr; }
const std::string & NvmlProbe::unavailable_reason() const { return impl_->reason; }

Reading NvmlProbe::used() {
    if (!available()) return Reading::missing(impl_->reason);
    nvmlMemory_t mem{};
    if (nvmlReturn_t rc = impl_->get_memory(impl_->device, &mem); rc != kNvmlSuccess)
        return Reading::missing("nvmlDeviceGetMemoryInfo failed (NVML return " + std::to_string(rc) + ")");
    return Reading::of(mem.used);
}

Reading NvmlProbe::total() {
    if (!available()) return Reading::missing(impl_->reason);
    nvmlMemory_t mem{};
    if (nvmlReturn_t rc = impl_->get_memory(impl_->device, &mem); rc != kNvmlSuccess)
        return Reading::missing("nvmlDeviceGetMemoryInfo failed (NVML return " + std::to_string(rc) + ")");
    return Reading::of(mem.total);
}

std::optional<std::string> NvmlProbe::device_name() const { return impl_->name; }
std::optional<std::string> NvmlProbe::driver_version() const { return impl_->driver; }
std::optional<std::string> NvmlProbe::cuda_driver_version() const { return impl_->cuda; }

}  // namespace ddo::report
