// The environment block of a run report: OS, kernel, WSL, CPU, RAM, GPU, driver, CUDA, torch.
// Each field is a value or null, with a sibling "<field>_reason" (null when the value is present).
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace ddo::report {

class NvmlProbe;

nlohmann::json collect_environment(const std::filesystem::path & proc_root, const std::filesystem::path & etc_root,
                                   NvmlProbe & nvml);

}  // namespace ddo::report
