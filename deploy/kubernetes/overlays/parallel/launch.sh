#!/bin/bash
# Entry point of an infera-tp pod (see kustomization.yaml).
#   launch.sh run     pod 0: mpirun over every pod; other pods: sshd
#   launch.sh probe   readiness: pod 0's /ready, the others' sshd
#   launch.sh drain   preStop: pod 0 asks mpirun to drain (SIGUSR1)
# Environment: POD_NAME, HEADLESS_SERVICE, WORLD_SIZE, TP, PP, MODEL.
set -euo pipefail
rank="${POD_NAME##*-}"
set_name="${POD_NAME%-*}"
ssh_port=2222
# The Secret's files are group-readable (fsGroup); ssh and sshd want the
# keys readable by their owner only: private copies under /tmp.
keys=/tmp/infera-ssh

port_open() {  # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

case "${1:-run}" in
  probe)
    if [ "$rank" = 0 ]; then
      exec 3<>/dev/tcp/127.0.0.1/8080
      printf 'GET /ready HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
      head -n 1 <&3 | grep -q ' 200 '
    else
      port_open 127.0.0.1 "$ssh_port"
    fi
    ;;
  drain)
    # mpirun forwards SIGUSR1 to every rank: infera drains (SIGTERM would
    # make mpirun kill the job at once).
    sleep 5
    if [ "$rank" = 0 ]; then kill -USR1 1; fi
    sleep 70
    ;;
  run)
    install -d -m 0700 "$keys"
    install -m 0600 /etc/infera-ssh/* "$keys/"
    if [ "$rank" != 0 ]; then
      exec /usr/sbin/sshd -D -e -f /etc/infera-mpi/sshd_config
    fi
    hostfile=/tmp/hostfile
    : > "$hostfile"
    for ((i = 0; i < WORLD_SIZE; i++)); do
      host="$set_name-$i.$HEADLESS_SERVICE"
      if [ "$i" != 0 ]; then
        until getent hosts "$host" >/dev/null && port_open "$host" "$ssh_port"; do
          echo "launch: waiting for $host:$ssh_port" >&2
          sleep 2
        done
      fi
      echo "$host slots=1" >> "$hostfile"
    done
    exec mpirun --hostfile "$hostfile" -np "$WORLD_SIZE" --map-by node --bind-to none \
      --mca plm_rsh_agent "ssh -p $ssh_port -i $keys/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" \
      infera serve --model "$MODEL" --tp "$TP" --pp "$PP" --host 0.0.0.0 --port 8080 \
      --drain-timeout 60 --log-format json
    ;;
  *)
    echo "launch.sh: unknown command $1" >&2
    exit 2
    ;;
esac
