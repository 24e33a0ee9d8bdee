// What a person sees during `ddo-host --plugin ...`: before the first step one block (plugin, device and why,
// preset requested/effective, per component the plan: resident / streamed groups and bytes); then per phase a
// progress bar on a terminal (phase, steps, it/s, ETA) or one plain line per step when not a terminal; at the end
// the outputs, the report, the wall time and the peaks. Everything comes from the kit's progress events and the run
// report as it is being written, so the console says what the report says. --log-level warn (-q) silences it.
#pragma once

#include <chrono>
#include <string>

#include "ddo/report/run_tracker.hpp"
#include "ddo/run_context.hpp"

namespace ddo::host {

class RunConsole {
public:
    // tracker: borrowed for the run. enabled: info level or below. terminal: stderr is a TTY (bars, else lines).
    RunConsole(const RunTracker & tracker, bool enabled, bool terminal);
    void on_progress(const ProgressEvent & e);
    // After the report is written: outputs, report path, wall time, peaks (or the error).
    void finish(int exit_code, const std::string & report_path);

private:
    void print_plan();
    void end_line();

    const RunTracker & tracker_;
    bool enabled_, terminal_;
    bool plan_printed_ = false, bar_open_ = false;
    std::string phase_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), phase_start_ = start_;
};

}  // namespace ddo::host
