package storetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// Environment of a child process of the suite.
const (
	envRole = "DCSYNC_STORETEST_CHILD"
	envName = "DCSYNC_STORETEST_NAME"
	envN    = "DCSYNC_STORETEST_N"
	envFarm = "DCSYNC_STORETEST_FARM"
	envFile = "DCSYNC_STORETEST_FILE"
)

// ChildMain runs a child process's part of the multi-process cases, then exits. Call it
// first thing in the store's TestMain; it returns at once in the parent test process.
// open opens the store from the environment that Harness.ProcessEnv supplied.
func ChildMain(open func(ctx context.Context) (driver.Store, error)) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := runChild(ctx, role, open)
	if err != nil {
		fmt.Fprintf(os.Stderr, "storetest child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(ctx context.Context, role string, open func(ctx context.Context) (driver.Store, error)) error {
	s, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	name, farm := os.Getenv(envName), os.Getenv(envFarm)
	n, err := strconv.Atoi(os.Getenv(envN))
	if err != nil {
		return err
	}
	switch role {
	case "latch":
		m, err := latch.New(s, client, farm)
		if err != nil {
			return err
		}
		l, err := m.GetCountDown(name, latch.Level(dcsync.XDC))
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if _, err := l.CountDown(ctx); err != nil {
				return err
			}
		}
		return nil
	case "lock":
		m, err := lock.New(s, client, farm, lock.WithLevel(dcsync.XDC), lock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			return err
		}
		f, err := os.OpenFile(os.Getenv(envFile), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		for i := 0; i < n; i++ {
			l, err := m.Acquire(ctx, name, lock.TTL(time.Minute), lock.Wait(2*time.Minute))
			if err != nil {
				return err
			}
			// Under the lock: the parent checks that no two start/end pairs interleave.
			if _, err := fmt.Fprintf(f, "start %d %d\n", os.Getpid(), l.Token()); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
			if _, err := fmt.Fprintf(f, "end %d %d\n", os.Getpid(), l.Token()); err != nil {
				return err
			}
			if err := l.Release(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// spawn starts procs children of the test binary in role, and waits for all of them.
func spawn(t *testing.T, h Harness, procs int, role, name string, n int, file string) {
	t.Helper()
	env := append(os.Environ(), h.ProcessEnv(t)...)
	env = append(env, envRole+"="+role, envName+"="+name, envN+"="+strconv.Itoa(n), envFile+"="+file)
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*strings.Builder, procs)
	for i := range cmds {
		farm := h.Farm
		if i%2 == 1 {
			farm = h.OtherFarm
		}
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(env, envFarm+"="+farm)
		outs[i] = &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		must(t, cmds[i].Start(), "start child")
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d (%s): %v\n%s", i, role, err, outs[i])
		}
	}
}

func runProcesses(t *testing.T, h Harness) {
	const procs = 4

	t.Run("LatchCountDownIsExact", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		m := h.latches(t, s, h.Farm)
		name := unique(t)
		const each = 25
		l, err := m.CreateCountDown(ctx, name, procs*each, latch.Level(dcsync.XDC))
		must(t, err, "create")
		waited := make(chan error, 1)
		go func() { waited <- l.Wait(ctx) }()
		spawn(t, h, procs, "latch", name, each, "")
		if n, err := l.Count(ctx); err != nil || n != 0 {
			t.Fatalf("count after %d processes x %d count-downs = %d, %v; want exactly 0", procs, each, n, err)
		}
		must(t, <-waited, "Wait while other processes count down")
	})

	t.Run("LockIsExclusiveAcrossProcesses", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "critical.log")
		must(t, os.WriteFile(file, nil, 0o644), "create log")
		const each = 10
		spawn(t, h, procs, "lock", unique(t), each, file)
		f, err := os.Open(file)
		must(t, err, "open log")
		defer f.Close()
		var lines []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if len(lines) != 2*procs*each {
			t.Fatalf("log has %d lines, want %d", len(lines), 2*procs*each)
		}
		var last uint64
		for i := 0; i < len(lines); i += 2 {
			var pid1, pid2 int
			var tok1, tok2 uint64
			if _, err := fmt.Sscanf(lines[i], "start %d %d", &pid1, &tok1); err != nil {
				t.Fatalf("line %d %q: %v (two holders at once?)", i, lines[i], err)
			}
			if _, err := fmt.Sscanf(lines[i+1], "end %d %d", &pid2, &tok2); err != nil || pid1 != pid2 || tok1 != tok2 {
				t.Fatalf("lines %d-%d interleave: %q then %q: two holders at once", i, i+1, lines[i], lines[i+1])
			}
			if tok1 <= last {
				t.Fatalf("token %d after %d: not strictly increasing across processes", tok1, last)
			}
			last = tok1
		}
	})
}
