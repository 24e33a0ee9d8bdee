// The record of a served job on disk, <state>/jobs/<id>/job.json (format "ddo-serve-job/1"; Note [Serve state
// directory] in docs/architecture.md, fields in docs/metrics.md): what the job is (its id, API and request, the inputs
// the server wrote for it), where it stands (queued, running, or how it ended: status, exit code, reason, outputs)
// and when (created, started, finished). Written atomically (temp file, fsync, rename, directory fsync) when the job is
// accepted, when it starts and when it ends, so that a server restarted on the same state directory, or another tool
// reading it, finds one whole record per job whatever moment the process died at.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo::host::serve {

inline constexpr std::string_view kJobRecordFormat = "ddo-serve-job/1";

// `dir`/job.json.
std::filesystem::path job_record_path(const std::filesystem::path & job_dir);

// Writes `record` atomically to job_record_path(job_dir). Throws RuntimeError naming the file.
void write_job_record(const std::filesystem::path & job_dir, const nlohmann::json & record);

// The record in `job_dir`: an object with a string `id` and `status`, or null when the file is absent, unreadable or
// not a record. A record without `format` is one written before the format had one (the summary row alone).
nlohmann::json read_job_record(const std::filesystem::path & job_dir);

// Times in records: UTC, ISO 8601 with milliseconds ("2025-01-31T12:00:00.123Z"); the parser also takes whole
// seconds ("…T12:00:00Z", the job API's `created`). nullopt for any other text.
std::string record_time(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_record_time(const std::string & text);

// queued | running: the job has not ended. Anything else (completed, failed, interrupted, cancelled) is final.
bool is_final_status(std::string_view status);

// The files of a job's folder that are its outputs, sorted: regular files other than its report, its journal, its
// record and hidden files (temporaries, locks); inputs/ is a folder, never listed.
std::vector<std::string> job_outputs(const std::filesystem::path & job_dir);

// The record as its row in serve_summary.json: the record less what only the job's folder needs (format, request,
// inputs, server).
nlohmann::json summary_row(const nlohmann::json & record);

}  // namespace ddo::host::serve
