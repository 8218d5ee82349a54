//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rwCLI returns a CLI on a fresh SQLite file, skipping the test when the store keeps no
// registers (before SQLite's registers are merged).
func rwCLI(t *testing.T) *cli {
	c := newCLI(t)
	if _, errs, code := c.run("rwlock", "status", "probe"); code != 0 && strings.Contains(errs, "keeps no registers") {
		t.Skip("the SQLite store keeps no registers yet: " + errs)
	}
	return c
}

func TestRWLockCommands(t *testing.T) {
	c := rwCLI(t)
	if out := c.want(0, "rwlock", "status", "doc"); out != "writer free\nreaders 0 of 0 slots\n" {
		t.Fatalf("status of an unused name: %q", out)
	}
	c.want(2, "rwlock", "run", "doc", "--", "true")                      // neither --read nor --write
	c.want(2, "rwlock", "run", "doc", "--read", "--write", "--", "true") // both
	c.want(2, "rwlock", "run", "doc", "--read", "true")                  // no --
	c.want(127, "rwlock", "run", "doc", "--read", "--", "no-such-command-dcsync")

	out := c.want(0, "rwlock", "run", "doc", "--write", "--readers", "3", "--", "sh", "-c", `echo "$DCSYNC_RWLOCK_MODE $DCSYNC_LOCK_TOKEN"`)
	if out != "write 1\n" {
		t.Fatalf("write run printed %q, want mode write and token 1", out)
	}
	if out := c.want(7, "rwlock", "run", "doc", "--read", "--", "sh", "-c", `echo "$DCSYNC_RWLOCK_MODE"; exit 7`); out != "read\n" {
		t.Fatalf("read run printed %q", out)
	}

	// A reader holds (another process): readers share, writers are refused.
	holder := c.process("rwlock", "run", "doc", "--read", "--ttl", "1m", "--", "sleep", "120")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	waitFor(t, "the reader process holds", time.Minute, func() bool {
		out, _, _ := c.run("rwlock", "status", "doc")
		return strings.Contains(out, "readers 1 of 3 slots")
	})
	c.want(0, "rwlock", "run", "doc", "--read", "--", "true")
	c.want(3, "rwlock", "run", "doc", "--write", "--", "true")
	c.want(4, "rwlock", "run", "doc", "--write", "--wait", "300ms", "--", "true")
	c.want(9, "rwlock", "run", "doc", "--write", "--conflict-exit-code", "9", "--", "true")
	var st rwStatusJSON
	if err := json.Unmarshal([]byte(c.want(0, "rwlock", "status", "doc", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Slots != 3 || st.Writer != nil || len(st.Readers) != 1 || st.Readers[0].Slot == nil || st.Readers[0].Owner == "" {
		t.Fatalf("status --json while a reader holds: %+v", st)
	}

	// The reader ends (SIGTERM, forwarded to sleep): a writer gets in, with the next token.
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	out = c.want(0, "rwlock", "run", "doc", "--write", "--wait", "1m", "--", "sh", "-c", `echo "$DCSYNC_LOCK_TOKEN"`)
	if strings.TrimSpace(out) == "" || out == "1\n" {
		t.Fatalf("second writer's token %q, want one above 1", out)
	}
	if out := c.want(0, "rwlock", "status", "doc"); out != "writer free\nreaders 0 of 3 slots\n" {
		t.Fatalf("status after all ended: %q", out)
	}
}

// A writer that holds keeps readers out, and the level keys the read-write lock.
func TestRWLockRunWriterExcludesReaders(t *testing.T) {
	c := rwCLI(t)
	holder := c.process("rwlock", "run", "w", "--write", "--ttl", "1m", "--", "sleep", "120")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	waitFor(t, "the writer process holds", time.Minute, func() bool {
		out, _, _ := c.run("rwlock", "status", "w")
		return strings.HasPrefix(out, "writer held owner=")
	})
	c.want(3, "rwlock", "run", "w", "--read", "--", "true")
	c.want(4, "rwlock", "run", "w", "--read", "--wait", "300ms", "--", "true")
	c.want(0, "rwlock", "run", "w", "--read", "--level", "xdc", "--", "true") // another key
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	c.want(0, "rwlock", "run", "w", "--read", "--wait", "1m", "--", "true")
}
