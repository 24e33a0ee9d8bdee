// What a server started on a state directory makes of what an earlier server left there (Note [Serve state
// directory] in docs/architecture.md): each job folder's record, ended here when the earlier process died before the
// job ended (killed, out of memory, crashed: it could not drain): a job that was running is `failed` with the reason
// its run journal gives, a job that was queued is `cancelled`; and the rows of the earlier serve_summary.json.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::host::serve {

// The exit code of a job whose server died under it: 137, the code of a run killed by SIGKILL or the OOM killer
// (README, "Exit codes"), as the process that ran it would have shown it.
inline constexpr int kKilledExitCode = 137;

struct RecoveredJob {
    std::filesystem::path dir;
    nlohmann::json record;           // final (is_final_status), with its `finished` time
    bool ended_here = false;         // the earlier process died before the job ended; the record was completed here
};

// Every folder under `jobs_dir` named as a job (job-…, a safe name), with its record, oldest first. `now` is when
// this server found them: the `finished` time of the jobs it ends (their TTL runs from it, so a client sees how its
// job ended for a whole TTL after the restart). `by` ({"pid", "started"} of this server) goes into the `recovered`
// field of the records it completes. `skipped` gets a line per folder that is no job's (left alone).
std::vector<RecoveredJob> recover_jobs(const std::filesystem::path & jobs_dir, std::chrono::system_clock::time_point now,
                                       const nlohmann::json & by, std::vector<std::string> & skipped);

// The temp files of atomic writes (".<name>.tmp.XXXXXX", write_text_atomically) whose process died before the rename:
// in `state_dir` (the summary's), in each job folder (its record's, its report's) and its inputs/ (a condition
// image's). Removed at start, before the jobs are read (no writer of the directory is alive then: the server holds
// its claim). Returns the files removed; never throws (what cannot be listed or removed stays).
std::vector<std::filesystem::path> remove_write_leftovers(const std::filesystem::path & state_dir);

// Why a job that was running when its server died ended, from its folder's run journal (Note [Run journal] in
// docs/metrics.md): "interrupted: the server was killed …" with the journal's pid, where it ends (the open phase,
// the steps done in it, the time) or, when the run had ended, how. `outputs`: the files the journal records as
// written (whole: an output is journaled once written) that are still in the folder.
std::string killed_job_reason(const std::filesystem::path & job_dir, std::vector<std::string> & outputs);

// The earlier serve_summary.json: its `served` rows and `processes` (the servers that wrote it), empty when there
// is none; `problem` says why an existing one could not be read (its rows are then rebuilt from the job records).
struct PreviousSummary {
    std::vector<nlohmann::json> served;
    nlohmann::json processes = nlohmann::json::array();
    std::string problem;
};
PreviousSummary read_previous_summary(const std::filesystem::path & file);

}  // namespace ddo::host::serve
