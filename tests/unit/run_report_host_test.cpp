// ddo-host end to end (no GPU): preset show/check, reports of failed and interrupted runs, and the
// docs/metrics.md catalog against the fields a report emits (both directions).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kHost = fs::path(DDO_BINARY_DIR) / "bin" / "ddo-host";
const fs::path kSource = DDO_SOURCE_DIR;

struct Result {
    int code = -1;
    std::string out;
};

// Runs a shell command line, capturing stdout+stderr and the exit code.
Result run(const std::string & cmd) {
    Result r;
    FILE * p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    int st = ::pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

class HostTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ddo_host_test_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        ASSERT_TRUE(fs::exists(kHost)) << kHost;
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

// ---- docs/metrics.md catalog ----------------------------------------------------------------

struct Catalog {
    std::set<std::string> all, conditional;
};

Catalog read_catalog() {
    Catalog c;
    std::ifstream in(kSource / "docs/metrics.md");
    std::string line;
    std::regex row(R"(^\|\s*`([^`]+)`)");
    std::regex placeholder(R"(<[^>]+>)");
    bool inside = false;
    while (std::getline(in, line)) {
        if (line.find("<!-- report-fields:begin -->") != std::string::npos) inside = true;
        if (line.find("<!-- report-fields:end -->") != std::string::npos) inside = false;
        std::smatch m;
        if (!inside || !std::regex_search(line, m, row)) continue;
        std::string path = std::regex_replace(m[1].str(), placeholder, "*");
        c.all.insert(path);
        if (line.find("conditional") != std::string::npos) c.conditional.insert(path);
    }
    return c;
}

// Objects whose keys are data (components, setting keys): their children are written as "*".
const std::set<std::string> kDynamicMaps = {"settings.values", "settings.effective_components", "routes", "counters",
                                            "workload", "memory", "phases[].memory",
                                            "identity.checkpoint.identity.components",
                                            "identity.checkpoint.identity.components_missing",
                                            "identity.checkpoint.inputs"};
// Values whose inside belongs to someone else (plugin, engine, user): not descended into.
const std::set<std::string> kOpaque = {"settings.values.*.value", "counters.*", "notes", "phases[].notes", "steps[].extra",
                                       "workload.*", "identity.checkpoint.facts", "error.exit_code_detail"};

void flatten(const json & j, const std::string & path, std::set<std::string> & out, std::set<std::string> & empty) {
    if (!path.empty()) out.insert(path);
    if (kOpaque.count(path)) return;
    if (j.is_null() || (j.is_object() && j.empty()) || (j.is_array() && j.empty())) {
        empty.insert(path);
        return;
    }
    if (j.is_object()) {
        bool dynamic = kDynamicMaps.count(path) > 0;
        for (const auto & [k, v] : j.items())
            flatten(v, path.empty() ? (dynamic ? "*" : k) : path + "." + (dynamic ? "*" : k), out, empty);
    } else if (j.is_array()) {
        for (const auto & v : j) flatten(v, path + "[]", out, empty);
    }
}

void expect_catalog_matches(const json & report, bool require_documented) {
    auto cat = read_catalog();
    ASSERT_GT(cat.all.size(), 50u) << "docs/metrics.md has no field table";
    std::set<std::string> emitted, empty;
    flatten(report, "", emitted, empty);
    for (const auto & p : emitted) {
        bool documented = cat.all.count(p) > 0;
        if (!documented)  // a container is documented through its children
            for (const auto & d : cat.all)
                if (d.rfind(p + ".", 0) == 0 || d.rfind(p + "[]", 0) == 0) documented = true;
        EXPECT_TRUE(documented) << "report field '" << p << "' is not in docs/metrics.md";
    }
    if (!require_documented) return;
    for (const auto & d : cat.all) {
        if (emitted.count(d) || cat.conditional.count(d)) continue;
        bool under_empty = false;
        for (const auto & e : empty)
            if (d.rfind(e + ".", 0) == 0 || d.rfind(e + "[]", 0) == 0) under_empty = true;
        EXPECT_TRUE(under_empty) << "docs/metrics.md documents '" << d
                                 << "' but the report does not emit it (mark it conditional if that is expected)";
    }
}

json read_json(const fs::path & p) {
    std::ifstream in(p);
    return json::parse(in);
}

// ---- preset review commands -----------------------------------------------------------------

TEST_F(HostTest, PresetShowSetHasSetProvenance) {
    auto r = run(kHost.string() + " preset show low_ram_safe --set capacities.staging_slots=5");
    ASSERT_EQ(r.code, 0) << r.out;
    std::istringstream in(r.out);
    std::string line;
    bool found = false;
    while (std::getline(in, line))
        if (line.rfind("capacities.staging_slots ", 0) == 0) {
            found = true;
            EXPECT_NE(line.find(" 5 "), std::string::npos) << line;
            EXPECT_NE(line.find("--set capacities.staging_slots=5"), std::string::npos) << line;
        }
    EXPECT_TRUE(found) << r.out;
    EXPECT_NE(r.out.find("low_ram_safe.toml:"), std::string::npos) << "preset values name file:line";
}

TEST_F(HostTest, PresetCheckMisspelledCopyExits2WithLineAndSuggestion) {
    std::ifstream in(kSource / "presets/low_ram_safe.toml");
    std::string text, line;
    int n = 0, bad_line = 0;
    while (std::getline(in, line)) {
        ++n;
        if (!bad_line && line.rfind("staging_slots", 0) == 0) {
            line = "stagng_slots" + line.substr(13);
            bad_line = n;
        }
        text += line + "\n";
    }
    ASSERT_GT(bad_line, 0);
    auto copy = dir_ / "low_ram_safe.toml";
    std::ofstream(copy) << text;
    auto r = run(kHost.string() + " preset check " + copy.string());
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("low_ram_safe.toml:" + std::to_string(bad_line) + ":"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("did you mean 'capacities.staging_slots'"), std::string::npos) << r.out;
}

TEST_F(HostTest, PresetCheckShippedPresetsPass) {
    std::string cmd = kHost.string() + " preset check";
    // presets/machines/ holds machine profiles (--machine), not presets.
    for (const auto & e : fs::directory_iterator(kSource / "presets"))
        if (e.is_regular_file()) cmd += " " + e.path().string();
    auto r = run(cmd);
    EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(HostTest, PresetDiffShowsResolvedDifferences) {
    auto r = run(kHost.string() + " preset diff diffusers_offload_compat diffusers_leaf_offload_compat");
    ASSERT_EQ(r.code, 1) << "presets that differ exit 1, like diff\n" << r.out;
    EXPECT_NE(r.out.find("components.transformer.route"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("components.text_encoder.route"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("A SOURCE"), std::string::npos) << "each side's source is shown\n" << r.out;
    EXPECT_NE(r.out.find("diffusers_leaf_offload_compat.toml:"), std::string::npos) << r.out;
    auto same = run(kHost.string() + " preset diff low_ram_safe low_ram_safe");
    EXPECT_EQ(same.code, 0) << same.out;
}

TEST_F(HostTest, ReportSummarizeRefusesJsonThatIsNotAReport) {
    const auto path = dir_ / "not_a_report.json";
    std::ofstream(path) << R"({"status": 1.7e-306})";
    auto s = run(kHost.string() + " report summarize " + path.string());
    EXPECT_EQ(s.code, 2) << s.out;
    EXPECT_NE(s.out.find("not a ddo run report"), std::string::npos) << s.out;
}

TEST_F(HostTest, ReportSummarizeShowsWorkloadAdjustmentsOutputsAndSteps) {
    const auto path = dir_ / "run.json";
    nlohmann::json r = {{"schema_version", 1}, {"status", "completed"}, {"exit_code", 0}, {"phases", nlohmann::json::array()}};
    r["workload"] = {{"width", 224}, {"steps", 2}};
    r["adjustments"] = {{{"key", "workload.width"}, {"requested", 250}, {"effective", 224}, {"reason", "multiple of 32"}}};
    r["outputs"] = {{{"path", "/o/image.png"}, {"sha256", "abcdef0123456789abcdef"}}};
    r["steps"] = {{{"phase", "denoise"}, {"index", 0}, {"host_wall_s", 0.5}}, {{"phase", "denoise"}, {"index", 1}, {"host_wall_s", 0.25}}};
    std::ofstream(path) << r.dump();
    auto s = run(kHost.string() + " report summarize " + path.string());
    ASSERT_EQ(s.code, 0) << s.out;
    EXPECT_NE(s.out.find("workload: steps 2, width 224"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("adjusted workload.width: requested 250, ran 224 (multiple of 32)"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("output: /o/image.png"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("STEPS"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("0.250 s"), std::string::npos) << s.out;
}

TEST_F(HostTest, PresetShowPrintsEffectiveValuesOfUnsetOverrides) {
    auto r = run(kHost.string() + " preset show low_ram_safe");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("3.0 (from capacities.resident_budget_gb)"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("(unset)"), std::string::npos) << "an unset override shows the value in effect\n" << r.out;
}

// ---- failed and interrupted runs ------------------------------------------------------------

TEST_F(HostTest, PresetErrorRunExits2AndWritesFailedReport) {
    auto report = dir_ / "r.json";
    auto r = run(kHost.string() + " --plugin anything --preset no_such_preset --report " + report.string());
    EXPECT_EQ(r.code, 2) << r.out;
    ASSERT_TRUE(fs::exists(report)) << r.out;
    auto j = read_json(report);
    EXPECT_EQ(j["status"], "failed");
    EXPECT_EQ(j["exit_code"], 2);
    EXPECT_EQ(j["error"]["kind"], "usage");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("no_such_preset"), std::string::npos);
    EXPECT_EQ(j["phases"][0]["name"], "setup");
    expect_catalog_matches(j, false);
}

TEST_F(HostTest, UnknownPluginRunWritesFailedReportWithSettings) {
    auto report = dir_ / "r.json";
    auto r = run(kHost.string() + " --plugin-dir " + dir_.string() +
                 " --plugin no_such_plugin_xyz --preset low_ram_safe --steps 3 --report " + report.string());
    EXPECT_TRUE(r.code == 2 || r.code == 3) << r.code << " " << r.out;
    ASSERT_TRUE(fs::exists(report)) << r.out;
    auto j = read_json(report);
    EXPECT_EQ(j["status"], "failed");
    EXPECT_EQ(j["identity"]["preset"]["effective"], "low_ram_safe");
    EXPECT_EQ(j["settings"]["values"]["capacities.resident_budget_gb"]["value"], 3.0);
    EXPECT_EQ(j["workload"]["steps"], 3);
    EXPECT_EQ(j["settings"]["values"]["workload.steps"]["source"]["layer"], "--set");
    EXPECT_TRUE(j["identity"]["plugin"].is_null());
    expect_catalog_matches(j, false);
}

TEST_F(HostTest, InterruptedRunWritesInterruptedReport) {
    auto report = dir_ / "r.json";
    auto child = fs::path(DDO_BINARY_DIR) / "tests/bin/ddo_report_sigint_child";
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::dup2(fds[1], 1);
        ::close(fds[0]);
        ::execl(child.c_str(), child.c_str(), report.c_str(), nullptr);
        ::_exit(127);
    }
    ::close(fds[1]);
    char buf[16] = {};
    ASSERT_GT(::read(fds[0], buf, sizeof buf - 1), 0);
    EXPECT_EQ(std::string(buf).substr(0, 5), "ready");
    ::kill(pid, SIGINT);
    int st = 0;
    ::waitpid(pid, &st, 0);
    ::close(fds[0]);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 130);
    auto j = read_json(report);
    EXPECT_EQ(j["status"], "interrupted");
    EXPECT_EQ(j["exit_code"], 130);
    EXPECT_EQ(j["phases"][0]["status"], "open");
    EXPECT_TRUE(j["phases"][0]["host_wall_s"].is_null());
    EXPECT_TRUE(j["phases"][0]["host_wall_s_reason"].is_string());
}

TEST_F(HostTest, ReportSummarizeAndDiffRefuseUnmatched) {
    auto a = dir_ / "a.json", b = dir_ / "b.json";
    run(kHost.string() + " --plugin x --preset low_ram_safe --steps 3 --plugin-dir " + dir_.string() + " --report " + a.string());
    run(kHost.string() + " --plugin x --preset low_ram_safe --steps 4 --plugin-dir " + dir_.string() + " --report " + b.string());
    auto s = run(kHost.string() + " report summarize " + a.string());
    EXPECT_EQ(s.code, 0) << s.out;
    EXPECT_NE(s.out.find("PHASES"), std::string::npos);
    EXPECT_NE(s.out.find("gpu_absolute"), std::string::npos);
    auto d = run(kHost.string() + " report diff " + a.string() + " " + b.string());
    EXPECT_EQ(d.code, 0) << d.out;
    EXPECT_NE(d.out.find("NOT a matched comparison"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("workload.steps"), std::string::npos) << d.out;
    auto same = run(kHost.string() + " report diff " + a.string() + " " + a.string());
    EXPECT_NE(same.out.find("matched comparison: workload and identity fields are equal"), std::string::npos) << same.out;
}

// report diff puts each component's executed route side by side (a component either report names), as it does the
// bytes streamed. (The route rows were never printed before 2026-12-04: the component set they iterated was empty.)
TEST_F(HostTest, ReportDiffShowsEachComponentsExecutedRoute) {
    const auto a = dir_ / "route_a.json", b = dir_ / "route_b.json";
    const auto report = [](const char * route, bool with_vae) {
        nlohmann::json r = {{"schema_version", 1}, {"status", "completed"}, {"exit_code", 0}, {"dry_run", false},
                            {"phases", nlohmann::json::array()}};
        r["routes"]["transformer"] = {{"intended", route}, {"executed", route}};
        if (with_vae) r["routes"]["vae"] = {{"intended", "resident"}, {"executed", "resident"}};
        r["counters"]["transformer"]["bytes_streamed"] = 1048576;
        return r;
    };
    std::ofstream(a) << report("dynamic", true).dump();
    std::ofstream(b) << report("disk", false).dump();
    const auto d = run(kHost.string() + " report diff " + a.string() + " " + b.string());
    EXPECT_EQ(d.code, 0) << d.out;
    const auto at = d.out.find("route transformer executed");
    ASSERT_NE(at, std::string::npos) << d.out;
    const auto line = d.out.substr(at, d.out.find('\n', at) - at);
    EXPECT_NE(line.find("dynamic"), std::string::npos) << line;
    EXPECT_NE(line.find("disk"), std::string::npos) << line;
    EXPECT_NE(d.out.find("route vae executed"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("bytes streamed transformer"), std::string::npos) << d.out;
}

TEST_F(HostTest, ReportSummarizeShowsStreamingOnOneLinePerAspect) {
    // A report as the qwen plugin writes it (trimmed): counters.<component>.engine with plan, counters, staging.
    const auto path = dir_ / "streamed.json";
    nlohmann::json r = {{"schema_version", 1}, {"status", "completed"}, {"exit_code", 0}, {"dry_run", false},
                        {"phases", nlohmann::json::array()}};
    r["counters"]["transformer"] = {
        {"route", "dynamic"},
        {"bytes_streamed", 787968},
        {"engine",
         {{"plan",
           {{"route", "dynamic"}, {"slots", 2}, {"slot_bytes", 41472},
            {"groups", {{{"residency", "resident"}}, {{"residency", "pageable"}}, {{"residency", "pageable"}}}}}},
          {"counters",
           {{"bytes_moved", {{"resident", 82944}, {"pinned", 0}, {"pageable", 705024}, {"file", 0}}},
            {"uploads", 19}, {"hits", 23}, {"misses", 1}, {"stall_s", 0.0036}}},
          {"host_staging",
           {{"backend", "host"},
            {"limits", {{"pinned_route", "off"}, {"pinned_route_reason", "capacities.pin_host_memory = false"},
                        {"registration", "off"}}},
            {"pinned", {{"attempts", 0}, {"successes", 0}, {"refusals", 0}, {"failures", 0}, {"bytes_total", 0}}},
            {"registration", {{"attempts", 0}, {"successes", 0}, {"refusals", 0}, {"failures", 0}, {"bytes_total", 0}}}}}}}};
    std::ofstream(path) << r.dump();
    auto s = run(kHost.string() + " report summarize " + path.string());
    EXPECT_EQ(s.code, 0) << s.out;
    EXPECT_NE(s.out.find("plan dynamic: 3 groups (1 resident, 0 pinned, 2 pageable, 0 file), 2 slots of 40.50 KiB"),
              std::string::npos) << s.out;
    EXPECT_NE(s.out.find("moved resident 81.00 KiB, pinned 0 B, pageable 688.50 KiB, file 0 B; 19 uploads, 23 hits, 1 misses"),
              std::string::npos) << s.out;
    EXPECT_NE(s.out.find("pinned off (capacities.pin_host_memory = false): 0/0 ok"), std::string::npos) << s.out;
    // Nested objects are pointed at, not dumped.
    EXPECT_NE(s.out.find("(see counters.transformer.engine)"), std::string::npos) << s.out;
    EXPECT_EQ(s.out.find("\"bytes_moved\""), std::string::npos) << s.out;
}

// ---- the dry-run report against the catalog (needs the "good" fixture model plugin) -------

TEST_F(HostTest, DryRunReportFieldsMatchMetricsCatalog) {
    fs::path fixtures = fs::path(DDO_BINARY_DIR) / "tests/fixtures/plugins";
    std::string plugin_dir, plugin_name;
    // The fixture directory of the good model plugin: a folder with an artifacts.toml whose
    // model entry is named like "good".
    std::error_code ec;
    for (const auto & e : fs::recursive_directory_iterator(fixtures, ec)) {
        if (e.path().filename() != "artifacts.toml") continue;
        std::ifstream in(e.path());
        std::string text((std::istreambuf_iterator<char>(in)), {});
        std::smatch m;
        if (std::regex_search(text, m, std::regex(R"re(name\s*=\s*"([^"]*good[^"]*)")re")) &&
            text.find("\"model\"") != std::string::npos) {
            plugin_dir = e.path().parent_path().string();
            plugin_name = m[1].str();
            break;
        }
    }
    if (plugin_name.empty()) GTEST_SKIP() << "no good fixture model plugin under " << fixtures << " yet";
    auto report = dir_ / "dry.json";
    auto r = run(kHost.string() + " --plugin-dir " + plugin_dir + " --plugin " + plugin_name +
                 " --preset low_ram_safe --dry-run --report " + report.string());
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = read_json(report);
    EXPECT_EQ(j["status"], "completed");
    EXPECT_EQ(j["dry_run"], true);
    EXPECT_FALSE(j["identity"]["plugin"].is_null());
    expect_catalog_matches(j, true);
}

TEST_F(HostTest, ReportSummarizeAndDiffReadFieldsOfAnyTypeOrMissing) {
    // Found by tests/fuzz/report_reader_fuzz: a report whose fields are missing or of another type (an older, partial
    // or edited report) printed "internal error" (exit 4: nlohmann type_error) or read a missing key through the const
    // operator[] (undefined). Every such field now prints "null" or is skipped.
    const auto path = dir_ / "odd.json";
    const nlohmann::json r = nlohmann::json::parse(R"({
        "schema_version": 1, "status": "completed", "error": {"kind": "x"},
        "phases": [5, {"name": "denoise"}, {"name": "decode", "depth": -1, "memory": 3}, {"depth": 99999999999}],
        "steps": {"first": {"phase": "denoise"}}, "adjustments": [1, {"key": "steps"}], "outputs": [7, {"facts": 1}],
        "memory": {"rss": {}, "uss": 5}, "routes": {"vae": 3, "transformer": {}},
        "counters": {"transformer": {"engine": {"plan": 1, "counters": [], "host_staging": {"limits": 2, "pinned": 3}}},
                     "vae": {"engine": {"plan": {"groups": [1, {"residency": 2}]}}}},
        "workload": 4})");
    std::ofstream(path) << r.dump();
    const auto s = run(kHost.string() + " report summarize " + path.string());
    EXPECT_EQ(s.code, 0) << s.out;
    EXPECT_NE(s.out.find("exit_code: null  error: null"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("plan null: 0 groups"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("plan null: 2 groups (0 resident"), std::string::npos) << s.out;
    EXPECT_EQ(s.out.find("internal error"), std::string::npos) << s.out;
    const auto d = run(kHost.string() + " report diff " + path.string() + " " + path.string());
    EXPECT_EQ(d.code, 0) << d.out;
    EXPECT_NE(d.out.find("matched comparison: workload and identity fields are equal"), std::string::npos) << d.out;
}

}  // namespace
