#include "tools/nginx_config.h"

#include <cctype>
#include <string>

#include <fmt/format.h>

namespace infera::cli {
namespace {

bool ValidHost(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  if (h.front() == '[') {  // IPv6 literal
    if (h.back() != ']' || h.size() < 3) return false;
    for (size_t i = 1; i + 1 < h.size(); ++i) {
      if (!std::isxdigit(static_cast<unsigned char>(h[i])) && h[i] != ':' && h[i] != '.') return false;
    }
    return true;
  }
  for (char c : h) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return false;
  }
  return true;
}

// "1".."65535" -> the port; 0 when it is not one.
int ParsePort(const std::string& text) {
  if (text.empty() || text.size() > 5) return 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return 0;
  }
  const int p = std::stoi(text);
  return p <= 65535 ? p : 0;
}

// Text written into the configuration comes only from checked fields, so
// nothing here needs nginx quoting.
std::string ServerLines(const NginxConfigOptions& o) {
  std::string out;
  for (const Upstream& u : o.replicas) {
    out += fmt::format("    server {}:{} max_fails={} fail_timeout={}s;\n", u.host, u.port, o.max_fails, o.fail_timeout_s);
  }
  return out;
}

std::string UpstreamBlock(const NginxConfigOptions& o, const char* name, const char* policy) {
  return fmt::format(
      "upstream {0} {{\n"
      "    zone {0} 64k;  # failure counts and connection counts shared by the workers\n"
      "    {1};\n"
      "{2}"
      "    keepalive {3};\n"
      "    keepalive_timeout 60s;\n"
      "}}\n",
      name, policy, ServerLines(o), o.keepalive);
}

