// A state directory read back at a server's start (job_recovery.hpp).
#include "serve/job_recovery.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "ddo/report/run_journal.hpp"
#include "serve/job_record.hpp"
#include "serve/job_request.hpp"

namespace ddo::host::serve {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path & p) {
    std::ifstream in(p);
    if (!in) return nullptr;
    json j = json::parse(in, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
}

std::string seconds_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", s);
    return b;
}

// When `p` was last written, as a record time (its folder's age stands in for a time no record gives).
std::string modified(const fs::path & p, std::chrono::system_clock::time_point fallback) {
    std::error_code ec;
    const auto t = fs::last_write_time(p, ec);
    if (ec) return record_time(fallback);
    return record_time(std::chrono::time_point_cast<std::chrono::system_clock::duration>(std::chrono::file_clock::to_sys(t)));
}

// The job `dir` ended as its report says: the run wrote it, and the server died before recording the job's end.
void end_from_report(json & record, const json & report, const fs::path & dir) {
    record["status"] = report.value("status", std::string("failed"));
    record["exit_code"] = report.value("exit_code", json(nullptr));
    const json & err = report.value("error", json(nullptr));
    record["error"] = err.is_object() ? err.value("message", json(nullptr)) : json(nullptr);
    record["outputs"] = job_outputs(dir);
}

}  // namespace

std::string killed_job_reason(const fs::path & job_dir, std::vector<std::string> & outputs) {
    const fs::path journal = RunJournal::path_for(job_dir / "ddo_report.json");
    const std::string killed = "interrupted: the server was killed (SIGKILL, the OOM killer or a crash) while the job was running";
    if (!fs::exists(journal)) return killed + ", before its run had a journal; no report was written";
    JournalRecords j;
    try {
        j = read_journal(journal);
    } catch (const std::exception & e) {
        return killed + "; its journal cannot be read (" + e.what() + ")";
    }
    const json & start = j.records.front();
    std::map<long long, std::string> open;  // phase index -> name, the phases begun and not ended
    std::map<std::string, int> steps;       // steps recorded per phase name
    const json * end = nullptr;
    for (const auto & r : j.records) {
        const std::string ev = r.value("event", "");
        if (ev == "phase_begin") open[r.value("index", -1LL)] = r.value("name", "?");
        else if (ev == "phase_end") open.erase(r.value("index", -1LL));
        else if (ev == "step") ++steps[r.value("phase", "?")];
        else if (ev == "end") end = &r;
        else if (ev == "output" && r.contains("path") && r["path"].is_string()) {
            const std::string name = fs::path(r["path"].get<std::string>()).filename().string();
            std::error_code ec;
            if (fs::is_regular_file(job_dir / name, ec) && std::find(outputs.begin(), outputs.end(), name) == outputs.end())
                outputs.push_back(name);
        }
    }
    std::sort(outputs.begin(), outputs.end());
    const std::string pid = std::to_string(start.value("pid", 0LL));
    const std::string at = "+" + seconds_text(j.records.back().value("t", 0.0)) + " s";
    if (end) {
        const json & err = end->value("error", json(nullptr));
        const std::string why = err.is_object() && err.value("message", json()).is_string() ? ": " + err["message"].get<std::string>() : "";
        return "interrupted: the server was killed (pid " + pid + ") after the run ended " + end->value("status", std::string("?")) +
               " (exit " + end->value("exit_code", json(nullptr)).dump() + ") at " + at + " and before its report was written" + why;
    }
    std::string where = "its journal ends at " + at;
    if (!open.empty()) {
        const std::string phase = open.rbegin()->second;  // the innermost: the last begun of those still open
        where += " in phase " + phase;
        if (const auto s = steps.find(phase); s != steps.end()) where += " after " + std::to_string(s->second) + " step(s)";
    }
    return "interrupted: the server was killed (pid " + pid + " gone without a report: SIGKILL, the OOM killer or a crash); " +
           where + (j.torn ? " (a torn last line dropped)" : "");
}

