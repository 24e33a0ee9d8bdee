// ddo-host serve's jobs: queue, worker, events, cancellation, TTL, drain and summary (job_server.hpp).
#include "serve/job_server.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <random>
#include <sstream>

#include "ddo/error.hpp"
#include "ddo/plugin/plugin_search_path.hpp"
#include "ddo/report/run_journal.hpp"
#include "ddo/report/run_tracker.hpp"
#include "ddo/util/atomic_write.hpp"
#include "ddo/util/stale_path_locks.hpp"
#include "serve/job_record.hpp"
#include "serve/job_recovery.hpp"

namespace ddo::host::serve {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string new_job_id() {
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard lk(mu);
    std::ostringstream s;
    s << "job-" << std::hex << std::setw(12) << std::setfill('0') << (rng() & 0xffffffffffffULL);
    return s.str();
}

std::string iso_time(std::chrono::system_clock::time_point t) {
    const std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

json read_json_file(const fs::path & p) {
    std::ifstream in(p);
    if (!in) return nullptr;
    json j = json::parse(in, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
}

// `dir` synced, so that the names made in it survive a crash (a filesystem that cannot sync a directory, EINVAL or
// ENOTSUP, is taken as it is, as write_text_atomically takes it). Throws RuntimeError naming the directory.
void sync_directory(const fs::path & dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError("cannot open " + dir.string() + " to sync it: " + std::strerror(errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL && err != ENOTSUP) throw RuntimeError("cannot sync " + dir.string() + ": " + std::strerror(err));
}

// Where the server writes a job's condition image `i` (inside the job's directory, a name of its own making).
fs::path input_image_path(const fs::path & job_dir, std::size_t i) {
    return job_dir / "inputs" / ("image_" + std::to_string(i));
}

// The condition images of `spec` written into the job's inputs/ (their bytes then dropped: the files hold them); what
// the record lists of them.
json write_inputs(const fs::path & job_dir, JobSpec & spec) {
    json inputs = json::array();
    for (std::size_t i = 0; i < spec.images.size(); ++i) {
        const fs::path f = input_image_path(job_dir, i);
        // As durable as the record that lists it: the file and inputs/ synced (throws RuntimeError naming the file).
        write_text_atomically(f, spec.images[i].bytes, "condition image");
        inputs.push_back({{"file", fs::relative(f, job_dir).string()}, {"bytes", spec.images[i].bytes.size()},
                          {"frame", spec.images[i].frame ? json(*spec.images[i].frame) : json(nullptr)}});
        spec.images[i].bytes = std::string();
    }
    return inputs;
}

}  // namespace

JobServer::JobServer(ServeConfig config, const HostOptions & options) : config_(std::move(config)), options_(options) {
    fs::create_directories(config_.state_dir / "jobs");
    claim_state_dir();
    log_.open(config_.state_dir / "serve.log", std::ios::app);
    if (!log_) throw UsageError("--state-dir " + config_.state_dir.string() + ": cannot write serve.log there; choose another directory");
    registry_.emplace(PluginRegistry::discover(plugin_search_dirs(options.builtin_plugin_dir, options.plugin_dirs)));
    session_.keep_weights = config_.keep_weights;
    session_.embeddings_cache_bytes = config_.embeddings_cache_bytes;
    recover();
    worker_ = std::thread([this] { work(); });
}

// One server per state directory: a second one would take the first one's running and queued jobs for a dead
// server's. The claim is a PathLock (it dies with the process, so a killed server's does not block its restart).
void JobServer::claim_state_dir() {
    try {
        state_lock_ = PathLock::acquire(config_.state_dir / "serve", "state directory");
    } catch (const UsageError &) {
        std::string holder;
        std::ifstream in(config_.state_dir / ".serve.ddo-lock");
        std::getline(in, holder);
        if (holder.empty()) throw;
        throw UsageError("--state-dir " + config_.state_dir.string() + " is in use by another ddo-host serve (" + holder +
                         "); stop that server, or give this one another --state-dir");
    }
}

// Note [Serve state directory]: what an earlier server left is read back before this one takes a job.
void JobServer::recover() {
    const auto now = std::chrono::system_clock::now();
    const json me = {{"pid", ::getpid()}, {"started", record_time(started_)}};
    for (const auto & l : remove_stale_path_locks(config_.state_dir))
        log("removed the stale lock " + l.file.string() + " (" + (l.holder.empty() ? "no holder recorded" : l.holder + ", gone") + ")");
    for (const auto & f : remove_write_leftovers(config_.state_dir))
        log("removed " + f.string() + " (the temp file of a write its process died in)");
    PreviousSummary previous = read_previous_summary(config_.state_dir / "serve_summary.json");
    if (!previous.problem.empty()) log(previous.problem);
    std::vector<std::string> skipped;
    const std::vector<RecoveredJob> found = recover_jobs(config_.state_dir / "jobs", now, me, skipped);
    for (const auto & l : skipped) log(l);
    std::size_t ended = 0;
    {
        std::lock_guard lk(mu_);
        served_ = std::move(previous.served);
        processes_ = std::move(previous.processes);
        processes_.push_back(me);
        std::set<std::string> rows;
        for (const auto & r : served_) rows.insert(r.at("id").get<std::string>());
        for (const auto & r : found) {
            auto job = restore(r.dir, r.record);
            if (r.ended_here) {
                ++ended;
                write_record(*job, r.record);
                log("job " + job->id + " was " + r.record["recovered"].value("was", "") + " when the server that had it died; now " +
                    job->status + " (exit " + std::to_string(job->exit_code) + "): " + job->error);
            }
            // A row for every job ended: also one whose server died between its record and the summary.
            if (!rows.count(job->id)) served_.push_back(summary_row(r.record));
            jobs_[job->id] = std::move(job);
        }
        for (const auto & r : served_) {
            const std::string id = r.at("id");
            if (!jobs_.count(id)) expired_.insert(id);  // in the summary, its folder gone: expired (410)
            if (r.value("status", "") == "completed" && r.value("run_s", json()).is_number()) run_seconds_.push_back(r["run_s"].get<double>());
        }
    }
    if (!found.empty() || !served_.empty())
        log("state directory read back: " + std::to_string(found.size()) + " job folder(s), " + std::to_string(ended) +
            " of them ended here (their server had died), " + std::to_string(served_.size()) + " job(s) in the summary");
    expire_old();
    write_summary();
}

// A Job for a record read back at start: finished, its events one `done`, its TTL from the record's `finished`.
std::shared_ptr<Job> JobServer::restore(const fs::path & dir, const json & record) {
    auto job = std::make_shared<Job>();
    job->id = record.at("id");
    job->dir = dir;
    job->status = record.at("status");
    job->exit_code = record.value("exit_code", json()).is_number_integer() ? record["exit_code"].get<int>() : -1;
    job->error = record.value("error", json()).is_string() ? record["error"].get<std::string>() : "";
    for (const auto & o : record.value("outputs", json::array()))
        if (o.is_string() && safe_name(o.get<std::string>())) job->outputs.push_back(o);
    std::error_code ec;
    job->has_report = fs::is_regular_file(dir / "ddo_report.json", ec);
    job->spec.request = record.value("request", json(nullptr));
    job->spec.openai = record.value("api", json()) == "images/generations";
    const auto now_wall = std::chrono::system_clock::now();
    const auto now = std::chrono::steady_clock::now();
    const auto time_of = [&](const char * key) {
        return record.value(key, json()).is_string() ? parse_record_time(record[key].get<std::string>()) : std::nullopt;
    };
    if (const auto t = time_of("created")) job->created = *t;
    job->finished_wall = now_wall;
    if (const auto t = time_of("finished")) job->finished_wall = std::min(*t, now_wall);
    job->finished_at = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(now_wall - job->finished_wall);
    job->queued_at = job->finished_at;
    job->finished = true;
    job->restored = record;
    push_event(*job, "done", {{"status", job->status}, {"exit_code", record.value("exit_code", json())}, {"outputs", job->outputs},
                              {"error", record.value("error", json())}});
    return job;
}

json JobServer::record_locked(const Job & job) const {
    if (!job.restored.is_null()) return job.restored;
    const bool ran = job.started_at != std::chrono::steady_clock::time_point{};
    return {{"format", kJobRecordFormat},
            {"id", job.id},
            {"status", job.status},
            {"api", job.spec.openai ? "images/generations" : "jobs"},
            {"created", record_time(job.created)},
            {"started", ran ? json(record_time(job.started_wall)) : json(nullptr)},
            {"finished", job.finished ? json(record_time(job.finished_wall)) : json(nullptr)},
            {"exit_code", job.finished ? json(job.exit_code) : json(nullptr)},
            {"error", job.error.empty() ? json(nullptr) : json(job.error)},
            {"outputs", job.outputs},
            {"queued_s", ran ? json(seconds(job.started_at - job.queued_at))
                             : job.finished ? json(seconds(job.finished_at - job.queued_at)) : json(nullptr)},
            {"run_s", ran && job.finished ? json(seconds(job.finished_at - job.started_at)) : json(nullptr)},
            {"recovered", nullptr},
            {"request", job.spec.request},
            {"inputs", job.inputs},
            {"server", {{"pid", ::getpid()}, {"started", record_time(started_)}}}};
}

void JobServer::write_record(const Job & job, const json & record) {
    try {
        write_job_record(job.dir, record);
    } catch (const std::exception & e) {
        spdlog::warn("serve: job {}: {}", job.id, e.what());
    }
}

JobServer::~JobServer() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
}

void JobServer::log(const std::string & line) {
    spdlog::info("serve: {}", line);
    std::lock_guard lk(log_mu_);
    log_ << iso_time(std::chrono::system_clock::now()) << ' ' << line << '\n';
    log_.flush();
}

RunArgs JobServer::run_args(const Job & job) const {
    RunArgs a;
    a.plugin = config_.plugin;
    a.model = config_.model;
    a.preset = config_.preset;
    a.sets = config_.sets;
    for (const auto & [k, v] : job.spec.sets) a.sets.push_back(k + "=" + v);
    const JobSpec & s = job.spec;
    a.prompt = s.prompt;
    a.negative_prompt = s.negative_prompt;
    a.width = s.width;
    a.height = s.height;
    a.steps = s.steps;
    a.seed = s.seed;
    a.num_images = s.num_images;
    a.frames = s.frames;
    a.fps = s.fps;
    a.cfg_scale = s.guidance_scale;
    a.strength = s.strength;
    // The condition images the request sent, as the server wrote them (write_inputs): FILE or FILE@FRAME.
    for (std::size_t i = 0; i < s.images.size(); ++i) {
        const auto f = input_image_path(job.dir, i).string();
        a.images.push_back(s.images[i].frame ? f + "@" + std::to_string(*s.images[i].frame) : f);
    }
    a.output = job.dir.string();
    a.report = (job.dir / "ddo_report.json").string();
    return a;
}

int JobServer::startup_check() {
    Job probe;
    probe.dir = config_.state_dir / "startup";
    RunArgs a = run_args(probe);
    a.dry_run = true;
    a.overwrite = true;
    RunHooks hooks;
    hooks.console = false;
    hooks.registry = &*registry_;
    const int code = run_once(a, options_, {"ddo-host", "serve", "(startup dry run)"}, hooks);
    startup_report_ = read_json_file(probe.dir / "ddo_report.json");
    log("startup dry run: exit " + std::to_string(code) + ", report " + (probe.dir / "ddo_report.json").string());
    return code;
}

void JobServer::check_settings(const JobSpec & spec) const {
    Job probe;
    probe.spec = spec;
    try {
        check_run_settings(run_args(probe), options_);
    } catch (const UsageError & e) {
        throw RequestError(400, spec.openai ? "ddo" : "set", e.what());
    }
}

std::pair<std::shared_ptr<Job>, std::size_t> JobServer::submit(JobSpec spec) {
    auto job = std::make_shared<Job>();
    job->spec = std::move(spec);
    std::size_t position = 0;
    {
        std::lock_guard lk(mu_);
        if (draining_) throw RequestError(503, "", "the server is shutting down; no new jobs");
        if (queue_.size() + admitting_.size() >= config_.queue_capacity)
            throw RequestError(429, "", "the queue is full (" + std::to_string(config_.queue_capacity) +
                                            " jobs waiting, --queue); retry after the Retry-After seconds");
        do job->id = new_job_id();
        while (jobs_.count(job->id) || expired_.count(job->id) || admitting_.count(job->id));
        job->dir = config_.state_dir / "jobs" / job->id;
        admitting_.insert(job->id);
    }
    // The request on disk before it is answered 202 (Note [Serve state directory]): the images (each file and inputs/
    // synced), the record (the file and the job's folder synced), the folder's name in jobs/ synced. Outside the lock.
    const auto refuse = [&](int status, const std::string & message) {
        {
            std::lock_guard lk(mu_);
            admitting_.erase(job->id);
        }
        std::error_code ec;
        fs::remove_all(job->dir, ec);
        throw RequestError(status, "", message);
    };
    try {
        fs::create_directories(job->dir);
        job->inputs = write_inputs(job->dir, job->spec);
        json record;
        {
            std::lock_guard lk(mu_);
            record = record_locked(*job);
        }
        write_job_record(job->dir, record);
        sync_directory(job->dir.parent_path());  // the job folder's own name in jobs/
    } catch (const std::exception & e) {
        refuse(500, "the job could not be recorded in the state directory (" + std::string(e.what()) +
                        "); check that --state-dir " + config_.state_dir.string() + " is writable and has space");
    }
    {
        std::unique_lock lk(mu_);
        admitting_.erase(job->id);
        if (draining_) {
            lk.unlock();
            refuse(503, "the server is shutting down; no new jobs");
        }
        jobs_[job->id] = job;
        queue_.push_back(job);
        position = queue_.size();
        push_event(*job, "queued", {{"position", position}});
        // Logged under the queue's lock: the log's order of "queued" lines is the queue's order.
        log("job " + job->id + " queued at position " + std::to_string(position) +
            (job->spec.openai ? " (POST /v1/images/generations)" : " (POST /v1/jobs)"));
    }
    cv_.notify_all();
    return {job, position};
}

std::pair<std::shared_ptr<Job>, JobServer::Lookup> JobServer::find(const std::string & id) {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) return {it->second, Lookup::found};
    return {nullptr, expired_.count(id) ? Lookup::expired : Lookup::unknown};
}

bool JobServer::cancel(const std::shared_ptr<Job> & job) {
    std::unique_lock lk(mu_);
    if (job->finished) return false;
    if (job->status == "queued") {
        queue_.erase(std::remove(queue_.begin(), queue_.end(), job), queue_.end());
        lk.unlock();
        finish(job, "cancelled", 130, "cancelled by DELETE /v1/jobs/" + job->id + " before it ran");
        return true;
    }
    job->cancel_reason = "interrupted by DELETE /v1/jobs/" + job->id;
    job->cancel_code = 130;
    job->cancel.store(true);
    push_event(*job, "cancelling", {{"reason", job->cancel_reason}});
    lk.unlock();
    cv_.notify_all();
    log("job " + job->id + ": DELETE, stops at its next step");
    return true;
}

json JobServer::describe(const Job & job) {
    std::unique_lock lk(mu_);
    json j = {{"id", job.id}, {"status", job.status}, {"created", iso_time(job.created)}, {"progress", job.progress},
              {"request", job.spec.request}};
    if (job.status == "queued") {
        const auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto & q) { return q.get() == &job; });
        j["position"] = it == queue_.end() ? 0 : std::distance(queue_.begin(), it) + 1;
    }
    if (job.finished) {
        j["exit_code"] = job.exit_code < 0 ? json(nullptr) : json(job.exit_code);
        j["error"] = job.error.empty() ? json(nullptr) : json(job.error);
        json outs = json::array();
        for (const auto & n : job.outputs) outs.push_back({{"name", n}, {"url", "/v1/jobs/" + job.id + "/outputs/" + n}});
        j["outputs"] = outs;
    }
    const bool read_report = job.finished && job.has_report;
    if (job.finished && !job.has_report) j["report"] = nullptr;
    lk.unlock();
    if (read_report) j["report"] = read_json_file(job.dir / "ddo_report.json");  // outside the lock
    return j;
}

