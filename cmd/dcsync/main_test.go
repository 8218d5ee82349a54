package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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
	if os.Getenv(guardEnv) != "" {
		os.Exit(guardMain())
	}
	switch os.Getenv("DCSYNC_TEST_AS_MAIN") {
	case "1":
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	case "":
	default:
		os.Exit(testHelper(os.Getenv("DCSYNC_TEST_AS_MAIN")))
	}
	goleak.VerifyTestMain(m)
}

// testHelper is a command for lock run to run in tests, with behaviour a shell
// script cannot give reliably:
//
//	signals: prints "ready", then the name of every INT, HUP or TERM it gets, one per
//	         line, the moment it gets it; exits 0 after TERM.
//	readline: prints "ready", reads one line from stdin and prints "got:<line>".
//	renewed: watches lock "job" in the store DCSYNC_TEST_STORE until its lease end
//	         moves (lock run renewed it), prints "renewed token=<DCSYNC_LOCK_TOKEN>" and
//	         exits 7; exits 1 if the lease end has not moved within a minute.
func testHelper(mode string) int {
	switch mode {
	case "renewed":
		expires := func() string {
			var out, errb bytes.Buffer
			run([]string{"--store", os.Getenv("DCSYNC_TEST_STORE"), "--client", "app", "--farm", "dc1", "lock", "status", "job", "--json"}, &out, &errb)
			var st struct {
				Held    bool   `json:"held"`
				Expires string `json:"expires_at"`
			}
			if json.Unmarshal(out.Bytes(), &st) != nil || !st.Held {
				return ""
			}
			return st.Expires
		}
		first := expires()
		for end := time.Now().Add(time.Minute); first != "" && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if e := expires(); e != "" && e != first {
				fmt.Println("renewed token=" + os.Getenv("DCSYNC_LOCK_TOKEN"))
				return 7
			}
		}
		fmt.Println("not renewed; lease end", first)
		return 1
	case "signals":
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
		fmt.Println("ready")
		for s := range sigs {
			fmt.Println(map[os.Signal]string{syscall.SIGINT: "INT", syscall.SIGHUP: "HUP", syscall.SIGTERM: "TERM"}[s])
			if s == syscall.SIGTERM {
				return 0
			}
		}
	case "readline":
		fmt.Println("ready")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			fmt.Println("read:", err)
			return 1
		}
		fmt.Println("got:" + strings.TrimSpace(line))
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown test helper", mode)
	return 2
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
		{"lock", "bogus"},
		{"latch", "bogus", "x"},
		{"queue", "bogus"},
		{"latch", "create", "x", "--count", "1", "--poll", "1s"}, // --poll is await's
		{"latch", "countdown", "x", "--ttl", "1m"},               // --ttl is create's
		{"latch", "await", "x", "--ttl", "1m"},
		{"lock", "acquire", "job", "--level", "dc", "--level", "xdc"},
		{"latch", "list", "--level", "xdc", "--level", "dc"},
		{"lock", "run", "job", "--ttl", "30s", "--kill-after", "11s", "--", "true"}, // at most TTL/3
		{"lock", "acquire"},
		{"lock", "acquire", "a", "b"},
		{"lock", "acquire", "job", "--ttl", "10ms"},
		{"lock", "acquire", "job", "--level", "global"},
		{"lock", "release", "job"},
		{"lock", "run", "job"},
		{"latch", "create", "x"},
		{"latch", "create", "x", "--count", "-1"},
		{"latch", "count", "bad\nname"},
		{"--client", "a\x01b", "latch", "count", "x"},
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

