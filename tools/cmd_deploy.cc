// infera deploy: configuration for running infera in production.
//   infera deploy nginx --replicas host:port,... > infera.conf
// writes the nginx front for a set of replicas (see tools/nginx_config.h).
#include <cstdio>
#include <memory>

#include "tools/commands.h"
#include "tools/nginx_config.h"

namespace infera::cli {
namespace {

struct DeployNginxArgs {
  std::string replicas;
  bool no_affinity = false;
  NginxConfigOptions opts;
};

int DeployNginx(DeployNginxArgs& a) {
  std::string error;
  a.opts.replicas = ParseReplicaList(a.replicas, &error);
  if (!error.empty()) return ReportError("--replicas: " + error);
  a.opts.affinity = !a.no_affinity;
  if (std::string why = CheckNginxConfigOptions(a.opts); !why.empty()) return ReportError(why);
  std::fputs(NginxConfig(a.opts).c_str(), stdout);
  return kExitOk;
}

}  // namespace

CommandFn RegisterDeploy(CLI::App& app, const RuntimeOptions& /*rt*/) {
  app.require_subcommand(1);
  auto a = std::make_shared<DeployNginxArgs>();
  CLI::App* nginx = app.add_subcommand("nginx", "nginx configuration for infera replicas (written to standard output)");
  nginx->add_option("--replicas", a->replicas, "the replicas: host:port,host:port,...")->required();
  nginx->add_option("--listen", a->opts.listen, "where nginx listens: PORT or HOST:PORT");
  nginx->add_flag("--no-affinity", a->no_affinity,
                  "no session affinity: every request to the replica with the fewest connections");
  nginx->add_option("--max-fails", a->opts.max_fails,
                    "failed tries within --fail-timeout that take a replica out (0: never)");
  nginx->add_option("--fail-timeout", a->opts.fail_timeout_s, "seconds a failed replica gets no requests");
  nginx->add_option("--tries", a->opts.tries, "replicas one request may try, the first included");
  nginx->add_option("--connect-timeout", a->opts.connect_timeout_s, "seconds to connect to a replica");
  nginx->add_option("--stream-timeout", a->opts.stream_timeout_s,
                    "longest wait in seconds for the next bytes of a response (streams included)");
  nginx->add_option("--keepalive", a->opts.keepalive, "idle keep-alive connections to the replicas, per worker");
  nginx->add_flag("--upstream-header", a->opts.upstream_header,
                  "add a response header X-Infera-Upstream naming the replica(s) tried (debugging; shows internal addresses)");
  nginx->add_option("--max-body-bytes", a->opts.max_body_bytes, "largest request body, as infera serve's");
  nginx->add_flag("--standalone", a->opts.standalone,
                  "a whole nginx.conf for `nginx -p DIR -c FILE` instead of a file to include in http {}");
  nginx->add_option("--worker-processes", a->opts.worker_processes, "with --standalone: nginx workers (0: auto)");
  return [a, nginx]() {
    if (!nginx->parsed()) return ReportError("deploy: name a target: infera deploy nginx --replicas ...");
    return DeployNginx(*a);
  };
}

}  // namespace infera::cli
