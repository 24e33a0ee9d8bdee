// `ddo-host serve --plugin P --model DIR [--preset …] [--set k=v]… [--listen 127.0.0.1:8188] [--queue 16]
// [--token-file F] [--state-dir DIR] [--job-ttl S] [--keep-weights all|none|C,...] [--embeddings-cache-mb N]`: one process serving generations over HTTP (host/serve/): the
// native job API, the OpenAI-compatible images API, progress as Server-Sent Events, a page at "/". Each job is a run
// as `ddo-host --plugin …` makes it (run_once), into its own directory under the state directory. SIGTERM, SIGINT
// or SIGHUP drains (the running job interrupted with its report, queued jobs cancelled) and exits 0. A server started on
// a state directory that an earlier one left (killed, without a drain) reads it back before it listens: Note [Serve
// state directory].
// Exit codes: 0 served and drained, 2 usage (bad options, the address cannot be bound, the state directory held by
// another server, the startup dry run refused), 3 plugin verification, 4 runtime. Note [Serving] in docs/architecture.md.
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "command_registry.hpp"
#include "ddo/error.hpp"
#include "run_command.hpp"
#include "serve/http_server.hpp"
#include "serve/job_server.hpp"

namespace ddo::host {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
    std::string plugin, model, preset, listen = "127.0.0.1:8188", token_file, state_dir = "ddo_serve";
    std::vector<std::string> sets;
    std::size_t queue = 16;
    long long job_ttl_s = 3600;
    std::size_t max_body = 1 << 20;
    std::string keep_weights = "all";
    double embeddings_cache_mb = 256;
};

