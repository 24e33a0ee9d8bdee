#include "ddo/report/environment_info.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "ddo/report/memory_probes.hpp"
#include "ddo/util/build_info.hpp"

namespace ddo::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::optional<std::string> slurp_trimmed(const fs::path & p) {
    std::ifstream in(p);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

void put(json & j, const std::string & key, const std::optional<json> & v, const std::string & reason) {
    j[key] = v ? *v : json(nullptr);
    j[key + "_reason"] = v ? json(nullptr) : json(reason);
}

}  // namespace

json collect_environment(const fs::path & proc_root, const fs::path & etc_root, NvmlProbe & nvml) {
    json env = json::object();
    // OS: PRETTY_NAME of os-release.
    std::optional<json> os;
    if (std::ifstream in(etc_root / "os-release"); in) {
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("PRETTY_NAME=", 0) == 0) {
                auto v = line.substr(12);
                if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
                os = v;
            }
    }
    put(env, "os", os, "no PRETTY_NAME in " + (etc_root / "os-release").string());
    auto kernel = slurp_trimmed(proc_root / "sys/kernel/osrelease");
    put(env, "kernel", kernel ? std::optional<json>(*kernel) : std::nullopt,
        "cannot read " + (proc_root / "sys/kernel/osrelease").string());
    std::optional<json> wsl;
    if (kernel) {
        auto lower = *kernel;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        wsl = lower.find("microsoft") != std::string::npos || lower.find("wsl") != std::string::npos;
    }
    put(env, "wsl", wsl, "kernel release unknown");
    std::optional<json> cpu;
    int cpus = 0;
    if (std::ifstream in(proc_root / "cpuinfo"); in) {
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("model name", 0) == 0 && !cpu) cpu = line.substr(line.find(':') + 2);
            if (line.rfind("processor", 0) == 0) ++cpus;
        }
    }
    put(env, "cpu_model", cpu, "no 'model name' in " + (proc_root / "cpuinfo").string());
    put(env, "cpu_count", cpus > 0 ? std::optional<json>(cpus) : std::nullopt,
        "no 'processor' entries in " + (proc_root / "cpuinfo").string());
    auto ram = read_mem_total(proc_root);
    put(env, "ram_total_bytes", ram.bytes ? std::optional<json>(*ram.bytes) : std::nullopt, ram.reason);
    auto gpu_name = nvml.device_name();
    put(env, "gpu_name", gpu_name ? std::optional<json>(*gpu_name) : std::nullopt, nvml.unavailable_reason());
    auto total = nvml.total();
    put(env, "gpu_total_bytes", total.bytes ? std::optional<json>(*total.bytes) : std::nullopt, total.reason);
    auto drv = nvml.driver_version();
    put(env, "driver_version", drv ? std::optional<json>(*drv) : std::nullopt, nvml.unavailable_reason());
    auto cuda = nvml.cuda_driver_version();
    put(env, "cuda_driver_version", cuda ? std::optional<json>(*cuda) : std::nullopt, nvml.unavailable_reason());
    const auto & bi = build_info();
    put(env, "cuda_build_version", bi.cuda_version != "none" && !bi.cuda_version.empty() ? std::optional<json>(bi.cuda_version) : std::nullopt,
        "built without the CUDA toolkit");
    put(env, "torch_version", bi.torch_version != "none" && !bi.torch_version.empty() ? std::optional<json>(bi.torch_version) : std::nullopt,
        "built without LibTorch");
    return env;
}

}  // namespace ddo::report
