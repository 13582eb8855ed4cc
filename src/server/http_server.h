// An HTTP/1.1 server on Boost.Beast / Asio: a few I/O threads serve any
// number of connections (no thread per connection). It only parses requests,
// enforces limits and writes responses; what a request means is the
// handler's business (see api_server.h).
//
// Closed connections are noticed promptly: while a request is being answered
// (queued in the engine or streaming), the connection waits for the socket to
// turn readable; end-of-file or an error there, or a failed write, means the
// client left, and the handler's OnDisconnect callback runs at once.
//
// Thread-safety: HttpServer's methods may be called from any thread; a
// Responder may be used from any thread (calls are posted to the
// connection's strand, never block and never fail: after a disconnect they
// do nothing).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/status.h"

namespace infera::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string path;    // target without the query
  Headers headers;     // names in lower case
  std::string body;
  // The value of header `name` (lower case), or "".
  std::string Header(std::string_view name) const;
};

// The answer to one request: either Respond once, or BeginStream, any number
// of Send, then End.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Respond(int status, std::string content_type, std::string body, Headers extra = {}) = 0;
  // A chunked response (server-sent events, say).
  virtual void BeginStream(int status, std::string content_type, Headers extra = {}) = 0;
  virtual void Send(std::string data) = 0;
  virtual void End() = 0;
  // `fn` runs once, on an I/O thread, if the client goes away before the
  // response is complete (at once if it already has).
  virtual void OnDisconnect(std::function<void()> fn) = 0;
};

// Called on an I/O thread for every complete request; may answer at once or
// keep the responder and answer later from any thread.
using Handler = std::function<void(HttpRequest, std::shared_ptr<Responder>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                                  // 0: any free port
  size_t max_body_bytes = 8u << 20;                 // larger bodies: 413
  int io_threads = 2;
  std::chrono::seconds read_timeout{30};            // a request (or idle keep-alive) taking longer is closed
  // Told of every request the HTTP layer answers itself (413 body too large,
  // 400 malformed HTTP): status, the request target ("" if not parsed) and
  // the message. Called on an I/O thread; may be empty.
  std::function<void(int status, const std::string& target, const std::string& message)> on_layer_error;
};

class HttpServer {
 public:
  // Binds, listens and starts the I/O threads.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& opts, Handler handler);
  // Stops (if not yet) and closes every connection. Responders still held
  // elsewhere must be released before (see Stop).
  ~HttpServer();

  int port() const;
  // Closes the listening socket: new connections are refused; open ones go on.
  void StopAccepting();
  // Requests read but whose response is not yet written (or abandoned).
  int64_t active_requests() const;
  // Stops the I/O threads: no handler runs after this returns, so whatever
  // the handler uses may then be destroyed (releasing its responders),
  // before the server itself.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::server