void JobServer::push_event(Job & job, const std::string & name, json data) {
    job.events.push_back({{"event", name}, {"data", std::move(data)}});
}

std::vector<json> JobServer::events(const Job & job, std::size_t from, std::chrono::milliseconds wait, bool & done) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, wait, [&] { return job.events.size() > from || job.finished || stop_; });
    std::vector<json> out;
    for (std::size_t i = from; i < job.events.size(); ++i) out.push_back(job.events[i]);
    done = job.finished || stop_;
    return out;
}

void JobServer::wait_finished(const Job & job) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return job.finished || stop_; });
}

json JobServer::health() {
    std::lock_guard lk(mu_);
    return {{"status", draining_ ? "draining" : "ok"},
            {"plugin", config_.plugin},
            {"queued", queue_.size()},
            {"queue_capacity", config_.queue_capacity},
            {"running", running_ ? json(running_->id) : json(nullptr)},
            {"served", served_.size()},
            {"started", iso_time(started_)}};
}

int JobServer::retry_after_s() {
    std::lock_guard lk(mu_);
    double mean = 5;
    if (!run_seconds_.empty()) {
        mean = 0;
        for (double s : run_seconds_) mean += s;
        mean /= double(run_seconds_.size());
    }
    return std::max(1, int(mean + 0.999));
}

