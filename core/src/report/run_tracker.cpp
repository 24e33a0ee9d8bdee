// RunTracker: the run report (field catalog: docs/metrics.md).
#include "ddo/report/run_tracker.hpp"

#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "ddo/error.hpp"
#include "ddo/preset/resolved_settings.hpp"
#include "ddo/report/environment_info.hpp"
#include "ddo/util/file_digest.hpp"
#include "ddo/report/memory_probes.hpp"
#include "ddo/report/run_journal.hpp"
#include "ddo/util/build_info.hpp"

namespace ddo {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char * to_string(RunStatus s) {
    switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::completed: return "completed";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
    }
    return "?";
}

namespace {

constexpr int kReportSchemaVersion = 1;

std::string iso_utc(std::chrono::system_clock::time_point t) {
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

json opt(const std::optional<std::int64_t> & v) { return v ? json(*v) : json(nullptr); }
json opt_d(const std::optional<double> & v) { return v ? json(*v) : json(nullptr); }

// One sampled series. A failed reading counts as a failed sample and never as a value.
struct Series {
    std::optional<std::int64_t> current, peak, min;
    std::uint64_t samples = 0, failed = 0, skipped = 0;
    std::string last_failure, skip_reason;

    // A read not taken on purpose (the telemetry CPU budget): neither a value nor a failure, but the series is then
    // not complete (a peak between its reads can be missed) and says why.
    void skip(const std::string & why) {
        ++skipped;
        skip_reason = why;
    }

    void add(std::optional<std::int64_t> v, const std::string & why) {
        if (!v) {
            ++failed;
            last_failure = why;
            current.reset();
            return;
        }
        ++samples;
        current = v;
        peak = peak ? std::max(*peak, *v) : *v;
        min = min ? std::min(*min, *v) : *v;
    }
    void add(const report::Reading & r) {
        add(r.bytes ? std::optional<std::int64_t>(static_cast<std::int64_t>(*r.bytes)) : std::nullopt, r.reason);
    }
    bool complete(bool sampler_covered) const { return sampler_covered && samples > 0 && failed == 0 && skipped == 0; }
    json to_json(bool sampler_covered, const std::string & incomplete_why) const {
        json j;
        j["samples"] = samples;
        j["failed_samples"] = failed;
        j["complete"] = complete(sampler_covered);
        j["current_bytes"] = opt(current);
        j["peak_bytes"] = opt(peak);
        j["min_bytes"] = opt(min);
        if (samples == 0)
            j["reason"] = !last_failure.empty() ? last_failure : !skip_reason.empty() ? skip_reason : "no sample was taken";
        else if (failed > 0)
            j["reason"] = std::to_string(failed) + " sample(s) failed, last: " + last_failure;
        else if (skipped > 0)
            j["reason"] = std::to_string(skipped) + " read(s) skipped: " + skip_reason;
        else if (!sampler_covered)
            j["reason"] = incomplete_why;
        else
            j["reason"] = nullptr;
        return j;
    }
};

struct MonitorSet {
    Series rss, uss, mem_available, cgroup, gpu_absolute, gpu_delta, torch_allocated, torch_reserved;
};

struct PhaseRec {
    std::string name;
    std::optional<std::size_t> parent;
    int depth = 0;
    Clock::time_point start;
    std::optional<Clock::time_point> end;
    std::optional<double> cuda_event_ms;
    json notes = json::object();
    MonitorSet mem;
};

}  // namespace

struct RunTracker::Impl {
    RunTrackerOptions opt;
    mutable std::mutex mu;
    Clock::time_point start = Clock::now();
    std::chrono::system_clock::time_point start_wall = std::chrono::system_clock::now();
    std::optional<Clock::time_point> finish;
    std::optional<std::chrono::system_clock::time_point> finish_wall;
    RunStatus status = RunStatus::running;
    json error = nullptr;
    int exit_code = -1;

    std::vector<PhaseRec> phases;
    std::vector<std::size_t> open;
    json steps = json::array();
    json counters = json::object();
    json routes = json::object();
    json workload = json::object();
    json settings = nullptr;
    json preset_identity = nullptr;
    json plugin = nullptr;
    json artifacts = json::array();
    json checkpoint = nullptr;
    json admission = nullptr;
    json outputs = json::array();
    json command_line = json::array();
    json notes = json::object();
    json adjustments = json::array();
    json step_cache;  // null: no step cache ran
    json forecast;    // null: the plugin made no memory forecast
    json environment;
    bool dry_run = false;

