package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aerospike/aerospike-client-go/v8/pkg/bcrypt"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dcsync/dcsync/internal/tlstest"
)

// tlsAerospike is the real Aerospike server behind a TLS-terminating proxy that plays
// Enterprise's TLS peer discovery and login (tlstest.Aerospike) for user "alice" with
// password: the store URL (without a password) and the CA file the client trusts.
type tlsAerospike struct {
	proxy *tlstest.Proxy
	ca    *tlstest.CA
	ns    string
	sets  string // a lock and latch set suffix of the test's own
}

const cliTLSName = "dcsync-cli-test"

func newTLSAerospike(t *testing.T, users map[string]string) *tlsAerospike {
	t.Helper()
	addr, ns := aerospikeServer(t)
	ca := tlstest.NewCA(t, t.TempDir(), "cli")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, cliTLSName).TLS}, MinVersion: tls.VersionTLS12}
	p := tlstest.NewAerospikeProxy(t, addr, cfg, &tlstest.Aerospike{Users: users})
	return &tlsAerospike{proxy: p, ca: ca, ns: ns, sets: fmt.Sprintf("sec%d", time.Now().UnixNano()%1e9)}
}

// url returns the store URL with the TLS parameters, the test's sets and extra.
func (a *tlsAerospike) url(user string, extra url.Values) string {
	q := url.Values{"tls_ca": {a.ca.File}, "tls_name": {cliTLSName}, "lock_set_suffix": {a.sets}, "latch_set_suffix": {a.sets}}
	for k, v := range extra {
		q[k] = v
	}
	host := a.proxy.Addr()
	if user != "" {
		host = user + "@" + host
	}
	return "aerospike://" + host + "/" + a.ns + "?" + q.Encode()
}

