#include "ddo/report/run_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <utility>

#include "ddo/error.hpp"

namespace ddo {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char * kFormat = "ddo-run-journal/1";

void sync_dir(const fs::path & file) {
    const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    (void)::fsync(dfd);  // best effort: the journal's own records are synced; this makes its name durable
    ::close(dfd);
}

}  // namespace

RunJournal::RunJournal(RunJournal && o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), records_(o.records_), error_(std::move(o.error_)),
      removed_(o.removed_) {}

RunJournal & RunJournal::operator=(RunJournal && o) noexcept {
    if (this != &o) {
        close();
        fd_ = std::exchange(o.fd_, -1);
        path_ = std::move(o.path_);
        records_ = o.records_;
        error_ = std::move(o.error_);
        removed_ = o.removed_;
    }
    return *this;
}

RunJournal::~RunJournal() { close(); }

void RunJournal::close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

fs::path RunJournal::path_for(const fs::path & report_path) {
    const std::string name = report_path.filename().string() + ".journal";
    if (name.size() <= 255) return report_path.parent_path() / name;
    return report_path.parent_path() /
           ("ddo-" + std::to_string(std::hash<std::string>{}(report_path.filename().string())) + ".journal");
}

RunJournal RunJournal::open(const fs::path & path, json start) {
    RunJournal j;
    j.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (j.fd_ < 0)
        throw RuntimeError("run journal " + path.string() + ": cannot create it (" + std::strerror(errno) +
                           "); check that the report's directory is writable");
    j.path_ = path;
    start["event"] = "start";
    start["format"] = kFormat;
    j.append(start);
    if (!j.error_.empty()) throw RuntimeError("run journal " + path.string() + ": " + j.error_);
    sync_dir(path);
    return j;
}

void RunJournal::append(const json & record) noexcept {
    if (fd_ < 0) return;
    std::string line;
    try {
        line = record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    } catch (const std::exception & e) {
        error_ = std::string("a record could not be serialised: ") + e.what();
        close();
        return;
    }
    const char * p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
        const ssize_t n = ::write(fd_, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            error_ = std::string("write failed after ") + std::to_string(records_) + " records: " + std::strerror(errno) +
                     " (the journal stops; the run goes on)";
            close();
            return;
        }
        p += n;
        left -= std::size_t(n);
    }
    if (::fdatasync(fd_) != 0) {
        error_ = std::string("fdatasync failed after ") + std::to_string(records_) + " records: " + std::strerror(errno) +
                 " (the journal stops; the run goes on)";
        close();
        return;
    }
    ++records_;
}

void RunJournal::remove() noexcept {
    close();
    if (path_.empty() || removed_) return;
    std::error_code ec;
    removed_ = fs::remove(path_, ec) || !fs::exists(path_, ec);
    if (removed_) sync_dir(path_);
}

JournalRecords read_journal(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("run journal " + path.string() + ": cannot open it (" + std::strerror(errno) + ")");
    JournalRecords out;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            ++out.torn;
            continue;
        }
        out.records.push_back(std::move(j));
    }
    if (out.records.empty() || out.records.front().value("event", "") != "start" ||
        out.records.front().value("format", "") != kFormat)
        throw UsageError("run journal " + path.string() + ": not a ddo run journal (its first line is not a " +
                         kFormat + " start record)");
    return out;
}

}  // namespace ddo
