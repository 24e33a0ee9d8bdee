// ddo-host serve's HTTP/1.1 server on Boost.Beast (http_server.hpp).
#include "serve/http_server.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <functional>
#include <fstream>
#include <set>
#include <thread>

#include "ddo/error.hpp"
#include "run_signals.hpp"
#include "serve/index_page.hpp"

namespace ddo::host::serve {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// What a handler answers; `headers` are extra header fields (Retry-After, WWW-Authenticate).
struct Reply {
    int status = 200;
    std::string body;
    std::string content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;
};

std::string error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 410: return "gone_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 500: return "server_error";
    case 503: return "server_unavailable";
    default: return status < 500 ? "invalid_request_error" : "server_error";
    }
}

Reply error_reply(int status, const std::string & message, const std::string & param = "") {
    json e = {{"error", {{"message", message}, {"type", error_type(status)}, {"param", param.empty() ? json(nullptr) : json(param)},
                         {"code", status}}}};
    return {status, e.dump() + "\n", "application/json", {}};
}

Reply json_reply(int status, const json & j) { return {status, j.dump() + "\n", "application/json", {}}; }

std::string base64(const std::string & in) {
    static constexpr char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
    }
    if (i + 1 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16;
        out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
    } else if (i + 2 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
        out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
    }
    return out;
}

std::string read_file(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

std::string content_type_of(const std::string & name) {
    if (name.ends_with(".png")) return "image/png";
    if (name.ends_with(".mp4")) return "video/mp4";
    if (name.ends_with(".wav")) return "audio/wav";
    if (name.ends_with(".json")) return "application/json";
    return "application/octet-stream";
}

bool same_token(const std::string & given, const std::string & token) {
    unsigned diff = given.size() != token.size();
    for (std::size_t i = 0; i < given.size(); ++i) diff |= unsigned(given[i] ^ token[i % std::max<std::size_t>(token.size(), 1)]);
    return diff == 0;
}

std::vector<std::string> split_path(std::string_view target) {
    target = target.substr(0, target.find('?'));
    std::vector<std::string> parts;
    std::size_t i = 0;
    while (i < target.size()) {
        const std::size_t j = target.find('/', i);
        const std::string_view part = target.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i);
        if (!part.empty()) parts.emplace_back(part);
        if (j == std::string_view::npos) break;
        i = j + 1;
    }
    return parts;
}

class Server {
public:
    Server(JobServer & jobs, const HttpOptions & options) : jobs_(jobs), options_(options) {}

    void session(tcp::socket sock);
    std::atomic<int> active{0};
    std::mutex sockets_mu;
    std::set<int> sockets;  // native handles of open connections (shut down when the server stops)

private:
    using Send = std::function<void(const Reply &, unsigned version, bool keep_alive)>;
    // One request read into `req`; false when the connection ends here (after the error reply one is owed).
    bool read_request(tcp::socket & sock, beast::flat_buffer & buffer, Request & req, const Send & send);
    // The reply to one request: the token check, then route(); or the event stream, which then owns the connection
    // (`streamed`).
    Reply handle(tcp::socket & sock, const Request & req, const std::vector<std::string> & parts, bool & streamed);
    Reply route(const Request & req, const std::vector<std::string> & p);
    Reply post_job(const Request & req, bool openai);
    Reply outputs(const std::shared_ptr<Job> & job, const std::string & name);
    void sse(tcp::socket & sock, const std::shared_ptr<Job> & job);
    std::shared_ptr<Job> lookup(const std::string & id, Reply & err);

    JobServer & jobs_;
    const HttpOptions & options_;
};

std::shared_ptr<Job> Server::lookup(const std::string & id, Reply & err) {
    if (!safe_name(id)) {
        err = error_reply(400, "job id '" + id.substr(0, 64) + "' is not a job id ([A-Za-z0-9._-])", "id");
        return nullptr;
    }
    auto [job, how] = jobs_.find(id);
    if (how == JobServer::Lookup::expired)
        err = error_reply(410, "job " + id + " finished longer ago than the server keeps jobs (--job-ttl); it is gone", "id");
    else if (how == JobServer::Lookup::unknown) err = error_reply(404, "no job " + id, "id");
    return job;
}

