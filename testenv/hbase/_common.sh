# Shared by up, down and java-layout (sourced, not executed).
# shellcheck shell=bash
HB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# DCSYNC_HBASE_SECURE=1 (up-secure, down-secure): the Kerberized instance (LocalHBaseSecure),
# its own run directory, ports and lock; the default instance is untouched.
HB_MAIN=dcsync.testenv.hbase.LocalHBase
HB_LOCK="$HB_DIR/.up.lock"
if [[ "${DCSYNC_HBASE_SECURE:-}" == 1 ]]; then
  HB_MAIN=dcsync.testenv.hbase.LocalHBaseSecure
  HB_LOCK="$HB_DIR/.up-secure.lock"
  DCSYNC_HBASE_RUN_DIR="${DCSYNC_HBASE_SECURE_RUN_DIR:-$HB_DIR/run-secure}"
  DCSYNC_HBASE_ZK_PORT="${DCSYNC_HBASE_SECURE_ZK_PORT:-24818}"
  export DCSYNC_HBASE_MASTER_PORT="${DCSYNC_HBASE_SECURE_MASTER_PORT:-19000}"
  export DCSYNC_HBASE_RS_PORT="${DCSYNC_HBASE_SECURE_RS_PORT:-19020}"
  export DCSYNC_HBASE_KDC_PORT="${DCSYNC_HBASE_SECURE_KDC_PORT:-19088}"
  # DCSYNC_HBASE_SECURE_ZK_SASL=1: ZooKeeper requires SASL (Kerberos) of every client.
  if [[ "${DCSYNC_HBASE_SECURE_ZK_SASL:-}" == 1 ]]; then
    export DCSYNC_HBASE_ZK_SASL=1
  else
    unset DCSYNC_HBASE_ZK_SASL
  fi
  # TLS on the RPC ports unless DCSYNC_HBASE_SECURE_TLS=0 (material made by hb_make_tls).
  if [[ "${DCSYNC_HBASE_SECURE_TLS:-1}" != 0 ]]; then
    export DCSYNC_HBASE_TLS_DIR="$DCSYNC_HBASE_RUN_DIR/tls"
  else
    unset DCSYNC_HBASE_TLS_DIR
  fi
fi
HB_RUN="${DCSYNC_HBASE_RUN_DIR:-$HB_DIR/run}"
HB_TARGET="$HB_DIR/target"
HB_CP_FILE="$HB_TARGET/classpath.txt"
HB_STAMP="$HB_TARGET/.build-stamp"
HB_ZK_PORT="${DCSYNC_HBASE_ZK_PORT:-21818}"
HB_PID_FILE="$HB_RUN/hbase.pid"
HB_LOG="$HB_RUN/hbase.log"

# Flags JDK 17 needs for HBase 2.x / Hadoop (same set as bin/hbase adds on JDK 11+).
HB_JDK_OPTS=(
  -XX:+IgnoreUnrecognizedVMOptions
  --add-modules jdk.unsupported
  --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens java.base/java.io=ALL-UNNAMED
  --add-opens java.base/java.net=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED
  --add-exports java.base/sun.net.util=ALL-UNNAMED
  --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
  -Dio.netty.tryReflectionSetAccessible=true
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  -Djava.net.preferIPv4Stack=true
  -Dzookeeper.admin.enableServer=false
)

hb_pid_alive() {
  local pid
  [[ -f "$HB_PID_FILE" ]] || return 1
  pid="$(cat "$HB_PID_FILE" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  # Not a zombie, and really our server (pids get reused).
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'dcsync.testenv.hbase.LocalHBase'
}

# Builds the Maven project and caches the dependency classpath when anything is stale.
hb_ensure_built() {
  local stale=0
  if [[ ! -f "$HB_STAMP" || ! -s "$HB_CP_FILE" ]]; then
    stale=1
  elif [[ -n "$(find "$HB_DIR/pom.xml" "$HB_DIR/src" -newer "$HB_STAMP" -print -quit)" ]]; then
    stale=1
  fi
  [[ $stale == 1 ]] || return 0
  mkdir -p "$HB_TARGET"
  (
    flock 9
    # Re-check under the lock (another process may have built meanwhile).
    if [[ -f "$HB_STAMP" && -s "$HB_CP_FILE" && -z "$(find "$HB_DIR/pom.xml" "$HB_DIR/src" -newer "$HB_STAMP" -print -quit)" ]]; then
      exit 0
    fi
    local log="$HB_TARGET/build.log" t0
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if ! (cd "$HB_DIR" && mvn -q -B ${DCSYNC_MVN_OPTS:-} compile dependency:build-classpath \
        -Dmdep.outputFile="$HB_CP_FILE" >"$log" 2>&1); then
      echo "testenv/hbase: maven build failed; tail of $log:" >&2
      tail -n 60 "$log" >&2
      exit 1
    fi
    touch "$HB_STAMP"
    echo "testenv/hbase: built in $(( $(date +%s) - t0 ))s (log: $log)" >&2
  ) 9>"$HB_DIR/.build.lock"
}