// --keep-weights: "all", "none", or a comma-separated list of component names.
std::vector<std::string> keep_list(const std::string & flag) {
    if (flag == "none") return {};
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= flag.size()) {
        const auto comma = flag.find(',', at);
        std::string c = flag.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (c.empty() || c == "none" || (c == "all" && flag != "all"))
            throw UsageError("--keep-weights " + flag + ": give all, none, or component names separated by commas "
                             "(e.g. transformer,text_encoder; ddo-host plugins lists a plugin's components)");
        out.push_back(c);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

std::string read_token(const std::string & file) {
    std::ifstream in(file);
    if (!in) throw UsageError("--token-file " + file + " cannot be read; give a file holding the token");
    std::string t;
    std::getline(in, t);
    while (!t.empty() && (t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
    if (t.size() < 16) throw UsageError("--token-file " + file + ": the token's first line is shorter than 16 characters; use a longer one");
    return t;
}

int serve(const ServeArgs & s, const HostOptions & options) {
    serve::HttpOptions http;
    const auto colon = s.listen.rfind(':');
    if (colon == std::string::npos || colon == 0) throw UsageError("--listen " + s.listen + ": give ADDRESS:PORT, e.g. 127.0.0.1:8188");
    http.address = s.listen.substr(0, colon);
    if (http.address.size() > 2 && http.address.front() == '[' && http.address.back() == ']')
        http.address = http.address.substr(1, http.address.size() - 2);
    try {
        const int port = std::stoi(s.listen.substr(colon + 1));
        if (port < 0 || port > 65535) throw std::out_of_range("port");
        http.port = static_cast<unsigned short>(port);
    } catch (const std::exception &) {
        throw UsageError("--listen " + s.listen + ": the port must be a number in [0, 65535]");
    }
    if (!s.token_file.empty()) http.token = read_token(s.token_file);
    const bool loopback = http.address.starts_with("127.") || http.address == "::1" || http.address == "localhost";
    if (!loopback && http.token.empty())
        spdlog::warn("--listen {}: not a loopback address and no --token-file: anyone who reaches it can run jobs",
                     s.listen);
    if (s.queue < 1) throw UsageError("--queue must be at least 1");
    if (s.job_ttl_s < 1) throw UsageError("--job-ttl must be at least 1 second");

    serve::ServeConfig config;
    config.plugin = s.plugin;
    config.model = s.model.empty() ? "" : fs::absolute(s.model).string();
    config.preset = s.preset;
    if (config.preset.empty()) {
        const char * env = std::getenv("DDO_PRESET");
        config.preset = env && *env ? env : "auto";
    }
    config.sets = s.sets;
    config.state_dir = fs::absolute(s.state_dir);
    config.queue_capacity = s.queue;
    config.job_ttl = std::chrono::seconds(s.job_ttl_s);
    config.limits.max_body_bytes = s.max_body;
    config.keep_weights = keep_list(s.keep_weights);
    if (!(s.embeddings_cache_mb >= 0) || s.embeddings_cache_mb > 1 << 20)
        throw UsageError("--embeddings-cache-mb " + std::to_string(s.embeddings_cache_mb) + ": give MiB in [0, 1048576] (0: no cache)");
    config.embeddings_cache_bytes = static_cast<std::uint64_t>(s.embeddings_cache_mb * 1048576.0);

    serve::JobServer jobs(config, options);
    jobs.log("ddo-host serve: plugin " + config.plugin + ", model " + config.model + ", preset " + config.preset +
             ", queue " + std::to_string(config.queue_capacity) + ", state " + config.state_dir.string() +
             ", keep weights " + s.keep_weights + ", embeddings cache " + std::to_string(config.embeddings_cache_bytes) + " bytes");
    // Everything a job would refuse for the server's own settings is refused now, before listening.
    if (const int code = jobs.startup_check(); code != 0) {
        spdlog::error("the startup dry run failed (exit {}); its report: {}", code, (config.state_dir / "startup" / "ddo_report.json").string());
        return code;
    }
    serve::serve_http(jobs, http, [&](unsigned short port) {
        // One line on stdout, for scripts that start the server on port 0.
        std::cout << "ddo-host serve: listening on http://" << http.address << ":" << port << std::endl;
    });
    return 0;
}

void install(CLI::App & app, HostOptions & options) {
    auto s = std::make_shared<ServeArgs>();
    auto * cmd = app.add_subcommand("serve", "serve generations over HTTP: a job API, an OpenAI-compatible images API, "
                                             "progress events and a page at / (README, \"Serving\")");
    cmd->add_option("--plugin", s->plugin, "model plugin: name or unique alias (ddo-host plugins)")->required();
    cmd->add_option("--model", s->model, "checkpoint directory (diffusers layout)")->required();
    cmd->add_option("--preset", s->preset, "preset name or file; default: DDO_PRESET, else auto");
    cmd->add_option("--set", s->sets, "key=value override of a preset key for every job (repeatable; docs/presets.md)");
    cmd->add_option("--listen", s->listen, "ADDRESS:PORT to listen on (port 0: any free port, printed)")->capture_default_str();
    cmd->add_option("--queue", s->queue, "jobs that may wait behind the running one; more get 429 + Retry-After")->capture_default_str();
    cmd->add_option("--token-file", s->token_file, "a file whose first line is the token every request must send as "
                                                   "Authorization: Bearer TOKEN");
    cmd->add_option("--state-dir", s->state_dir, "where jobs/<id>/ (outputs, report, job.json), serve.log and serve_summary.json "
                                                 "go; one server each; read back at start (a restart serves what it holds)")
        ->capture_default_str();
    cmd->add_option("--job-ttl", s->job_ttl_s, "seconds a finished job and its outputs are kept (from its end, also across restarts); later: 410")->capture_default_str();
    cmd->add_option("--keep-weights", s->keep_weights, "components whose weights stay loaded between jobs: all, none, "
                                                       "or names separated by commas (Note [Serving])")
        ->capture_default_str();
    cmd->add_option("--embeddings-cache-mb", s->embeddings_cache_mb, "MiB of prompt embeddings kept between jobs (least "
                                                                     "recently used first out; 0: none)")
        ->capture_default_str();
    cmd->add_option("--max-body", s->max_body, "largest request body in bytes; larger: 413")->capture_default_str();
    cmd->callback([s, &options] { options.exit_code = serve(*s, options); });
}

const RegisterCommand reg{88, install};

}  // namespace
}  // namespace ddo::host
