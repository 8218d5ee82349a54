package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// gone reports whether process pid has ended (no such process, or a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// waitFor polls cond until it holds, failing the test after bound.
func waitFor(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pids parses a line of process ids.
func pids(t *testing.T, line string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(line) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not a pid line: %q", line)
		}
		out = append(out, n)
		t.Cleanup(func() { _ = syscall.Kill(n, syscall.SIGKILL) })
	}
	return out
}

// A lost lease stops the command's whole process group: `sh -c 'sleep & wait'` leaves
// no sleep running.
func TestLockRunStopsGrandchildrenWhenLeaseIsLost(t *testing.T) {
	c := newCLI(t)
	var stderr bytes.Buffer
	p := c.startRun(&stderr, "job", "--ttl", "3s", "--", "sh", "-c", `sleep 300 & echo $$ $!; wait`)
	ps := pids(t, p.sc.Text())
	c.stealLock()
	finish(t, p, time.Minute)
	if code := p.cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("exit %d, stderr %q; want 5", code, stderr.String())
	}
	for _, pid := range ps {
		waitFor(t, fmt.Sprintf("process %d of the command's group ends", pid), 30*time.Second, func() bool { return gone(pid) })
	}
}

// Processes the command leaves behind when it exits would run without the lock once it
// is released: they are stopped first.
func TestLockRunStopsLeftoversWhenCommandExits(t *testing.T) {
	c := newCLI(t)
	var stderr bytes.Buffer
	p := c.startRun(&stderr, "job", "--ttl", "30s", "--", "sh", "-c", `sleep 300 & echo $!`)
	ps := pids(t, p.sc.Text())
	finish(t, p, time.Minute)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if !gone(ps[0]) {
		t.Fatalf("the command's background process %d still runs after the lock was released", ps[0])
	}
}

// When dcsync itself is killed (SIGKILL, the OOM killer), the command and its children
// die too, before anyone else can hold the lock.
func TestLockRunCommandDiesWithDcsync(t *testing.T) {
	c := newCLI(t)
	var stderr bytes.Buffer
	p := c.startRun(&stderr, "job", "--ttl", "30s", "--", "sh", "-c", `sleep 300 & echo $$ $!; wait`)
	ps := pids(t, p.sc.Text())
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	finish(t, p, time.Minute)
	for _, pid := range ps {
		waitFor(t, fmt.Sprintf("process %d of the command's group ends after dcsync is killed", pid), 30*time.Second, func() bool { return gone(pid) })
	}
}

// heartbeat is a command that writes the wall-clock time (ns) to a file every 10 ms. It
// ignores SIGTERM: only SIGKILL stops it, as a command busy cleaning up would go on.
func heartbeat(file string) []string {
	return []string{"sh", "-c", `trap '' TERM; echo ready; while true; do date +%s%N >> "$0"; sleep 0.01; done`, file}
}

// lastBeat returns the last time written by heartbeat.
func lastBeat(t *testing.T, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) == 0 {
		t.Fatal("no heartbeat")
	}
	ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, ns)
}

// children returns the pids of pid's child processes.
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); i >= 0 && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// commandPID returns the pid of the command dcsync process pid runs: the child of its
// child, the guardian.
func commandPID(t *testing.T, dcsyncPID int) int {
	t.Helper()
	for _, g := range children(dcsyncPID) {
		if cs := children(g); len(cs) == 1 {
			return cs[0]
		}
	}
	t.Fatalf("no command process under dcsync %d", dcsyncPID)
	return 0
}

// heartbeatTTL is the lease of the tests that check a command is stopped before its
// lease ends. lock run stops the command TTL/20 + 100 ms before the end; the TTL is long
// enough that this margin (1.1 s) covers the guardian's timer and the kill running late
// on a loaded machine. Those tests run in parallel: each waits out most of a lease.
const heartbeatTTL = "20s"

// When the lease cannot be renewed (the store is locked by another writer), the command
// is stopped before the lease ends by the store's clock, not after.
func TestLockRunStopsCommandBeforeLeaseEnds(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	beats := filepath.Join(t.TempDir(), "beats")
	var stderr bytes.Buffer
	p := c.startRun(&stderr, append([]string{"job", "--ttl", heartbeatTTL, "--kill-after", "1s", "--"}, heartbeat(beats)...)...)
	child := commandPID(t, p.cmd.Process.Pid)
	// Lock the database against writers: no renewal can get through.
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	var expiresMS int64
	if err := conn.QueryRowContext(ctx, `SELECT expires_ms FROM dcsync_locks`).Scan(&expiresMS); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command ends while renewals are blocked", time.Minute, func() bool { return gone(child) })
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	finish(t, p, time.Minute)
	last, end := lastBeat(t, beats), time.UnixMilli(expiresMS)
	if !last.Before(end) {
		t.Fatalf("the command ran until %v, %v after its lease ended at %v", last, last.Sub(end), end)
	}
	t.Logf("the command's last sign of life was %v before its lease ended", end.Sub(last))
	if code := p.cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("exit %d, stderr %q; want 5", code, stderr.String())
	}
}