std::string HttpBody(const NginxConfigOptions& o) {
  std::string out;
  out += "# Access log: which replica answered, its status, and the time taken.\n";
  out += "log_format infera '$remote_addr [$time_local] \"$request\" $status $body_bytes_sent '\n";
  out += "                  'upstream=$upstream_addr upstream_status=$upstream_status '\n";
  out += "                  'request_time=$request_time session=\"$http_x_session_id\"';\n\n";
  if (o.affinity) {
    out +=
        "# Session affinity: requests with an X-Session-Id header, or else a \"user\"\n"
        "# field in the JSON body, go to one replica by consistent hash (so a chat's\n"
        "# turns find their prefix in that replica's cache); the rest go to the\n"
        "# replica with the fewest connections. The body is read before the pool is\n"
        "# chosen (mirror_request_body below); bodies larger than\n"
        "# client_body_buffer_size have no $request_body and use least connections.\n"
        "map $request_body $infera_body_user {\n"
        "    '~\"user\"\\s*:\\s*\"(?<infera_user>[^\"\\\\\\\\]{1,256})\"' $infera_user;\n"
        "    default '';\n"
        "}\n"
        "map $http_x_session_id $infera_affinity_key {\n"
        "    '' $infera_body_user;\n"
        "    default $http_x_session_id;\n"
        "}\n"
        "map $infera_affinity_key $infera_pool {\n"
        "    '' infera_least_conn;\n"
        "    default infera_affinity;\n"
        "}\n\n";
  }
  out += UpstreamBlock(o, "infera_least_conn", "least_conn");
  if (o.affinity) {
    out += "\n";
    out += UpstreamBlock(o, "infera_affinity", "hash $infera_affinity_key consistent");
  }
  out += "\nserver {\n";
  out += fmt::format("    listen {};\n", o.listen);
  out += "    access_log " + std::string(o.standalone ? "/dev/stdout" : "/var/log/nginx/infera.access.log") +
         " infera;\n";
  out += fmt::format(
      "    # As infera serve's --max-body-bytes; larger bodies get infera's 413.\n"
      "    client_max_body_size {0};\n"
      "    client_body_buffer_size {0};\n"
      "    client_body_in_single_buffer on;\n\n",
      o.max_body_bytes);
  out += "    location / {\n";
  if (o.affinity) {
    out +=
        "        # Reads the whole body before proxy_pass picks $infera_pool.\n"
        "        mirror /_infera_read_body;\n"
        "        mirror_request_body on;\n"
        "        proxy_pass http://$infera_pool;\n";
  } else {
    out += "        proxy_pass http://infera_least_conn;\n";
  }
  out += fmt::format(
      "        proxy_http_version 1.1;\n"
      "        proxy_set_header Connection '';  # keep-alive to the replica\n"
      "        proxy_set_header Host $host;\n"
      "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
      "        proxy_set_header X-Forwarded-Proto $scheme;\n"
      "        # Server-sent events: pass every token on at once, wait long between.\n"
      "        proxy_buffering off;\n"
      "        proxy_cache off;\n"
      "        proxy_connect_timeout {0}s;\n"
      "        proxy_send_timeout {1}s;\n"
      "        proxy_read_timeout {1}s;\n"
      "        # Another replica only while nothing was sent to the client: a refused\n"
      "        # or reset connection, or a replica that is draining (503) or full\n"
      "        # (429). nginx never retries once a response byte was passed on; a\n"
      "        # stream cut by a dying replica ends without its last chunk.\n"
      "        proxy_next_upstream error timeout http_502 http_503 http_429 non_idempotent;\n"
      "        proxy_next_upstream_tries {2};\n",
      o.connect_timeout_s, o.stream_timeout_s, o.tries);
  if (o.upstream_header) out += "        add_header X-Infera-Upstream $upstream_addr always;  # the replica(s) tried\n";
  out += "    }\n";
  if (o.affinity) {
    out +=
        "\n"
        "    location = /_infera_read_body {\n"
        "        internal;\n"
        "        return 204;\n"
        "    }\n";
  }
  out +=
      "\n"
      "    # nginx's own errors as OpenAI-style error objects: every replica down\n"
      "    # or failing (502/504), or a body over the limit (413).\n"
      "    error_page 502 504 = @infera_unavailable;\n"
      "    error_page 413 = @infera_too_large;\n"
      "    location @infera_unavailable {\n"
      "        default_type application/json;\n"
      "        add_header Retry-After 1 always;\n"
      "        return 503 '{\"error\":{\"message\":\"no infera replica is available; retry later\","
      "\"type\":\"service_unavailable\",\"param\":null,\"code\":\"no_replica\"}}';\n"
      "    }\n"
      "    location @infera_too_large {\n"
      "        default_type application/json;\n"
      "        return 413 '{\"error\":{\"message\":\"the request body is larger than the limit\","
      "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_too_large\"}}';\n"
      "    }\n"
      "}\n";
  return out;
}

std::string Indent(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out += "    " + text.substr(start, end - start);
    out += "\n";
    start = end + 1;
  }
  return out;
}

// The command that writes this configuration: every option that differs
// from its default, so that the file's header reproduces it.
std::string CommandLine(const NginxConfigOptions& o) {
  const NginxConfigOptions d;
  std::string replicas;
  for (const Upstream& u : o.replicas) replicas += fmt::format("{}{}:{}", replicas.empty() ? "" : ",", u.host, u.port);
  std::string cmd = "infera deploy nginx --replicas " + replicas;
  if (o.listen != d.listen) cmd += " --listen " + o.listen;
  if (!o.affinity) cmd += " --no-affinity";
  struct Numeric {
    const char* flag;
    int64_t value, default_value;
  };
  const Numeric numbers[] = {{"--max-fails", o.max_fails, d.max_fails},
                             {"--fail-timeout", o.fail_timeout_s, d.fail_timeout_s},
                             {"--tries", o.tries, d.tries},
                             {"--connect-timeout", o.connect_timeout_s, d.connect_timeout_s},
                             {"--stream-timeout", o.stream_timeout_s, d.stream_timeout_s},
                             {"--keepalive", o.keepalive, d.keepalive},
                             {"--max-body-bytes", o.max_body_bytes, d.max_body_bytes},
                             {"--worker-processes", o.worker_processes, d.worker_processes}};
  for (const Numeric& n : numbers) {
    if (n.value != n.default_value) cmd += fmt::format(" {} {}", n.flag, n.value);
  }
  if (o.upstream_header) cmd += " --upstream-header";
  if (o.standalone) cmd += " --standalone";
  return cmd;
}

}  // namespace