Reply Server::post_job(const Request & req, bool openai) {
    JobSpec spec = openai ? parse_openai_request(req.body(), jobs_.config().limits) : parse_job_request(req.body(), jobs_.config().limits);
    jobs_.check_settings(spec);
    auto [job, position] = jobs_.submit(std::move(spec));
    if (!openai) {
        Reply r = json_reply(202, {{"id", job->id}, {"status", "queued"}, {"position", position}, {"url", "/v1/jobs/" + job->id}});
        r.headers.emplace_back("Location", "/v1/jobs/" + job->id);
        return r;
    }
    jobs_.wait_finished(*job);
    const json d = jobs_.describe(*job);
    const std::string status = d.at("status");
    if (status != "completed") {
        const json exit_code = d.value("exit_code", json());
        const int code = exit_code.is_number_integer() ? exit_code.get<int>() : 4;
        const std::string msg = "job " + job->id + " " + status + ": " + d.value("error", json("")).dump();
        return error_reply(code == 2 ? 400 : status == "interrupted" || status == "cancelled" ? 503 : 500, msg);
    }
    json data = json::array();
    for (const auto & o : d.at("outputs")) {
        const std::string name = o.at("name");
        if (!name.ends_with(".png")) continue;
        data.push_back({{"b64_json", base64(read_file(job->dir / name))}, {"revised_prompt", nullptr}});
    }
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(job->created.time_since_epoch()).count();
    return json_reply(200, {{"created", created}, {"data", data}, {"ddo", {{"job", job->id}, {"url", "/v1/jobs/" + job->id}}}});
}

Reply Server::outputs(const std::shared_ptr<Job> & job, const std::string & name) {
    if (!safe_name(name)) return error_reply(400, "output name '" + name.substr(0, 64) + "' is not a file name ([A-Za-z0-9._-])", "name");
    const json d = jobs_.describe(*job);
    if (!d.contains("outputs")) return error_reply(409, "job " + job->id + " has not finished (status " + d.at("status").get<std::string>() + ")");
    const bool listed = name == "ddo_report.json" ||
                        std::any_of(d["outputs"].begin(), d["outputs"].end(), [&](const json & o) { return o.at("name") == name; });
    if (!listed) return error_reply(404, "job " + job->id + " has no output '" + name + "'", "name");
    return {200, read_file(job->dir / name), content_type_of(name), {}};
}

Reply Server::route(const Request & req, const std::vector<std::string> & p) {
    const auto m = req.method();
    const auto method_is = [&](http::verb v) { return m == v; };
    if (p.empty()) {
        if (!method_is(http::verb::get)) return error_reply(405, "GET / only");
        return {200, std::string(kIndexPage), "text/html; charset=utf-8", {}};
    }
    if (p[0] != "v1") return error_reply(404, "no such endpoint (see GET /v1/health, /v1/models, /v1/jobs)");
    if (p.size() == 2 && p[1] == "health") {
        if (!method_is(http::verb::get)) return error_reply(405, "GET /v1/health only");
        return json_reply(200, jobs_.health());
    }
    if (p.size() == 2 && p[1] == "models") {
        if (!method_is(http::verb::get)) return error_reply(405, "GET /v1/models only");
        const json & r = jobs_.startup_report();
        json ddo = {{"plugin", jobs_.config().plugin}, {"model", jobs_.config().model}, {"preset", jobs_.config().preset},
                    {"sets", jobs_.config().sets}};
        if (r.is_object()) {
            if (r.contains("identity")) {
                ddo["checkpoint"] = r["identity"].value("checkpoint", json(nullptr));
                ddo["plugin_identity"] = r["identity"].value("plugin", json(nullptr));
                ddo["preset_identity"] = r["identity"].value("preset", json(nullptr));
            }
            ddo["routes"] = r.value("routes", json(nullptr));
        }
        ddo["session"] = jobs_.session_json();
        return json_reply(200, {{"object", "list"},
                                {"data", json::array({{{"id", jobs_.config().plugin}, {"object", "model"}, {"owned_by", "ddo"}, {"ddo", ddo}}})}});
    }
    if (p.size() == 3 && p[1] == "images" && p[2] == "generations") {
        if (!method_is(http::verb::post)) return error_reply(405, "POST /v1/images/generations only");
        return post_job(req, true);
    }
    if (p[1] != "jobs") return error_reply(404, "no such endpoint (see GET /v1/health, /v1/models, /v1/jobs)");
    if (p.size() == 2) {
        if (!method_is(http::verb::post)) return error_reply(405, "POST /v1/jobs only");
        return post_job(req, false);
    }
    Reply err;
    auto job = lookup(p[2], err);
    if (!job) return err;
    if (p.size() == 3) {
        if (method_is(http::verb::get)) return json_reply(200, jobs_.describe(*job));
        if (method_is(http::verb::delete_)) {
            if (!jobs_.cancel(job))
                return error_reply(409, "job " + job->id + " has already finished (" + jobs_.describe(*job).at("status").get<std::string>() + ")");
            return json_reply(202, jobs_.describe(*job));
        }
        return error_reply(405, "GET or DELETE /v1/jobs/{id}");
    }
    if (p.size() == 5 && p[3] == "outputs") {
        if (!method_is(http::verb::get)) return error_reply(405, "GET /v1/jobs/{id}/outputs/{name} only");
        return outputs(job, p[4]);
    }
    return error_reply(404, "no such endpoint under /v1/jobs/{id} (events, outputs/{name})");
}

