#include "ddo/plugin/plugin_probe.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "ddo/ddo_plugin_abi.h"
#include "ddo/error.hpp"
#include "ddo/util/unique_fd.hpp"

namespace ddo {
namespace {

void write_all(int fd, const std::string & s) noexcept {
    const char * p = s.data();
    std::size_t left = s.size();
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        p += n;
        left -= std::size_t(n);
    }
}

// The child: map, negotiate, print one JSON object, _exit (no atexit handlers, no static destructors of the plugin).
[[noreturn]] void child(int plugin_fd, int out) {
    nlohmann::json j;
    const std::string path = "/proc/self/fd/" + std::to_string(plugin_fd);
    void * h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char * e = ::dlerror();
        write_all(out, nlohmann::json{{"error", std::string("dlopen failed: ") + (e ? e : "unknown")}}.dump());
        ::_exit(1);
    }
    auto negotiate = reinterpret_cast<ddo_plugin_negotiate_fn>(::dlsym(h, "ddo_plugin_negotiate"));
    if (!negotiate) {
        write_all(out, nlohmann::json{{"error", "no ddo_plugin_negotiate entry point (is it a ddo plugin?)"}}.dump());
        ::_exit(1);
    }
    ddo_plugin_info info{};
    info.struct_size = sizeof(info);
    const ddo_status st = negotiate(DDO_ABI_VERSION_MAJOR, DDO_ABI_VERSION_MINOR, &info);
    if (st != DDO_STATUS_OK) {
        write_all(out, nlohmann::json{{"error", "ddo_plugin_negotiate returned status " + std::to_string(int(st))}}.dump());
        ::_exit(1);
    }
    auto str = [](const char * s) { return std::string(s ? s : ""); };
    j["name"] = str(info.name);
    j["version"] = str(info.version);
    j["kind"] = info.kind == DDO_PLUGIN_KIND_MODEL       ? std::string("model")
                : info.kind == DDO_PLUGIN_KIND_ALLOCATOR ? std::string("allocator")
                                                         : "unknown(" + std::to_string(info.kind) + ")";
    j["fingerprint"] = str(info.build_fingerprint);
    j["abi_major"] = info.abi_major;
    j["abi_minor"] = info.abi_minor;
    j["aliases"] = nlohmann::json::array();
    for (auto a = info.aliases; a && *a; ++a) j["aliases"].push_back(*a);
    write_all(out, j.dump());
    ::_exit(0);
}

}  // namespace

NegotiateInfo negotiate_in_child(int fd, const std::filesystem::path & file, std::chrono::milliseconds timeout) {
    auto refuse = [&](const std::string & what) -> VerificationError {
        return VerificationError(file.string() + ": " + what + "; build it with ddo_add_model_plugin() against this ddo");
    };
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw RuntimeError(std::string("pipe2 failed: ") + std::strerror(errno));
    UniqueFd rd(p[0]), wr(p[1]);
    const pid_t pid = ::fork();
    if (pid < 0) throw RuntimeError(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
        rd.release();
        child(fd, wr.get());
    }
    wr.reset();
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    bool timed_out = false;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd pfd{rd.get(), POLLIN, 0};
        const int r = ::poll(&pfd, 1, int(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        const ssize_t n = ::read(rd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, std::size_t(n));
    }
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) throw refuse("negotiation did not answer within " + std::to_string(timeout.count()) + " ms");
    if (WIFSIGNALED(status))
        throw refuse("the plugin crashed while loading or negotiating (signal " + std::to_string(WTERMSIG(status)) + ")");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception &) {
        throw refuse("negotiation gave no answer (exit status " + std::to_string(WEXITSTATUS(status)) + ")");
    }
    if (j.contains("error")) throw refuse(j["error"].get<std::string>());
    NegotiateInfo info;
    info.name = j.at("name").get<std::string>();
    info.version = j.at("version").get<std::string>();
    info.kind = j.at("kind").get<std::string>();
    info.fingerprint = j.at("fingerprint").get<std::string>();
    info.abi_major = j.at("abi_major").get<std::uint32_t>();
    info.abi_minor = j.at("abi_minor").get<std::uint32_t>();
    info.aliases = j.at("aliases").get<std::vector<std::string>>();
    return info;
}

}  // namespace ddo
