// ddo-host serve (host/serve/, Note [Serving] in docs/architecture.md) on the text fixtures' checkpoint (saved whole,
// with its Qwen3-VL text encoder), driven by curl as a client would: health and models; a job through POST /v1/jobs,
// its Server-Sent Events, its outputs, and a PNG equal to the CLI's for the same settings and seed; the same through
// the OpenAI-compatible POST /v1/images/generations (b64_json); bad requests (malformed JSON, wrong types, unknown
// fields, oversize body, width 100000, a file-naming --set key, path-traversal names) each with its status and error
// JSON naming the field; the Bearer token; the job TTL (410); DELETE of a running job (its report interrupted, the
// next job starts), a full queue (429 + Retry-After) and SIGTERM with jobs queued (each reported, exit 0); the weights
// and prompt embeddings kept between jobs (--keep-weights, --embeddings-cache-mb): what each job's report says it
// reused, read and skipped, and images still equal to the CLI's; a restart after SIGKILL on the same state directory
// (the killed job failed, the queued cancelled, the finished still served, the summary kept, the TTL over old folders).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kModel = fs::path(QI21_TEXT_FIXTURE_DIR) / "checkpoint";
const std::string kPrompt = "a lighthouse at dusk, watercolor", kNegative = "blurry, low quality";

std::string q(const std::string & s) { return "'" + s + "'"; }

