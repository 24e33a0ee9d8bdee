// ddo-host report summarize | diff: read run reports (docs/metrics.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "byte_text.hpp"
#include "command_registry.hpp"
#include "journal_summary.hpp"
#include "report_reader.hpp"
#include "ddo/report/run_journal.hpp"
#include "ddo/error.hpp"
#include <nlohmann/json.hpp>

namespace ddo::host {

namespace {

void install(CLI::App & app, HostOptions & options) {
    auto * report = app.add_subcommand("report", "read run reports");
    report->require_subcommand(1);
    auto file = std::make_shared<std::string>();
    auto * sum = report->add_subcommand("summarize", "phases, peaks, routes and counters of one report");
    sum->add_option("file", *file, "report JSON")->required();
    // A run that wrote no report (SIGKILL, the OOM killer) left its journal: summarized instead, and said so; a
    // later run's journal beside a report is summarized after it (Note [Run journal]).
    sum->callback([file] {
        const std::filesystem::path f(*file);
        const bool is_journal = f.extension() == ".journal";
        const std::filesystem::path journal = is_journal ? f : RunJournal::path_for(f);
        if (!is_journal && (std::filesystem::exists(f) || !std::filesystem::exists(journal))) summarize_report(load_report(*file));
        if (std::filesystem::exists(journal) || is_journal)
            summarize_journal(journal, is_journal || !std::filesystem::exists(f), std::cout);
    });

    auto ab = std::make_shared<std::pair<std::string, std::string>>();
    auto * d = report->add_subcommand("diff", "two reports side by side; says whether they are a matched comparison");
    d->add_option("a", ab->first, "first report")->required();
    d->add_option("b", ab->second, "second report")->required();
    d->callback([ab] { diff_reports(load_report(ab->first), load_report(ab->second), ab->first, ab->second); });
    (void)options;
}

const RegisterCommand reg{40, install};

}  // namespace

}  // namespace ddo::host