// TestAerospikeTLS runs CLI commands through TLS (the real server behind a TLS proxy):
// lock acquire and release work; an untrusted CA and a wrong TLS name exit 6 with a
// message naming what failed.
func TestAerospikeTLS(t *testing.T) {
	a := newTLSAerospike(t, nil)
	c := &cli{t: t, store: a.url("", nil)}
	out := c.want(0, "lock", "acquire", "tls-job", "--ttl", "1m")
	m := ownerRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("acquire printed %q", out)
	}
	c.want(3, "lock", "acquire", "tls-job")
	c.want(0, "lock", "release", "tls-job", "--owner", m[1])
	if ok, failed := a.proxy.Handshakes(); ok == 0 || failed != 0 {
		t.Fatalf("the proxy saw %d TLS handshakes and %d failures; want some and none", ok, failed)
	}

	other := tlstest.NewCA(t, t.TempDir(), "other")
	for _, tc := range []struct {
		name, store, says string
	}{
		{"UntrustedCA", a.url("", url.Values{"tls_ca": {other.File}}), "not signed by a trusted authority"},
		{"WrongTLSName", a.url("", url.Values{"tls_name": {"elsewhere"}}), `not valid for the TLS name "elsewhere"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{t: t, store: tc.store}
			out, errs, code := c.run("lock", "acquire", "tls-job-2")
			if code != exitAuth || out != "" || !strings.Contains(errs, tc.says) || strings.Count(errs, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and one line saying %q", code, out, errs, exitAuth, tc.says)
			}
		})
	}
}

// TestSecretsStayHidden runs the CLI (--verbose: debug logs and whole error chains) and
// the exporter with a password given the ways dcsync takes one (a variable, a file), on
// success and on every kind of failure, and looks for the password, and the credential
// the client derives from it (its bcrypt hash, which the server accepts in its place),
// in stdout, stderr, the traces and metrics recorded in process, the exporter's
// /metrics and its command line.
func TestSecretsStayHidden(t *testing.T) {
	const secret = "Sekr1t-pw-d7f3a9" // what the test looks for
	const wrong = "Wr0ng-pw-5c2e81"
	hash, err := bcrypt.Hash(secret, "$2a$10$7EqJtq98hPqEX7fNZaFWoO")
	if err != nil {
		t.Fatal(err)
	}
	wrongHash, err := bcrypt.Hash(wrong, "$2a$10$7EqJtq98hPqEX7fNZaFWoO")
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{secret, hash, wrong, wrongHash}
	a := newTLSAerospike(t, map[string]string{"alice": secret})

	// Record every span and metric of the in-process runs.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetMeterProvider(prevMP)
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})

	var seen strings.Builder // everything dcsync printed or recorded
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongFile, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openFile := filepath.Join(dir, "open")
	if err := os.WriteFile(openFile, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openFile, 0o644); err != nil {
		t.Fatal(err)
	}
	good := a.url("alice", url.Values{"password_file": {file}})
	step := func(env string, code int, store string, args ...string) string {
		t.Helper()
		if env != "" {
			t.Setenv("DCSYNC_AEROSPIKE_PASSWORD", env)
		} else {
			os.Unsetenv("DCSYNC_AEROSPIKE_PASSWORD")
		}
		c := &cli{t: t, store: store}
		out, errs, got := c.run(append([]string{"--verbose"}, args...)...)
		fmt.Fprintf(&seen, "$ dcsync %s\n%s%s", strings.Join(args, " "), out, errs)
		if got != code {
			t.Fatalf("dcsync %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errs)
		}
		return out
	}
	t.Setenv("DCSYNC_AEROSPIKE_PASSWORD", "")
	out := step("", 0, good, "lock", "acquire", "s", "--ttl", "1m")
	owner := ownerRE.FindStringSubmatch(out)
	if owner == nil {
		t.Fatalf("acquire printed %q", out)
	}
	step("", 3, good, "lock", "acquire", "s")
	step(secret, 0, a.url("alice", nil), "lock", "status", "s")
	step(secret, 0, a.url("alice", nil), "lock", "list")
	step("", 5, good, "lock", "release", "s", "--owner", "not-the-owner")
	step("", 0, good, "lock", "release", "s", "--owner", owner[1])
	step("", 0, good, "latch", "create", "l", "--count", "2")
	step("", 0, good, "latch", "countdown", "l")
	step("", 1, good, "latch", "count", "missing")
	// Failures: a wrong password (variable and file), two sources, a world-readable
	// file, the password in the URL, an untrusted certificate.
	step(wrong, exitAuth, a.url("alice", nil), "lock", "status", "s")
	step("", exitAuth, a.url("alice", url.Values{"password_file": {wrongFile}}), "lock", "status", "s")
	step(secret, exitUsage, good, "lock", "status", "s")
	step("", exitUsage, a.url("alice", url.Values{"password_file": {openFile}}), "lock", "status", "s")
	step("", exitUsage, strings.Replace(a.url("alice", nil), "alice@", "alice:"+secret+"@", 1), "lock", "status", "s")
	step("", exitUsage, strings.Replace(a.url("alice", nil), "alice@", "alice:"+secret+"@", 1)+"&port=x:y", "lock", "status", "s")
	step("", exitUsage, a.url("alice", url.Values{"password": {secret}}), "lock", "status", "s")
	other := tlstest.NewCA(t, t.TempDir(), "other")
	step(secret, exitAuth, a.url("alice", url.Values{"tls_ca": {other.File}}), "lock", "status", "s")

	// The spans and metrics the runs recorded.
	_ = tp.ForceFlush(context.Background())
	for _, s := range spans.Ended() {
		fmt.Fprintf(&seen, "span %s %v %v %v\n", s.Name(), s.Attributes(), s.Status(), s.Events())
	}
	if len(spans.Ended()) == 0 {
		t.Error("no span recorded: the check of traces checks nothing")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Fprintf(&seen, "metric %s %+v\n", m.Name, m.Data)
			n++
		}
	}
	if n == 0 {
		t.Error("no metric recorded: the check of metrics checks nothing")
	}

	// The exporter, as a process with the password in its environment.
	t.Setenv("DCSYNC_AEROSPIKE_PASSWORD", secret)
	metrics, cmdline := exporterWithSecret(t, &cli{t: t, store: a.url("alice", nil)}, &seen)
	fmt.Fprintf(&seen, "cmdline %s\n", cmdline)
	if !strings.Contains(metrics, "dcsync_exporter_up 1") {
		t.Errorf("the exporter did not read the store:\n%s", metrics)
	}
	seen.WriteString(metrics)

	text := seen.String()
	for _, s := range secrets {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("a secret (%q) was printed or recorded:\n%s", s[:4]+"…", text[max(0, i-300):min(len(text), i+100)])
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%d bytes checked; stderr of the failures:\n%s", len(text), grepLines(text, "dcsync: "))
	}
}

// exporterWithSecret runs 'dcsync --verbose exporter' on c's store, scrapes /metrics
// once, stops it and returns the scrape and its command line; its stderr goes to log.
func exporterWithSecret(t *testing.T, c *cli, log io.Writer) (metrics, cmdline string) {
	t.Helper()
	cmd := c.process("--verbose", "exporter", "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines strings.Builder
	urls := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`url=(http://\S+/metrics)`)
		for sc.Scan() {
			mu.Lock()
			lines.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		_ = cmd.Wait()
		mu.Lock()
		fmt.Fprintf(log, "$ dcsync --verbose exporter\n%s", lines.String())
		mu.Unlock()
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err == nil {
		cmdline = strings.ReplaceAll(string(b), "\x00", " ")
	}
	var u string
	select {
	case u = <-urls:
	case <-done:
		stop()
		t.Fatal("dcsync exporter ended without serving")
	case <-time.After(2 * time.Minute):
		stop()
		t.Fatal("dcsync exporter printed no URL within 2 minutes")
	}
	resp, err := http.Get(u)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	stop()
	if err != nil {
		t.Fatal(err)
	}
	return string(b), cmdline
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