std::string slurp(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// One ddo-host serve process on a free port, in its own directory; stopped with SIGTERM.
struct Server {
    pid_t pid = -1;
    int port = 0;
    fs::path dir;
    int exit_code = -1;

    // state: the --state-dir (default: DIR/state, removed with the server; one given outlives it).
    Server(const std::string & tag, const std::string & args, const fs::path & model = kModel,
           const std::string & plugin = "qwen_image", const fs::path & state = {}) {
        dir = fs::temp_directory_path() / ("ddo_serve_" + std::to_string(::getpid()) + "_" + tag);
        fs::remove_all(dir);
        fs::create_directories(dir);
        const fs::path state_dir = state.empty() ? dir / "state" : state;
        const std::string cmd = "exec '" + std::string(DDO_HOST_BIN) + "' serve --plugin " + plugin + " --preset low_ram_safe.toml --model " +
                                q(model.string()) + " --listen 127.0.0.1:0 --state-dir " + q(state_dir.string()) + " " +
                                args + " > " + q((dir / "stdout").string()) + " 2> " + q((dir / "stderr").string());
        pid = ::fork();
        if (pid == 0) {
            ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
            ::_exit(127);
        }
        for (int i = 0; i < 600 && port == 0; ++i) {
            const std::string out = slurp(dir / "stdout");
            if (const auto at = out.find("listening on http://127.0.0.1:"); at != std::string::npos)
                port = std::atoi(out.c_str() + at + 30);
            else std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
    int stop() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            int st = 0;
            ::waitpid(pid, &st, 0);
            exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            pid = -1;
        }
        return exit_code;
    }
    // SIGKILL: no drain, no report, no summary (the OOM killer's way). True when the process died of it.
    bool kill_now() {
        if (pid <= 0) return false;
        ::kill(pid, SIGKILL);
        int st = 0;
        ::waitpid(pid, &st, 0);
        pid = -1;
        return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    }
    ~Server() {
        stop();
        fs::remove_all(dir);
    }
    std::string url(const std::string & path) const { return "http://127.0.0.1:" + std::to_string(port) + path; }
};

struct Http {
    int status = 0;
    std::string headers, body;
    json j;  // the body as JSON (null when it is not)
};

// curl METHOD URL [-d @body] [extra]: status, headers and body.
Http curl(const Server & s, const std::string & method, const std::string & path, const std::string & body = "",
          const std::string & extra = "") {
    static int n = 0;
    const fs::path b = s.dir / ("req" + std::to_string(++n));
    std::string cmd = "curl -s --path-as-is -m 120 -X " + method + " -D " + q(b.string() + ".h") + " -o " + q(b.string() + ".b") +
                      " -w '%{http_code}' " + extra + " ";
    if (!body.empty()) {
        std::ofstream(b.string() + ".in", std::ios::binary) << body;
        cmd += "-H 'Content-Type: application/json' --data-binary @" + q(b.string() + ".in") + " ";
    }
    cmd += q(s.url(path));
    Http r;
    if (FILE * p = ::popen(cmd.c_str(), "r")) {
        char buf[16] = {};
        if (std::fgets(buf, sizeof buf, p)) r.status = std::atoi(buf);
        ::pclose(p);
    }
    r.headers = slurp(b.string() + ".h");
    r.body = slurp(b.string() + ".b");
    r.j = json::parse(r.body, nullptr, false);
    if (r.j.is_discarded()) r.j = nullptr;
    return r;
}

json wait_status(const Server & s, const std::string & id, const std::string & want, int seconds = 120) {
    json j;
    for (int i = 0; i < seconds * 10; ++i) {
        j = curl(s, "GET", "/v1/jobs/" + id).j;
        if (j.is_object() && j.value("status", "") == want) return j;
        if (j.is_object() && want == "finished" && j.contains("exit_code")) return j;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return j;
}

bool ready() {
    if (!fs::exists(kModel / "model_index.json")) {
        std::cout << "[  SKIPPED ] the text fixtures' checkpoint " << kModel << " is missing (build qwen_image_21_text_fixtures)\n";
        return false;
    }
    if (std::system("curl --version > /dev/null 2>&1") != 0) {
        std::cout << "[  SKIPPED ] curl is not installed (tools/ddo setup installs it)\n";
        return false;
    }
    return true;
}

#define REQUIRE_READY()                      \
    do {                                     \
        if (!ready()) GTEST_SKIP() << "skip"; \
    } while (0)

// The CLI's image for the same settings (the reference a served job must equal).
ddo::test::Png cli_image() {
    ddo::test::Png png;
    auto r = ddo::test::run_ddo_host("serve_cli", "--plugin qwen_image --preset low_ram_safe.toml --model " + q(kModel.string()) +
                                                      " -p " + q(kPrompt) + " -n " + q(kNegative) +
                                                      " --width 64 --height 64 --steps 3 --seed 7 --cfg-scale 4",
                                     [&](const fs::path & dir) { png = ddo::test::read_png(dir / "image.png"); });
    EXPECT_EQ(r.exit_code, 0) << r.log;
    return png;
}

// The CLI's PNG for `args` (after the plugin, preset and model).
ddo::test::Png cli_png(const std::string & tag, const std::string & args, const fs::path & model = kModel) {
    ddo::test::Png png;
    auto r = ddo::test::run_ddo_host(tag, "--plugin qwen_image --preset low_ram_safe.toml --model " + q(model.string()) + " " + args,
                                     [&](const fs::path & dir) { png = ddo::test::read_png(dir / "image.png"); });
    EXPECT_EQ(r.exit_code, 0) << r.log;
    return png;
}

// A job run to its end: its report, and its image (empty pixels when it wrote none).
struct Done {
    json job;  // GET /v1/jobs/{id} once finished
    json report;
    ddo::test::Png image;
};

Done run_job(const Server & s, const json & req) {
    Done d;
    auto post = curl(s, "POST", "/v1/jobs", req.dump());
    EXPECT_EQ(post.status, 202) << post.body;
    if (post.status != 202) return d;
    const std::string id = post.j.at("id");
    const json j = wait_status(s, id, "finished");
    EXPECT_EQ(j.value("status", ""), "completed") << j.dump().substr(0, 600);
    d.job = j;
    d.report = j.value("report", json::object());
    auto img = curl(s, "GET", "/v1/jobs/" + id + "/outputs/image.png");
    if (img.status == 200) {
        const fs::path f = s.dir / (id + ".png");
        std::ofstream(f, std::ios::binary) << img.body;
        d.image = ddo::test::read_png(f);
    }
    return d;
}

json session_of(const json & report, const std::string & component) {
    return report.value("counters", json::object()).value(component, json::object()).value("session", json(nullptr));
}

// The notes of the report's phase `name` (null when the run had no such phase).
json phase_notes(const json & report, const std::string & name) {
    for (const auto & p : report.value("phases", json::array()))
        if (p.value("name", "") == name) return p.value("notes", json::object());
    return nullptr;
}

TEST(Serve, HealthModelsJobEventsOutputsAndOpenAiEqualTheCli) {
    REQUIRE_READY();
    Server s("main", "");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    auto h = curl(s, "GET", "/v1/health");
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(h.j.value("status", ""), "ok");
    auto m = curl(s, "GET", "/v1/models");
    ASSERT_EQ(m.status, 200);
    EXPECT_EQ(m.j["data"][0]["id"], "qwen_image");
    EXPECT_TRUE(m.j["data"][0]["ddo"]["checkpoint"].is_object()) << m.body.substr(0, 400);
    auto page = curl(s, "GET", "/");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("/v1/jobs"), std::string::npos);

    const json req = {{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"width", 64}, {"height", 64},
                      {"steps", 3},        {"seed", 7},                    {"guidance_scale", 4}};
    auto post = curl(s, "POST", "/v1/jobs", req.dump());
    ASSERT_EQ(post.status, 202) << post.body;
    const std::string id = post.j.at("id");
    EXPECT_EQ(post.j.at("position"), 1);
    // The event stream ends with the job: progress of each phase, journal records, then done.
    auto ev = curl(s, "GET", "/v1/jobs/" + id + "/events", "", "-N");
    EXPECT_EQ(ev.status, 200);
    EXPECT_NE(ev.headers.find("text/event-stream"), std::string::npos);
    for (const char * e : {"event: queued", "event: started", "event: journal", "event: progress", "event: done"})
        EXPECT_NE(ev.body.find(e), std::string::npos) << e;
    EXPECT_NE(ev.body.find("\"phase\":\"denoise\",\"phase_seconds\""), std::string::npos);
    EXPECT_NE(ev.body.find("\"status\":\"completed\""), std::string::npos);
    auto job = curl(s, "GET", "/v1/jobs/" + id);
    ASSERT_EQ(job.status, 200);
    EXPECT_EQ(job.j.at("status"), "completed");
    EXPECT_EQ(job.j.at("exit_code"), 0);
    EXPECT_EQ(job.j.at("report").at("status"), "completed");
    EXPECT_EQ(job.j.at("outputs")[0].at("name"), "image.png");
    auto img = curl(s, "GET", "/v1/jobs/" + id + "/outputs/image.png");
    ASSERT_EQ(img.status, 200);
    EXPECT_NE(img.headers.find("image/png"), std::string::npos);
    const auto reference = cli_image();
    const fs::path served = s.dir / "served.png";
    std::ofstream(served, std::ios::binary) << img.body;
    const auto got = ddo::test::read_png(served);
    EXPECT_EQ(got.width, 64u);
    EXPECT_EQ(got.pixels, reference.pixels) << "the served PNG's pixels differ from the CLI's for the same settings";
    auto rep = curl(s, "GET", "/v1/jobs/" + id + "/outputs/ddo_report.json");
    EXPECT_EQ(rep.status, 200);
    EXPECT_EQ(rep.j.value("status", ""), "completed");

    // OpenAI-compatible: the same image as b64_json.
    const json oai = {{"model", "qwen_image"}, {"prompt", kPrompt}, {"size", "64x64"}, {"response_format", "b64_json"},
                      {"negative_prompt", kNegative}, {"seed", 7}, {"steps", 3}, {"guidance_scale", 4}};
    auto gen = curl(s, "POST", "/v1/images/generations", oai.dump());
    ASSERT_EQ(gen.status, 200) << gen.body.substr(0, 400);
    ASSERT_EQ(gen.j.at("data").size(), 1u);
    std::ofstream(s.dir / "b64.txt") << gen.j["data"][0].at("b64_json").get<std::string>();
    ASSERT_EQ(std::system(("base64 -d " + q((s.dir / "b64.txt").string()) + " > " + q((s.dir / "b64.png").string())).c_str()), 0);
    EXPECT_EQ(ddo::test::read_png(s.dir / "b64.png").pixels, reference.pixels);

    EXPECT_EQ(s.stop(), 0);
    const json summary = json::parse(slurp(s.dir / "state" / "serve_summary.json"));
    EXPECT_EQ(summary.at("jobs"), 2);
    EXPECT_EQ(summary.at("by_status").at("completed"), 2);
    EXPECT_NE(slurp(s.dir / "state" / "serve.log").find("POST /v1/jobs 202"), std::string::npos);
}

TEST(Serve, BadRequestsGetTheirStatusAndAnErrorNamingTheField) {
    REQUIRE_READY();
    Server s("bad", "--max-body 4096");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    struct Case {
        std::string method, path, body;
        int status;
        std::string param;  // "" : null
    };
    const std::string big(5000, 'a');
    const std::vector<Case> cases = {
        {"POST", "/v1/jobs", "{\"prompt\": ", 400, "body"},
        {"POST", "/v1/jobs", "[1, 2]", 400, "body"},
        {"POST", "/v1/jobs", std::string(40, '[') + std::string(40, ']'), 400, ""},
        {"POST", "/v1/jobs", R"({"prompt": 3})", 400, "prompt"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "steps": "four"})", 400, "steps"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "steps": 2.5})", 400, "steps"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "output": "/tmp/x.png"})", 400, "output"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "width": 100000})", 400, "width"},
        {"POST", "/v1/jobs", R"({"negative_prompt": "x"})", 400, "prompt"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "set": {"workload.images": "/etc/passwd"}})", 400, "set"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "set": {"lora.adapters": "a.safetensors"}})", 400, "set"},
        {"POST", "/v1/jobs", R"({"prompt": "x", "set": {"capacities.no_such_key": 1}})", 400, "set"},
        {"POST", "/v1/jobs", "{\"prompt\": \"" + big + "\"}", 413, "body"},
        {"POST", "/v1/images/generations", R"({"prompt": "x", "size": "100000x64"})", 400, "size"},
        {"POST", "/v1/images/generations", R"({"prompt": "x", "response_format": "url"})", 400, "response_format"},
        {"POST", "/v1/images/generations", R"({"prompt": "x", "quality": "hd"})", 400, "quality"},
        {"POST", "/v1/images/generations", R"({"prompt": "x", "ddo": {"workload.prompt": "y"}})", 400, "ddo"},
        {"GET", "/v1/jobs/..%2F..%2Fetc", "", 400, "id"},
        {"GET", "/v1/jobs/job-000000000000", "", 404, "id"},
        {"GET", "/v1/jobs/job-000000000000/outputs/..", "", 404, "id"},
        {"GET", "/v1/nothing", "", 404, ""},
        {"PUT", "/v1/jobs", "", 405, ""},
    };
    for (const auto & c : cases) {
        auto r = curl(s, c.method, c.path, c.body);
        EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body.substr(0, 80) << ": " << r.body;
        ASSERT_TRUE(r.j.is_object() && r.j.contains("error")) << c.path << ": " << r.body.substr(0, 200);
        EXPECT_FALSE(r.j["error"].at("message").get<std::string>().empty());
        EXPECT_EQ(r.j["error"].at("code"), c.status);
        if (c.param.empty()) EXPECT_TRUE(r.j["error"].at("param").is_null() || c.status == 400) << r.body;
        else EXPECT_EQ(r.j["error"].at("param"), c.param) << c.body.substr(0, 80) << ": " << r.body;
    }
    // A completed job's outputs: a name that is not a file of the job is refused, no file is opened by it.
    auto post = curl(s, "POST", "/v1/jobs", R"({"prompt": "x", "width": 64, "height": 64, "steps": 2})");
    ASSERT_EQ(post.status, 202) << post.body;
    const std::string id = post.j.at("id");
    ASSERT_EQ(wait_status(s, id, "finished").value("status", ""), "completed");
    for (const std::string name : {"..", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "job.json.", "nothing.png"}) {
        auto r = curl(s, "GET", "/v1/jobs/" + id + "/outputs/" + name);
        EXPECT_TRUE(r.status == 400 || r.status == 404) << name << ": " << r.status;
        EXPECT_TRUE(r.j.is_object() && r.j.contains("error")) << name;
    }
    EXPECT_EQ(curl(s, "GET", "/v1/health").status, 200) << "the server survived";
    EXPECT_EQ(s.stop(), 0);
}

