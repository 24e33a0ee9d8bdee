// ddo::RunJournal: the crash-safe record of a run in progress (Note [Run journal] in docs/metrics.md). JSON lines
// beside the report, each appended and fdatasynced at a phase boundary, a step, a counters update and the end, so a
// run killed by SIGKILL or the OOM killer still leaves its last known state. Removed once the report is written
// (the report supersedes it); `ddo-host report summarize` reads one when the report is missing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddo {

class RunJournal {
public:
    RunJournal() = default;
    RunJournal(const RunJournal &) = delete;
    RunJournal & operator=(const RunJournal &) = delete;
    RunJournal(RunJournal && o) noexcept;
    RunJournal & operator=(RunJournal && o) noexcept;
    ~RunJournal();

    // "<report>.journal" beside the report (a name over NAME_MAX gets a shorter one, by the report name's hash).
    static std::filesystem::path path_for(const std::filesystem::path & report_path);

    // Creates (replacing a stale one) `path` and appends `start` as its first record ("event": "start" is added).
    // Throws RuntimeError naming the file when it cannot be created.
    static RunJournal open(const std::filesystem::path & path, nlohmann::json start);

    bool is_open() const { return fd_ >= 0; }
    const std::filesystem::path & path() const { return path_; }

    // One record (an object; "event" names it), written as one line and synced. Never throws: a failed write (a
    // full disk) stops the journal, and error() says why; the run goes on.
    void append(const nlohmann::json & record) noexcept;
    // Deletes the file (and syncs its directory): the report is written and supersedes it.
    void remove() noexcept;

    std::uint64_t records() const { return records_; }
    const std::string & error() const { return error_; }
    bool removed() const { return removed_; }

private:
    void close() noexcept;
    int fd_ = -1;
    std::filesystem::path path_;
    std::uint64_t records_ = 0;
    std::string error_;
    bool removed_ = false;
};

// The records of a journal file, in order. A torn last line (the process died mid-write) is dropped and counted in
// `torn`. Throws UsageError naming the file when it cannot be read or its first record is not a journal start.
struct JournalRecords {
    std::vector<nlohmann::json> records;
    std::size_t torn = 0;
};
JournalRecords read_journal(const std::filesystem::path & path);

}  // namespace ddo
