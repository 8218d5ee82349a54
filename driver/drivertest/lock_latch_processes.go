package drivertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// childLatch counts an XDC latch down env.n times from farm env.farm.
func childLatch(ctx context.Context, s driver.Store, env childEnv) error {
	m, err := latch.New(s, client, env.farm)
	if err != nil {
		return err
	}
	l, err := m.GetCountDown(env.name, latch.Level(dcsync.XDC))
	if err != nil {
		return err
	}
	for i := 0; i < env.n; i++ {
		if _, err := l.CountDown(ctx); err != nil {
			return err
		}
	}
	return nil
}

// childLock takes an XDC lock env.n times from farm env.farm and, under it, appends a
// start and an end line to the file env.arg.
func childLock(ctx context.Context, s driver.Store, env childEnv) error {
	m, err := lock.New(s, client, env.farm, lock.WithLevel(dcsync.XDC), lock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(env.arg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 0; i < env.n; i++ {
		l, err := m.Acquire(ctx, env.name, lock.TTL(time.Minute), lock.Wait(2*time.Minute))
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

// runProcesses runs the lock and latch cases across OS processes.
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
		checkExclusiveLog(t, readLines(t, file), 2*procs*each, "holders")
	})
}

// checkExclusiveLog checks the lines that processes holding an exclusive thing (a lock,
// a leadership) appended under it, "start PID TOKEN" then "end PID TOKEN": want lines,
// no two start/end pairs interleaving (else two whose, e.g. "holders", at once), tokens
// strictly increasing down the file.
func checkExclusiveLog(t *testing.T, lines []string, want int, whose string) {
	t.Helper()
	if len(lines) != want {
		t.Fatalf("log has %d lines, want %d", len(lines), want)
	}
	var last uint64
	for i := 0; i+1 < len(lines); i += 2 {
		var pid1, pid2 int
		var tok1, tok2 uint64
		if _, err := fmt.Sscanf(lines[i], "start %d %d", &pid1, &tok1); err != nil {
			t.Fatalf("line %d %q: %v (two %s at once?)", i, lines[i], err, whose)
		}
		if _, err := fmt.Sscanf(lines[i+1], "end %d %d", &pid2, &tok2); err != nil || pid1 != pid2 || tok1 != tok2 {
			t.Fatalf("lines %d-%d interleave: %q then %q: two %s at once", i, i+1, lines[i], lines[i+1], whose)
		}
		if tok1 <= last {
			t.Fatalf("token %d after %d: not strictly increasing across processes", tok1, last)
		}
		last = tok1
	}
}