// A dcsync that is paused (SIGSTOP, a debugger, a stalled VM) cannot renew the lease: the
// command is still stopped before the lease ends.
func TestLockRunStopsCommandWhileDcsyncIsPaused(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	beats := filepath.Join(t.TempDir(), "beats")
	var stderr bytes.Buffer
	p := c.startRun(&stderr, append([]string{"job", "--ttl", heartbeatTTL, "--kill-after", "1s", "--"}, heartbeat(beats)...)...)
	child := commandPID(t, p.cmd.Process.Pid)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command ends while dcsync is paused", time.Minute, func() bool { return gone(child) })
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var expiresMS int64
	if err := db.QueryRowContext(context.Background(), `SELECT expires_ms FROM dcsync_locks WHERE token = 1`).Scan(&expiresMS); err != nil {
		t.Fatal(err)
	}
	last, end := lastBeat(t, beats), time.UnixMilli(expiresMS)
	if !last.Before(end) {
		t.Fatalf("the command ran until %v, %v after its lease ended at %v", last, last.Sub(end), end)
	}
	t.Logf("the command's last sign of life was %v before its lease ended", end.Sub(last))
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	finish(t, p, time.Minute)
	if code := p.cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("exit %d, stderr %q; want 5", code, stderr.String())
	}
}