void JobServer::work() {
    for (;;) {
        std::shared_ptr<Job> job;
        json record;
        {
            std::unique_lock lk(mu_);
            cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            if (queue_.empty()) {
                lk.unlock();
                expire_old();
                continue;
            }
            job = queue_.front();
            queue_.pop_front();
            running_ = job;
            job->status = "running";
            job->started_at = std::chrono::steady_clock::now();
            job->started_wall = std::chrono::system_clock::now();
            push_event(*job, "started", json::object());
            record = record_locked(*job);
        }
        write_record(*job, record);
        cv_.notify_all();
        run_job(job);
        {
            std::lock_guard lk(mu_);
            running_.reset();
        }
        cv_.notify_all();
        expire_old();
    }
}

void JobServer::run_job(const std::shared_ptr<Job> & job) {
    log("job " + job->id + " running");
    std::error_code ec;
    fs::create_directories(job->dir, ec);
    // The request's condition images are in the job's inputs/ since it was accepted (submit), where run_args names them.
    const RunArgs a = run_args(*job);
    const fs::path journal = RunJournal::path_for(a.report);
    std::streamoff journal_offset = 0;
    RunHooks hooks;
    hooks.console = false;
    hooks.registry = &*registry_;
    hooks.interrupted = &job->cancel;
    hooks.session = &session_;
    hooks.interruption = [this, job] {  // DELETE and the drain write the reason under the lock
        std::lock_guard lk(mu_);
        return std::pair{job->cancel_reason, job->cancel_code};
    };
    // Each progress event of the kit, and the run journal's records written since the last one (phases, steps with
    // their times, counters, memory), become the job's events: what GET /v1/jobs/{id}/events streams.
    hooks.progress = [this, job, journal, &journal_offset](const ProgressEvent & e) {
        std::vector<json> records;
        if (std::ifstream in{journal}) {
            in.seekg(journal_offset);
            std::string line;
            while (std::getline(in, line)) {
                if (in.eof()) break;  // a line still being written
                journal_offset += std::streamoff(line.size() + 1);
                json r = json::parse(line, nullptr, false);
                if (!r.is_discarded()) records.push_back(std::move(r));
            }
        }
        {
            std::lock_guard lk(mu_);
            for (auto & r : records) push_event(*job, "journal", std::move(r));
            job->progress = {{"phase", e.phase}, {"step", e.step}, {"total", e.total}, {"step_seconds", e.step_seconds},
                             {"phase_seconds", e.phase_seconds}};
            push_event(*job, "progress", job->progress);
        }
        cv_.notify_all();
    };
    std::vector<std::string> argv = {"ddo-host", "serve", "job", job->id};
    int code = 0;
    try {
        code = run_once(a, options_, argv, hooks);
    } catch (const std::exception & e) {  // run_once records its own failures; this is what escaped it
        code = int(ExitCode::runtime);
        finish(job, "failed", code, std::string("internal error: ") + e.what());
        return;
    }
    if (session_.state) {
        json snapshot = session_.state->to_json();
        std::lock_guard lk(mu_);
        session_snapshot_ = std::move(snapshot);
    }
    const json report = read_json_file(a.report);
    std::string status = report.is_object() ? report.value("status", std::string("failed")) : std::string("failed");
    std::string error;
    if (report.is_object() && report.contains("error") && report["error"].is_object())
        error = report["error"].value("message", std::string());
    {
        std::lock_guard lk(mu_);
        job->has_report = report.is_object();
        job->outputs = job_outputs(job->dir);
    }
    finish(job, status, code, error);
}

