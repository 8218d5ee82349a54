package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// latchRun runs dcsync in this process against store and returns stdout, stderr and the
// exit code.
func latchRun(store string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(append([]string{"--store", store, "--client", "app", "--farm", "dc1"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// TestLatchAwaitNegativeTimeout pins defect 5 (CLI side): `latch await --timeout -1s`
// waited for ever. A negative timeout is a usage error (exit 2), as timeout(1) refuses
// one; it runs as a separate process so that the old hang fails the test instead of
// hanging it.
func TestLatchAwaitNegativeTimeout(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "cli.db")
	if _, errs, code := latchRun(store, "latch", "create", "x", "--count", "1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "--store", store, "--client", "app", "--farm", "dc1",
		"latch", "await", "x", "--timeout", "-1s")
	cmd.Env = append(os.Environ(), "DCSYNC_TEST_AS_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("await --timeout -1s: %v (ctx: %v), want exit 2\nstderr: %s", err, ctx.Err(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "--timeout") {
		t.Fatalf("stderr %q does not name --timeout", stderr.String())
	}
	// 0 still means no limit, and a positive timeout still ends in exit 4.
	if _, errs, code := latchRun(store, "latch", "await", "x", "--timeout", "100ms"); code != 4 {
		t.Fatalf("await --timeout 100ms: exit %d, want 4: %s", code, errs)
	}
}

// TestLatchCountOverflow pins defect 6 (CLI side): after `latch create big --count
// MaxInt64`, `countup` printed -9223372036854775808 and await said done. The update is
// refused (exit 2, nothing on stdout), the count is unchanged and await still waits.
func TestLatchCountOverflow(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "cli.db")
	const max = "9223372036854775807"
	if _, errs, code := latchRun(store, "latch", "create", "big", "--count", max); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	out, errs, code := latchRun(store, "latch", "countup", "big")
	if code != 2 || out != "" {
		t.Fatalf("countup at MaxInt64: exit %d, stdout %q, stderr %q; want exit 2 and no count", code, out, errs)
	}
	if out, _, code := latchRun(store, "latch", "count", "big"); code != 0 || out != max+"\n" {
		t.Fatalf("count after the refused countup: exit %d, %q; want %s", code, out, max)
	}
	if out, errs, code := latchRun(store, "latch", "await", "big", "--timeout", "100ms"); code != 4 || strings.Contains(out, "done") {
		t.Fatalf("await: exit %d, stdout %q, stderr %q; want exit 4 (timed out)", code, out, errs)
	}
}
