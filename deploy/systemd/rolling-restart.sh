#!/bin/bash
# Restarts infera replicas one at a time without failing a request:
#   deploy/systemd/rolling-restart.sh [--fail-timeout S] PORT...
# For each replica: `systemctl restart infera@PORT` (SIGTERM drains it: nginx
# retries what it refuses on the others), wait until /ready answers 200,
# then wait nginx's fail_timeout, during which nginx still avoids the
# replica for the failures it saw while it drained (restarting the next one
# sooner could leave nginx no replica it trusts).
set -euo pipefail

fail_timeout=10
ready_timeout=600
ports=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fail-timeout) fail_timeout="$2"; shift 2 ;;
    --ready-timeout) ready_timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) ports+=("$1"); shift ;;
  esac
done
if [ ${#ports[@]} -eq 0 ]; then
  echo "rolling-restart: name the replicas' ports" >&2
  exit 2
fi

for port in "${ports[@]}"; do
  echo "rolling-restart: infera@$port: restarting (draining first)" >&2
  systemctl restart "infera@$port"
  waited=0
  until curl -fsS -o /dev/null "http://127.0.0.1:$port/ready"; do
    if [ "$waited" -ge "$ready_timeout" ]; then
      echo "rolling-restart: infera@$port not ready after $ready_timeout s; stopping here" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "rolling-restart: infera@$port ready after $waited s; waiting $fail_timeout s for nginx" >&2
  sleep "$fail_timeout"
done
echo "rolling-restart: done" >&2
