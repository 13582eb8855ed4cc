// A small synchronous HTTP/1.1 client (Beast), for the tools that talk to a
// server: span export, `infera top`, `infera bench-serve`. One connection
// per call, with a timeout over the whole exchange.
//
// Thread-safety: the functions are thread-safe (no shared state).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/status.h"

namespace infera::server {

struct HttpUrl {
  std::string host, port, path;  // path: "/..." ("" when the URL has none)
};

// "http://HOST[:PORT][/PATH]" (PORT defaults to 80); InvalidArgument otherwise.
StatusOr<HttpUrl> ParseHttpUrl(const std::string& url);

struct HttpResult {
  int status = 0;
  std::string body;
};

// Pieces of a chunked response body as they arrive (a streamed response).
using BodyChunkFn = std::function<void(std::string_view)>;

// One request; Unavailable when the server cannot be reached, answers
// nothing in time, or the exchange fails. With on_chunk, a chunked body goes
// to it as it arrives instead of into HttpResult::body.
StatusOr<HttpResult> HttpFetch(const HttpUrl& url, const std::string& method, const std::string& target,
                               const std::string& body, std::chrono::milliseconds timeout,
                               const std::vector<std::pair<std::string, std::string>>& headers = {},
                               const BodyChunkFn& on_chunk = nullptr);

}  // namespace infera::server
