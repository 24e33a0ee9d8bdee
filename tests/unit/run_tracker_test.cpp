// RunTracker: null-not-zero for every unavailable metric, parsing of faked /proc and /sys, nested
// phases (parent recorded, never summed), CUDA-event fields separate, atomic writes, terminal states.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "ddo/util/path_lock.hpp"
#include <thread>

#include "ddo/error.hpp"
#include "ddo/report/run_journal.hpp"
#include "ddo/report/run_tracker.hpp"

namespace fs = std::filesystem;
using namespace ddo;
using nlohmann::json;

namespace {

const char * kMonitors[] = {"rss", "uss", "mem_available", "cgroup", "gpu_absolute", "gpu_delta", "torch_allocated",
                            "torch_reserved"};

class RunTrackerTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ddo_tracker_test_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "empty");
    }
    void TearDown() override { fs::remove_all(dir_); }

    RunTrackerOptions no_sources() {
        RunTrackerOptions o;
        o.proc_root = dir_ / "empty";
        o.sys_root = dir_ / "empty";
        o.etc_root = dir_ / "empty";
        o.nvml_library = "libddo-test-no-such-nvml.so.1";
        o.start_sampler = false;
        return o;
    }
    fs::path fake_proc() {
        auto p = dir_ / "proc";
        fs::create_directories(p / "self");
        fs::create_directories(p / "sys/kernel");
        std::ofstream(p / "self/status") << "Name:\tx\nVmHWM:\t  4096 kB\nVmRSS:\t  2048 kB\n";
        std::ofstream(p / "self/smaps_rollup") << "Rss: 2048 kB\nPrivate_Clean:  100 kB\nPrivate_Dirty:  900 kB\n";
        std::ofstream(p / "meminfo") << "MemTotal: 32000000 kB\nMemFree: 1 kB\nMemAvailable: 16000000 kB\n";
        std::ofstream(p / "self/cgroup") << "0::/user.slice/test\n";
        std::ofstream(p / "sys/kernel/osrelease") << "6.1.0-18-amd64\n";
        std::ofstream(p / "cpuinfo") << "processor\t: 0\nmodel name\t: Fake CPU\nprocessor\t: 1\nmodel name\t: Fake CPU\n";
        auto s = dir_ / "sys/fs/cgroup/user.slice/test";
        fs::create_directories(s);
        std::ofstream(s / "memory.max") << "max\n";
        std::ofstream(s / "memory.current") << "123456\n";
        return p;
    }
    fs::path dir_;
};

// Every unavailable value is null with a non-empty reason; no unavailable value is 0.
void expect_null_with_reason(const json & obj, const std::string & field, const std::string & reason_field) {
    ASSERT_TRUE(obj.contains(field)) << field;
    EXPECT_TRUE(obj[field].is_null()) << field << " = " << obj[field];
    ASSERT_TRUE(obj.contains(reason_field)) << reason_field;
    ASSERT_TRUE(obj[reason_field].is_string()) << reason_field;
    EXPECT_FALSE(obj[reason_field].get<std::string>().empty());
}

TEST_F(RunTrackerTest, UnavailableMetricsAreNullWithReasonNeverZero) {
    RunTracker t(no_sources());
    t.sample_now();
    {
        auto p = t.phase("denoise");
    }
    t.mark_completed();
    json r = t.to_json();
    for (const char * m : kMonitors) {
        const json & mon = r["memory"][m];
        SCOPED_TRACE(m);
        for (const char * f : {"current_bytes", "peak_bytes", "min_bytes"}) expect_null_with_reason(mon, f, "reason");
        EXPECT_EQ(mon["samples"], 0);
        EXPECT_FALSE(mon["complete"].get<bool>());
        const json & pm = r["phases"][0]["memory"][m];
        expect_null_with_reason(pm, "peak_bytes", "reason");
    }
    expect_null_with_reason(r["memory"]["rss"], "kernel_hwm_bytes", "kernel_hwm_reason");
    expect_null_with_reason(r["memory"]["mem_available"], "total_bytes", "total_reason");
    expect_null_with_reason(r["memory"]["cgroup"], "limit_bytes", "limit_reason");
    expect_null_with_reason(r["memory"]["gpu_delta"], "baseline_bytes", "baseline_reason");
    EXPECT_NE(r["memory"]["gpu_absolute"]["reason"].get<std::string>().find("NVML"), std::string::npos);
    for (const char * f : {"os", "kernel", "wsl", "cpu_model", "cpu_count", "ram_total_bytes", "gpu_name",
                           "gpu_total_bytes", "driver_version", "cuda_driver_version"})
        expect_null_with_reason(r["environment"], f, std::string(f) + "_reason");
    expect_null_with_reason(r["phases"][0], "cuda_event_ms", "cuda_event_ms_reason");
    expect_null_with_reason(r["identity"], "plugin", "plugin_reason");
    expect_null_with_reason(r["identity"], "checkpoint", "checkpoint_reason");
}