hb_classpath() {
  echo "$HB_TARGET/classes:$(cat "$HB_CP_FILE")"
}

# Runs the Java interop tool (JavaLayout) with the cached classpath.
hb_java_layout() {
  java "${HB_JDK_OPTS[@]}" -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -cp "$(hb_classpath)" dcsync.testenv.hbase.JavaLayout "$@"
}

# Runs `java-layout health` against this instance; in secure mode as the Kerberos client
# of secure.env, which the launcher writes once its KDC is up (waits for it).
hb_health() {
  if [[ $HB_MAIN == *Secure ]]; then
    local i=0
    while [[ ! -s "$HB_RUN/secure.env" ]] && ((i++ < ${1:-0})); do sleep 1; done
    [[ -s "$HB_RUN/secure.env" ]] || { echo "health: no $HB_RUN/secure.env" >&2; return 1; }
    (set -a; source "$HB_RUN/secure.env"; set +a
      # ZooKeeper with SASL (secure.env says so): the health check's session logs in as the client.
      [[ "${DCSYNC_HBASE_SECURE_ZK_SASL:-}" == 1 ]] && HB_JDK_OPTS+=(-Djava.security.auth.login.config="$HB_RUN/jaas-client.conf")
      hb_java_layout health "$@")
  else
    hb_java_layout health "$@"
  fi
}

# The last lines of up's stdout: the address (secure mode: the client's settings first,
# then DCSYNC_HBASE_SECURE_ZK).
hb_print_address() {
  if [[ $HB_MAIN == *Secure ]]; then
    cat "$HB_RUN/secure.env"
    echo "DCSYNC_HBASE_SECURE_DIR=$HB_RUN"
    echo "DCSYNC_HBASE_SECURE_ZK=127.0.0.1:$HB_ZK_PORT"
  else
    echo "DCSYNC_HBASE_ZK=127.0.0.1:$HB_ZK_PORT"
  fi
}

# Makes the secure instance's TLS material in DIR with keytool (once): a CA (ca.pem for
# Go clients, ca.p12 the Java trust store) and the servers' key and certificate signed
# by it for localhost and 127.0.0.1 (server.p12); passwords "changeit".
hb_make_tls() {
  local dir="$1" pw=changeit
  [[ -s "$dir/server.p12" && -s "$dir/ca.pem" ]] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    keytool -genkeypair -alias ca -keyalg EC -groupname secp256r1 -dname "CN=dcsync test CA" \
      -ext bc:c -validity 3650 -keystore ca-key.p12 -storetype PKCS12 -storepass $pw -keypass $pw
    keytool -exportcert -rfc -alias ca -keystore ca-key.p12 -storepass $pw -file ca.pem
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore ca.p12 -storetype PKCS12 -storepass $pw
    keytool -genkeypair -alias server -keyalg EC -groupname secp256r1 -dname "CN=localhost" \
      -validity 3650 -keystore server.p12 -storetype PKCS12 -storepass $pw -keypass $pw
    keytool -certreq -alias server -keystore server.p12 -storepass $pw -file server.csr
    keytool -gencert -alias ca -keystore ca-key.p12 -storepass $pw -infile server.csr -outfile server.pem \
      -rfc -validity 3650 -ext san=dns:localhost,ip:127.0.0.1 -ext ku:c=digitalSignature,keyAgreement -ext eku=serverAuth,clientAuth
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore server.p12 -storepass $pw
    keytool -importcert -noprompt -alias server -file server.pem -keystore server.p12 -storepass $pw
    rm -f server.csr ca-key.p12
  ) >"$dir/keytool.log" 2>&1 || { echo "testenv/hbase: keytool failed (see $dir/keytool.log)" >&2; return 1; }
}
