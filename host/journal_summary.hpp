// `ddo-host report summarize` on a run journal (Note [Run journal] in docs/metrics.md): what a run that wrote no
// report (SIGKILL, the OOM killer, a crash, or still running) had done when its journal ends.
#pragma once

#include <filesystem>
#include <ostream>

namespace ddo::host {

// Prints the journal's last known state. `report_missing`: the report it belongs to is absent (said first); else a
// report is beside it, from an earlier run, and this journal is a later run's that did not finish.
void summarize_journal(const std::filesystem::path & journal, bool report_missing, std::ostream & out);

}  // namespace ddo::host