TEST_F(RunTrackerTest, TorchHookAbsentOrEmptyIsNullWithDistinctReasons) {
    RunTracker t(no_sources());
    t.sample_now();
    auto r1 = t.to_json();
    EXPECT_NE(r1["memory"]["torch_allocated"]["reason"].get<std::string>().find("no torch memory hook"), std::string::npos);
    t.set_torch_memory_hook([] { return std::optional<TorchMemory>(); }, "2.9.0");
    t.sample_now();
    auto r2 = t.to_json();
    EXPECT_TRUE(r2["memory"]["torch_reserved"]["peak_bytes"].is_null());
    EXPECT_NE(r2["memory"]["torch_reserved"]["reason"].get<std::string>().find("returned no value"), std::string::npos);
    t.set_torch_memory_hook([] { return std::optional<TorchMemory>(TorchMemory{100, 300}); }, "");
    t.sample_now();
    auto r3 = t.to_json();
    EXPECT_EQ(r3["memory"]["torch_allocated"]["peak_bytes"], 100);
    EXPECT_EQ(r3["memory"]["torch_reserved"]["peak_bytes"], 300);
    // Earlier failed samples make the series incomplete; it says so.
    EXPECT_FALSE(r3["memory"]["torch_allocated"]["complete"].get<bool>());
    EXPECT_TRUE(r3["memory"]["torch_allocated"]["reason"].is_string());
}

TEST_F(RunTrackerTest, TorchMemoryUnavailableCarriesTheCallersReason) {
    RunTracker t(no_sources());
    t.set_torch_memory_hook([] { return std::optional<TorchMemory>(TorchMemory{100, 300}); }, "");
    t.set_torch_memory_unavailable("the run computes on the CPU");  // replaces the hook
    t.sample_now();
    auto r = t.to_json();
    for (const char * m : {"torch_allocated", "torch_reserved"}) {
        EXPECT_TRUE(r["memory"][m]["peak_bytes"].is_null()) << m;
        EXPECT_EQ(r["memory"][m]["reason"], "the run computes on the CPU") << m;
    }
}

TEST_F(RunTrackerTest, ReadsFakedProcAndSys) {
    auto o = no_sources();
    o.proc_root = fake_proc();
    o.sys_root = dir_ / "sys";
    RunTracker t(o);
    t.mark_completed();
    json r = t.to_json();
    EXPECT_EQ(r["memory"]["rss"]["peak_bytes"], 2048 * 1024);
    EXPECT_EQ(r["memory"]["rss"]["kernel_hwm_bytes"], 4096 * 1024);
    EXPECT_EQ(r["memory"]["uss"]["peak_bytes"], 1000 * 1024);  // Private_Clean + Private_Dirty, not Rss
    EXPECT_EQ(r["memory"]["mem_available"]["min_bytes"], 16000000LL * 1024);
    EXPECT_EQ(r["memory"]["mem_available"]["total_bytes"], 32000000LL * 1024);
    EXPECT_EQ(r["memory"]["cgroup"]["peak_bytes"], 123456);
    EXPECT_TRUE(r["memory"]["cgroup"]["limit_bytes"].is_null());
    EXPECT_NE(r["memory"]["cgroup"]["limit_reason"].get<std::string>().find("no limit"), std::string::npos);
    EXPECT_EQ(r["environment"]["cpu_model"], "Fake CPU");
    EXPECT_EQ(r["environment"]["cpu_count"], 2);
    EXPECT_EQ(r["environment"]["wsl"], false);
    // Explicit samples only: values present but the series is not claimed complete.
    EXPECT_FALSE(r["memory"]["rss"]["complete"].get<bool>());
    EXPECT_TRUE(r["memory"]["rss"]["interval_ms"].is_null());
}