    // Note [Run journal]: the crash-safe copy of what happened so far, one synced line per event.
    RunJournal journal;
    void journal_locked(json record) {
        if (!journal.is_open()) return;
        record["t"] = std::chrono::duration<double>(Clock::now() - start).count();
        record["rss_bytes"] = ddo::opt(mem.rss.current);
        record["rss_peak_bytes"] = ddo::opt(mem.rss.peak);
        record["mem_available_bytes"] = ddo::opt(mem.mem_available.current);
        journal.append(record);
    }

    MonitorSet mem;
    std::optional<std::int64_t> gpu_baseline;
    std::string gpu_baseline_reason;
    std::optional<std::uint64_t> rss_hwm;
    std::string rss_hwm_reason;
    report::CgroupReading cgroup_last;
    std::optional<std::int64_t> mem_total;
    std::string mem_total_reason;
    std::unique_ptr<report::NvmlProbe> nvml;
    TorchMemoryHook torch_hook;
    std::string torch_unavailable;  // why no hook applies (set_torch_memory_unavailable)
    std::string torch_version;

    // The cost of measuring (Note [Telemetry cost] in docs/metrics.md): CPU time of every telemetry read, on
    // whichever thread took it, and the USS reads the budget allowed or skipped.
    std::chrono::nanoseconds telemetry_cpu{0}, uss_cpu{0}, last_uss_cost{0};
    std::uint64_t samples_taken = 0, uss_boundary_reads = 0, uss_periodic_reads = 0, uss_skipped = 0,
                  uss_boundary_skipped = 0;
    std::string rss_source = "/proc/self/statm";

