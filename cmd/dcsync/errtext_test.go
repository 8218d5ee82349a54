package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
)

// lockErrorsInUsersWords checks the CLI's two lock errors on c's store: one sentence
// naming the lock and the owner, with no call path unless --verbose; the same words on
// every store (each store's CLI test calls it).
func lockErrorsInUsersWords(t *testing.T, c *cli, name string) {
	t.Helper()
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", name, "--ttl", "1m"))
	if m == nil {
		t.Fatal("acquire printed no owner")
	}
	held := regexp.MustCompile(`^dcsync: lock "` + name + `" is held by ` + m[1] + ` for (\d+m)?\d+s more\n$`)
	_, errs, code := c.run("lock", "acquire", name)
	if code != exitHeld || !held.MatchString(errs) {
		t.Errorf("acquire of a held lock: exit %d, stderr %q; want 3 and %s", code, errs, held)
	}
	_, errs, code = c.run("lock", "run", name, "--", "true")
	if code != exitHeld || !held.MatchString(errs) {
		t.Errorf("lock run of a held lock: exit %d, stderr %q; want 3 and %s", code, errs, held)
	}
	_, errs, code = c.run("lock", "acquire", name, "--wait", "100ms")
	if waited := `^dcsync: waited 100ms: ` + strings.TrimPrefix(held.String(), "^dcsync: "); code != exitTimeout || !regexp.MustCompile(waited).MatchString(errs) {
		t.Errorf("acquire --wait of a held lock: exit %d, stderr %q; want 4 and %s", code, errs, waited)
	}
	_, errs, code = c.run("--verbose", "lock", "acquire", name)
	if code != exitHeld || !strings.Contains(errs, "lock.Acquire: ") || strings.Count(errs, "\n") != 1 {
		t.Errorf("--verbose acquire of a held lock: exit %d, stderr %q; want 3 and the call path on one line", code, errs)
	}
	for _, args := range [][]string{{"lock", "release", name, "--owner", "someone"}, {"lock", "refresh", name, "--owner", "someone"}} {
		_, errs, code = c.run(args...)
		if want := `dcsync: lock "` + name + `" is not held by someone` + "\n"; code != exitNotOwner || errs != want {
			t.Errorf("%s by another owner: exit %d, stderr %q; want 5 and %q", args[1], code, errs, want)
		}
	}
	c.want(0, "lock", "release", name, "--owner", m[1])
}

func TestLockErrorsInUsersWords(t *testing.T) {
	lockErrorsInUsersWords(t, newCLI(t), "nightly")
}

// Without --verbose no error carries the library's call path (an Op), whatever wraps
// it; a wrapper's own words stay.
func TestPlainErrorDropsCallPaths(t *testing.T) {
	inner := &dcsync.Error{Code: dcsync.NotFound, Op: "sqlite.ReadLatches", Msg: "latch x does not exist"}
	outer := &dcsync.Error{Code: dcsync.NotFound, Op: "latch.Count", Err: inner}
	err := withCode(exitError, fmt.Errorf("reading: %w", outer))
	if got, want := errorText(err, false), "reading: not found: latch x does not exist"; got != want {
		t.Errorf("errorText = %q, want %q", got, want)
	}
	if got := errorText(err, true); !strings.Contains(got, "latch.Count: ") || !strings.Contains(got, "sqlite.ReadLatches: ") {
		t.Errorf("errorText --verbose = %q, want the call path", got)
	}
	if !errors.Is(plainError(err), dcsync.ErrNotFound) {
		t.Error("plainError lost the error's code")
	}
}
