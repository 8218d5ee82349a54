# Shared by up-cluster, down-cluster and cluster-ctl (sourced, not executed): an HBase of
# one master and DCSYNC_HBASE_CLUSTER_RS (2) region servers in one JVM (LocalHBaseMulti),
# beside and independent of the single-node HBase of ./up.
# shellcheck shell=bash
# Env: DCSYNC_HBASE_CLUSTER_RUN_DIR (testenv/hbase/run-cluster), DCSYNC_HBASE_CLUSTER_ZK_PORT
# (23818), DCSYNC_HBASE_CLUSTER_MASTER_PORT (18000), DCSYNC_HBASE_CLUSTER_RS_PORT (18020:
# region server i, from 0, listens on 18020+i), DCSYNC_HBASE_CLUSTER_CTL_PORT (18030, the
# control port), DCSYNC_HBASE_CLUSTER_RS (2), DCSYNC_HBASE_UP_TIMEOUT (600 s).
_HC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DCSYNC_HBASE_RUN_DIR="${DCSYNC_HBASE_CLUSTER_RUN_DIR:-$_HC_DIR/run-cluster}"
# shellcheck source=_common.sh
source "$_HC_DIR/_common.sh"
HC_ZK_PORT="${DCSYNC_HBASE_CLUSTER_ZK_PORT:-23818}"
HC_MASTER_PORT="${DCSYNC_HBASE_CLUSTER_MASTER_PORT:-18000}"
HC_RS_PORT="${DCSYNC_HBASE_CLUSTER_RS_PORT:-18020}"
HC_CTL_PORT="${DCSYNC_HBASE_CLUSTER_CTL_PORT:-18030}"
HC_RS="${DCSYNC_HBASE_CLUSTER_RS:-2}"

hc_alive() {
  local pid
  [[ -f "$HB_PID_FILE" ]] || return 1
  pid="$(cat "$HB_PID_FILE" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'dcsync.testenv.hbase.LocalHBaseMulti'
}

# hc_ctl COMMAND...: sends one command to the launcher's control port, prints the reply.
hc_ctl() {
  python3 - "$HC_CTL_PORT" "$*" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=900)
s.sendall(sys.argv[2].encode() + b"\n")
f = s.makefile("r")
line = f.readline().strip()
print(line)
sys.exit(0 if line.startswith("ok") else 1)
PY
}
