// The job record of ddo-host serve (job_record.hpp).
#include "serve/job_record.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "ddo/report/run_tracker.hpp"

namespace ddo::host::serve {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path job_record_path(const fs::path & job_dir) { return job_dir / "job.json"; }

void write_job_record(const fs::path & job_dir, const json & record) { write_json_atomically(job_record_path(job_dir), record); }

json read_job_record(const fs::path & job_dir) {
    std::ifstream in(job_record_path(job_dir));
    if (!in) return nullptr;
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j["id"].is_string() || !j.contains("status") ||
        !j["status"].is_string())
        return nullptr;
    return j;
}

std::string record_time(std::chrono::system_clock::time_point t) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
    const std::time_t tt = std::time_t(ms / 1000);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[40];
    const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(buf + n, sizeof buf - n, ".%03dZ", int(ms % 1000));
    return buf;
}

std::optional<std::chrono::system_clock::time_point> parse_record_time(const std::string & text) {
    std::tm tm{};
    const char * rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest) return std::nullopt;
    int ms = 0;
    if (*rest == '.') {
        int digits = 0;
        for (++rest; *rest >= '0' && *rest <= '9'; ++rest, ++digits)
            if (digits < 3) ms = ms * 10 + (*rest - '0');
        if (digits == 0) return std::nullopt;
        for (; digits < 3; ++digits) ms *= 10;
    }
    if (rest[0] != 'Z' || rest[1] != '\0') return std::nullopt;
    const std::time_t tt = ::timegm(&tm);
    return std::chrono::system_clock::from_time_t(tt) + std::chrono::milliseconds(ms);
}

bool is_final_status(std::string_view status) { return status != "queued" && status != "running"; }

std::vector<std::string> job_outputs(const fs::path & job_dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(job_dir, ec)) {
        const std::string n = e.path().filename().string();
        std::error_code type_ec;
        if (e.is_regular_file(type_ec) && n != "ddo_report.json" && n != "job.json" && !n.ends_with(".journal") && !n.starts_with("."))
            names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
}

json summary_row(const json & record) {
    json row = record;
    for (const char * k : {"format", "request", "inputs", "server"}) row.erase(k);
    return row;
}

}  // namespace ddo::host::serve