    static std::chrono::nanoseconds thread_cpu() {
        timespec ts{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    }
    // A fifth of the budget stays for the cheap monitors, which keep their interval whatever USS costs.
    static constexpr double kUssShareOfBudget = 0.8;
    // The next read's cost, predicted: smaps_rollup walks the page tables, so its cost grows with the resident set;
    // the last read's cost scaled by how much RSS grew since (never below it: a read once in costs at least that).
    std::uint64_t rss_at_last_uss = 0;
    std::chrono::nanoseconds predicted_uss_cost(std::optional<std::uint64_t> rss_now) const {
        if (!rss_now || rss_at_last_uss == 0 || *rss_now <= rss_at_last_uss) return last_uss_cost;
        return std::chrono::nanoseconds(static_cast<std::int64_t>(
            double(last_uss_cost.count()) * double(*rss_now) / double(rss_at_last_uss)));
    }
    bool uss_within_budget(std::optional<std::uint64_t> rss_now) const {
        const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
        return double((telemetry_cpu + predicted_uss_cost(rss_now)).count()) <=
               kUssShareOfBudget * opt.cpu_budget_fraction * double(wall.count());
    }

    std::thread sampler;
    std::condition_variable cv;
    bool stop = false;
    bool sampler_running = false;
    bool sampler_failed = false;  // the thread could not start or run for the whole scope

    // boundary: a phase begins or ends, the run starts or finishes (every monitor); else the sampler's periodic read.
    void sample_locked(bool boundary = true) {
        const auto cpu0 = thread_cpu();
        auto rss = report::read_rss_statm(opt.proc_root);
        if (!rss.bytes) {  // no statm (a faked /proc): VmRSS of status is the same quantity
            rss = report::read_rss(opt.proc_root);
            rss_source = "/proc/self/status VmRSS (statm unreadable)";
        }
        // Every USS read, at a boundary too, stays within the budget; only the run's first read is unconditional.
        const bool take_uss = (uss_boundary_reads + uss_periodic_reads == 0) || uss_within_budget(rss.bytes);
        report::Reading uss;
        if (take_uss) {
            const auto u0 = thread_cpu();
            uss = report::read_uss(opt.proc_root);
            last_uss_cost = thread_cpu() - u0;
            rss_at_last_uss = rss.bytes.value_or(0);
            uss_cpu += last_uss_cost;
            ++(boundary ? uss_boundary_reads : uss_periodic_reads);
        } else {
            ++(boundary ? uss_boundary_skipped : uss_skipped);
        }
        auto avail = report::read_mem_available(opt.proc_root);
        auto cg = report::read_cgroup(opt.proc_root, opt.sys_root);
        auto gpu = nvml->used();
        std::optional<std::int64_t> delta;
        std::string delta_why = gpu.reason;
        if (gpu.bytes && gpu_baseline) delta = static_cast<std::int64_t>(*gpu.bytes) - *gpu_baseline;
        else if (gpu.bytes) delta_why = "no GPU baseline: " + gpu_baseline_reason;
        std::optional<std::int64_t> ta, tr;
        std::string torch_why;
        if (!torch_hook) {
            torch_why = torch_unavailable.empty()
                            ? "no torch memory hook registered (the model plugin did not provide one)"
                            : torch_unavailable;
        } else if (auto t = torch_hook()) {
            ta = static_cast<std::int64_t>(t->allocated_bytes);
            tr = static_cast<std::int64_t>(t->reserved_bytes);
        } else {
            torch_why = "torch memory hook returned no value (CUDA not initialised in torch)";
        }
        cgroup_last = cg;
        auto add_all = [&](MonitorSet & m) {
            m.rss.add(rss);
            if (take_uss) m.uss.add(uss);
            else m.uss.skip("smaps_rollup reads would exceed telemetry.cpu_budget_percent (sampler.uss)");
            m.mem_available.add(avail);
            m.cgroup.add(cg.usage);
            m.gpu_absolute.add(gpu);
            m.gpu_delta.add(delta, delta_why);
            m.torch_allocated.add(ta, torch_why);
            m.torch_reserved.add(tr, torch_why);
        };
        add_all(mem);
        for (auto i : open) add_all(phases[i].mem);
        ++samples_taken;
        telemetry_cpu += thread_cpu() - cpu0;
    }

    void stop_sampler() {
        {
            std::lock_guard lk(mu);
            stop = true;
        }
        cv.notify_all();
        if (sampler.joinable()) sampler.join();
        sampler_running = false;
    }

    json monitor_json(const Series & s, const std::string & metric, const std::string & scope, bool phase_scope) const {
        bool covered = opt.start_sampler && !sampler_failed;
        json j = s.to_json(covered, opt.start_sampler ? "the sampler thread did not run for the whole scope"
                                                       : "sampler disabled: only explicit samples were taken");
        j["metric"] = metric;
        j["scope"] = phase_scope ? "phase" : scope;
        j["unit"] = "bytes";
        j["interval_ms"] = opt.start_sampler ? json(opt.sample_interval.count()) : json(nullptr);
        return j;
    }

    json memory_json(const MonitorSet & m, bool phase_scope) const {
        json j;
        j["rss"] = monitor_json(m.rss, "VmRSS of the host process (anonymous + file-backed + shmem resident pages)",
                                "process, whole run", phase_scope);
        j["uss"] = monitor_json(m.uss, "USS of the host process: Private_Clean + Private_Dirty of smaps_rollup",
                                "process, whole run", phase_scope);
        // smaps_rollup walks every mapping: read at phase boundaries and within the CPU budget (sampler.uss).
        j["uss"]["interval_ms"] = nullptr;
        j["uss"]["policy"] = "adaptive: at phase boundaries and the interval, within sampler.cpu_budget_fraction";
        j["mem_available"] = monitor_json(m.mem_available, "MemAvailable of /proc/meminfo", "system, whole run", phase_scope);
        j["cgroup"] = monitor_json(m.cgroup, "memory.current of the process's cgroup v2", "cgroup, whole run", phase_scope);
        j["gpu_absolute"] = monitor_json(m.gpu_absolute, "NVML used memory of the device (all processes and contexts)",
                                         "device, whole run", phase_scope);
        j["gpu_delta"] = monitor_json(m.gpu_delta, "NVML used memory minus the baseline taken when the tracker started",
                                      "device relative to run baseline, whole run", phase_scope);
        j["torch_allocated"] = monitor_json(m.torch_allocated, "PyTorch caching allocator: allocated bytes",
                                            "torch allocator of this process, whole run", phase_scope);
        j["torch_reserved"] = monitor_json(m.torch_reserved, "PyTorch caching allocator: reserved bytes",
                                           "torch allocator of this process, whole run", phase_scope);
        return j;
    }
};

RunTracker::RunTracker(RunTrackerOptions options) : impl_(std::make_unique<Impl>()) {
    auto & m = *impl_;
    m.opt = std::move(options);
    m.nvml = std::make_unique<report::NvmlProbe>(m.opt.nvml_library, m.opt.gpu_index);
    auto base = m.nvml->used();
    if (base.bytes) m.gpu_baseline = static_cast<std::int64_t>(*base.bytes);
    m.gpu_baseline_reason = base.reason;
    auto total = report::read_mem_total(m.opt.proc_root);
    if (total.bytes) m.mem_total = static_cast<std::int64_t>(*total.bytes);
    m.mem_total_reason = total.reason;
    m.environment = report::collect_environment(m.opt.proc_root, m.opt.etc_root, *m.nvml);
    m.torch_version = build_info().torch_version;
    {
        std::lock_guard lk(m.mu);
        m.sample_locked();
    }
    if (m.opt.start_sampler) {
        try {
            m.sampler_running = true;
            m.sampler = std::thread([this] {
                auto & im = *impl_;
                std::unique_lock lk(im.mu);
                while (!im.stop) {
                    if (im.cv.wait_for(lk, im.opt.sample_interval, [&] { return im.stop; })) break;
                    im.sample_locked(false);
                }
            });
        } catch (const std::exception &) {
            m.sampler_running = false;
            m.sampler_failed = true;
        }
    }
}

RunTracker::~RunTracker() { impl_->stop_sampler(); }

void RunTracker::set_sampling(std::chrono::milliseconds interval, double cpu_budget_fraction) {
    auto & m = *impl_;
    {
        std::lock_guard lk(m.mu);
        m.opt.sample_interval = interval;
        m.opt.cpu_budget_fraction = cpu_budget_fraction;
    }
    m.cv.notify_all();  // the sampler waits on the new interval from now
}

void RunTracker::start_journal(const fs::path & journal_path) {
    auto & m = *impl_;
    std::lock_guard lk(m.mu);
    m.journal = RunJournal::open(journal_path, {{"pid", ::getpid()},
                                                {"report", fs::absolute(m.opt.report_path).string()},
                                                {"started_at", iso_utc(m.start_wall)},
                                                {"command_line", m.command_line},
                                                {"dry_run", m.dry_run},
                                                {"t", std::chrono::duration<double>(Clock::now() - m.start).count()}});
}

RunTracker::Phase::Phase(Phase && o) noexcept : tracker_(o.tracker_), index_(o.index_) { o.tracker_ = nullptr; }
RunTracker::Phase::~Phase() { end(); }
void RunTracker::Phase::end() {
    if (tracker_) tracker_->end_phase(index_);
    tracker_ = nullptr;
}
void RunTracker::Phase::set_cuda_event_ms(double ms) {
    if (tracker_) tracker_->phase_cuda_ms(index_, ms);
}
void RunTracker::Phase::note(const std::string & key, json value) {
    if (tracker_) tracker_->phase_note(index_, key, std::move(value));
}

RunTracker::Phase RunTracker::phase(const std::string & name) {
    auto & m = *impl_;
    std::lock_guard lk(m.mu);
    PhaseRec rec;
    rec.name = name;
    if (!m.open.empty()) {
        rec.parent = m.open.back();
        rec.depth = m.phases[*rec.parent].depth + 1;
    }
    rec.start = Clock::now();
    m.phases.push_back(std::move(rec));
    std::size_t idx = m.phases.size() - 1;
    m.open.push_back(idx);
    m.sample_locked();
    m.journal_locked({{"event", "phase_begin"}, {"index", idx}, {"name", name},
                      {"parent", m.phases[idx].parent ? json(m.phases[*m.phases[idx].parent].name) : json(nullptr)}});
    return Phase(this, idx);
}

void RunTracker::end_phase(std::size_t index) {
    auto & m = *impl_;
    std::lock_guard lk(m.mu);
    auto & p = m.phases.at(index);
    if (p.end) return;
    m.sample_locked();
    p.end = Clock::now();
    m.open.erase(std::remove(m.open.begin(), m.open.end(), index), m.open.end());
    m.journal_locked({{"event", "phase_end"}, {"index", index}, {"name", p.name},
                      {"host_wall_s", std::chrono::duration<double>(*p.end - p.start).count()}});
}

void RunTracker::phase_cuda_ms(std::size_t index, double ms) {
    std::lock_guard lk(impl_->mu);
    impl_->phases.at(index).cuda_event_ms = ms;
}

void RunTracker::phase_note(std::size_t index, const std::string & key, json value) {
    std::lock_guard lk(impl_->mu);
    impl_->phases.at(index).notes[key] = std::move(value);
}

void RunTracker::step(const std::string & phase, int index, double host_wall_s, std::optional<double> cuda_event_ms,
                      json extra) {
    std::lock_guard lk(impl_->mu);
    impl_->steps.push_back({{"phase", phase},
                            {"index", index},
                            {"host_wall_s", host_wall_s},
                            {"cuda_event_ms", opt_d(cuda_event_ms)},
                            {"cuda_event_ms_reason",
                             cuda_event_ms ? json(nullptr) : json("no completed CUDA-event interval was supplied")},
                            {"extra", extra.is_null() ? json::object() : std::move(extra)}});
    impl_->journal_locked({{"event", "step"}, {"phase", phase}, {"index", index}, {"host_wall_s", host_wall_s},
                           {"extra", impl_->steps.back()["extra"]}});
}

void RunTracker::set_counters(const std::string & component, json counters) {
    std::lock_guard lk(impl_->mu);
    impl_->counters[component] = std::move(counters);
    impl_->journal_locked({{"event", "counters"}, {"component", component}, {"counters", impl_->counters[component]}});
}

namespace {
json & route_entry(json & routes, const std::string & component) {
    if (!routes.contains(component))
        routes[component] = {{"intended", nullptr},
                             {"intended_source", nullptr},
                             {"executed", nullptr},
                             {"executed_note", nullptr},
                             {"executed_reason", "the plugin did not report an executed route"},
                             {"used", nullptr},
                             {"matches", nullptr}};
    return routes[component];
}
void update_match(json & e) {
    e["matches"] = (e["intended"].is_null() || e["executed"].is_null()) ? json(nullptr) : json(e["intended"] == e["executed"]);
}
}  // namespace

void RunTracker::set_route_intended(const std::string & component, const std::string & route, const std::string & source) {
    std::lock_guard lk(impl_->mu);
    auto & e = route_entry(impl_->routes, component);
    e["intended"] = route;
    e["intended_source"] = source.empty() ? json(nullptr) : json(source);
    update_match(e);
}

void RunTracker::set_route_executed(const std::string & component, const std::string & route, const std::string & note) {
    std::lock_guard lk(impl_->mu);
    auto & e = route_entry(impl_->routes, component);
    e["executed"] = route;
    e["executed_note"] = note.empty() ? json(nullptr) : json(note);
    e["executed_reason"] = nullptr;
    e["used"] = true;
    update_match(e);
    impl_->journal_locked({{"event", "route"}, {"component", component}, {"executed", route}});
}

void RunTracker::set_route_unused(const std::string & component, const std::string & reason) {
    std::lock_guard lk(impl_->mu);
    auto & e = route_entry(impl_->routes, component);
    if (e["used"] == json(true)) return;  // executed earlier in this run (a second generation may differ)
    e["used"] = false;
    e["executed_reason"] = "not used: " + reason;
    update_match(e);
    impl_->journal_locked({{"event", "route"}, {"component", component}, {"executed", nullptr}, {"not_used", reason}});
}

void RunTracker::set_workload(json workload) {
    std::lock_guard lk(impl_->mu);
    impl_->workload = std::move(workload);
}

void RunTracker::set_settings(const ResolvedSettings & settings) {
    json j = settings.to_json();
    std::lock_guard lk(impl_->mu);
    impl_->preset_identity = j["preset"];
    impl_->settings = {{"values", j["values"]},
                       {"components", j["components"]},
                       {"effective_components", j["effective_components"]}};
}

void RunTracker::set_plugin(json plugin) {
    std::lock_guard lk(impl_->mu);
    impl_->plugin = std::move(plugin);
    impl_->journal_locked({{"event", "plugin"}, {"plugin", impl_->plugin}});
}

void RunTracker::add_artifact(const std::string & role, const std::string & name, const fs::path & path,
                              const std::string & sha256) {
    std::lock_guard lk(impl_->mu);
    impl_->artifacts.push_back({{"role", role}, {"name", name}, {"path", path.string()}, {"sha256", sha256}});
}

void RunTracker::set_checkpoint(json checkpoint) {
    std::lock_guard lk(impl_->mu);
    impl_->checkpoint = std::move(checkpoint);
}

void RunTracker::set_admission(json observations) {
    std::lock_guard lk(impl_->mu);
    impl_->admission = std::move(observations);
}

void RunTracker::add_output(const fs::path & path, const std::string & kind) {
    std::error_code ec;
    auto size = fs::file_size(path, ec);
    auto sha = file_sha256(path);
    std::lock_guard lk(impl_->mu);
    impl_->outputs.push_back({{"path", path.string()},
                              {"kind", kind},
                              {"bytes", ec ? json(nullptr) : json(size)},
                              {"sha256", sha ? json(*sha) : json(nullptr)},
                              {"sha256_reason", sha ? json(nullptr) : json("cannot read " + path.string())}});
}

void RunTracker::add_output_written(const fs::path & path, const std::string & kind, std::uint64_t bytes,
                                    const std::string & sha256, nlohmann::json facts) {
    std::lock_guard lk(impl_->mu);
    nlohmann::json o = {{"path", path.string()}, {"kind", kind}, {"bytes", bytes}, {"sha256", sha256},
                        {"sha256_reason", nullptr}};
    if (!facts.is_null()) o["facts"] = std::move(facts);
    impl_->journal_locked({{"event", "output"}, {"path", o["path"]}, {"bytes", bytes}, {"sha256", sha256}});
    impl_->outputs.push_back(std::move(o));
}

void RunTracker::set_command_line(std::vector<std::string> argv) {
    std::lock_guard lk(impl_->mu);
    impl_->command_line = std::move(argv);
}

void RunTracker::set_dry_run(bool dry_run) {
    std::lock_guard lk(impl_->mu);
    impl_->dry_run = dry_run;
}

void RunTracker::note(const std::string & key, json value) {
    std::lock_guard lk(impl_->mu);
    impl_->notes[key] = std::move(value);
}

void RunTracker::set_forecast(json forecast) {
    std::lock_guard lk(impl_->mu);
    impl_->forecast = std::move(forecast);
}

void RunTracker::set_step_cache(json summary) {
    std::lock_guard lk(impl_->mu);
    impl_->step_cache = std::move(summary);
}

void RunTracker::add_adjustment(const std::string & key, json requested, json effective, const std::string & reason) {
    std::lock_guard lk(impl_->mu);
    json a = {{"key", key}, {"requested", std::move(requested)}, {"effective", std::move(effective)}, {"reason", reason}};
    for (auto & old : impl_->adjustments)
        if (old.at("key") == key) {
            old = std::move(a);
            return;
        }
    impl_->adjustments.push_back(std::move(a));
}

void RunTracker::set_torch_memory_hook(TorchMemoryHook hook, std::string torch_version) {
    std::lock_guard lk(impl_->mu);
    impl_->torch_hook = std::move(hook);
    if (!torch_version.empty()) impl_->torch_version = std::move(torch_version);
}

void RunTracker::set_torch_memory_unavailable(std::string reason) {
    std::lock_guard lk(impl_->mu);
    impl_->torch_hook = nullptr;
    impl_->torch_unavailable = std::move(reason);
}

void RunTracker::set_torch_version(std::string torch_version) {
    std::lock_guard lk(impl_->mu);
    impl_->torch_version = std::move(torch_version);
}

void RunTracker::sample_now() {
    std::lock_guard lk(impl_->mu);
    impl_->sample_locked();
}

namespace {
void finish(RunTracker::Impl & m, RunStatus s, int exit_code, json error) {
    m.stop_sampler();
    std::lock_guard lk(m.mu);
    if (m.status != RunStatus::running) return;  // the first terminal status wins
    m.sample_locked();
    auto hwm = report::read_rss_hwm(m.opt.proc_root);
    m.rss_hwm = hwm.bytes;
    m.rss_hwm_reason = hwm.reason;
    m.status = s;
    m.exit_code = exit_code;
    m.error = std::move(error);
    m.finish = Clock::now();
    m.finish_wall = std::chrono::system_clock::now();
    m.journal_locked({{"event", "end"}, {"status", to_string(s)}, {"exit_code", exit_code}, {"error", m.error}});
}
}  // namespace

void RunTracker::mark_completed() { finish(*impl_, RunStatus::completed, 0, nullptr); }

void RunTracker::mark_failed(int exit_code, const std::string & message, const std::string & kind) {
    finish(*impl_, RunStatus::failed, exit_code, {{"kind", kind}, {"message", message}, {"exit_code", exit_code}});
}

void RunTracker::mark_interrupted(const std::string & message, int exit_code) {
    finish(*impl_, RunStatus::interrupted, exit_code,
           {{"kind", "interrupted"}, {"message", message}, {"exit_code", exit_code}});
}

RunStatus RunTracker::status() const {
    std::lock_guard lk(impl_->mu);
    return impl_->status;
}

json RunTracker::to_json() const {
    const auto & m = *impl_;
    std::lock_guard lk(m.mu);
    auto now = Clock::now();
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    const auto & bi = build_info();

    json r;
    r["schema_version"] = kReportSchemaVersion;
    r["status"] = to_string(m.status);
    r["exit_code"] = m.status == RunStatus::running ? json(nullptr) : json(m.exit_code);
    r["error"] = m.error;
    r["dry_run"] = m.dry_run;

    json id;
    id["host"] = {{"version", bi.version},         {"git_revision", bi.git_revision}, {"build_type", bi.build_type},
                  {"fingerprint", bi.fingerprint}, {"compiler", bi.compiler}};
    id["command_line"] = m.command_line;
    id["plugin"] = m.plugin;
    id["plugin_reason"] = m.plugin.is_null() ? json("no model plugin was loaded") : json(nullptr);
    id["artifacts"] = m.artifacts;
    id["preset"] = m.preset_identity;
    id["preset_reason"] = m.preset_identity.is_null() ? json("settings were not resolved") : json(nullptr);
    id["checkpoint"] = m.checkpoint;
    id["checkpoint_reason"] = m.checkpoint.is_null() ? json("no checkpoint identity was recorded") : json(nullptr);
    r["identity"] = id;
    r["admission"] = m.admission;
    r["admission_reason"] = m.admission.is_null() ? json("Linux admission was not observed for this run") : json(nullptr);
    r["settings"] = m.settings;
    r["workload"] = m.workload;
    json env = m.environment;
    env["torch_version"] = m.torch_version.empty() || m.torch_version == "none" ? json(nullptr) : json(m.torch_version);
    env["torch_version_reason"] = env["torch_version"].is_null() ? json("built without LibTorch") : json(nullptr);
    r["environment"] = env;

    auto end = m.finish.value_or(now);
    r["timing"] = {{"started_at", iso_utc(m.start_wall)},
                   {"finished_at", m.finish_wall ? json(iso_utc(*m.finish_wall)) : json(nullptr)},
                   {"tracked_total_host_s", secs(end - m.start)},
                   {"clock", "host steady clock; CUDA-event times are separate fields (cuda_event_ms)"}};

    json phases = json::array();
    for (std::size_t i = 0; i < m.phases.size(); ++i) {
        const auto & p = m.phases[i];
        json j;
        j["index"] = i;
        j["name"] = p.name;
        j["parent"] = p.parent ? json(m.phases[*p.parent].name) : json(nullptr);
        j["parent_index"] = p.parent ? json(*p.parent) : json(nullptr);
        j["depth"] = p.depth;
        j["start_offset_s"] = secs(p.start - m.start);
        j["status"] = p.end ? "ended" : "open";
        j["host_wall_s"] = p.end ? json(secs(*p.end - p.start)) : json(nullptr);
        j["host_wall_s_reason"] = p.end ? json(nullptr) : json("phase did not end (run " + std::string(to_string(m.status)) + ")");
        j["cuda_event_ms"] = opt_d(p.cuda_event_ms);
        j["cuda_event_ms_reason"] =
            p.cuda_event_ms ? json(nullptr) : json("no completed CUDA-event interval was supplied for this phase");
        j["notes"] = p.notes;
        j["memory"] = m.memory_json(p.mem, true);
        phases.push_back(std::move(j));
    }
    r["phases"] = phases;
    r["steps"] = m.steps;

    json mem = m.memory_json(m.mem, false);
    const double wall_s = std::chrono::duration<double>((m.finish ? *m.finish : Clock::now()) - m.start).count();
    const double cpu_s = std::chrono::duration<double>(m.telemetry_cpu).count();
    r["sampler"] = {{"interval_ms", m.opt.start_sampler ? json(m.opt.sample_interval.count()) : json(nullptr)},
                      {"enabled", m.opt.start_sampler},
                      {"cpu_budget_fraction", m.opt.cpu_budget_fraction},
                      {"cpu_seconds", cpu_s},
                      {"cpu_seconds_scope", "thread CPU time of every telemetry read (sampler thread and phase boundaries)"},
                      {"wall_seconds", wall_s},
                      {"cpu_fraction_of_wall", wall_s > 0 ? json(cpu_s / wall_s) : json(nullptr)},
                      {"samples", m.samples_taken},
                      {"rss_source", m.rss_source},
                      {"uss", {{"policy", "read (at phase boundaries and at the interval) only while telemetry CPU + "
                                          "one more read (its cost predicted from the last read's, scaled by RSS growth) <= 0.8 x cpu_budget_fraction x wall (the rest is the cheap "
                                          "monitors'); the first read always"},
                               {"boundary_reads", m.uss_boundary_reads}, {"periodic_reads", m.uss_periodic_reads},
                               {"skipped_for_budget", m.uss_skipped + m.uss_boundary_skipped},
                               {"boundary_skipped_for_budget", m.uss_boundary_skipped},
                               {"cpu_seconds", std::chrono::duration<double>(m.uss_cpu).count()},
                               {"last_read_seconds", std::chrono::duration<double>(m.last_uss_cost).count()}}},
                      {"note", "sampling can miss peaks shorter than the interval (USS: between its reads)"}};
    mem["rss"]["kernel_hwm_bytes"] = m.rss_hwm ? json(*m.rss_hwm) : json(nullptr);
    mem["rss"]["kernel_hwm_reason"] =
        m.rss_hwm ? json(nullptr) : json(m.rss_hwm_reason.empty() ? "read at the end of the run" : m.rss_hwm_reason);
    mem["mem_available"]["total_bytes"] = opt(m.mem_total);
    mem["mem_available"]["total_reason"] = m.mem_total ? json(nullptr) : json(m.mem_total_reason);
    mem["cgroup"]["path"] = m.cgroup_last.path.empty() ? json(nullptr) : json(m.cgroup_last.path);
    mem["cgroup"]["limit_bytes"] = m.cgroup_last.limit.bytes ? json(*m.cgroup_last.limit.bytes) : json(nullptr);
    mem["cgroup"]["limit_reason"] = m.cgroup_last.limit.bytes ? json(nullptr) : json(m.cgroup_last.limit.reason);
    mem["gpu_absolute"]["device_index"] = m.opt.gpu_index;
    mem["gpu_delta"]["baseline_bytes"] = opt(m.gpu_baseline);
    mem["gpu_delta"]["baseline_reason"] = m.gpu_baseline ? json(nullptr) : json(m.gpu_baseline_reason);
    r["memory"] = mem;

    r["routes"] = m.routes;
    r["counters"] = m.counters;
    r["outputs"] = m.outputs;
    r["notes"] = m.notes;
    r["adjustments"] = m.adjustments;
    r["forecast"] = m.forecast;
    r["forecast_reason"] = m.forecast.is_null() ? json("the model plugin made no memory forecast (Note [Memory forecast])")
                                                : json(nullptr);
    r["step_cache"] = m.step_cache;
    r["step_cache_reason"] = m.step_cache.is_null()
                                 ? json("no step cache ran (cache.kind = off, or the run ended before denoising)")
                                 : json(nullptr);
    if (!m.journal.path().empty())
        r["journal"] = {{"path", m.journal.path().string()},
                        {"records", m.journal.records()},
                        {"error", m.journal.error().empty() ? json(nullptr) : json(m.journal.error())},
                        {"kept", m.status == RunStatus::running},
                        {"policy", "appended and synced at every phase boundary, step, counters update and the end; "
                                   "removed once a final report is written (Note [Run journal])"}};
    else
        r["journal"] = nullptr;
    r["journal_reason"] = m.journal.path().empty() ? json("no run journal was kept (the report path was not claimed)")
                                                   : json(nullptr);
    return r;
}

void RunTracker::write(const fs::path & path) const {
    const fs::path & target = path.empty() ? impl_->opt.report_path : path;
    if (target.empty()) throw RuntimeError("RunTracker::write: no report path; pass --report FILE");
    write_json_atomically(target, to_json());
    // A final report supersedes the journal (Note [Run journal]); a report written elsewhere (its own path was not
    // writable) does not, and a running one is a snapshot.
    auto & m = *impl_;
    std::lock_guard lk(m.mu);
    std::error_code ec1, ec2;
    const bool own_path = target == m.opt.report_path ||
                          fs::weakly_canonical(target, ec1) == fs::weakly_canonical(m.opt.report_path, ec2);
    if (m.status != RunStatus::running && !m.journal.path().empty() && !m.journal.removed() && own_path)
        m.journal.remove();
}

}  // namespace ddo