std::vector<Upstream> ParseReplicaList(const std::string& list, std::string* error) {
  std::vector<Upstream> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= item.size()) {
      *error = fmt::format("replica '{}' is not host:port", item);
      return {};
    }
    Upstream u;
    u.host = item.substr(0, colon);
    u.port = ParsePort(item.substr(colon + 1));
    if (!ValidHost(u.host) || u.port < 1) {
      *error = fmt::format("replica '{}' is not host:port (port 1-65535)", item);
      return {};
    }
    out.push_back(u);
    start = end + 1;
  }
  return out;
}

std::string CheckNginxConfigOptions(const NginxConfigOptions& o) {
  if (o.replicas.empty()) return "at least one replica is needed";
  for (const Upstream& u : o.replicas) {
    if (!ValidHost(u.host) || u.port < 1 || u.port > 65535) return fmt::format("bad replica {}:{}", u.host, u.port);
  }
  const size_t colon = o.listen.rfind(':');
  const bool has_host = colon != std::string::npos;
  if (ParsePort(has_host ? o.listen.substr(colon + 1) : o.listen) < 1 ||
      (has_host && !ValidHost(o.listen.substr(0, colon)))) {
    return fmt::format("--listen '{}' is not PORT or HOST:PORT", o.listen);
  }
  if (o.max_fails < 0) return "--max-fails must be at least 0 (0: never mark a replica down)";
  if (o.fail_timeout_s < 1) return "--fail-timeout must be at least 1 second";
  if (o.tries < 1) return "--tries must be at least 1";
  if (o.connect_timeout_s < 1) return "--connect-timeout must be at least 1 second";
  if (o.stream_timeout_s < 1) return "--stream-timeout must be at least 1 second";
  if (o.keepalive < 1) return "--keepalive must be at least 1";
  if (o.max_body_bytes < 1024) return "--max-body-bytes must be at least 1024";
  if (o.worker_processes < 0) return "--worker-processes must be at least 0 (0: auto)";
  return "";
}

std::string NginxConfig(const NginxConfigOptions& o) {
  std::string head = fmt::format(
      "# nginx in front of {} infera replica{}: written by\n"
      "#   {}\n"
      "# See docs/operations.md, \"Deployment\". Check with `nginx -t`.\n",
      o.replicas.size(), o.replicas.size() == 1 ? "" : "s", CommandLine(o));
  if (!o.standalone) {
    return head + "# Include it inside http {} (Debian: /etc/nginx/conf.d/infera.conf).\n\n" + HttpBody(o);
  }
  const std::string workers = o.worker_processes > 0 ? std::to_string(o.worker_processes) : "auto";
  return head +
         "# A whole nginx.conf: run it with `nginx -p DIR -c FILE -g 'daemon off;'`;\n"
         "# the pid and temporary files go under DIR.\n\n"
         "worker_processes " + workers + ";\n"
         "pid nginx.pid;\n"
         "error_log stderr warn;\n\n"
         "events {\n"
         "    worker_connections 4096;\n"
         "}\n\n"
         "http {\n"
         "    client_body_temp_path client_body_temp;\n"
         "    proxy_temp_path proxy_temp;\n"
         "    fastcgi_temp_path fastcgi_temp;\n"
         "    uwsgi_temp_path uwsgi_temp;\n"
         "    scgi_temp_path scgi_temp;\n\n" +
         Indent(HttpBody(o)) + "}\n";
}

}  // namespace infera::cli