std::vector<RecoveredJob> recover_jobs(const fs::path & jobs_dir, std::chrono::system_clock::time_point now, const json & by,
                                       std::vector<std::string> & skipped) {
    std::vector<RecoveredJob> out;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(jobs_dir, ec)) {
        const std::string name = e.path().filename().string();
        std::error_code type_ec;
        if (!e.is_directory(type_ec) || e.is_symlink(type_ec)) continue;
        if (!name.starts_with("job-") || !safe_name(name)) {
            skipped.push_back(e.path().string() + ": not a job's folder (its name is not a job id); left as it is");
            continue;
        }
        RecoveredJob job;
        job.dir = e.path();
        json record = read_job_record(job.dir);
        if (record.is_object() && record["id"] != name) {
            skipped.push_back(job.dir.string() + ": its job.json is job " + record["id"].get<std::string>() + "'s; left as it is");
            continue;
        }
        const std::string was = record.is_object() ? record["status"].get<std::string>() : "unrecorded";
        if (record.is_object() && is_final_status(was)) {
            if (!record.contains("finished") || !record["finished"].is_string() || !parse_record_time(record["finished"].get<std::string>()))
                record["finished"] = modified(job_record_path(job.dir), now);  // a record of the format before `finished`
            job.record = std::move(record);
            out.push_back(std::move(job));
            continue;
        }
        // The earlier server died before this job ended: its end is established here.
        if (!record.is_object())
            record = {{"format", kJobRecordFormat}, {"id", name},          {"api", nullptr},     {"created", modified(job.dir, now)},
                      {"started", nullptr},         {"request", nullptr}, {"inputs", nullptr}, {"server", nullptr}};
        record["format"] = kJobRecordFormat;
        const json report = read_json(job.dir / "ddo_report.json");
        const bool report_final = report.is_object() && report.value("status", std::string("running")) != "running";
        const bool journal = fs::exists(RunJournal::path_for(job.dir / "ddo_report.json"));
        std::string evidence;
        if (report_final) {
            end_from_report(record, report, job.dir);
            evidence = "report";
        } else if (journal || was == "running") {
            std::vector<std::string> outputs;
            record["status"] = "failed";
            record["exit_code"] = kKilledExitCode;
            record["error"] = killed_job_reason(job.dir, outputs);
            record["outputs"] = outputs;
            evidence = journal ? "journal" : "record";
        } else if (was == "queued") {
            record["status"] = "cancelled";
            record["exit_code"] = kKilledExitCode;
            record["error"] = "cancelled: the server was killed (SIGKILL, the OOM killer or a crash) before the job ran; "
                              "its request is kept in job.json";
            record["outputs"] = json::array();
            evidence = "record";
        } else {
            record["status"] = "failed";
            record["exit_code"] = kKilledExitCode;
            record["error"] = "interrupted: the server was killed while it was accepting the job (its folder has no "
                              "record, run journal or report)";
            record["outputs"] = job_outputs(job.dir);
            evidence = "none";
        }
        record["finished"] = record_time(now);
        if (!record.contains("started")) record["started"] = nullptr;
        const auto created = record.value("created", json()).is_string() ? parse_record_time(record["created"].get<std::string>()) : std::nullopt;
        const auto started = record["started"].is_string() ? parse_record_time(record["started"].get<std::string>()) : std::nullopt;
        record["queued_s"] = created && started ? json(std::chrono::duration<double>(*started - *created).count()) : json(nullptr);
        record["run_s"] = nullptr;  // from its start to its end: unknown, the process died somewhere in between
        record["recovered"] = {{"at", record_time(now)}, {"by", by}, {"was", was}, {"from", evidence}};
        job.record = std::move(record);
        job.ended_here = true;
        out.push_back(std::move(job));
    }
    // By time, not text: `created` is "…SS.mmmZ" or, in an older record, "…SSZ" (a record without one first).
    const auto key = [](const RecoveredJob & j) {
        const json & c = j.record.value("created", json());
        const auto t = c.is_string() ? parse_record_time(c.get<std::string>()) : std::nullopt;
        return std::pair(t.value_or(std::chrono::system_clock::time_point{}), j.record.value("id", std::string()));
    };
    std::sort(out.begin(), out.end(), [&](const RecoveredJob & a, const RecoveredJob & b) { return key(a) < key(b); });
    return out;
}

namespace {

// A temp file of write_text_atomically: ".<name>.tmp.XXXXXX" (mkstemp's six characters).
bool is_write_leftover(const std::string & name) {
    return name.size() > 12 && name[0] == '.' && name.compare(name.size() - 11, 5, ".tmp.") == 0;
}

void remove_leftovers_in(const fs::path & dir, std::vector<fs::path> & removed) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code type_ec, rm_ec;
        if (is_write_leftover(it->path().filename().string()) && it->is_regular_file(type_ec) && !it->is_symlink(type_ec) &&
            fs::remove(it->path(), rm_ec))
            removed.push_back(it->path());
    }
}

}  // namespace

std::vector<fs::path> remove_write_leftovers(const fs::path & state_dir) {
    std::vector<fs::path> removed;
    remove_leftovers_in(state_dir, removed);
    std::error_code ec;
    for (auto it = fs::directory_iterator(state_dir / "jobs", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        std::error_code type_ec;
        if (!name.starts_with("job-") || !safe_name(name) || !it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
        remove_leftovers_in(it->path(), removed);
        remove_leftovers_in(it->path() / "inputs", removed);
    }
    return removed;
}

PreviousSummary read_previous_summary(const fs::path & file) {
    PreviousSummary out;
    if (!fs::exists(file)) return out;
    const json s = read_json(file);
    if (!s.is_object() || !s.contains("served") || !s["served"].is_array()) {
        out.problem = file.string() + " is not a summary (not JSON, or no `served` array); its rows are rebuilt from the job records";
        return out;
    }
    for (const auto & r : s["served"])
        if (r.is_object() && r.value("id", json()).is_string() && r.value("status", json()).is_string()) out.served.push_back(r);
    if (s.contains("processes") && s["processes"].is_array()) out.processes = s["processes"];
    else if (s.value("started", json()).is_string())  // a summary from before `processes`: the one server that wrote it
        out.processes.push_back({{"pid", nullptr}, {"started", s["started"]}});
    return out;
}

}  // namespace ddo::host::serve
