// ddo::Error: the one exception type of core. Each carries the process exit code it maps to, so the
// host turns any failure into the documented exit code (README, "Exit codes") and a failed report.
#pragma once

#include <stdexcept>
#include <string>

namespace ddo {

enum class ExitCode : int {
    ok = 0,
    usage = 2,         // CLI, preset or configuration error: nothing ran
    verification = 3,  // an artifact failed verification
    runtime = 4,       // the run failed (checkpoint, engine, model)
    interrupted = 130, // SIGINT
};

class Error : public std::runtime_error {
public:
    Error(ExitCode code, const std::string & message) : std::runtime_error(message), code_(code) {}
    ExitCode code() const noexcept { return code_; }

private:
    ExitCode code_;
};

// Usage / configuration error (exit 2). The message names the file, key and the next step.
struct UsageError : Error {
    explicit UsageError(const std::string & m) : Error(ExitCode::usage, m) {}
};
// Artifact verification failure (exit 3).
struct VerificationError : Error {
    explicit VerificationError(const std::string & m) : Error(ExitCode::verification, m) {}
};
// Runtime failure (exit 4): bad checkpoint, engine failure, model error.
struct RuntimeError : Error {
    explicit RuntimeError(const std::string & m) : Error(ExitCode::runtime, m) {}
};

}  // namespace ddo