TEST(Serve, BearerTokenAndJobTtl) {
    REQUIRE_READY();
    const fs::path token = fs::temp_directory_path() / ("ddo_serve_token_" + std::to_string(::getpid()));
    std::ofstream(token) << "s3cret-token-0123456789\n";
    Server s("auth", "--token-file " + q(token.string()) + " --job-ttl 1");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    auto none = curl(s, "GET", "/v1/health");
    EXPECT_EQ(none.status, 401);
    EXPECT_NE(none.headers.find("WWW-Authenticate: Bearer"), std::string::npos);
    EXPECT_EQ(none.j["error"]["type"], "authentication_error");
    EXPECT_EQ(curl(s, "GET", "/v1/health", "", "-H 'Authorization: Bearer wrong-token-0123456789'").status, 401);
    const std::string auth = "-H 'Authorization: Bearer s3cret-token-0123456789'";
    EXPECT_EQ(curl(s, "GET", "/v1/health", "", auth).status, 200);
    auto post = curl(s, "POST", "/v1/jobs", R"({"prompt": "x", "width": 64, "height": 64, "steps": 2})", auth);
    ASSERT_EQ(post.status, 202) << post.body;
    const std::string id = post.j.at("id");
    json j;
    for (int i = 0; i < 600; ++i) {
        auto r = curl(s, "GET", "/v1/jobs/" + id, "", auth);
        if (r.status == 410) {
            j = r.j;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(j.is_object()) << "no 410 after the job's TTL";
    EXPECT_EQ(j["error"]["code"], 410);
    EXPECT_FALSE(fs::exists(s.dir / "state" / "jobs" / id)) << "an expired job's directory is removed";
    EXPECT_EQ(s.stop(), 0);
    fs::remove(token);
}

TEST(Serve, CancelQueueFullAndSigtermDrain) {
    REQUIRE_READY();
    Server s("drain", "--queue 3");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    // Long enough to be caught running: 512x512, 200 steps (about 0.2 s a step on the CPU).
    const std::string slow = R"({"prompt": "x", "width": 512, "height": 512, "steps": 200})";
    auto a = curl(s, "POST", "/v1/jobs", slow);
    ASSERT_EQ(a.status, 202);
    const std::string ida = a.j.at("id");
    ASSERT_EQ(wait_status(s, ida, "running").value("status", ""), "running");
    auto b = curl(s, "POST", "/v1/jobs", slow), c = curl(s, "POST", "/v1/jobs", slow), d = curl(s, "POST", "/v1/jobs", slow);
    ASSERT_EQ(b.status, 202);
    ASSERT_EQ(c.status, 202);
    ASSERT_EQ(d.status, 202);
    EXPECT_EQ(b.j.at("position"), 1);
    EXPECT_EQ(c.j.at("position"), 2);
    EXPECT_EQ(d.j.at("position"), 3);
    auto full = curl(s, "POST", "/v1/jobs", slow);
    EXPECT_EQ(full.status, 429) << full.body;
    EXPECT_NE(full.headers.find("Retry-After: "), std::string::npos);
    EXPECT_EQ(full.j["error"]["type"], "rate_limit_error");

    auto del = curl(s, "DELETE", "/v1/jobs/" + ida);
    EXPECT_EQ(del.status, 202) << del.body;
    const json ja = wait_status(s, ida, "finished");
    EXPECT_EQ(ja.value("status", ""), "interrupted");
    EXPECT_EQ(ja.value("exit_code", 0), 130);
    EXPECT_EQ(ja["report"].value("status", ""), "interrupted");
    EXPECT_NE(ja.value("error", "").find("DELETE"), std::string::npos);
    EXPECT_EQ(curl(s, "DELETE", "/v1/jobs/" + ida).status, 409) << "a finished job cannot be cancelled";
    const std::string idb = b.j.at("id"), idc = c.j.at("id"), idd = d.j.at("id");
    EXPECT_EQ(wait_status(s, idb, "running").value("status", ""), "running") << "the next queued job starts";

    // SIGTERM with three jobs behind A: B running, C and D queued; all three reported.
    EXPECT_EQ(s.stop(), 0) << "SIGTERM drains and exits 0";
    const json summary = json::parse(slurp(s.dir / "state" / "serve_summary.json"));
    std::map<std::string, std::string> status;
    for (const auto & r : summary.at("served")) status[r.at("id")] = r.at("status");
    EXPECT_EQ(status[ida], "interrupted");
    EXPECT_EQ(status[idb], "interrupted");
    EXPECT_EQ(status[idc], "cancelled");
    EXPECT_EQ(status[idd], "cancelled");
    const json rb = json::parse(slurp(s.dir / "state" / "jobs" / idb / "ddo_report.json"));
    EXPECT_EQ(rb.at("status"), "interrupted");
    EXPECT_NE(rb.at("error").dump().find("SIGTERM"), std::string::npos);
    EXPECT_TRUE(fs::exists(s.dir / "state" / "jobs" / idc / "job.json")) << "a job cancelled before it ran has its record";
    EXPECT_TRUE(fs::exists(s.dir / "state" / "jobs" / idd / "job.json"));
}

// The lock files (PathLock's `.NAME.ddo-lock`) anywhere under `dir`.
std::vector<std::string> lock_files(const fs::path & dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->path().filename().string().ends_with(".ddo-lock")) out.push_back(fs::relative(it->path(), dir).string());
    return out;
}

// The summary's rows by job id: their status.
std::map<std::string, std::string> summary_status(const fs::path & state) {
    std::map<std::string, std::string> out;
    const json s = json::parse(slurp(state / "serve_summary.json"), nullptr, false);
    if (s.is_object())
        for (const auto & r : s.value("served", json::array())) out[r.value("id", "")] = r.value("status", "");
    return out;
}

// Issue 40, item 4: a server killed (SIGKILL) with a job finished, one running and two queued, then restarted on the
// same --state-dir, reads that directory: the finished job is still served (status and outputs), the running one reads
// `failed` with the reason its journal gives, the queued ones `cancelled` with a reason, serve_summary.json keeps the
// old rows and adds the new, no stale lock or temp file of a write is left, a folder that is no job's is left alone;
// a later restart with a short --job-ttl removes the old folders (410). All from the client's side, over HTTP.
TEST(Serve, RestartAfterSigkillReadsTheStateDirectory) {
    REQUIRE_READY();
    const fs::path state = fs::temp_directory_path() / ("ddo_serve_" + std::to_string(::getpid()) + "_restart_state");
    fs::remove_all(state);
    const std::string quick = R"({"prompt": "x", "width": 64, "height": 64, "steps": 2, "seed": 5})";
    // Long enough to be caught running, whatever the machine: 1024x1024, 1000 steps (minutes on a CPU).
    const std::string slow = R"({"prompt": "x", "width": 1024, "height": 1024, "steps": 1000})";
    std::string id0, id1, id2, id3, id4, png0;
    {
        Server a("restart_a", "--queue 3", kModel, "qwen_image", state);
        ASSERT_GT(a.port, 0) << slurp(a.dir / "stderr");
        auto p0 = curl(a, "POST", "/v1/jobs", quick);
        ASSERT_EQ(p0.status, 202) << p0.body;
        id0 = p0.j.at("id");
        ASSERT_EQ(wait_status(a, id0, "finished").value("status", ""), "completed");
        png0 = curl(a, "GET", "/v1/jobs/" + id0 + "/outputs/image.png").body;
        ASSERT_FALSE(png0.empty());
        auto p1 = curl(a, "POST", "/v1/jobs", slow);
        ASSERT_EQ(p1.status, 202) << p1.body;
        id1 = p1.j.at("id");
        ASSERT_EQ(wait_status(a, id1, "running").value("status", ""), "running");
        auto p2 = curl(a, "POST", "/v1/jobs", slow), p3 = curl(a, "POST", "/v1/jobs", slow);
        ASSERT_EQ(p2.status, 202) << p2.body;
        ASSERT_EQ(p3.status, 202) << p3.body;
        id2 = p2.j.at("id");
        id3 = p3.j.at("id");
        EXPECT_EQ(p3.j.at("position"), 2);
        // Killed in the middle of the denoising loop: its journal holds steps, no end.
        json j;
        for (int i = 0; i < 1200; ++i) {
            j = curl(a, "GET", "/v1/jobs/" + id1).j;
            if (j.is_object() && j["progress"].value("phase", "") == "denoise" && j["progress"].value("step", 0) >= 2) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ASSERT_EQ(j["progress"].value("phase", ""), "denoise") << j.dump().substr(0, 600);
        ASSERT_TRUE(a.kill_now());
        EXPECT_FALSE(lock_files(state / "jobs").empty()) << "the killed run left no lock file: the check below proves nothing";
        EXPECT_EQ(summary_status(state).size(), 1u) << "the killed server had written the summary for its finished job";
    }
    // What a crash can leave besides: temp files of atomic writes (the summary's, a record's), swept at the restart;
    // a folder named as a job whose record is another job's, left as it is (never expired).
    const fs::path tmp_summary = state / ".serve_summary.json.tmp.AbC123", tmp_record = state / "jobs" / id0 / ".job.json.tmp.XyZ789";
    const fs::path foreign = state / "jobs" / "job-0123456789ab";
    std::ofstream(tmp_summary) << "{";
    std::ofstream(tmp_record) << "{";
    fs::create_directories(foreign);
    std::ofstream(foreign / "job.json") << R"({"id": "job-ba9876543210", "status": "completed"})";
    {
        Server b("restart_b", "--queue 3", kModel, "qwen_image", state);
        ASSERT_GT(b.port, 0) << slurp(b.dir / "stderr");
        // The job that was running: failed, the reason from its journal.
        auto r1 = curl(b, "GET", "/v1/jobs/" + id1);
        EXPECT_EQ(r1.status, 200) << r1.body;
        EXPECT_EQ(r1.j.value("status", ""), "failed") << r1.body.substr(0, 600);
        const std::string why1 = r1.j.is_object() && r1.j["error"].is_string() ? r1.j["error"].get<std::string>() : "";
        EXPECT_NE(why1.find("interrupted: the server was killed"), std::string::npos) << why1;
        EXPECT_NE(why1.find("denoise"), std::string::npos) << "the reason names where its journal ends: " << why1;
        EXPECT_EQ(r1.j.is_object() ? r1.j.value("exit_code", json()) : json(), 137) << "the code of a run killed without its report";
        auto ev = curl(b, "GET", "/v1/jobs/" + id1 + "/events", "", "-N");
        EXPECT_EQ(ev.status, 200);
        EXPECT_NE(ev.body.find("event: done"), std::string::npos) << ev.body.substr(0, 400);
        // The two that were queued: cancelled, with a reason, their requests kept.
        for (const auto & id : {id2, id3}) {
            auto r = curl(b, "GET", "/v1/jobs/" + id);
            EXPECT_EQ(r.status, 200) << id << ": " << r.body;
            EXPECT_EQ(r.j.value("status", ""), "cancelled") << r.body.substr(0, 600);
            const std::string why = r.j.is_object() && r.j["error"].is_string() ? r.j["error"].get<std::string>() : "";
            EXPECT_NE(why.find("killed"), std::string::npos) << why;
            EXPECT_EQ(r.j.is_object() && r.j["request"].is_object() ? r.j["request"].value("steps", 0) : 0, 1000)
                << r.body.substr(0, 600);
        }
        // The job finished before the kill: still served, status and outputs.
        auto r0 = curl(b, "GET", "/v1/jobs/" + id0);
        EXPECT_EQ(r0.status, 200) << r0.body;
        EXPECT_EQ(r0.j.value("status", ""), "completed");
        EXPECT_TRUE(r0.j.is_object() && r0.j["report"].is_object() && r0.j["report"].value("status", "") == "completed")
            << r0.body.substr(0, 600);
        auto img = curl(b, "GET", "/v1/jobs/" + id0 + "/outputs/image.png");
        EXPECT_EQ(img.status, 200);
        EXPECT_EQ(img.body, png0) << "the restarted server serves another image.png than the one the job made";
        EXPECT_TRUE(lock_files(state / "jobs").empty()) << "stale locks left: " << json(lock_files(state / "jobs")).dump();
        EXPECT_FALSE(fs::exists(tmp_summary)) << "a crashed summary write's temp file outlived the restart";
        EXPECT_FALSE(fs::exists(tmp_record)) << "a crashed record write's temp file outlived the restart";
        EXPECT_EQ(curl(b, "GET", "/v1/jobs/job-0123456789ab").status, 404) << "a folder whose record is another job's was read as a job";
        // One server per state directory: a second one is refused (exit 2) naming the first.
        const std::string second = "timeout 30 '" + std::string(DDO_HOST_BIN) + "' serve --plugin qwen_image --model " + q(kModel.string()) +
                                   " --listen 127.0.0.1:0 --state-dir " + q(state.string()) + " > " + q((b.dir / "second.out").string()) + " 2>&1";
        const int st2 = std::system(second.c_str());
        EXPECT_EQ(WIFEXITED(st2) ? WEXITSTATUS(st2) : -1, 2) << "(124: still running after 30 s)";
        EXPECT_NE(slurp(b.dir / "second.out").find("in use by another ddo-host serve"), std::string::npos) << slurp(b.dir / "second.out");
        // A new job runs; the summary has the old jobs and the new one.
        auto p4 = curl(b, "POST", "/v1/jobs", quick);
        ASSERT_EQ(p4.status, 202) << p4.body;
        id4 = p4.j.at("id");
        EXPECT_EQ(wait_status(b, id4, "finished").value("status", ""), "completed");
        auto st = summary_status(state);
        EXPECT_EQ(st[id0], "completed");
        EXPECT_EQ(st[id1], "failed");
        EXPECT_EQ(st[id2], "cancelled");
        EXPECT_EQ(st[id3], "cancelled");
        EXPECT_EQ(st[id4], "completed");
        EXPECT_EQ(st.size(), 5u) << json(st).dump();
        EXPECT_EQ(b.stop(), 0);
    }
    EXPECT_TRUE(lock_files(state).empty()) << "locks left after a drain: " << json(lock_files(state)).dump();
    {
        // --job-ttl 1: every old job finished longer ago; their folders go, the jobs read 410, the summary keeps them.
        Server c("restart_c", "--job-ttl 1", kModel, "qwen_image", state);
        ASSERT_GT(c.port, 0) << slurp(c.dir / "stderr");
        for (const auto & id : {id0, id1, id2, id3, id4}) {
            int code = 0;
            for (int i = 0; i < 100 && code != 410; ++i) {
                code = curl(c, "GET", "/v1/jobs/" + id).status;
                if (code != 410) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            EXPECT_EQ(code, 410) << id;
            EXPECT_FALSE(fs::exists(state / "jobs" / id)) << id << "'s folder outlived its TTL";
        }
        EXPECT_EQ(summary_status(state).size(), 5u);
        EXPECT_TRUE(fs::exists(foreign / "job.json")) << "a folder that is no job's was expired";
        EXPECT_EQ(c.stop(), 0);
    }
    EXPECT_TRUE(lock_files(state).empty()) << json(lock_files(state)).dump();
    const json summary = json::parse(slurp(state / "serve_summary.json"), nullptr, false);
    EXPECT_EQ(summary.is_object() ? summary.value("jobs", 0) : 0, 5) << summary.dump().substr(0, 600);
    fs::remove_all(state);
}

// --keep-weights all (the default): the weights a job unloads stay loaded for the next, and a repeated prompt's
// embeddings come from the cache. The transformer runs group_block, so its blocks stream from host copies: a rebuilt
// engine reads them from the file again, a reused one reads nothing. (The fixture's two blocks are both resident on
// the dynamic route whatever the resident budget: the planner streams nothing with fewer groups than slots.)
TEST(Serve, WeightsAndPromptEmbeddingsAreKeptBetweenJobs) {
    REQUIRE_READY();
    const std::string cap = "components.transformer.route=group_block";
    Server s("keep", "--set " + cap);
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    const json base = {{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"width", 64}, {"height", 64},
                       {"steps", 3},        {"guidance_scale", 4}};
    json req = base;
    req["seed"] = 7;
    const Done first = run_job(s, req);
    const json t1 = session_of(first.report, "transformer");
    ASSERT_TRUE(t1.is_object()) << first.report.value("counters", json::object()).dump().substr(0, 800);
    EXPECT_EQ(t1.value("weights", ""), "built");
    EXPECT_GT(t1.value("file_bytes_read", 0), 0) << t1.dump();
    EXPECT_TRUE(t1.value("kept_for_next_run", false)) << t1.dump();
    EXPECT_EQ(session_of(first.report, "text_encoder").value("weights", ""), "built");
    EXPECT_EQ(phase_notes(first.report, "encode").value("embeddings_cache", ""), "miss");

    // The same prompt, another seed: the transformer resumed, nothing read from its files, the text encoder not
    // opened; the image is the CLI's for that seed.
    req["seed"] = 8;
    const Done second = run_job(s, req);
    const json t2 = session_of(second.report, "transformer");
    EXPECT_EQ(t2.value("weights", ""), "reused") << t2.dump();
    EXPECT_EQ(t2.value("file_bytes_read", -1), 0) << t2.dump();
    EXPECT_EQ(t2.value("runs_of_entry", 0), 2);
    const json k2 = second.report["counters"]["transformer"]["engine"]["counters"];
    EXPECT_EQ(k2["host_copy_fill_bytes"], 0);
    EXPECT_EQ(k2["bytes_moved"]["file"], 0);
    EXPECT_EQ(k2["bytes_moved"]["resident"], 0);
    // The fixture's two blocks fit the two slots, so the kept slots still hold them: acquired, nothing copied.
    EXPECT_GT(k2["hits"].get<double>(), 0) << k2.dump();
    EXPECT_EQ(k2["bytes_moved"]["pageable"], 0) << k2.dump();
    EXPECT_GT(t2["held_at_open"].value("host_copy_bytes", 0), 0) << t2.dump();
    EXPECT_EQ(phase_notes(second.report, "encode").value("embeddings_cache", ""), "hit");
    EXPECT_FALSE(second.report["counters"].contains("text_encoder")) << "a cache hit opens no text encoder";
    const std::string flags = " -n " + q(kNegative) + " --width 64 --height 64 --steps 3 --cfg-scale 4 --set " + cap;
    EXPECT_EQ(second.image.pixels, cli_png("keep_cli8", "-p " + q(kPrompt) + flags + " --seed 8").pixels)
        << "a job on kept weights and cached embeddings differs from the CLI's image";

    // Another prompt: encoded on the kept text encoder (a cache miss), the image is the CLI's.
    req["prompt"] = "a red fox in fresh snow";
    req["seed"] = 7;
    const Done third = run_job(s, req);
    EXPECT_EQ(session_of(third.report, "text_encoder").value("weights", ""), "reused");
    EXPECT_EQ(session_of(third.report, "transformer").value("weights", ""), "reused");
    EXPECT_EQ(session_of(third.report, "transformer").value("runs_of_entry", 0), 3);
    EXPECT_EQ(phase_notes(third.report, "encode").value("embeddings_cache", ""), "miss");
    EXPECT_EQ(third.image.pixels, cli_png("keep_cli_fox", "-p 'a red fox in fresh snow'" + flags + " --seed 7").pixels);

    // Another route: the kept transformer was loaded for other settings, so it is freed and built again (the
    // prompt is the third job's: a second embeddings hit).
    req["set"] = {{"components.transformer.route", "disk"}};
    const Done fourth = run_job(s, req);
    const json t4 = session_of(fourth.report, "transformer");
    EXPECT_EQ(t4.value("weights", ""), "built");
    EXPECT_NE(t4.value("reason", "").find("other settings"), std::string::npos) << t4.dump();

    const json session = curl(s, "GET", "/v1/models").j["data"][0]["ddo"]["session"];
    EXPECT_EQ(session["weights"]["transformer"].value("reused", 0), 2) << session.dump();
    EXPECT_EQ(session["weights"]["transformer"].value("built", 0), 2) << session.dump();
    EXPECT_EQ(session["embeddings"].value("hits", 0), 2) << session.dump();
    EXPECT_EQ(session["embeddings"].value("misses", 0), 2) << session.dump();
    EXPECT_EQ(session["embeddings"].value("entries", 0), 2) << session.dump();
    EXPECT_EQ(s.stop(), 0);
    const json summary = json::parse(slurp(s.dir / "state" / "serve_summary.json"));
    EXPECT_EQ(summary["session"]["weights"]["transformer"].value("reused", 0), 2) << summary["session"].dump();
}

// Step caching under serve (issue 41): a job's cache.* comes from its request, its per-pass records reach the event
// stream with each step (journal records), and its state dies with the job: the next job on the kept weights, without
// a cache, is the CLI's image without one.
TEST(Serve, AStepCacheIsPerJobAndItsPassesAreStreamed) {
    REQUIRE_READY();
    Server s("cache", "");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    json req = {{"prompt", kPrompt}, {"negative_prompt", kNegative}, {"width", 64}, {"height", 64},
                {"steps", 4},        {"seed", 7},                    {"guidance_scale", 4}};
    req["set"] = {{"cache.kind", "first_block"}, {"cache.threshold", 0.9}, {"cache.allow_few_steps", true}};
    auto post = curl(s, "POST", "/v1/jobs", req.dump());
    ASSERT_EQ(post.status, 202) << post.body;
    const std::string id = post.j.at("id");
    auto ev = curl(s, "GET", "/v1/jobs/" + id + "/events", "", "-N");
    EXPECT_NE(ev.body.find("\"cache\":[{\"blocks_computed\""), std::string::npos) << ev.body.substr(0, 2000);
    const json j = wait_status(s, id, "finished");
    ASSERT_EQ(j.value("status", ""), "completed") << j.dump().substr(0, 600);
    const json sc = j.at("report").at("step_cache");
    EXPECT_EQ(sc.value("kind", ""), "first_block") << sc.dump();
    EXPECT_EQ(sc.value("passes", 0), 8) << sc.dump();
    req.erase("set");
    const Done next = run_job(s, req);
    EXPECT_TRUE(next.report.at("step_cache").is_null()) << next.report.at("step_cache").dump();
    EXPECT_EQ(next.image.pixels, cli_png("cache_next_cli", "-p " + q(kPrompt) + " -n " + q(kNegative) +
                                                              " --width 64 --height 64 --steps 4 --cfg-scale 4 --seed 7")
                                     .pixels)
        << "the job after a cached one differs from the CLI's image without a cache";
    EXPECT_EQ(s.stop(), 0);
}

// --keep-weights none --embeddings-cache-mb 0: every job loads what it needs and encodes its prompt, as a CLI run.
TEST(Serve, KeepWeightsNoneLoadsEveryJob) {
    REQUIRE_READY();
    Server s("nokeep", "--keep-weights none --embeddings-cache-mb 0");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    const json req = {{"prompt", kPrompt}, {"width", 64}, {"height", 64}, {"steps", 2}, {"seed", 3}};
    run_job(s, req);
    const Done second = run_job(s, req);
    const json t = session_of(second.report, "transformer");
    EXPECT_EQ(t.value("weights", ""), "built") << t.dump();
    EXPECT_NE(t.value("reason", "").find("--keep-weights"), std::string::npos) << t.dump();
    EXPECT_FALSE(t.value("kept_for_next_run", true));
    EXPECT_TRUE(second.report["counters"]["transformer"].value("unloaded", false));
    EXPECT_EQ(session_of(second.report, "text_encoder").value("weights", ""), "built");
    EXPECT_FALSE(phase_notes(second.report, "encode").contains("embeddings_cache"));
    EXPECT_EQ(s.stop(), 0);

    // A malformed list is refused before the server starts (exit 2, naming the flag).
    const std::string bad = "'" + std::string(DDO_HOST_BIN) + "' serve --plugin qwen_image --model " + q(kModel.string()) +
                            " --keep-weights all,transformer --listen 127.0.0.1:0 --state-dir " + q((s.dir / "bad").string()) +
                            " > " + q((s.dir / "bad.out").string()) + " 2>&1";
    const int st = std::system(bad.c_str());
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2);
    EXPECT_NE(slurp(s.dir / "bad.out").find("--keep-weights"), std::string::npos) << slurp(s.dir / "bad.out");
}

// POST /v1/jobs "images": condition images in the request (base64, a data URL, or {"b64_json", "frame"}), written by
// the server into the job's inputs/ and read as --image files: a Qwen-Image 2.1 edit on the reference fixtures'
// checkpoint (a vision tower and processor sized for references) equal to the CLI's with --image.
TEST(Serve, ConditionImagesFromTheRequest) {
    REQUIRE_READY();
    const fs::path model = fs::path(QI21_REF_FIXTURE_DIR) / "checkpoint", png = fs::path(QI21_REF_FIXTURE_DIR) / "refs" / "wide_rgb.png";
    if (!fs::exists(png)) GTEST_SKIP() << "the reference fixtures are missing (build qwen_image_21_reference_fixtures)";
    Server s("images", "", model);
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    const std::string b64 = "base64 -w0 " + q(png.string()) + " > " + q((s.dir / "ref.b64").string());
    ASSERT_EQ(std::system(b64.c_str()), 0);
    const std::string data = "data:image/png;base64," + slurp(s.dir / "ref.b64");
    // The settings of the fixture's one_rgb run (output size from the reference at 96²).
    const json req = {{"prompt", "make the cat blue"}, {"steps", 2}, {"seed", 0}, {"images", {data}},
                      {"set", {{"plugin.qwen_image_21.output_resolution", 96}}}};
    const Done edit = run_job(s, req);
    EXPECT_TRUE(edit.report["workload"]["references"].is_array()) << edit.report["workload"].dump().substr(0, 600);
    EXPECT_NE(edit.report["identity"]["checkpoint"]["inputs"].dump().find("image_0"), std::string::npos);
    const auto cli = cli_png("images_cli", "-p 'make the cat blue' --steps 2 --seed 0 --image " + q(png.string()) +
                                               " --set plugin.qwen_image_21.output_resolution=96", model);
    EXPECT_GT(cli.width, 0u);
    EXPECT_EQ(edit.image.width, cli.width);
    EXPECT_EQ(edit.image.pixels, cli.pixels) << "a served edit differs from the CLI's with --image";
    // The job's record keeps the image's size, not its bytes; its inputs are not outputs.
    EXPECT_EQ(edit.job["request"]["images"][0].value("bytes", 0u), fs::file_size(png)) << edit.job["request"].dump();
    ASSERT_EQ(edit.job["outputs"].size(), 1u) << edit.job["outputs"].dump();
    EXPECT_EQ(edit.job["outputs"][0]["name"], "image.png");

    // Refusals name the entry: not base64, a data URL without base64, too many, an unknown field.
    const auto bad = [&](const json & images, const std::string & param) {
        auto r = curl(s, "POST", "/v1/jobs", json{{"prompt", "x"}, {"images", images}}.dump());
        EXPECT_EQ(r.status, 400) << r.body;
        EXPECT_EQ(r.j["error"]["param"], param) << r.body;
    };
    bad({"not base64!"}, "images[0]");
    bad({data, "data:image/png,abc"}, "images[1]");
    bad(json::array({json{{"b64_json", "iVBORw0KGgo="}, {"path", "/etc/passwd"}}}), "images[0]");
    bad(json::array({json{{"b64_json", "iVBORw0KGgo="}, {"frame", -1}}}), "images[0].frame");
    json many = json::array();
    for (int i = 0; i < 17; ++i) many.push_back("iVBORw0KGgo=");
    bad(many, "images");
    // A valid base64 that is no image: accepted, then the run refuses it (exit 2) naming the server's file.
    auto post = curl(s, "POST", "/v1/jobs", json{{"prompt", "x"}, {"width", 64}, {"height", 64}, {"images", {"aGVsbG8="}}}.dump());
    ASSERT_EQ(post.status, 202) << post.body;
    const json j = wait_status(s, post.j.at("id"), "finished");
    EXPECT_EQ(j.value("exit_code", 0), 2) << j.dump().substr(0, 600);
    EXPECT_NE(j.value("error", "").find("image_0"), std::string::npos) << j.value("error", "");
    EXPECT_EQ(s.stop(), 0);
}

// The LTX-2 plugins' text stage (ltx2_common run_text_stage) under a server: ltx2_image on its text fixtures' checkpoint
// (Gemma-3 and the connectors), the same prompt twice with other seeds: the second job's embeddings come from the
// cache (Gemma-3 not opened), its DiT is resumed, and its PNG equals the CLI's for that seed.
TEST(Serve, Ltx2ImageKeepsGemmaEmbeddingsAndTheDit) {
    REQUIRE_READY();
    const fs::path dir = LTX2_IMAGE_FIXTURE_DIR, model = dir / "checkpoint_text";
    if (!fs::exists(model / "model_index.json")) GTEST_SKIP() << "the ltx2_image fixtures are missing (build ltx2_image_fixtures)";
    const json ref = json::parse(std::ifstream(dir / "reference.json"));
    const auto & k = ref.at("cases").at("text");
    const auto & st = k.at("settings");
    Server s("ltx2", "", model, "ltx2_image");
    ASSERT_GT(s.port, 0) << slurp(s.dir / "stderr");
    const json sets = {{"plugin.ltx2_image.guidance_rescale", st.at("guidance_rescale")},
                       {"plugin.ltx2_image.pag_scale", st.at("pag_scale")},
                       {"plugin.ltx2_image.max_sequence_length", st.at("max_sequence_length")}};
    json req = {{"prompt", st.at("prompt")}, {"width", k.at("width")}, {"height", k.at("height")}, {"steps", st.at("steps")},
                {"guidance_scale", st.at("guidance_scale")}, {"seed", 1}, {"set", sets}};
    const Done first = run_job(s, req);
    EXPECT_EQ(phase_notes(first.report, "encode").value("embeddings_cache", ""), "miss") << first.report["phases"].dump().substr(0, 600);
    EXPECT_EQ(session_of(first.report, "text_encoder").value("weights", ""), "built");
    req["seed"] = 2;
    const Done second = run_job(s, req);
    EXPECT_EQ(phase_notes(second.report, "encode").value("embeddings_cache", ""), "hit");
    EXPECT_FALSE(second.report["counters"].contains("text_encoder")) << "a cache hit opens no Gemma-3";
    EXPECT_EQ(session_of(second.report, "transformer").value("weights", ""), "reused");
    EXPECT_EQ(session_of(second.report, "transformer").value("file_bytes_read", -1), 0);
    std::string flags = "-p '" + st.at("prompt").get<std::string>() + "' --width " + std::to_string(k.at("width").get<int>()) +
                        " --height " + std::to_string(k.at("height").get<int>()) + " --steps " +
                        std::to_string(st.at("steps").get<int>()) + " --cfg-scale " + st.at("guidance_scale").dump() + " --seed 2";
    for (const auto & [key, v] : sets.items()) flags += " --set " + key + "=" + v.dump();
    ddo::test::Png cli;
    auto r = ddo::test::run_ddo_host("serve_ltx2_cli", "--plugin ltx2_image --preset low_ram_safe.toml --model " +
                                                           q(model.string()) + " " + flags,
                                     [&](const fs::path & d) { cli = ddo::test::read_png(d / "image.png"); });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    EXPECT_GT(second.image.width, 0u);
    EXPECT_EQ(second.image.pixels, cli.pixels) << "a served LTX-2 image on cached embeddings differs from the CLI's";
    EXPECT_EQ(s.stop(), 0);
}

}  // namespace
