// Shared pieces of the libFuzzer targets (docs/validation.md, "Fuzzing"). Each target feeds its input to a production
// parser. A documented refusal (ddo::Error: UsageError, VerificationError, RuntimeError, PresetError) is the parser
// doing its job; any other exception escapes LLVMFuzzerTestOneInput and aborts (libFuzzer reports a crash), as do
// AddressSanitizer / UndefinedBehaviorSanitizer findings and the targets' own invariant checks (DDO_FUZZ_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <string_view>
#include <unistd.h>

#include "ddo/error.hpp"

namespace ddo::fuzz {

// DDO_FUZZ_VERBOSE=1 in the environment prints every refusal (to see why a seed or a crash input is refused).
inline bool verbose() {
    static const bool on = [] {
        const char * v = std::getenv("DDO_FUZZ_VERBOSE");
        return v && *v && std::string_view(v) != "0";
    }();
    return on;
}

// Runs f; a ddo::Error is an expected refusal (returns false), anything else propagates. True: f returned.
template <class F>
bool accepted(F && f) {
    try {
        f();
        return true;
    } catch (const ddo::Error & e) {
        if (verbose()) std::fprintf(stderr, "ddo fuzz: refused: %s\n", e.what());
        return false;
    }
}

// An invariant of an accepted input that does not hold: a bug, reported as a crash with the failed condition.
[[noreturn]] inline void invariant_failed(const char * what, const char * file, int line) {
    std::fprintf(stderr, "ddo fuzz: invariant failed at %s:%d: %s\n", file, line, what);
    std::abort();
}
#define DDO_FUZZ_CHECK(cond) ((cond) ? (void)0 : ::ddo::fuzz::invariant_failed(#cond, __FILE__, __LINE__))

inline std::string_view bytes(const std::uint8_t * data, std::size_t size) {
    return {reinterpret_cast<const char *>(data), size};
}

// The targets that print (the report reader) send stdout to /dev/null; libFuzzer reports on stderr.
inline void silence_stdout() {
    std::fflush(stdout);
    const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::close(fd);
    }
}

}  // namespace ddo::fuzz