// text/event-stream: every event of the job so far, then each new one, until the job's "done" event.
void Server::sse(tcp::socket & sock, const std::shared_ptr<Job> & job) {
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(false);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(sock, sr, ec);
    std::size_t next = 0;
    bool done = false;
    while (!ec) {
        const auto evs = jobs_.events(*job, next, std::chrono::seconds(15), done);
        std::string out;
        for (const auto & e : evs) {
            out += "id: " + std::to_string(next++) + "\nevent: " + e.at("event").get<std::string>() + "\ndata: " + e.at("data").dump() + "\n\n";
        }
        if (evs.empty() && !done) out = ": keep-alive\n\n";
        if (!out.empty()) asio::write(sock, asio::buffer(out), ec);
        if (done) break;
    }
}

bool Server::read_request(tcp::socket & sock, beast::flat_buffer & buffer, Request & req, const Send & send) {
    beast::error_code ec;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(jobs_.config().limits.max_body_bytes);
    // The header first: a client that sent "Expect: 100-continue" (curl does for bodies over 1 KiB) is told to go
    // on at once rather than after its own timeout.
    http::read_header(sock, buffer, parser, ec);
    if (!ec && beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, 11};
        http::write(sock, go_on, ec);
    }
    if (!ec) http::read(sock, buffer, parser, ec);
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) return false;
    if (ec == http::error::body_limit) {
        send(error_reply(413, "the body is over " + std::to_string(jobs_.config().limits.max_body_bytes) + " bytes", "body"), 11, false);
        return false;
    }
    if (ec == http::error::header_limit) {
        send(error_reply(431, "the request header is over 16 KiB"), 11, false);
        return false;
    }
    if (ec) {
        if (ec.category() == http::make_error_code(http::error::bad_target).category())
            send(error_reply(400, std::string("malformed HTTP request: ") + ec.message()), 11, false);
        return false;
    }
    req = parser.release();
    return true;
}

Reply Server::handle(tcp::socket & sock, const Request & req, const std::vector<std::string> & parts, bool & streamed) {
    try {
        const auto auth = req[http::field::authorization];
        if (!options_.token.empty() &&
            !(auth.starts_with("Bearer ") && same_token(std::string(auth.substr(7)), options_.token))) {
            Reply reply = error_reply(401, "this server needs Authorization: Bearer <token> (--token-file)");
            reply.headers.emplace_back("WWW-Authenticate", "Bearer");
            return reply;
        }
        if (parts.size() == 4 && parts[0] == "v1" && parts[1] == "jobs" && parts[3] == "events") {
            Reply err;
            auto job = req.method() == http::verb::get ? lookup(parts[2], err) : nullptr;
            if (req.method() != http::verb::get) err = error_reply(405, "GET /v1/jobs/{id}/events only");
            if (!job) return err;
            sse(sock, job);
            streamed = true;
            return {};
        }
        return route(req, parts);
    } catch (const RequestError & e) {
        Reply reply = error_reply(e.status(), e.what(), e.field());
        if (e.status() == 429 || e.status() == 503) reply.headers.emplace_back("Retry-After", std::to_string(jobs_.retry_after_s()));
        return reply;
    } catch (const std::exception & e) {
        return error_reply(500, std::string("internal error: ") + e.what());
    }
}

