#include "server/http_client.h"

#include <limits>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace infera::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

StatusOr<HttpUrl> ParseHttpUrl(const std::string& url) {
  const std::string prefix = "http://";
  if (url.compare(0, prefix.size(), prefix) != 0) {
    return InvalidArgument(url + ": not an http:// URL (http://HOST:PORT/PATH)");
  }
  const std::string rest = url.substr(prefix.size());
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  HttpUrl u;
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  u.host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  u.port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  if (u.host.empty() || u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument(url + ": not an http:// URL (http://HOST:PORT/PATH)");
  }
  return u;
}

StatusOr<HttpResult> HttpFetch(const HttpUrl& url, const std::string& method, const std::string& target,
                               const std::string& body, std::chrono::milliseconds timeout,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               const BodyChunkFn& on_chunk) {
  try {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.expires_after(timeout);
    stream.connect(resolver.resolve(url.host, url.port));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, url.host);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(on_chunk ? std::numeric_limits<uint64_t>::max() : (64u << 20));
    auto chunk = [&](uint64_t, beast::string_view piece, beast::error_code&) -> size_t {
      on_chunk(std::string_view(piece.data(), piece.size()));
      return piece.size();
    };
    if (on_chunk) parser.on_chunk_body(chunk);
    http::read(stream, buffer, parser);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    HttpResult r;
    r.status = parser.get().result_int();
    r.body = std::move(parser.get().body());
    return r;
  } catch (const std::exception& e) {
    return Unavailable(std::string("http://") + url.host + ":" + url.port + target + ": " + e.what());
  }
}

}  // namespace infera::server
