// The nginx configuration that puts nginx in front of infera replicas
// (`infera deploy nginx`): least-connections balancing, session affinity by
// consistent hash, keep-alive to the replicas, SSE-friendly proxying, passive
// health checks and retries only before any response byte was sent.
//
// Pure functions of their options: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace infera::cli {

struct Upstream {
  std::string host;  // name or address; IPv6 literals in brackets
  int port = 0;
};

struct NginxConfigOptions {
  std::vector<Upstream> replicas;  // at least one
  std::string listen = "8080";     // nginx `listen` argument: "8080" or "host:port"
  bool affinity = true;            // X-Session-Id / body "user" -> one replica
  int max_fails = 2;               // failed tries within fail_timeout that mark a replica down
  int fail_timeout_s = 10;         // ... and for how long it then gets no requests
  int tries = 3;                   // replicas one request may try (first one included)
  int connect_timeout_s = 2;
  int stream_timeout_s = 600;      // longest gap between two bytes of a response
  int keepalive = 32;              // idle connections kept to the replicas, per worker
  int64_t max_body_bytes = 8 << 20;  // as infera serve's --max-body-bytes
  // X-Infera-Upstream response header naming the replica(s) tried: for
  // debugging and tests; off by default (it shows clients internal addresses).
  bool upstream_header = false;
  // A whole nginx.conf (events, http, pid and temporary files relative to
  // nginx's -p prefix, logs to stderr) instead of a file to include in http {}.
  bool standalone = false;
  int worker_processes = 0;        // standalone only; 0: auto
};

// "host:port,host:port" -> replicas; "" and an error message when malformed.
std::vector<Upstream> ParseReplicaList(const std::string& list, std::string* error);

// Checks the options; "" when they can be written.
std::string CheckNginxConfigOptions(const NginxConfigOptions& opts);

// The configuration text (opts must pass CheckNginxConfigOptions).
std::string NginxConfig(const NginxConfigOptions& opts);

}  // namespace infera::cli
