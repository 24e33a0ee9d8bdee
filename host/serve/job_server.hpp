// The job side of `ddo-host serve`: a bounded FIFO of generations, one worker that runs them one at a time through
// the same path as `ddo-host run` (run_once, host/run_command.hpp) into a per-job directory the server owns, the
// events of each job (its progress and run-journal records, for Server-Sent Events), cancellation (DELETE: the run
// stops at its next step as on SIGINT), the TTL after which a finished job is gone (410), the drain on SIGTERM, and
// the summary of the jobs served. Each job's record (job_record.hpp) is on disk from the moment it is accepted, and a
// server reads its state directory back when it starts (job_recovery.hpp). Notes [Serving] and [Serve state
// directory] in docs/architecture.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddo/plugin/plugin_registry.hpp"
#include "ddo/run_session.hpp"
#include "ddo/util/path_lock.hpp"
#include "run_command.hpp"
#include "serve/job_request.hpp"

namespace ddo::host::serve {

// What a server runs every job with: the plugin, checkpoint, preset and --set keys given to `ddo-host serve`.
struct ServeConfig {
    std::string plugin, model, preset;
    std::vector<std::string> sets;
    std::filesystem::path state_dir;  // jobs/<id>/ (each job's outputs, report and journal), serve.log, serve_summary.json
    std::size_t queue_capacity = 16;  // queued jobs, the running one not counted
    std::chrono::seconds job_ttl{3600};
    RequestLimits limits;
    // What the jobs leave loaded for the next (ddo/run_session.hpp): --keep-weights, --embeddings-cache-mb.
    std::vector<std::string> keep_weights{"all"};
    std::uint64_t embeddings_cache_bytes = 256ull << 20;
};

struct Job {
    std::string id;
    JobSpec spec;
    std::filesystem::path dir;
    // Guarded by JobServer's mutex.
    std::string status = "queued";  // queued | running | completed | failed | interrupted | cancelled
    int exit_code = -1;
    std::string error;
    nlohmann::json progress = nlohmann::json::object();  // the last progress event: phase, step, total
    std::vector<nlohmann::json> events;  // {"event": name, "data": {...}}, in order (journal records dropped at the end)
    bool has_report = false;                             // the run wrote dir/ddo_report.json (read when asked)
    std::vector<std::string> outputs;                    // file names in dir
    nlohmann::json inputs = nlohmann::json::array();     // the condition images written into dir/inputs/ at POST
    std::chrono::system_clock::time_point created = std::chrono::system_clock::now(), started_wall, finished_wall;
    std::chrono::steady_clock::time_point queued_at = std::chrono::steady_clock::now(), started_at, finished_at;
    bool finished = false;
    bool record_pending = false;  // finished, its final job.json not written yet: expire_old leaves its folder
    // The final record of a job an earlier server on this state directory ran (read back at start); null for this
    // server's own jobs.
    nlohmann::json restored = nullptr;
    std::atomic<bool> cancel{false};  // the flag the run polls (RunContext::interrupted)
    std::string cancel_reason = "interrupted by DELETE";  // guarded by JobServer's mutex
    int cancel_code = 130;
};

class JobServer {
public:
    // options: the host's (plugin and preset directories); borrowed for the server's life.
    JobServer(ServeConfig config, const HostOptions & options);
    ~JobServer();

    const ServeConfig & config() const { return config_; }

    // The startup check: one dry run (plugin verified and loaded, settings resolved, checkpoint read) into
    // <state>/startup. Returns its exit code; its report is what GET /v1/models shows.
    int startup_check();
    const nlohmann::json & startup_report() const { return startup_report_; }

    // Settings the run would resolve (unknown keys, wrong types): throws RequestError 400 naming the key.
    void check_settings(const JobSpec & spec) const;

    // Queues a job, its record (with the request) and its condition images written into its folder first; throws
    // RequestError 429 when the queue is full, 503 when draining, 500 when the state directory cannot take the record.
    // Returns the job and its position (1 = next to run).
    std::pair<std::shared_ptr<Job>, std::size_t> submit(JobSpec spec);

    enum class Lookup { found, unknown, expired };
    std::pair<std::shared_ptr<Job>, Lookup> find(const std::string & id);

    // DELETE: a queued job is cancelled at once; a running one is asked to stop at its next step. False when the job
    // had already finished.
    bool cancel(const std::shared_ptr<Job> & job);

    // The job as GET /v1/jobs/{id} shows it.
    nlohmann::json describe(const Job & job);

    // Events from index `from` on, waiting up to `wait` for new ones; done: the job has finished and every event was
    // returned.
    std::vector<nlohmann::json> events(const Job & job, std::size_t from, std::chrono::milliseconds wait, bool & done);
    // Waits until the job finishes (POST /v1/images/generations answers with its images).
    void wait_finished(const Job & job);

    nlohmann::json health();
    // Seconds a client should wait before retrying a full queue (Retry-After).
    int retry_after_s();

    // What the session keeps and reused so far (GET /v1/models, the summary); null before the first job.
    nlohmann::json session_json();

    // SIGTERM: refuse new jobs, cancel the queued ones, interrupt the running one, wait for it, write the summary.
    void drain(const std::string & reason, int code);

    // One line per request or job event to <state>/serve.log (and the console at info level).
    void log(const std::string & line);

private:
    // At start: the state directory claimed (one server per state directory), its stale locks removed, its jobs and
    // summary read back (Note [Serve state directory]).
    void claim_state_dir();
    void recover();
    std::shared_ptr<Job> restore(const std::filesystem::path & dir, const nlohmann::json & record);
    // The job's record as it stands (job_record.hpp); the caller holds mu_.
    nlohmann::json record_locked(const Job & job) const;
    void write_record(const Job & job, const nlohmann::json & record);
    void work();
    void run_job(const std::shared_ptr<Job> & job);
    void finish(const std::shared_ptr<Job> & job, const std::string & status, int exit_code, const std::string & error);
    void push_event(Job & job, const std::string & name, nlohmann::json data);
    void expire_old();
    void write_summary();
    RunArgs run_args(const Job & job) const;

    ServeConfig config_;
    const HostOptions & options_;
    PathLock state_lock_;  // this server's claim on config_.state_dir
    // One registry for every job: each plugin verified, sealed and loaded once (a registry per job would load a new
    // sealed copy of the plugin per job, and loaded plugins are never unloaded: RSS grew about 1 MB a job).
    std::optional<PluginRegistry> registry_;
    // The weights and prompt embeddings the jobs keep for the next (Note [Serving], "Weight reuse"); the worker's.
    SessionSlot session_;
    nlohmann::json session_snapshot_;  // session_.state->to_json() after the last job (guarded by mu_)
    nlohmann::json startup_report_;
    std::mutex mu_;
    std::condition_variable cv_;         // queue changes, job events, finished jobs
    std::deque<std::shared_ptr<Job>> queue_;
    std::shared_ptr<Job> running_;
    std::map<std::string, std::shared_ptr<Job>> jobs_;
    std::set<std::string> admitting_;  // ids of jobs being recorded by submit(), not queued yet
    std::set<std::string> expired_;
    std::vector<nlohmann::json> served_;  // the summary's rows, one per finished job (earlier servers' first)
    nlohmann::json processes_ = nlohmann::json::array();  // the servers that wrote the summary: {pid, started}
    std::vector<double> run_seconds_;
    bool draining_ = false, stop_ = false;
    std::mutex summary_write_mu_;  // write_summary(), snapshot to rename; taken before mu_
    std::mutex log_mu_;
    std::ofstream log_;
    std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
    std::thread worker_;
};

}  // namespace ddo::host::serve
