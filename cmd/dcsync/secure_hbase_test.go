package main

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// secureHBase reads the Kerberized, TLS-enabled HBase of testenv/hbase/up-secure:
// DCSYNC_HBASE_SECURE_ZK names its ZooKeeper, its run directory
// (DCSYNC_HBASE_SECURE_DIR, default testenv/hbase/run-secure) holds secure.env, whose
// variables it returns. Unset: a skip, a failure when CI=true and
// DCSYNC_HBASE_SECURE_REQUIRED=1 (as store/hbase's secure tests).
func secureHBase(t *testing.T) (zk string, vars map[string]string) {
	t.Helper()
	zk = os.Getenv("DCSYNC_HBASE_SECURE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" && os.Getenv("DCSYNC_HBASE_SECURE_REQUIRED") == "1" {
			t.Fatal("DCSYNC_HBASE_SECURE_ZK is not set: start testenv/hbase/up-secure and export its last line")
		}
		t.Skip("DCSYNC_HBASE_SECURE_ZK not set: skipping the Kerberized HBase CLI test (testenv/hbase/up-secure)")
	}
	dir := os.Getenv("DCSYNC_HBASE_SECURE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "testenv", "hbase", "run-secure")
	}
	f, err := os.Open(filepath.Join(dir, "secure.env"))
	if err != nil {
		t.Fatalf("the Kerberized HBase's secure.env: %v", err)
	}
	defer f.Close()
	vars = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return zk, vars
}

// TestHBaseKerberosTLS runs the CLI on the Kerberized HBase with TLS on its RPC port,
// the store URL naming a principal, its keytab, krb5.conf and the CA (the default
// tables, created once on the cluster; lock, latch and queue names of the run's own):
// lock acquire, status and release, a latch, a queue round. Without credentials, or
// without TLS, the command exits 6 with one line naming what failed, and nothing of
// the keytab.
func TestHBaseKerberosTLS(t *testing.T) {
	zk, vars := secureHBase(t)
	q := url.Values{
		"principal":        {vars["DCSYNC_HBASE_SECURE_PRINCIPAL"]},
		"keytab":           {vars["DCSYNC_HBASE_SECURE_KEYTAB"]},
		"krb5_conf":        {vars["KRB5_CONFIG"]},
		"server_principal": {vars["DCSYNC_HBASE_SECURE_SERVER_PRINCIPAL"]},
	}
	ca := vars["DCSYNC_HBASE_SECURE_TLS_CA"]
	if ca == "" {
		t.Fatal("secure.env names no CA (DCSYNC_HBASE_SECURE_TLS_CA): the cluster runs without TLS")
	}
	q.Set("tls_ca", ca)
	noCredsSays := "Authentication is required"
	if vars["DCSYNC_HBASE_SECURE_ZK_SASL"] == "1" {
		// ZooKeeper requires SASL of every client (up-secure with DCSYNC_HBASE_SECURE_ZK_SASL=1).
		q.Set("zk_sasl", "true")
		q.Set("zk_server_principal", vars["DCSYNC_HBASE_SECURE_ZK_PRINCIPAL"])
		noCredsSays = "ZooKeeper"
	}
	store := func(q url.Values) string { return "hbase://" + zk + "?" + q.Encode() }
	c := &cli{t: t, store: store(q)}
	run := randSuffix()

	lock := "sec-job-" + run
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", lock, "--ttl", "1m"))
	if m == nil {
		t.Fatal("lock acquire printed no owner and token")
	}
	c.want(3, "lock", "acquire", lock)
	if st := c.want(0, "lock", "status", lock); !strings.HasPrefix(st, "held owner="+m[1]) {
		t.Fatalf("status printed %q", st)
	}
	c.want(0, "lock", "release", lock, "--owner", m[1])

	latch := "sec-latch-" + run
	c.want(0, "latch", "create", latch, "--count", "2")
	c.want(0, "latch", "countdown", latch)
	if n := c.want(0, "latch", "count", latch); n != "1\n" {
		t.Fatalf("latch count printed %q, want 1", n)
	}

	queue := "sec-q-" + run
	c.want(0, "queue", "create", queue, "--partitions", "2", "--group", "g")
	if _, errs := c.wantSend(0, "one\ntwo\n", queue); !strings.Contains(errs, "sent 2 events, 0 duplicates") {
		t.Fatalf("queue send summary %q", errs)
	}
	got := lines(c.want(0, "queue", "receive", queue, "--group", "g", "--max", "2", "--timeout", waitAll))
	if !slices.Equal(sorted(got), []string{"one", "two"}) {
		t.Fatalf("queue receive printed %q, want one and two", got)
	}
	if out := c.want(0, "queue", "receive", queue, "--group", "g", "--timeout", "500ms"); out != "" {
		t.Fatalf("a second receive (all acked) printed %q", out)
	}

	keytab, err := os.ReadFile(vars["DCSYNC_HBASE_SECURE_KEYTAB"])
	if err != nil {
		t.Fatal(err)
	}
	if mid := len(keytab) / 2; mid < 12 || !showsKeytab("key "+hex.EncodeToString(keytab[mid-12:mid+4]), keytab) {
		t.Fatal("showsKeytab does not find the keytab's bytes in hex: the check below would check nothing")
	}
	noCreds := url.Values{"tls_ca": {ca}}
	noTLS := url.Values{}
	for k, v := range q {
		noTLS[k] = v
	}
	noTLS.Del("tls_ca")
	for _, tc := range []struct {
		name  string
		store string
		says  string
	}{
		{"NoCredentials", store(noCreds), noCredsSays},
		{"NoTLS", store(noTLS), "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{t: t, store: tc.store}
			out, errs, code := c.run("lock", "status", "sec-job-"+run)
			if code != exitAuth || out != "" || !strings.Contains(errs, tc.says) || strings.Count(errs, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and one line saying %q", code, out, errs, exitAuth, tc.says)
			}
			if showsKeytab(errs, keytab) {
				t.Fatalf("stderr shows bytes of the keytab: %q", errs)
			}
			t.Log(strings.TrimSpace(errs))
		})
	}
}

// showsKeytab reports whether s holds any 12 bytes in a row of the keytab (its keys
// among them), raw, in hex or in base64.
func showsKeytab(s string, keytab []byte) bool {
	const n = 12
	for i := 0; i+n <= len(keytab); i++ {
		w := keytab[i : i+n]
		if strings.Contains(s, string(w)) || strings.Contains(strings.ToLower(s), hex.EncodeToString(w)) ||
			strings.Contains(s, base64.StdEncoding.EncodeToString(w)[:n]) {
			return true
		}
	}
	return false
}
