// Fuzz target: the run report reader of `ddo-host report summarize | diff` (host/report_reader.hpp). The input is a
// report's JSON text. parse_report refuses what is not a run report; an accepted report is summarised, diffed with
// itself and diffed both ways with a real report (the report_reader seed dry_run.json): every field may be missing,
// null or of another type, and must print as "null" or be skipped, never fail. Output goes to /dev/null.
#include <fstream>
#include <iterator>

#include "report_reader.hpp"
#include "fuzz_support.hpp"

namespace {

nlohmann::json g_reference;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    ddo::fuzz::silence_stdout();
    g_reference = ddo::host::load_report(DDO_SOURCE_DIR "/tests/fuzz/corpus/report_reader/dry_run.json");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    ddo::fuzz::accepted([&] {
        const nlohmann::json r = ddo::host::parse_report(ddo::fuzz::bytes(data, size), "fuzz.json");
        ddo::host::summarize_report(r);
        ddo::host::diff_reports(r, r, "fuzz.json", "fuzz.json");
        ddo::host::diff_reports(r, g_reference, "fuzz.json", "dry_run.json");
        ddo::host::diff_reports(g_reference, r, "dry_run.json", "fuzz.json");
    });
    return 0;
}
