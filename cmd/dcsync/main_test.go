package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// TestMain doubles as the dcsync binary when DCSYNC_TEST_AS_MAIN is set, so tests can
// run real processes (for signals and leases) without building anything.
func TestMain(m *testing.M) {
	if os.Getenv("DCSYNC_TEST_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

type cli struct {
	t     *testing.T
	store string
}

func newCLI(t *testing.T) *cli {
	return &cli{t: t, store: "sqlite://" + filepath.Join(t.TempDir(), "cli.db")}
}

// run runs dcsync in this process and returns stdout, stderr and the exit code.
func (c *cli) run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(append([]string{"--store", c.store, "--client", "app", "--farm", "dc1"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func (c *cli) want(code int, args ...string) string {
	c.t.Helper()
	out, errs, got := c.run(args...)
	if got != code {
		c.t.Fatalf("dcsync %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errs)
	}
	return out
}

// process starts dcsync as a separate OS process.
func (c *cli) process(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"--store", c.store, "--client", "app", "--farm", "dc1"}, args...)...)
	cmd.Env = append(os.Environ(), "DCSYNC_TEST_AS_MAIN=1")
	return cmd
}

var ownerRE = regexp.MustCompile(`^owner=([0-9a-f]{32}) token=(\d+)\n$`)

func TestLockCommands(t *testing.T) {
	c := newCLI(t)
	out := c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	m := ownerRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("acquire printed %q", out)
	}
	c.want(3, "lock", "acquire", "job")
	c.want(4, "lock", "acquire", "job", "--wait", "200ms")
	c.want(0, "lock", "acquire", "job", "--level", "xdc") // XDC is another key
	if st := c.want(0, "lock", "status", "job"); !strings.HasPrefix(st, "held owner="+m[1]+" token=1 expires_in=") {
		t.Fatalf("status printed %q", st)
	}
	c.want(5, "lock", "release", "job", "--owner", "someone-else")
	c.want(0, "lock", "release", "job", "--owner", m[1])
	c.want(5, "lock", "release", "job", "--owner", m[1])
	if st := c.want(0, "lock", "status", "job"); st != "free\n" {
		t.Fatalf("status printed %q", st)
	}
	out = c.want(0, "lock", "acquire", "job")
	if m2 := ownerRE.FindStringSubmatch(out); m2 == nil || m2[2] != "2" {
		t.Fatalf("second acquisition printed %q, want token 2", out)
	}
}

func TestLatchCommands(t *testing.T) {
	c := newCLI(t)
	c.want(0, "latch", "create", "batch", "--count", "2")
	c.want(1, "latch", "create", "batch", "--count", "5") // exists: count untouched
	if out := c.want(0, "latch", "count", "batch"); out != "2\n" {
		t.Fatalf("count printed %q", out)
	}
	if out := c.want(0, "latch", "countup", "batch"); out != "3\n" {
		t.Fatalf("countup printed %q", out)
	}
	c.want(0, "latch", "countdown", "batch")
	c.want(0, "latch", "countdown", "batch")
	c.want(4, "latch", "await", "batch", "--timeout", "300ms")
	c.want(0, "latch", "countdown", "batch")
	if out := c.want(0, "latch", "await", "batch"); !strings.HasSuffix(out, "done\n") {
		t.Fatalf("await printed %q", out)
	}
	c.want(1, "latch", "count", "missing")
	c.want(1, "latch", "countdown", "missing")
	c.want(1, "latch", "await", "missing")
	// XDC: farm dc2 counts down its own cell; the XDC count is the sum.
	c.want(0, "latch", "create", "x", "--count", "2", "--level", "xdc")
	var out, errb bytes.Buffer
	if code := run([]string{"--store", c.store, "--client", "app", "--farm", "dc2", "latch", "countdown", "x", "--level", "xdc"}, &out, &errb); code != 0 {
		t.Fatalf("dc2 countdown: %d %s", code, errb.String())
	}
	if out := c.want(0, "latch", "count", "x", "--level", "xdc"); out != "1\n" {
		t.Fatalf("xdc count printed %q", out)
	}
	if out := c.want(0, "latch", "count", "x"); out != "2\n" {
		t.Fatalf("dc1 cell printed %q", out)
	}
}

func TestUsageAndInvalidInput(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"bogus"},
		{"lock", "acquire"},
		{"lock", "acquire", "a", "b"},
		{"lock", "acquire", "job", "--ttl", "10ms"},
		{"lock", "acquire", "job", "--level", "global"},
		{"lock", "release", "job"},
		{"lock", "run", "job"},
		{"latch", "create", "x"},
		{"latch", "create", "x", "--count", "-1"},
		{"latch", "count", "bad\nname"},
		{"--client", "a_b", "latch", "count", "x"},
		{"--store", "redis://x", "latch", "count", "x"},
	} {
		if _, errs, code := c.run(args...); code != 2 {
			t.Errorf("dcsync %q: exit %d, want 2 (%s)", args, code, errs)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--store", c.store, "latch", "count", "x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "DCSYNC_CLIENT") {
		t.Errorf("missing client: exit %d, %q", code, errb.String())
	}
}

func TestLockRunPassesExitCodeAndReleases(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("lock", "run", "job", "--ttl", "1s", "--", "sh", "-c", `sleep 1.5; echo "token=$DCSYNC_LOCK_TOKEN"; exit 7`)
	if code != 7 || out != "token=1\n" {
		t.Fatalf("lock run: exit %d, stdout %q; want 7 and token=1", code, out)
	}
	if st := c.want(0, "lock", "status", "job"); st != "free\n" {
		t.Fatalf("lock not released after run: %q", st)
	}
	c.want(0, "lock", "acquire", "held", "--ttl", "1m")
	c.want(3, "lock", "run", "held", "--", "true")
}

func TestLockRunForwardsSignals(t *testing.T) {
	c := newCLI(t)
	cmd := c.process("lock", "run", "job", "--ttl", "30s", "--", "sh", "-c", `trap 'echo got-term; exit 42' TERM; echo ready; while true; do sleep 0.05; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child did not start: %q", sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	err = cmd.Wait()
	if cmd.ProcessState.ExitCode() != 42 || len(rest) != 1 || rest[0] != "got-term" {
		t.Fatalf("after SIGTERM: exit %d (%v), output %q; want 42 and got-term", cmd.ProcessState.ExitCode(), err, rest)
	}
	if st := c.want(0, "lock", "status", "job"); st != "free\n" {
		t.Fatalf("lock not released: %q", st)
	}
}

func TestLockRunStopsCommandWhenLeaseIsLost(t *testing.T) {
	c := newCLI(t)
	cmd := c.process("lock", "run", "job", "--ttl", "1s", "--", "sh", "-c", `echo ready; while true; do sleep 0.05; done`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatal("child did not start")
	}
	// Someone deletes the lock behind the holder's back (as a Java client's unconditional
	// release does) and another owner takes it: the next renewal finds it lost.
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), `DELETE FROM dcsync_locks`); err != nil {
		t.Fatal(err)
	}
	c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("lock run did not stop its command after the lease was lost")
	}
	if code := cmd.ProcessState.ExitCode(); code != 5 || !strings.Contains(stderr.String(), "lost") {
		t.Fatalf("exit %d, stderr %q; want 5 and a lost-lease message", code, stderr.String())
	}
}

func TestDemo(t *testing.T) {
	c := newCLI(t)
	cmd := c.process("demo", "--workers", "3", "--rounds", "4")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "12 acquisitions by 3 processes, one holder at a time, tokens strictly increasing") {
		t.Fatalf("demo output:\n%s", out)
	}
}

// A lock whose lease end the store cannot know (held by a Java client, which stores no
// end) prints expires_in=unknown, not a negative duration from the zero time.
func TestRemainingOfUnknownEnd(t *testing.T) {
	if got := remaining(time.Time{}); got != "unknown" {
		t.Fatalf("remaining(zero) = %q, want unknown", got)
	}
	if got := remaining(time.Now().Add(time.Hour)); !strings.HasPrefix(got, "59m") && !strings.HasPrefix(got, "1h") {
		t.Fatalf("remaining(+1h) = %q", got)
	}
}