// The command runs until lock run has renewed its lease (it watches the lease end move),
// and its exit code is lock run's. The lease (10 s) is long enough for a loaded machine
// to renew it in time (renewals start at a third of it and are retried until its end):
// the test waits for the renewal, not for a time. It was a 1 s lease around a 1.5 s
// command, which failed on a loaded machine when the renewal came late.
func TestLockRunPassesExitCodeAndReleases(t *testing.T) {
	c := newCLI(t)
	out, errs, code := c.run("lock", "run", "job", "--ttl", "10s", "--", "env", "DCSYNC_TEST_AS_MAIN=renewed", "DCSYNC_TEST_STORE="+c.store, os.Args[0])
	if code != 7 || out != "renewed token=1\n" {
		t.Fatalf("lock run: exit %d, stdout %q, stderr %q; want 7 and renewed token=1", code, out, errs)
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
	if !strings.Contains(string(out), "12 acquisitions by 3 processes, one holder at a time (by their timestamps), tokens strictly increasing") ||
		!strings.Contains(string(out), "400 events acked exactly once by ") {
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

// A child's death by a signal gives 128+signal, as shells report it; a command that
// cannot be found is 127 and one that cannot be executed 126, before the lock is taken.
func TestLockRunExitCodesAsShellsDo(t *testing.T) {
	c := newCLI(t)
	for sig, want := range map[string]int{"INT": 130, "KILL": 137, "TERM": 143, "HUP": 129} {
		if _, errs, code := c.run("lock", "run", "job", "--", "sh", "-c", "kill -"+sig+" $$"); code != want {
			t.Errorf("child killed by SIG%s: exit %d, want %d (%s)", sig, code, want, errs)
		}
	}
	if _, errs, code := c.run("lock", "run", "job", "--", "no-such-command-dcsync"); code != 127 || !strings.Contains(errs, "no-such-command-dcsync") {
		t.Errorf("missing command: exit %d, want 127 (%s)", code, errs)
	}
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := c.run("lock", "run", "job", "--", notExec); code != 126 {
		t.Errorf("command not executable: exit %d, want 126 (%s)", code, errs)
	}
	if st := c.want(0, "lock", "status", "job"); st != "free\n" {
		t.Fatalf("lock left held: %q", st)
	}
}

// --conflict-exit-code tells "the lock is held" apart from the command's own exit 3.
func TestLockRunConflictExitCode(t *testing.T) {
	c := newCLI(t)
	c.want(3, "lock", "run", "free", "--conflict-exit-code", "75", "--", "sh", "-c", "exit 3")
	c.want(0, "lock", "acquire", "held", "--ttl", "1m")
	c.want(75, "lock", "run", "held", "--conflict-exit-code", "75", "--", "true")
	c.want(75, "lock", "run", "held", "--conflict-exit-code", "75", "--wait", "100ms", "--", "true")
	c.want(3, "lock", "run", "held", "--", "true")
	c.want(4, "lock", "run", "held", "--wait", "100ms", "--", "true")
	c.want(2, "lock", "run", "held", "--conflict-exit-code", "256", "--", "true")
	c.want(2, "lock", "run", "held", "--kill-after", "-1s", "--", "true")
}

// stealLock deletes every lock behind the holders' backs (as a Java client's
// unconditional release does) and takes "job" as another owner.
func (c *cli) stealLock() {
	c.t.Helper()
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), `DELETE FROM dcsync_locks`); err != nil {
		c.t.Fatal(err)
	}
	c.want(0, "lock", "acquire", "job", "--ttl", "1m")
}

// runProc is a `dcsync lock run` process started by startRun.
type runProc struct {
	cmd *exec.Cmd
	sc  *bufio.Scanner // its stdout, line by line
	out *os.File       // the read end of its stdout
}

// startRun starts `dcsync lock run` as a process and returns it once the command has
// printed its first line (in p.sc.Text()).
func (c *cli) startRun(stderr *bytes.Buffer, args ...string) *runProc {
	c.t.Helper()
	cmd := c.process(append([]string{"lock", "run"}, args...)...)
	cmd.Stderr = stderr
	r, w, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); r.Close() })
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		c.t.Fatalf("command did not start: %s", stderr)
	}
	return &runProc{cmd: cmd, sc: sc, out: r}
}

// finish waits, for at most bound, for the process to exit and returns the rest of its
// output. Output that processes left behind write after it exits is not waited for long.
func finish(t *testing.T, p *runProc, bound time.Duration) []string {
	t.Helper()
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	lines := make(chan []string, 1)
	go func() {
		var rest []string
		for p.sc.Scan() {
			rest = append(rest, p.sc.Text())
		}
		lines <- rest
	}()
	select {
	case <-exited:
	case <-time.After(bound):
		_ = p.cmd.Process.Kill()
		<-exited
		p.out.Close()
		<-lines
		t.Fatalf("dcsync lock run did not end within %v", bound)
	}
	select {
	case rest := <-lines:
		return rest
	case <-time.After(10 * time.Second):
		p.out.Close()
		return append(<-lines, "(stdout still open 10s after dcsync exited)")
	}
}

// --kill-after 0: a lost lease ends the command with SIGKILL at once, no SIGTERM.
func TestLockRunKillAfterZero(t *testing.T) {
	c := newCLI(t)
	var stderr bytes.Buffer
	p := c.startRun(&stderr, "job", "--ttl", "3s", "--kill-after", "0", "--", "sh", "-c",
		`trap 'echo got-term' TERM; echo ready; while true; do sleep 0.05; done`)
	c.stealLock()
	rest := finish(t, p, time.Minute)
	if code := p.cmd.ProcessState.ExitCode(); code != 5 || len(rest) != 0 {
		t.Fatalf("exit %d, output %q, stderr %q; want 5 and no SIGTERM", code, rest, stderr.String())
	}
}