void JobServer::finish(const std::shared_ptr<Job> & job, const std::string & status, int exit_code, const std::string & error) {
    json record;
    {
        std::lock_guard lk(mu_);
        if (job->finished) return;  // ended already: a DELETE and the drain both took this queued job
        job->status = status;
        job->exit_code = exit_code;
        job->error = error;
        job->finished = true;
        job->record_pending = true;  // its folder kept from expire_old until the final record below is written
        job->finished_at = std::chrono::steady_clock::now();
        job->finished_wall = std::chrono::system_clock::now();
        const bool ran = job->started_at != std::chrono::steady_clock::time_point{};
        if (ran && status == "completed") run_seconds_.push_back(seconds(job->finished_at - job->started_at));
        // The job's own record beside its outputs (also for a job cancelled before it ran: it has no run report),
        // and its row in the summary.
        record = record_locked(*job);
        served_.push_back(summary_row(record));
        // What a finished job keeps in memory until its TTL: its events with the journal's records cut to their
        // names (the report, read from its file when asked, holds them all; the indices stay for event streams
        // being read), so that a server's memory does not grow with the jobs it keeps.
        for (auto & e : job->events)
            if (e.at("event") == "journal" && e.at("data").is_object())
                e["data"] = {{"event", e["data"].value("event", "")}, {"trimmed", true}};
        push_event(*job, "done", {{"status", status}, {"exit_code", exit_code}, {"outputs", job->outputs},
                                  {"error", record["error"]}});
    }
    cv_.notify_all();
    // Outside the lock (the file is synced). expire_old skips the job until then (record_pending), so this write never
    // lands in, and recreates, a folder the expiry removed.
    write_record(*job, record);
    {
        std::lock_guard lk(mu_);
        job->record_pending = false;
    }
    log("job " + job->id + " " + status + " (exit " + std::to_string(exit_code) + ")" + (error.empty() ? "" : ": " + error));
    write_summary();
}

