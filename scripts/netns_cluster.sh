#!/usr/bin/env bash
# A pretend cluster on one Linux machine for testing multi-host MPI runs:
# N network namespaces ("hosts") joined by veth pairs to a bridge, each with
# its own address, plus what mpirun needs to start ranks "on" them.
#
#   sudo scripts/netns_cluster.sh up N DIR    # hosts 10.77.0.1 ... 10.77.0.N
#   sudo ip netns exec infera_h0 mpirun --hostfile DIR/hostfile -np N \
#        --mca plm_rsh_agent DIR/rsh --mca btl tcp,self \
#        --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
#        infera generate ... --tp N
#   sudo scripts/netns_cluster.sh down N
#
# DIR/hostfile names the hosts (one slot each); DIR/rsh is the "remote
# shell" mpirun uses to start its daemon on a host: it runs the command in
# that host's namespace (real clusters use ssh). Needs root (CAP_NET_ADMIN,
# CAP_SYS_ADMIN) and iproute2. mpirun itself runs in the first host's
# namespace, so the daemons reach it over the "network".
set -euo pipefail
cmd="${1:-}"
n="${2:-2}"
if [ "$cmd" = up ]; then
  dir="${3:?usage: netns_cluster.sh up N DIR}"
  mkdir -p "$dir"
  ip link add infera_br type bridge
  ip link set infera_br up
  : > "$dir/hostfile"
  {
    echo '#!/bin/sh'
    echo '# mpirun rsh agent: "$1" is a host address; the rest runs in its namespace.'
    echo 'host="$1"; shift'
    echo 'case "$host" in'
  } > "$dir/rsh"
  for i in $(seq 0 $((n - 1))); do
    ns="infera_h$i"
    addr="10.77.0.$((i + 1))"
    ip netns add "$ns"
    ip link add "infera_v$i" type veth peer name "infera_b$i"
    ip link set "infera_v$i" netns "$ns"
    ip link set "infera_b$i" master infera_br
    ip link set "infera_b$i" up
    ip -n "$ns" addr add "$addr/24" dev "infera_v$i"
    ip -n "$ns" link set "infera_v$i" up
    ip -n "$ns" link set lo up
    mkdir -p "$dir/tmp-$ns"
    echo "$addr slots=1" >> "$dir/hostfile"
    echo "  $addr) ns=$ns ;;" >> "$dir/rsh"
  done
  {
    echo '  *) echo "rsh: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    # Each host its own TMPDIR, as real hosts have their own /tmp: the
    # daemons' session directories (TMPDIR/ompi.HOSTNAME.UID/...) would
    # otherwise be one path for every host (same hostname), and two daemons
    # creating it at once failed with "File exists" (orte_init).
    echo 'exec ip netns exec "$ns" env TMPDIR="'"$dir"'/tmp-$ns" sh -c "$*"'
  } >> "$dir/rsh"
  chmod +x "$dir/rsh"
elif [ "$cmd" = down ]; then
  for i in $(seq 0 $((n - 1))); do
    ip netns del "infera_h$i" 2>/dev/null || true
    ip link del "infera_b$i" 2>/dev/null || true
  done
  ip link del infera_br 2>/dev/null || true
else
  echo "usage: netns_cluster.sh up N DIR | down N" >&2
  exit 2
fi