// A command that traps SIGTERM gets it, and the grace period, when the lease is lost.
// The grace is --kill-after, at most TTL/3: a 15 s lease gives the trap 5 s to run,
// which a loaded machine has (a 3 s lease gave it 1 s).
func TestLockRunKillAfterGivesGrace(t *testing.T) {
	c := newCLI(t)
	var stderr bytes.Buffer
	p := c.startRun(&stderr, "job", "--ttl", "15s", "--kill-after", "5s", "--", "sh", "-c",
		`trap 'echo got-term; exit 9' TERM; echo ready; while true; do sleep 0.05; done`)
	c.stealLock()
	rest := finish(t, p, time.Minute)
	if code := p.cmd.ProcessState.ExitCode(); code != 5 || len(rest) != 1 || rest[0] != "got-term" {
		t.Fatalf("exit %d, output %q, stderr %q; want 5 and got-term", code, rest, stderr.String())
	}
}

// Every error is printed on one line, however many lines the store's error has, and no
// cause is printed twice.
func TestErrorsPrintOnOneLine(t *testing.T) {
	if got := errorLine(errors.New("dial: failed\n  ResultCode: X\n\n  dial tcp: refused\n")); got != "dial: failed; ResultCode: X; dial tcp: refused" {
		t.Fatalf("errorLine = %q", got)
	}
	c := newCLI(t)
	c.store = "aerospike://127.0.0.1:1/test?timeout=200ms&attempts=1"
	_, errs, code := c.run("lock", "status", "x")
	if code == 0 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "dcsync: ") {
		t.Fatalf("exit %d, stderr %q: want one line", code, errs)
	}
}

// Ids are named as characters: the CLI path prints "é" as it was given.
func TestNonASCIIClientID(t *testing.T) {
	c := newCLI(t)
	var out, errb bytes.Buffer
	if code := run([]string{"--store", c.store, "--client", "é\x01", "latch", "count", "x"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `"é\x01"`) || !strings.Contains(errb.String(), "U+0001 at byte 2") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"--store", c.store, "--client", "é", "--farm", "dc1", "latch", "create", "x", "--count", "1"}, &out, &errb); code != 0 {
		t.Fatalf("client é: exit %d, stderr %q", code, errb.String())
	}
}

// --help names every store URL scheme and says that the default store is per user.
func TestHelpNamesStoresAndPerUserDefault(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d %s", code, errb.String())
	}
	help := out.String()
	var flagLine string
	for _, line := range strings.Split(help, "\n") {
		if strings.Contains(line, "--store") {
			flagLine = line
		}
	}
	for _, scheme := range []string{"sqlite://", "memory:", "hbase://", "aerospike://"} {
		if !strings.Contains(flagLine, scheme) {
			t.Errorf("--store help %q does not name %s", flagLine, scheme)
		}
	}
	flat := strings.Join(strings.Fields(help), " ")
	for _, want := range []string{"per user", "do not exclude each other", "sqlite:///var/lib/dcsync/dcsync.db"} {
		if !strings.Contains(flat, want) {
			t.Errorf("--help does not say %q:\n%s", want, help)
		}
	}
}

// The demo's workers are separate processes: a memory: store cannot be shared, and the
// demo says so at once instead of hanging.
func TestDemoRefusesMemoryStore(t *testing.T) {
	c := newCLI(t)
	c.store = "memory:"
	cmd := c.process("demo", "--workers", "2", "--rounds", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("demo on memory: did not end within a minute:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(out.String(), "memory:") {
		t.Fatalf("exit %d, output %q; want 2 and a message naming memory:", code, out.String())
	}
}

// Without --store the demo works in a temporary file, not in the user's default store.
func TestDemoLeavesDefaultStoreAlone(t *testing.T) {
	state := t.TempDir()
	cmd := exec.Command(os.Args[0], "demo", "--workers", "2", "--rounds", "2")
	cmd.Env = append(os.Environ(), "DCSYNC_TEST_AS_MAIN=1", "XDG_STATE_HOME="+state, "DCSYNC_STORE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(state, "dcsync")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("demo wrote into the default store's directory (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "4 acquisitions by 2 processes") {
		t.Fatalf("demo output:\n%s", out)
	}
}

// The demo checks what it claims: two holders at once, by their timestamps, or tokens out
// of order, fail it.
func TestDemoCheckFindsOverlapAndTokenOrder(t *testing.T) {
	ok := []holding{{pid: 1, token: 1, start: 10, end: 20}, {pid: 2, token: 2, start: 21, end: 30}}
	if err := checkHoldings(ok); err != nil {
		t.Fatalf("exclusive holdings: %v", err)
	}
	overlap := []holding{{pid: 1, token: 1, start: 10, end: 20}, {pid: 2, token: 2, start: 19, end: 30}}
	if err := checkHoldings(overlap); err == nil || !strings.Contains(err.Error(), "at once") {
		t.Fatalf("overlapping holdings: %v", err)
	}
	order := []holding{{pid: 1, token: 2, start: 10, end: 20}, {pid: 2, token: 1, start: 21, end: 30}}
	if err := checkHoldings(order); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("tokens out of order: %v", err)
	}
}
