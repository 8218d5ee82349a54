//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// When the hold's lease is lost (W freed by owner id behind the writer's back, or the
// reader's slot), rwlock run stops the command and exits 5, as lock run does; the
// read-write lock is free afterwards.
func TestReviewRWLockRunStopsCommandWhenLeaseIsLost(t *testing.T) {
	c := rwCLI(t)
	for _, mode := range []string{"--write", "--read"} {
		name := "lost" + strings.TrimPrefix(mode, "--")
		owner := filepath.Join(t.TempDir(), "owner")
		p := c.process("rwlock", "run", name, mode, "--readers", "2", "--ttl", "10s", "--kill-after", "1s", "--",
			"sh", "-c", `echo "$DCSYNC_LOCK_OWNER" > `+owner+`.tmp && mv `+owner+`.tmp `+owner+`; exec sleep 120`)
		var stderr strings.Builder
		p.Stderr = &stderr
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		var id string
		for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(owner); err == nil {
				id = strings.TrimSpace(string(b))
				break
			}
			if time.Now().After(end) {
				_ = p.Process.Kill()
				<-done
				t.Fatalf("%s: the command did not start: %s", mode, stderr.String())
			}
		}
		// The hold's lock: W, or one of the 2 slots (the status line says which).
		key := "rwlock:" + strconv.Itoa(len(name)) + ":" + name + "/w"
		if mode == "--read" {
			st := c.want(0, "rwlock", "status", name)
			i := strings.Index(st, "reader slot=")
			if i < 0 {
				t.Fatalf("status while a reader holds: %q", st)
			}
			key = "rwlock:" + strconv.Itoa(len(name)) + ":" + name + "/r" + st[i+len("reader slot="):i+len("reader slot=")+1]
		}
		c.want(0, "lock", "release", key, "--owner", id)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = p.Process.Kill()
			<-done
			t.Fatalf("%s: rwlock run still running two minutes after its hold was freed behind its back: %s", mode, stderr.String())
		}
		if code := p.ProcessState.ExitCode(); code != exitNotOwner || !strings.Contains(stderr.String(), "lost") {
			t.Fatalf("%s: rwlock run exited %d, stderr %q; want %d and the lease lost", mode, code, stderr.String(), exitNotOwner)
		}
		if st := c.want(0, "rwlock", "status", name); st != "writer free\nreaders 0 of 2 slots\n" {
			t.Fatalf("%s: status after the loss: %q", mode, st)
		}
	}
}
