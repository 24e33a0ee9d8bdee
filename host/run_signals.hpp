// SIGINT, SIGTERM and SIGHUP for the whole life of ddo-host (installed first thing in main): the first one asks the
// run to stop (RunContext::interrupted; the plugin checks it between steps and tiles) and the run ends with its
// report (status interrupted, exit 128 + signal: 130, 143, 129); a second one ends the process at once, after the
// registered flush has written the report. `timeout`, systemd and a closed terminal send SIGTERM / SIGHUP.
// A SIGHUP or SIGINT the parent set to be ignored (nohup; a background job) stays ignored; the handled ones are
// unblocked if the parent left them blocked.
#pragma once

#include <atomic>
#include <functional>

namespace ddo::host {

// Idempotent. Starts the watcher thread that runs the second-signal flush outside the signal handler.
void install_run_signals();
// Set by the first signal; what RunContext::interrupted points at.
std::atomic<bool> & run_interrupted();
// The signal that interrupted (0: none yet), and its name ("SIGTERM").
int interrupting_signal();
const char * signal_name(int signo);
// What a second signal does before the process exits with 128 + signal (write the report); empty: nothing. The
// callback runs on the watcher thread.
void set_second_signal_flush(std::function<void(int signo)> flush);

}  // namespace ddo::host
