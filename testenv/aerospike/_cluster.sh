# Shared by up-cluster, down-cluster and cluster-node (sourced, not executed): an
# Aerospike cluster of NODES asd processes in one mesh on loopback.
# shellcheck shell=bash
# Env: DCSYNC_ASD (the asd binary), DCSYNC_AEROSPIKE_CLUSTER_RUN_DIR (default
# testenv/aerospike/run-cluster), DCSYNC_AEROSPIKE_CLUSTER_NODES (2),
# DCSYNC_AEROSPIKE_CLUSTER_PORT (27900: node i, from 1, has service port PORT+10(i-1),
# fabric +1, heartbeat +2; keep them below the kernel's ephemeral range, 32768 and up by
# default: a client reconnecting to a node that is down can otherwise be given the node's
# own port as its local port, connect to itself, and hold the port the node needs), DCSYNC_AEROSPIKE_UP_TIMEOUT (180 s: a node started again may
# wait up to a minute for its service port, held in TIME_WAIT by its old connections).
AC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
AC_RUN="${DCSYNC_AEROSPIKE_CLUSTER_RUN_DIR:-$AC_DIR/run-cluster}"
AC_WAIT="${DCSYNC_AEROSPIKE_UP_TIMEOUT:-180}"
# The layout of the first start is kept in RUN/cluster.env, so that every later call
# (a node's restart, down-cluster) finds the same nodes and ports.
if [[ -f "$AC_RUN/cluster.env" ]]; then
  # shellcheck disable=SC1091
  source "$AC_RUN/cluster.env"
else
  AC_NODES="${DCSYNC_AEROSPIKE_CLUSTER_NODES:-2}"
  AC_PORT="${DCSYNC_AEROSPIKE_CLUSTER_PORT:-27900}"
fi

ac_fail() {
  echo "testenv/aerospike: $*" >&2
  exit 1
}
ac_service_port() { echo $((AC_PORT + 10 * ($1 - 1))); }
ac_fabric_port() { echo $((AC_PORT + 10 * ($1 - 1) + 1)); }
ac_heartbeat_port() { echo $((AC_PORT + 10 * ($1 - 1) + 2)); }
ac_node_dir() { echo "$AC_RUN/node$1"; }
ac_pid_file() { echo "$AC_RUN/node$1/asd.pid"; }
ac_alive() {
  local f pid
  f="$(ac_pid_file "$1")"
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$(ac_node_dir "$1")/aerospike.conf"
}
# ac_info PORT NAME...: the values of the info protocol's NAMEs, one line each
# ("NAME<TAB>VALUE"); fails when the node does not answer.
ac_info() {
  python3 - "$@" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
body = "".join(n + "\n" for n in sys.argv[2:]).encode()
s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | len(body)) + body)
hdr = b""
while len(hdr) < 8:
    chunk = s.recv(8 - len(hdr))
    if not chunk:
        sys.exit(1)
    hdr += chunk
n = struct.unpack(">Q", hdr)[0] & ((1 << 48) - 1)
data = b""
while len(data) < n:
    chunk = s.recv(n - len(data))
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
PY
}
# ac_stable PORT SIZE: the node sees a cluster of SIZE nodes with no migration left in
# namespace test (info cluster-stable answers the cluster key, else an error).
ac_stable() {
  local out
  out="$(ac_info "$1" "cluster-stable:size=$2;ignore-migrations=false;namespace=test" 2>/dev/null)" || return 1
  [[ -n "$out" && "$out" != *ERROR* ]]
}
# ac_start N: starts node N (its memory namespace empty) on its ports.
ac_start() {
  local n=$1 nd sp fp hp seeds="" i
  nd="$(ac_node_dir "$n")"
  sp="$(ac_service_port "$n")"; fp="$(ac_fabric_port "$n")"; hp="$(ac_heartbeat_port "$n")"
  for p in "$sp" "$fp" "$hp"; do
    for _ in $(seq 1 50); do
      ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || break
      sleep 0.1
    done
    ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || ac_fail "node $n: port $p is in use"
  done
  for ((i = 1; i <= AC_NODES; i++)); do
    [[ $i == "$n" ]] || seeds+="		mesh-seed-address-port 127.0.0.1 $(ac_heartbeat_port "$i")"$'\n'
  done
  rm -rf "$nd/work" "$nd/log"
  mkdir -p "$nd/work/smd" "$nd/work/usr/udf/lua" "$nd/log"
  printf '%s' "$seeds" >"$nd/seeds.conf"
  sed -e "s#@RUN_DIR@#$nd#g" -e "s#@NODE@#$n#g" -e "s#@NODE_ID@#a$n#g" \
    -e "s#@SERVICE_PORT@#$sp#" -e "s#@FABRIC_PORT@#$fp#" -e "s#@HEARTBEAT_PORT@#$hp#" \
    -e "/@SEEDS@/{r $nd/seeds.conf" -e "d}" \
    "$AC_DIR/aerospike-cluster.conf.in" >"$nd/aerospike.conf"
  setsid nohup "$DCSYNC_ASD" --config-file "$nd/aerospike.conf" --foreground \
    >"$nd/log/console.log" 2>&1 </dev/null 8>&- &
  echo $! >"$(ac_pid_file "$n")"
}
# ac_signal N SIG: sends SIG to node N and, for KILL and TERM, waits until it is gone.
ac_signal() {
  local n=$1 sig=$2 pid
  ac_alive "$n" || { echo "testenv/aerospike: node $n is not running" >&2; return 0; }
  pid="$(cat "$(ac_pid_file "$n")")"
  kill "-$sig" "$pid"
  case "$sig" in
    KILL | TERM)
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; }
      ;;
  esac
  echo "testenv/aerospike: node $n (pid $pid): SIG$sig" >&2
}
# ac_wait_stable: waits until every running node sees a cluster of all running nodes
# with migrations done.
ac_wait_stable() {
  local t0 live=() i ok
  t0=$(date +%s)
  for ((i = 1; i <= AC_NODES; i++)); do ac_alive "$i" && live+=("$i"); done
  [[ ${#live[@]} -gt 0 ]] || ac_fail "no node is running"
  while :; do
    ok=1
    for i in "${live[@]}"; do
      ac_alive "$i" || ac_fail "node $i exited (see $(ac_node_dir "$i")/log)"
      ac_stable "$(ac_service_port "$i")" "${#live[@]}" || { ok=0; break; }
    done
    [[ $ok == 1 ]] && return 0
    (( $(date +%s) - t0 < AC_WAIT )) || ac_fail "the cluster of nodes ${live[*]} did not settle within ${AC_WAIT}s"
    sleep 0.2
  done
}
ac_seeds() {
  local i out=""
  for ((i = 1; i <= AC_NODES; i++)); do out+="${out:+,}127.0.0.1:$(ac_service_port "$i")"; done
  echo "$out"
}