void JobServer::expire_old() {
    std::vector<std::shared_ptr<Job>> gone;
    {
        std::lock_guard lk(mu_);
        const auto now = std::chrono::steady_clock::now();
        for (auto it = jobs_.begin(); it != jobs_.end();) {
            if (it->second->finished && !it->second->record_pending && now - it->second->finished_at >= config_.job_ttl) {
                // Removed before the job reads as expired: a client that got 410 finds no file of it left.
                std::error_code ec;
                fs::remove_all(it->second->dir, ec);
                gone.push_back(it->second);
                expired_.insert(it->first);
                it = jobs_.erase(it);
            } else ++it;
        }
    }
    for (const auto & j : gone) log("job " + j->id + " expired (--job-ttl); its directory removed");
}

void JobServer::write_summary() {
    // Held from the snapshot to the rename: two writers (finish() on two threads) cannot land an older snapshot last.
    std::lock_guard write_lk(summary_write_mu_);
    json s;
    {
        std::lock_guard lk(mu_);
        json counts = json::object();
        for (const auto & r : served_) counts[r["status"].get<std::string>()] = counts.value(r["status"].get<std::string>(), 0) + 1;
        std::vector<double> sorted = run_seconds_;
        std::sort(sorted.begin(), sorted.end());
        const auto pct = [&](double p) {
            return sorted.empty() ? json(nullptr) : json(sorted[std::min(sorted.size() - 1, std::size_t(p * double(sorted.size())))]);
        };
        s = {{"plugin", config_.plugin},
             {"model", config_.model},
             {"preset", config_.preset},
             {"started", iso_time(started_)},
             {"written", iso_time(std::chrono::system_clock::now())},
             {"processes", processes_},
             {"jobs", served_.size()},
             {"by_status", counts},
             {"run_s_p50", pct(0.5)},
             {"run_s_p95", pct(0.95)},
             {"session", session_snapshot_},
             {"served", served_}};
    }
    try {
        write_json_atomically(config_.state_dir / "serve_summary.json", s);
    } catch (const std::exception & e) {
        spdlog::warn("serve: {}", e.what());
    }
}

json JobServer::session_json() {
    std::lock_guard lk(mu_);
    return session_snapshot_;
}

void JobServer::drain(const std::string & reason, int code) {
    std::vector<std::shared_ptr<Job>> queued;
    std::shared_ptr<Job> running;
    {
        std::lock_guard lk(mu_);
        draining_ = true;
        queued.assign(queue_.begin(), queue_.end());
        queue_.clear();
        running = running_;
        if (running) {
            running->cancel_reason = reason;
            running->cancel_code = code;
            running->cancel.store(true);
        }
    }
    log("draining (" + reason + "): " + std::to_string(queued.size()) + " queued job(s) cancelled" +
        (running ? ", job " + running->id + " interrupted" : ""));
    for (const auto & j : queued) finish(j, "cancelled", code, "cancelled: " + reason + " before it ran");
    // The running job's report and its row in the summary written, and the worker idle.
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !running_ || stop_; });
    lk.unlock();
    write_summary();
}

}  // namespace ddo::host::serve
