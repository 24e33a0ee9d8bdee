// `ddo-host plan --plugin P [the run's options]`: what the run would hold in memory, phase by phase, before anything
// loads (Note [Memory forecast] in docs/architecture.md). The run's options, presets and report; nothing is loaded or
// computed (a dry run). Each phase's forecast device and host peaks and the budget they are held against (this
// machine's available memory, or --machine / --device-memory / --host-memory) are printed and written into the
// report's forecast; a phase that does not fit is exit 2 with the largest size that would.
#include "command_registry.hpp"
#include "ddo/error.hpp"
#include "run_command.hpp"

namespace ddo::host {
namespace {

void install(CLI::App & app, HostOptions & options) {
    auto a = std::make_shared<RunArgs>();
    auto * cmd = app.add_subcommand("plan", "forecast every phase's device and host memory peak of a run (the run's "
                                            "options; nothing is loaded or computed) against this machine or a "
                                            "--machine profile, and say what fits");
    add_run_options(*cmd, a.get());
    cmd->callback([cmd, a, &options] {
        if (a->plugin.empty()) throw UsageError("ddo-host plan: --plugin NAME is required (list them with: ddo-host plugins)");
        a->dry_run = true;
        options.exit_code = run_from_cli(*a, *cmd, options, {"plan"});
    });
}

const RegisterCommand reg{35, install};

}  // namespace
}  // namespace ddo::host
