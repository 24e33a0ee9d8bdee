// The HTTP side of `ddo-host serve`: Boost.Beast HTTP/1.1 (parsing, limits, keep-alive; nothing hand-parsed), one
// thread per connection (a bounded number), the routes of the native job API, the OpenAI-compatible images API,
// Server-Sent Events and the page at "/". Every error is a JSON object {"error": {"message", "type", "param",
// "code"}} as OpenAI's API answers. Note [Serving] in docs/architecture.md; the endpoints are in README.md.
#pragma once

#include <string>

#include "serve/job_server.hpp"

namespace ddo::host::serve {

struct HttpOptions {
    std::string address = "127.0.0.1";
    unsigned short port = 8188;
    std::string token;             // empty: no Authorization needed (--token-file)
    std::size_t max_connections = 64;
};

// Serves until the process's interrupt flag is set (SIGTERM, SIGINT, SIGHUP: run_signals.hpp), then stops accepting,
// drains the job server and returns. Throws UsageError when the address cannot be bound. `on_listening` is called
// once the socket listens (the port bound, e.g. for --listen 127.0.0.1:0).
void serve_http(JobServer & jobs, const HttpOptions & options, const std::function<void(unsigned short port)> & on_listening);

}  // namespace ddo::host::serve