void Server::session(tcp::socket sock) {
    const int fd = sock.native_handle();
    {
        std::lock_guard lk(sockets_mu);
        sockets.insert(fd);
    }
    // A client that sends nothing (or reads nothing) for a minute is dropped, not waited for.
    const timeval tv{60, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    beast::flat_buffer buffer;
    beast::error_code ec;
    const Send send = [&](const Reply & r, unsigned version, bool keep_alive) {
        Response res{static_cast<http::status>(r.status), version};
        res.set(http::field::server, "ddo-host serve");
        res.set(http::field::content_type, r.content_type);
        for (const auto & [k, v] : r.headers) res.set(k, v);
        res.body() = r.body;
        res.keep_alive(keep_alive);
        res.prepare_payload();
        http::write(sock, res, ec);
    };
    for (;;) {
        Request req;
        if (!read_request(sock, buffer, req, send)) break;
        const auto t0 = std::chrono::steady_clock::now();
        const std::string target(req.target());
        bool streamed = false;
        const Reply reply = handle(sock, req, split_path(target), streamed);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        jobs_.log(std::string(req.method_string()) + " " + target.substr(0, 200) + " " + (streamed ? "200 (events)" : std::to_string(reply.status)) +
                  " " + std::to_string(int(ms)) + " ms");
        if (streamed) break;
        const bool keep = req.keep_alive();
        send(reply, req.version(), keep);
        if (ec || !keep) break;
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
    {
        std::lock_guard lk(sockets_mu);
        sockets.erase(fd);
    }
    sock.close(ec);
}

}  // namespace

void serve_http(JobServer & jobs, const HttpOptions & options, const std::function<void(unsigned short)> & on_listening) {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc);
    beast::error_code ec;
    const auto addr = asio::ip::make_address(options.address, ec);
    if (ec) throw UsageError("--listen " + options.address + ": not an IP address (" + ec.message() + ")");
    const tcp::endpoint ep{addr, options.port};
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw UsageError("--listen " + options.address + ":" + std::to_string(options.port) + ": cannot listen (" + ec.message() +
                         "); choose another address or port");
    const unsigned short port = acceptor.local_endpoint().port();
    jobs.log("listening on http://" + options.address + ":" + std::to_string(port) + (options.token.empty() ? "" : " (Bearer token required)"));
    if (on_listening) on_listening(port);

    auto server = std::make_shared<Server>(jobs, options);
    std::function<void()> accept = [&] {
        acceptor.async_accept([&](beast::error_code aec, tcp::socket sock) {
            if (aec) return;  // the acceptor was closed
            if (server->active.load() >= int(options.max_connections)) {
                beast::error_code ignored;
                const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                                         "Connection: close\r\nContent-Length: 0\r\n\r\n";
                asio::write(sock, asio::buffer(busy), ignored);
            } else {
                server->active.fetch_add(1);
                std::thread([server](tcp::socket s) {
                    server->session(std::move(s));
                    server->active.fetch_sub(1);
                }, std::move(sock)).detach();
            }
            accept();
        });
    };
    accept();
    // The interrupt flag (SIGTERM, SIGINT, SIGHUP) polled every 100 ms: then stop accepting.
    asio::steady_timer timer(ioc);
    std::function<void()> poll = [&] {
        timer.expires_after(std::chrono::milliseconds(100));
        timer.async_wait([&](beast::error_code) {
            if (run_interrupted().load()) {
                acceptor.close(ec);
                return;
            }
            poll();
        });
    };
    poll();
    ioc.run();

    const int signo = interrupting_signal();
    jobs.drain(std::string("interrupted by ") + signal_name(signo) + " (the server is draining)", signo ? 128 + signo : 130);
    // Open connections (idle keep-alive, finished event streams) are shut down; their threads end.
    {
        std::lock_guard lk(server->sockets_mu);
        for (int fd : server->sockets) ::shutdown(fd, SHUT_RDWR);
    }
    for (int i = 0; i < 50 && server->active.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    jobs.log("stopped");
}

}  // namespace ddo::host::serve