// Stopping dcsync's whole process group (kill -STOP -PGID, as a supervisor may) does not
// stop what watches the lease: the command is still stopped before the lease ends.
func TestLockRunStopsCommandWhileDcsyncJobIsStopped(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	beats := filepath.Join(t.TempDir(), "beats")
	cmd := c.process(append([]string{"lock", "run", "job", "--ttl", heartbeatTTL, "--kill-after", "1s", "--"}, heartbeat(beats)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a job of its own, as a shell starts it
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); r.Close() })
	p := &runProc{cmd: cmd, sc: bufio.NewScanner(r), out: r}
	if !p.sc.Scan() {
		t.Fatalf("command did not start: %s", stderr.String())
	}
	child := commandPID(t, cmd.Process.Pid)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command ends while dcsync's process group is stopped", time.Minute, func() bool { return gone(child) })
	db, err := sql.Open("sqlite", strings.TrimPrefix(c.store, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var expiresMS int64
	if err := db.QueryRowContext(context.Background(), `SELECT expires_ms FROM dcsync_locks WHERE token = 1`).Scan(&expiresMS); err != nil {
		t.Fatal(err)
	}
	last, end := lastBeat(t, beats), time.UnixMilli(expiresMS)
	if !last.Before(end) {
		t.Fatalf("the command ran until %v, %v after its lease ended at %v", last, last.Sub(end), end)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	finish(t, p, time.Minute)
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("exit %d, stderr %q; want 5", code, stderr.String())
	}
}

// openPTY returns a new pseudo-terminal's master and slave.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// termRun starts dcsync lock run in a new session on a terminal, as an interactive shell
// starts a foreground job, and returns a reader of the terminal's output.
func (c *cli) termRun(args ...string) (*exec.Cmd, *os.File, chan string) {
	c.t.Helper()
	master, slave := openPTY(c.t)
	cmd := c.process(append([]string{"lock", "run"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	return cmd, master, lines
}

// expect reads terminal lines until one equals want, returning those before it.
func expect(t *testing.T, lines chan string, want string) []string {
	t.Helper()
	var seen []string
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("terminal closed before %q; saw %q", want, seen)
			}
			if l == want || strings.HasSuffix(l, "^C"+want) { // after the echo of a Ctrl-C
				return seen
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("no %q on the terminal within a minute; saw %q", want, seen)
		}
	}
}

// Ctrl-C on the terminal reaches the command once: not once from the terminal and once
// more forwarded by dcsync.
func TestLockRunCtrlCReachesCommandOnce(t *testing.T) {
	c := newCLI(t)
	cmd, master, lines := c.termRun("job", "--ttl", "30s", "--", "env", "DCSYNC_TEST_AS_MAIN=signals", os.Args[0])
	expect(t, lines, "ready")
	// A terminal sends Ctrl-C to its foreground process group. Were dcsync in it, it
	// would get the SIGINT too and forward it: a second one. (Two SIGINTs microseconds
	// apart can merge into one in the receiver, so counting them alone proves little.)
	fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		t.Fatal(err)
	}
	if fg == cmd.Process.Pid { // dcsync leads its session's first process group
		t.Fatalf("dcsync is in the terminal's foreground process group %d: a Ctrl-C reaches the command from the terminal and again from dcsync", fg)
	}
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	expect(t, lines, "INT")
	// A SIGTERM sent to dcsync is forwarded (once) and ends the helper: anything between
	// the two is a second SIGINT.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var between []string
	for _, l := range expect(t, lines, "TERM") {
		if strings.HasSuffix(l, "INT") {
			between = append(between, l)
		}
	}
	if len(between) != 0 {
		t.Fatalf("the command got SIGINT %d more time(s) after the first", len(between))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dcsync did not exit")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// Ctrl-Z stops the command and dcsync's job with it, as a shell job stops (the shell
// takes the terminal back and goes on); fg continues the command in the foreground,
// where the next Ctrl-C reaches it. The shell is bash with job control (-m).
func TestLockRunCtrlZStopsTheJob(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run a job-control shell")
	}
	c := newCLI(t)
	master, slave := openPTY(t)
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	job := []string{"env", "DCSYNC_TEST_AS_MAIN=1", os.Args[0], "--store", c.store, "--client", "app", "--farm", "dc1",
		"lock", "run", "job", "--ttl", "30s", "--", "env", "DCSYNC_TEST_AS_MAIN=signals", os.Args[0]}
	for i := range job {
		job[i] = quote(job[i])
	}
	// trap: a Ctrl-C that comes while the shell has the terminal (between the stop and
	// fg) must not end the shell; a caught signal is reset to default in the job.
	shell := exec.Command(bash, "--norc", "--noprofile", "-m", "-c",
		"trap : INT; "+strings.Join(job, " ")+`; echo "job-stopped $?"; fg >/dev/null; echo "job-done $?"`)
	shell.Stdin, shell.Stdout, shell.Stderr = slave, slave, slave
	shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shell.Process.Kill() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	expect(t, lines, "ready")
	dcsync := children(shell.Process.Pid)
	if len(dcsync) != 1 {
		t.Fatalf("shell children %v, want dcsync alone", dcsync)
	}
	// Should the shell die first, its job must not outlive the test.
	t.Cleanup(func() { _ = syscall.Kill(dcsync[0], syscall.SIGKILL) })
	if _, err := master.Write([]byte{26}); err != nil { // Ctrl-Z
		t.Fatal(err)
	}
	expectSuffix(t, lines, "job-stopped 148") // 128+SIGTSTP: the shell saw its job stop
	// The shell ran fg: the command is continued and is given the terminal again.
	waitFor(t, "a Ctrl-C reaches the continued command", time.Minute, func() bool {
		if _, err := master.Write([]byte{3}); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-lines:
			return strings.HasSuffix(l, "INT")
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if err := syscall.Kill(dcsync[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectSuffix(t, lines, "TERM")
	expectSuffix(t, lines, "job-done 0")
}

// expectSuffix reads terminal lines until one ends with want.
func expectSuffix(t *testing.T, lines chan string, want string) {
	t.Helper()
	var seen []string
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("terminal closed before %q; saw %q", want, seen)
			}
			if strings.HasSuffix(l, want) {
				return
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("no %q on the terminal within a minute; saw %q", want, seen)
		}
	}
}

// The command can read the terminal (it is the terminal's foreground job): a prompt
// does not stop it.
func TestLockRunCommandReadsTerminal(t *testing.T) {
	c := newCLI(t)
	cmd, master, lines := c.termRun("job", "--ttl", "30s", "--", "env", "DCSYNC_TEST_AS_MAIN=readline", os.Args[0])
	expect(t, lines, "ready")
	if _, err := master.Write([]byte("yes\n")); err != nil {
		t.Fatal(err)
	}
	expect(t, lines, "got:yes")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dcsync did not exit")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// An interrupted wait for a lock exits 130, as shells report SIGINT, not 3 ("held").
func TestInterruptedAcquireExits130(t *testing.T) {
	c := newCLI(t)
	c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	cmd := c.process("lock", "acquire", "job", "--wait", "5m")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// The store file is open once signal handling is set up.
	db := strings.TrimPrefix(c.store, "sqlite://")
	waitFor(t, "dcsync opens the store", time.Minute, func() bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); l == db {
				return true
			}
		}
		return false
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want 130 and one line", code, stderr.String())
	}
}