TEST_F(RunTrackerTest, SamplerThreadMarksCompleteWithInterval) {
    auto o = no_sources();
    o.proc_root = fake_proc();
    o.sys_root = dir_ / "sys";
    o.start_sampler = true;
    o.sample_interval = std::chrono::milliseconds(5);
    RunTracker t(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    t.mark_completed();
    json r = t.to_json();
    EXPECT_TRUE(r["memory"]["rss"]["complete"].get<bool>());
    EXPECT_EQ(r["memory"]["rss"]["interval_ms"], 5);
    EXPECT_GT(r["memory"]["rss"]["samples"].get<int>(), 2);
    EXPECT_TRUE(r["memory"]["rss"]["reason"].is_null());
    EXPECT_FALSE(r["memory"]["gpu_absolute"]["complete"].get<bool>());  // no NVML here
}

TEST_F(RunTrackerTest, NestedPhasesRecordParentAndAreNotSummed) {
    RunTracker t(no_sources());
    {
        auto outer = t.phase("denoise");
        {
            auto inner = t.phase("step_0");
            inner.set_cuda_event_ms(12.5);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        auto inner2 = t.phase("step_1");
    }
    auto top = t.phase("decode");
    top.end();
    t.step("denoise", 0, 0.25, 12.5);
    t.step("denoise", 1, 0.30);
    t.mark_completed();
    json r = t.to_json();
    ASSERT_EQ(r["phases"].size(), 4u);
    EXPECT_TRUE(r["phases"][0]["parent"].is_null());
    EXPECT_EQ(r["phases"][1]["parent"], "denoise");
    EXPECT_EQ(r["phases"][1]["parent_index"], 0);
    EXPECT_EQ(r["phases"][1]["depth"], 1);
    EXPECT_EQ(r["phases"][2]["parent"], "denoise");
    EXPECT_TRUE(r["phases"][3]["parent"].is_null());
    EXPECT_GE(r["phases"][0]["host_wall_s"].get<double>(), r["phases"][1]["host_wall_s"].get<double>());
    // CUDA-event time is its own field; the host clock is not replaced by it.
    EXPECT_EQ(r["phases"][1]["cuda_event_ms"], 12.5);
    EXPECT_LT(r["phases"][1]["host_wall_s"].get<double>(), 1.0);
    EXPECT_EQ(r["steps"][0]["cuda_event_ms"], 12.5);
    EXPECT_TRUE(r["steps"][1]["cuda_event_ms"].is_null());
    // No aggregate that adds phases together exists; the tracked total is its own clock interval.
    EXPECT_FALSE(r["timing"].contains("sum_of_phases_s"));
    EXPECT_GE(r["timing"]["tracked_total_host_s"].get<double>(), r["phases"][0]["host_wall_s"].get<double>());
}

TEST_F(RunTrackerTest, RoutesIntendedVsExecuted) {
    RunTracker t(no_sources());
    t.set_route_intended("transformer", "dynamic", "preset x.toml:3:1");
    t.set_route_intended("vae", "component");
    t.set_route_executed("transformer", "group_block", "fell back: no pinned memory");
    auto r = t.to_json();
    EXPECT_EQ(r["routes"]["transformer"]["matches"], false);
    EXPECT_TRUE(r["routes"]["vae"]["executed"].is_null());
    EXPECT_TRUE(r["routes"]["vae"]["matches"].is_null());
    EXPECT_TRUE(r["routes"]["vae"]["executed_reason"].is_string());
}

TEST_F(RunTrackerTest, FailedRunRecordsErrorAndOpenPhase) {
    RunTracker t(no_sources());
    auto p = t.phase("load");
    t.mark_failed(4, "checkpoint /m is truncated", "runtime");
    auto r = t.to_json();
    EXPECT_EQ(r["status"], "failed");
    EXPECT_EQ(r["exit_code"], 4);
    EXPECT_EQ(r["error"]["message"], "checkpoint /m is truncated");
    EXPECT_EQ(r["phases"][0]["status"], "open");
    expect_null_with_reason(r["phases"][0], "host_wall_s", "host_wall_s_reason");
    t.mark_completed();  // the first terminal status wins
    EXPECT_EQ(t.to_json()["status"], "failed");
}

TEST_F(RunTrackerTest, InterruptedRun) {
    RunTracker t(no_sources());
    t.mark_interrupted();
    auto r = t.to_json();
    EXPECT_EQ(r["status"], "interrupted");
    EXPECT_EQ(r["exit_code"], 130);
}

// Note [Run journal]: every phase boundary, step, counters update and the end is a synced line; a snapshot written
// while running keeps the journal, the final report removes it; a torn last line is dropped when read.
TEST_F(RunTrackerTest, JournalRecordsTheRunUntilTheFinalReportSupersedesIt) {
    auto o = no_sources();
    o.report_path = dir_ / "r.json";
    RunTracker t(o);
    const fs::path jp = RunJournal::path_for(o.report_path);
    EXPECT_EQ(jp, dir_ / "r.json.journal");
    t.start_journal(jp);
    {
        auto run = t.phase("plugin_run");
        auto d = t.phase("denoise");
        t.step("denoise", 0, 0.5, std::nullopt, {{"engine", {{"transformer", {{"bytes_streamed", 4096}}}}}});
        t.set_counters("transformer", {{"uploads", 2}});
    }
    t.write();  // a snapshot of a running run: the journal stays
    EXPECT_TRUE(fs::exists(jp));
    auto j = read_journal(jp);
    ASSERT_GE(j.records.size(), 7u);
    EXPECT_EQ(j.records.front().at("event"), "start");
    EXPECT_EQ(j.records.front().at("pid"), ::getpid());
    std::vector<std::string> events;
    for (const auto & r : j.records) events.push_back(r.at("event"));
    EXPECT_EQ(events, (std::vector<std::string>{"start", "phase_begin", "phase_begin", "step", "counters", "phase_end", "phase_end"}));
    EXPECT_EQ(j.records[3].at("extra").at("engine").at("transformer").at("bytes_streamed"), 4096);
    EXPECT_TRUE(j.records[3].contains("t"));
    // A torn last line (the process died mid-write) is dropped and counted.
    std::ofstream(jp, std::ios::app) << "{\"event\": \"st";
    j = read_journal(jp);
    EXPECT_EQ(j.torn, 1u);
    EXPECT_EQ(j.records.size(), 7u);
    t.mark_interrupted("interrupted by SIGTERM");
    const json r = t.to_json();
    EXPECT_EQ(r.at("journal").at("path"), jp.string());
    EXPECT_EQ(r.at("journal").at("kept"), false);
    t.write();
    EXPECT_FALSE(fs::exists(jp)) << "the final report supersedes the journal";
    // Not a journal: refused naming the file.
    std::ofstream(dir_ / "x.journal") << "{\"event\": \"phase_begin\"}\n";
    EXPECT_THROW(read_journal(dir_ / "x.journal"), UsageError);
}

TEST_F(RunTrackerTest, NoJournalIsNullWithAReason) {
    RunTracker t(no_sources());
    const json r = t.to_json();
    EXPECT_TRUE(r.at("journal").is_null());
    EXPECT_FALSE(r.at("journal_reason").get<std::string>().empty());
}

TEST_F(RunTrackerTest, AtomicWriteReplacesAndLeavesNoTemp) {
    auto path = dir_ / "out" / "report.json";
    RunTracker t(no_sources());
    t.note("k", 1);
    t.write(path);
    std::ofstream(dir_ / "marker") << "x";
    t.note("k", 2);
    t.write(path);
    json back = json::parse(std::ifstream(path));
    EXPECT_EQ(back["notes"]["k"], 2);
    int entries = 0;
    for (auto & e : fs::directory_iterator(path.parent_path())) {
        ++entries;
        EXPECT_EQ(e.path().filename(), "report.json") << "left behind: " << e.path();
    }
    EXPECT_EQ(entries, 1);
    // A path under a regular file cannot be written: RuntimeError, exit 4, nothing partial.
    EXPECT_THROW(t.write(dir_ / "marker" / "r.json"), RuntimeError);
    EXPECT_EQ(json::parse(std::ifstream(path))["notes"]["k"], 2);
}

// A report name of 244-255 characters is a valid file name, but ".<name>.tmp.XXXXXX" is not: the temp name is shortened.
TEST_F(RunTrackerTest, AtomicWriteTakesNamesUpToNameMax) {
    RunTracker t(no_sources());
    for (std::size_t len : {240u, 250u, 255u}) {
        const fs::path path = dir_ / (std::string(len - 5, 'r') + ".json");
        ASSERT_EQ(path.filename().string().size(), len);
        EXPECT_NO_THROW(t.write(path)) << len;
        EXPECT_TRUE(fs::exists(path)) << len;
        const fs::path lock_target = dir_ / (std::string(len, 'i'));
        EXPECT_NO_THROW((void)ddo::PathLock::acquire(lock_target, "output")) << len;
    }
}

TEST_F(RunTrackerTest, OutputsAreHashed) {
    RunTracker t(no_sources());
    std::ofstream(dir_ / "img.png") << "abc";
    t.add_output(dir_ / "img.png", "image");
    t.add_output(dir_ / "missing.png", "image");
    auto r = t.to_json();
    EXPECT_EQ(r["outputs"][0]["sha256"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(r["outputs"][0]["bytes"], 3);
    EXPECT_TRUE(r["outputs"][1]["sha256"].is_null());
    EXPECT_TRUE(r["outputs"][1]["sha256_reason"].is_string());
}

}  // namespace

// USS (smaps_rollup) costs CPU in proportion to the mappings: between phase boundaries it is read only within the
// CPU budget, and the report shows what all telemetry reads cost (real /proc of this process).
TEST_F(RunTrackerTest, UssBetweenBoundariesIsReadOnlyWithinTheCpuBudget) {
    for (const double budget : {1e-9, 1.0}) {
        RunTrackerOptions o;
        o.nvml_library = "libddo-test-no-such-nvml.so.1";
        o.sample_interval = std::chrono::milliseconds(5);
        o.cpu_budget_fraction = budget;
        RunTracker t(o);
        { auto p = t.phase("work"); std::this_thread::sleep_for(std::chrono::milliseconds(80)); }
        t.mark_completed();
        const json r = t.to_json();
        const auto & s = r.at("sampler");
        EXPECT_EQ(s.at("cpu_budget_fraction").get<double>(), budget);
        EXPECT_GT(s.at("cpu_seconds").get<double>(), 0.0);
        EXPECT_GT(s.at("wall_seconds").get<double>(), 0.0);
        EXPECT_TRUE(s.at("cpu_fraction_of_wall").is_number());
        EXPECT_GE(s.at("uss").at("boundary_reads").get<int>(), 1);  // the first read is always taken
        EXPECT_GT(r.at("memory").at("rss").at("samples").get<int>(), 5) << "the cheap monitors keep their interval";
        EXPECT_EQ(s.at("rss_source").get<std::string>(), "/proc/self/statm");
        if (budget < 1e-6) {
            EXPECT_EQ(s.at("uss").at("periodic_reads").get<int>(), 0) << s.dump();
            EXPECT_EQ(s.at("uss").at("boundary_reads").get<int>(), 1) << s.dump();
            EXPECT_GT(s.at("uss").at("skipped_for_budget").get<int>(), 0) << s.dump();
            const auto & uss = r.at("memory").at("uss");
            EXPECT_FALSE(uss.at("complete").get<bool>());
            EXPECT_NE(uss.at("reason").get<std::string>().find("skipped"), std::string::npos) << uss.dump();
            EXPECT_EQ(uss.at("samples").get<int>(), 1);  // the first read, a value; skips are not zeros
        } else {
            EXPECT_GT(s.at("uss").at("periodic_reads").get<int>(), 0) << s.dump();
        }
    }
}

TEST_F(RunTrackerTest, SetSamplingChangesTheIntervalAndBudgetRecorded) {
    auto o = no_sources();
    RunTracker t(o);
    t.set_sampling(std::chrono::milliseconds(250), 0.005);
    t.mark_completed();
    const json r = t.to_json();
    EXPECT_EQ(r.at("sampler").at("cpu_budget_fraction").get<double>(), 0.005);
    EXPECT_TRUE(r.at("sampler").at("interval_ms").is_null()) << "the sampler is off in this tracker";
}
