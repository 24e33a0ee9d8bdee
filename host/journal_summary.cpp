#include "journal_summary.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "byte_text.hpp"
#include "ddo/report/run_journal.hpp"
#include "report_reader.hpp"

namespace ddo::host {

namespace {

using nlohmann::json;

std::string num(const json & v, const char * fmt) {
    if (!v.is_number()) return "null";
    char b[48];
    std::snprintf(b, sizeof b, fmt, v.get<double>());
    return b;
}

bool process_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

struct PhaseState {
    std::string name;
    int depth = 0;
    double begun = 0;
    json wall;  // null while open
    int steps = 0;
    json last_step;
};

// What the journal's records add up to (pointers into its records).
struct JournalState {
    std::vector<PhaseState> phases;
    std::map<std::size_t, std::size_t> by_index;  // journal phase index -> phases[]
    std::map<std::string, json> counters;
    std::map<std::string, std::pair<double, int>> streamed;  // component -> bytes streamed over its steps, steps
    std::vector<const json *> outputs;
    json plugin;
    const json * end = nullptr;
};

JournalState replay(const std::vector<json> & records) {
    JournalState st;
    for (const auto & r : records) {
        const std::string ev = r.value("event", "");
        if (ev == "phase_begin") {
            PhaseState p;
            p.name = r.value("name", "?");
            p.begun = r.value("t", 0.0);
            for (const auto & q : st.phases)  // depth: one more than the open phase it is nested in
                if (q.wall.is_null() && r.contains("parent") && r["parent"].is_string() && q.name == r["parent"])
                    p.depth = q.depth + 1;
            st.by_index[r.value("index", std::size_t(0))] = st.phases.size();
            st.phases.push_back(std::move(p));
        } else if (ev == "phase_end") {
            auto it = st.by_index.find(r.value("index", std::size_t(0)));
            if (it != st.by_index.end()) st.phases[it->second].wall = r.value("host_wall_s", json());
        } else if (ev == "step") {
            const json & eng = r.contains("extra") && r["extra"].is_object() ? r["extra"].value("engine", json()) : json();
            if (eng.is_object())
                for (const auto & [c, e] : eng.items())
                    if (e.is_object() && e.value("bytes_streamed", json()).is_number()) {
                        st.streamed[c].first += e["bytes_streamed"].get<double>();
                        ++st.streamed[c].second;
                    }
            for (auto it = st.phases.rbegin(); it != st.phases.rend(); ++it)
                if (it->name == r.value("phase", "")) {
                    ++it->steps;
                    it->last_step = r;
                    break;
                }
        } else if (ev == "counters") {
            st.counters[r.value("component", "?")] = r.value("counters", json());
        } else if (ev == "output") {
            st.outputs.push_back(&r);
        } else if (ev == "plugin") {
            st.plugin = r.value("plugin", json());
        } else if (ev == "end") {
            st.end = &r;
        }
    }

    return st;
}

// Where the journal is, the run's state, what started it, and the last memory reading; ends with the PHASES heading.
void print_journal_header(const std::filesystem::path & journal, const JournalRecords & j, const JournalState & st, bool report_missing,
                          std::ostream & out) {
    const json & start = j.records.front();
    const json & last = j.records.back();
    const long pid = start.value("pid", 0L);
    if (report_missing)
        out << "no report at " << json_text(start.value("report", json())) << ": the run wrote none. From its journal "
            << journal.string() << " (" << j.records.size() << " records" << (j.torn ? ", a torn last line dropped" : "")
            << "):\n";
    else
        out << "\nA LATER RUN'S JOURNAL is beside this report: " << journal.string() << " (" << j.records.size()
            << " records). That run did not write its report; the report above is an earlier run's.\n";
    std::string state;
    if (st.end)
        state = "ended " + json_text(st.end->value("status", json())) + " (exit " + json_text(st.end->value("exit_code", json())) +
                "), but its report was not written" +
                (st.end->value("error", json()).is_object() ? ": " + json_text(st.end->value("error", json()).value("message", json())) : "");
    else if (process_alive(pid))
        state = "running: pid " + std::to_string(pid) + " is alive (the report is written when it ends)";
    else
        state = "unfinished: pid " + std::to_string(pid) +
                " is gone without a report (killed by SIGKILL or the OOM killer, or it crashed); the journal ends at +" +
                num(last.value("t", json()), "%.3f") + " s";
    out << "status: " << state << "\n";
    out << "started: " << json_text(start.value("started_at", json())) << "  pid " << pid << "\n";
    std::string cmd;
    for (const auto & a : start.value("command_line", json::array())) cmd += (cmd.empty() ? "" : " ") + json_text(a);
    out << "command line: " << (cmd.empty() ? "(not recorded)" : cmd) << "\n";
    if (st.plugin.is_object())
        out << "plugin: " << json_text(st.plugin.value("name", json())) << " " << json_text(st.plugin.value("version", json())) << "\n";
    out << "last memory reading: RSS " << json_bytes(last.value("rss_bytes", json())) << " (peak so far "
        << json_bytes(last.value("rss_peak_bytes", json())) << "), MemAvailable " << json_bytes(last.value("mem_available_bytes", json()))
        << "\n\nPHASES (from the journal; host wall clock; open = where the journal ends)\n";
}

void print_journal_phases(const JournalState & st, std::ostream & out) {
    for (const auto & p : st.phases) {
        std::string line = "  " + std::string(2 * p.depth, ' ') + p.name;
        line.resize(std::max<std::size_t>(line.size(), 38), ' ');
        if (p.wall.is_null()) line += "open since +" + num(json(p.begun), "%.3f") + " s";
        else line += num(p.wall, "%.3f") + " s";
        if (p.steps > 0)
            line += "  " + std::to_string(p.steps) + " step(s), last " + json_text(p.last_step.value("index", json())) + " at +" +
                    num(p.last_step.value("t", json()), "%.3f") + " s";
        out << line << "\n";
    }
}

// The last counters of each component, the bytes streamed, the outputs.
void print_journal_totals(const JournalState & st, std::ostream & out) {
    if (!st.counters.empty()) {
        out << "\nCOUNTERS (the last update of each component: at open, the plan; at unload, the totals)\n";
        for (const auto & [c, k] : st.counters) {
            const json & e = k.is_object() && k.contains("engine") ? k["engine"].value("counters", json()) : json();
            if (e.is_object())
                out << "  " << c << ": bytes moved " << json_text(e.value("bytes_moved", json())) << ", uploads "
                    << json_text(e.value("uploads", json())) << ", failures " << json_text(e.value("failures", json())) << "\n";
            else
                out << "  " << c << ": " << k.dump() << "\n";
        }
    }
    if (!st.streamed.empty()) {
        out << "\nSTREAMED (summed over the journal's steps)\n";
        for (const auto & [c, v] : st.streamed)
            out << "  " << c << ": " << human_bytes(v.first) << " over " << v.second << " step(s)\n";
    }
    for (const auto * o : st.outputs)
        out << "output: " << json_text(o->value("path", json())) << "  sha256 " << json_text(o->value("sha256", json())).substr(0, 16) << "\n";
}

}  // namespace

void summarize_journal(const std::filesystem::path & journal, bool report_missing, std::ostream & out) {
    const auto j = read_journal(journal);
    const JournalState st = replay(j.records);
    print_journal_header(journal, j, st, report_missing, out);
    print_journal_phases(st, out);
    print_journal_totals(st, out);
}

}  // namespace ddo::host
