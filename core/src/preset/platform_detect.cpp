#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "ddo/preset/preset_resolver.hpp"

namespace ddo {

const char * to_string(Platform p) {
    switch (p) {
    case Platform::linux_native: return "linux";
    case Platform::wsl: return "wsl";
    case Platform::other: return "other";
    }
    return "?";
}

PlatformInfo detect_platform(const std::filesystem::path & proc_root) {
    auto osrelease = proc_root / "sys/kernel/osrelease";
    std::ifstream in(osrelease);
    if (!in) return {Platform::other, "no " + osrelease.string() + ": not a Linux kernel"};
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("microsoft") != std::string::npos || lower.find("wsl") != std::string::npos)
        return {Platform::wsl, osrelease.string() + " = '" + text + "' (contains microsoft/WSL)"};
    return {Platform::linux_native, osrelease.string() + " = '" + text + "' (no microsoft/WSL marker)"};
}

}  // namespace ddo
