package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startExporter starts 'dcsync exporter' on c's store as a process, on a free loopback
// port, and returns the /metrics URL; the process is stopped with SIGTERM at cleanup.
func startExporter(t *testing.T, c *cli) string {
	t.Helper()
	cmd := c.process("exporter", "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	urls := make(chan string, 1)
	var logMu sync.Mutex
	var logged strings.Builder
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			defer logMu.Unlock()
			t.Logf("dcsync exporter's log:\n%s", logged.String())
		}
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`url=(http://\S+/metrics)`)
		for sc.Scan() {
			logMu.Lock()
			logged.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatal("dcsync exporter ended without serving")
		}
		return u
	case <-time.After(2 * time.Minute):
		t.Fatal("dcsync exporter printed no URL within 2 minutes")
	}
	return ""
}

// prometheusBinary is the real Prometheus server the exporter is scraped by:
// $DCSYNC_PROMETHEUS, else prometheus on PATH. Without one the test skips, or fails
// with CI=true (scripts/test installs the Debian package).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DCSYNC_PROMETHEUS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	const msg = "no Prometheus server: set DCSYNC_PROMETHEUS or install prometheus (apt-get install prometheus)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " [CI=true: failing]")
	}
	t.Skip(msg)
	return ""
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapedByPrometheus runs a real Prometheus server scraping metricsURL every 30 s
// (a scrape of a shared Aerospike namespace with a hundred tests' queues takes
// seconds, more on a loaded machine; Prometheus drops a scrape longer than its timeout)
// and returns a function that evaluates an instant query on it, waiting (up to 3
// minutes) for the query to have a result.
func scrapedByPrometheus(t *testing.T, metricsURL string) func(query string) float64 {
	t.Helper()
	bin := prometheusBinary(t)
	target, _ := url.Parse(metricsURL)
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`global:
  scrape_interval: 5s
  scrape_timeout: 5s
scrape_configs:
  - job_name: dcsync
    scrape_interval: 30s
    scrape_timeout: 30s
    static_configs:
      - targets: [%q]
`, target.Host)), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freePort(t)
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	return func(query string) float64 {
		t.Helper()
		var last string
		for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(query))
			if err != nil {
				last = err.Error()
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(body)
			var r struct {
				Data struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			if json.Unmarshal(body, &r) != nil || len(r.Data.Result) != 1 {
				continue
			}
			s, _ := r.Data.Result[0].Value[1].(string)
			v, err := strconv.ParseFloat(s, 64)
			if err == nil {
				return v
			}
		}
		t.Fatalf("Prometheus query %s had no single result within 3 minutes; last answer: %s", query, last)
		return 0
	}
}

// exporterScrapedOn checks `dcsync exporter` on c's store, scraped by a real Prometheus:
// a queue's lag per group (and its sum), its dead letters, a held lock and a latch's
// count, as the store holds them.
func exporterScrapedOn(t *testing.T, c *cli) {
	name := fmt.Sprintf("exp%d", time.Now().UnixNano()%1_000_000_000)
	c.want(0, "queue", "create", name, "--partitions", "2", "--group", "billing", "--group", "audit")
	cmd := c.process("queue", "send", name, "--key", "k")
	cmd.Stdin = strings.NewReader("1\n2\n3\n4\n5\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("queue send: %v\n%s", err, out)
	}
	// A long idle timeout: on a loaded machine the first message can take seconds.
	if out := c.want(0, "queue", "receive", name, "--group", "billing", "--max", "2", "--timeout", "2m"); strings.Count(out, "\n") != 2 {
		t.Fatalf("queue receive --max 2 printed %q; want 2 messages", out)
	}
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", name+"-lock", "--ttl", "10m"))
	if m == nil {
		t.Fatal("lock acquire printed no owner")
	}
	token, _ := strconv.ParseFloat(m[2], 64) // tokens only go up: an in-doubt first attempt may have used 1
	c.want(0, "latch", "create", name+"-latch", "--count", "4")

	metrics := startExporter(t, c)
	// The first scrape of a new exporter connects to the store, and on a loaded
	// machine its reads can outlast the scrape's bound (dcsync_exporter_up 0, the
	// gauges left out): scrape until one succeeds, then check what it reports.
	var body []byte
	for end := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		resp, err := http.Get(metrics)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "dcsync_exporter_up 1\n") || time.Now().After(end) {
			break
		}
	}
	for _, want := range []string{
		`dcsync_queue_group_lag{group="billing",queue="` + name + `"} 3`,
		`dcsync_queue_group_lag{group="audit",queue="` + name + `"} 5`,
		`dcsync_exporter_up 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}

	query := scrapedByPrometheus(t, metrics)
	for q, want := range map[string]float64{
		`dcsync_queue_group_lag{queue="` + name + `",group="billing"}`:                   3,
		`sum(dcsync_queue_lag{queue="` + name + `",group="audit"})`:                      5,
		`dcsync_queue_dead_letters{queue="` + name + `",group="billing"}`:                0,
		`dcsync_lock_token{client="app",name="` + name + `-lock"}`:                       token,
		`dcsync_latch_count{client="app",name="` + name + `-latch"}`:                     4,
		`dcsync_lock_expires_in_seconds{client="app",name="` + name + `-lock"} > bool 0`: 1,
	} {
		if got := query(q); got != want {
			t.Errorf("Prometheus: %s = %v, want %v", q, got, want)
		}
	}
}

func TestExporterScrapedByPrometheus(t *testing.T) {
	exporterScrapedOn(t, newCLI(t))
}

func TestExporterListensOnLoopbackByDefault(t *testing.T) {
	if defaultExporterListen != "127.0.0.1:9464" {
		t.Fatalf("default --listen %q; want loopback", defaultExporterListen)
	}
	c := newCLI(t)
	_, errs, code := c.run("exporter", "--listen", "256.0.0.1:1")
	if code != exitUsage || !strings.Contains(errs, "--listen") {
		t.Fatalf("exporter --listen on a bad address: exit %d, %q; want 2 naming --listen", code, errs)
	}
}

func TestExporterHBase(t *testing.T) {
	exporterScrapedOn(t, hbaseCLI(t, "exp"))
}

func TestExporterAerospike(t *testing.T) {
	addr, ns := aerospikeServer(t)
	suffix := fmt.Sprintf("exp%d", time.Now().UnixNano()%1_000_000)
	exporterScrapedOn(t, &cli{t: t, store: "aerospike://" + addr + "/" + ns + "?lock_set_suffix=" + suffix + "&latch_set_suffix=" + suffix})
}
