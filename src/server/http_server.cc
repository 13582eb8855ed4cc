#include "server/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <future>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/logging.h"

namespace infera::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// An OpenAI-style error object (the HTTP layer's own errors: 400, 413).
std::string ErrorBody(const std::string& message, const char* code) {
  const nlohmann::json e = {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", code}};
  return DumpJson(nlohmann::json{{"error", e}});
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions opts;
  Handler handler;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  std::atomic<int64_t> active{0};
  int port = 0;

  Impl(const HttpServerOptions& o, Handler h)
      : opts(o), handler(std::move(h)), ioc(std::max(1, o.io_threads)), acceptor(net::make_strand(ioc)) {}
  void Accept();
};

namespace {

// One connection: reads requests one after another (keep-alive) and answers
// each through the Responder interface. Every member is touched only on the
// connection's strand.
class Session : public Responder, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl* server) : stream_(std::move(socket)), server_(server) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }

  void Respond(int status, std::string content_type, std::string body, Headers extra) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), status, ct = std::move(content_type),
                                       body = std::move(body), extra = std::move(extra)]() mutable {
      if (self->closed_ || !self->in_request_ || self->started_) return;
      self->WriteWhole(status, ct, body, extra);
    });
  }

  void BeginStream(int status, std::string content_type, Headers extra) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), status, ct = std::move(content_type),
                                       extra = std::move(extra)]() mutable {
      if (self->closed_ || !self->in_request_ || self->started_) return;
      self->started_ = true;
      self->streaming_ = true;
      self->out_ += self->Head(status, ct, true, 0, extra);
      self->Flush();
    });
  }

  void Send(std::string data) override {
    if (data.empty()) return;
    net::post(stream_.get_executor(), [self = shared_from_this(), data = std::move(data)] {
      if (self->closed_ || !self->streaming_ || self->ending_) return;
      self->out_ += fmt::format("{:x}\r\n", data.size());
      self->out_ += data;
      self->out_ += "\r\n";
      self->Flush();
    });
  }

  void End() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->closed_ || !self->streaming_ || self->ending_) return;
      self->out_ += "0\r\n\r\n";
      self->ending_ = true;
      self->Flush();
    });
  }

  void OnDisconnect(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), fn = std::move(fn)]() mutable {
      if (self->disconnected_) {
        fn();
      } else if (self->in_request_) {
        self->on_disconnect_ = std::move(fn);
      }
    });
  }

 private:
  void ReadRequest() {
    head_only_ = false;
    parser_.emplace();
    parser_->body_limit(server_->opts.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(server_->opts.read_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](ErrorCode ec, size_t) {
      self->OnHeader(ec);
    });
  }

  // The header is in (and a Content-Length over the limit already refused):
  // answer "Expect: 100-continue" (curl sends it for bodies over 1 KiB and
  // would otherwise wait a second), then read the body.
  void OnHeader(ErrorCode ec) {
    if (ec || parser_->is_done()) {
      OnRead(ec);
      return;
    }
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](ErrorCode ec, size_t) { self->OnRead(ec); });
    };
    const auto& h = parser_->get();
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                       [self = shared_from_this(), read_body](ErrorCode ec, size_t) {
                         if (ec) {
                           self->Close();
                         } else {
                           read_body();
                         }
                       });
      return;
    }
    read_body();
  }

  void OnRead(ErrorCode ec) {
    if (ec == http::error::body_limit) {
      FailRequest(413, fmt::format("the request body is larger than the limit of {} bytes",
                                   server_->opts.max_body_bytes), "request_too_large");
      return;
    }
    if (ec && ec.category() == ErrorCode(http::error::end_of_stream).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      FailRequest(400, "malformed HTTP request: " + ec.message(), "bad_request");
      return;
    }
    if (ec) {  // end of stream, timeout, reset: nothing to answer
      Close();
      return;
    }
    stream_.expires_never();
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    head_only_ = req.method == "HEAD";
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& field : msg) req.headers.emplace_back(Lower(std::string(field.name_string())), std::string(field.value()));
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive();
    BeginRequest();
    server_->handler(std::move(req), shared_from_this());
  }

  // A request the HTTP layer answers itself, then closes the connection
  // (its body may be unread).
  void FailRequest(int status, const std::string& message, const char* code) {
    if (server_->opts.on_layer_error) {
      std::string target;
      if (parser_) target = std::string(parser_->get().target());  // set once the request line parsed
      server_->opts.on_layer_error(status, target, message);
    }
    stream_.expires_never();
    keep_alive_ = false;
    BeginRequest();
    WriteWhole(status, "application/json", ErrorBody(message, code), {});
  }

  // Queues a complete (not streamed) response: the request's last bytes.
  // A HEAD request gets the headers GET would (Content-Length included) and
  // no body; a 204 neither a body nor a Content-Length (RFC 9110 8.6).
  void WriteWhole(int status, const std::string& content_type, const std::string& body, const Headers& extra) {
    started_ = true;
    out_ += Head(status, content_type, false, body.size(), extra);
    if (!head_only_ && status != 204) out_ += body;
    ending_ = true;
    Flush();
  }

  void BeginRequest() {
    in_request_ = true;
    started_ = streaming_ = ending_ = false;
    ++server_->active;
    Watch();
  }

  std::string Head(int status, const std::string& content_type, bool chunked, size_t length, const Headers& extra) {
    std::string h = fmt::format("HTTP/1.1 {} {}\r\nServer: infera\r\n", status,
                                std::string(http::obsolete_reason(static_cast<http::status>(status))));
    if (!content_type.empty()) h += fmt::format("Content-Type: {}\r\n", content_type);
    if (chunked) {
      h += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    } else if (status != 204) {
      h += fmt::format("Content-Length: {}\r\n", length);
    }
    h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
    h += "\r\n";
    return h;
  }

  // Watches the socket while a request is in flight: readable with end of
  // file (or an error) means the client is gone.
  void Watch() {
    if (!in_request_ || watching_ || closed_) return;
    watching_ = true;
    const uint64_t gen = ++watch_gen_;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](ErrorCode ec) {
      if (gen != self->watch_gen_) return;  // stale (cancelled at the end of a response)
      self->watching_ = false;
      if (self->closed_ || !self->in_request_) return;
      if (ec) {
        self->Disconnected();
        return;
      }
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        self->Disconnected();
      } else if (n < 0) {
        self->Watch();
      }
      // n > 0: the client sent more (a pipelined request); it is read after
      // this response, and this request is no longer watched.
    });
  }

  void Flush() {
    if (writing_ || closed_) return;
    if (out_.empty()) {
      if (ending_) Complete();
      return;
    }
    writing_ = true;
    sending_.swap(out_);
    out_.clear();
    // A client that stops reading is cut off after the read timeout.
    stream_.expires_after(server_->opts.read_timeout);
    net::async_write(stream_, net::buffer(sending_), [self = shared_from_this()](ErrorCode ec, size_t) {
      self->writing_ = false;
      self->stream_.expires_never();
      if (ec) {
        self->Disconnected();
        return;
      }
      self->Flush();
    });
  }

  // The response is written in full.
  void Complete() {
    in_request_ = false;
    started_ = streaming_ = ending_ = false;
    on_disconnect_ = nullptr;
    --server_->active;
    if (watching_) {
      ++watch_gen_;
      watching_ = false;
      ErrorCode ignored;
      stream_.socket().cancel(ignored);
    }
    if (keep_alive_) {
      ReadRequest();
    } else {
      // Lingering close: the client may still be sending (a body refused
      // with 413); read and drop it for a while, so that closing with unread
      // data does not reset the connection before the client reads the answer.
      ErrorCode ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream_.expires_after(server_->opts.read_timeout);
      Linger();
    }
  }

  void Linger() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](ErrorCode ec, size_t) {
      if (ec) {
        self->Close();
      } else {
        self->Linger();
      }
    });
  }

  void Disconnected() {
    if (disconnected_) return;
    disconnected_ = true;
    auto fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    Close();
    if (fn) fn();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    if (in_request_) {
      in_request_ = false;
      --server_->active;
    }
    ErrorCode ignored;
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool in_request_ = false;  // a request was read and its response is not written yet
  bool started_ = false;     // Respond or BeginStream was called
  bool head_only_ = false;   // the request is a HEAD: headers only
  bool streaming_ = false;
  bool ending_ = false;      // the response's last bytes are queued
  bool writing_ = false;
  bool watching_ = false;
  uint64_t watch_gen_ = 0;
  bool closed_ = false;
  bool disconnected_ = false;
  std::string out_, sending_;
  char discard_[4096];
  std::function<void()> on_disconnect_;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](ErrorCode ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      LOG_WARN("http: accept failed: {}", ec.message());
    } else {
      ErrorCode ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), this)->Start();
    }
    Accept();
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& opts, Handler handler) {
  if (opts.port < 0 || opts.port > 65535) return InvalidArgument("--port must be in 0..65535");
  auto impl = std::make_unique<Impl>(opts, std::move(handler));
  ErrorCode ec;
  const auto address = net::ip::make_address(opts.host, ec);
  if (ec) return InvalidArgument(fmt::format("--host {}: not an IP address", opts.host));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(opts.port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable(fmt::format("cannot listen on {}:{}: {}", opts.host, opts.port, ec.message()));
  impl->port = impl->acceptor.local_endpoint().port();
  impl->work.emplace(impl->ioc.get_executor());
  impl->Accept();
  for (int i = 0; i < std::max(1, opts.io_threads); ++i) {
    impl->threads.emplace_back([ioc = &impl->ioc] { ioc->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::StopAccepting() {
  std::promise<void> done;
  net::dispatch(impl_->acceptor.get_executor(), [&] {
    ErrorCode ignored;
    impl_->acceptor.close(ignored);
    done.set_value();
  });
  done.get_future().wait();
}

int64_t HttpServer::active_requests() const { return impl_->active.load(); }

}  // namespace infera::server
