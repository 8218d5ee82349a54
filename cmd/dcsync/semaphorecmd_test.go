package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/memory"
)

var permitRE = regexp.MustCompile(`(?m)^slot=(\d+) owner=([0-9a-f]{32}) token=(\d+)$`)

// semaphoreCLI returns a CLI on a fresh SQLite file.
func semaphoreCLI(t *testing.T) *cli { return newCLI(t) }

func TestSemaphoreCommands(t *testing.T) {
	c := semaphoreCLI(t)
	out := c.want(0, "semaphore", "acquire", "pool", "--permits", "3", "-n", "2", "--ttl", "1m")
	got := permitRE.FindAllStringSubmatch(out, -1)
	if len(got) != 2 || got[0][1] == got[1][1] {
		t.Fatalf("acquire -n 2 printed %q: want two lines of distinct slots", out)
	}
	c.want(3, "semaphore", "acquire", "pool", "--permits", "3", "-n", "2")
	c.want(4, "semaphore", "acquire", "pool", "--permits", "3", "-n", "2", "--wait", "200ms")
	c.want(2, "semaphore", "acquire", "pool", "--permits", "3", "-n", "4") // n > N: nothing written
	if _, errs, code := c.run("semaphore", "acquire", "pool", "--permits", "5"); code != 1 || !strings.Contains(errs, "has 3 permits, not 5") {
		t.Fatalf("acquire with another N: exit %d, stderr %q; want 1 naming the stored N", code, errs)
	}
	c.want(2, "semaphore", "acquire", "pool")                              // no --permits
	c.want(2, "semaphore", "acquire", "pool", "--permits", "3", "-n", "0") // n < 1
	st := c.want(0, "semaphore", "status", "pool")
	if !strings.HasPrefix(st, "permits=3 held=2\n") || len(permitRE.FindAllString(st, -1)) != 0 || strings.Count(st, "owner="+got[0][2]) != 1 {
		t.Fatalf("status printed %q", st)
	}
	var j semaphoreJSON
	if err := json.Unmarshal([]byte(c.want(0, "semaphore", "status", "pool", "--json")), &j); err != nil || j.Permits != 3 || len(j.Held) != 2 || j.Name != "pool" || j.Farm != "dc1" {
		t.Fatalf("status --json: %+v, %v", j, err)
	}
	c.want(5, "semaphore", "release", "pool", "--owner", strings.Repeat("0", 32))
	c.want(0, "semaphore", "release", "pool", "--owner", got[0][2], "--owner", got[1][2])
	c.want(5, "semaphore", "release", "pool", "--owner", got[0][2])
	if st := c.want(0, "semaphore", "status", "pool"); st != "permits=3 held=0\n" {
		t.Fatalf("status after release printed %q", st)
	}
	// Resize: growing applies at once; the old N is then refused.
	c.want(0, "semaphore", "resize", "pool", "--permits", "4")
	out = c.want(0, "semaphore", "acquire", "pool", "--permits", "4", "-n", "4", "--json")
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Permits != 4 || len(j.Held) != 4 {
		t.Fatalf("acquire --json: %+v, %v", j, err)
	}
	c.want(1, "semaphore", "acquire", "pool", "--permits", "3")
	// A shrink with permits above the new N held waits for them: here until --timeout.
	c.want(4, "semaphore", "resize", "pool", "--permits", "2", "--timeout", "300ms")
	c.want(1, "semaphore", "status", "absent")
	c.want(1, "semaphore", "resize", "absent", "--permits", "2")
}

// semaphore run reuses lock run's guardian: the command gets the permits' slots and
// tokens, the permits are released when it exits, and its exit code is the command's.
func TestSemaphoreRun(t *testing.T) {
	c := semaphoreCLI(t)
	out, errs, code := c.run("semaphore", "run", "jobs", "--permits", "2", "-n", "2", "--ttl", "10s", "--",
		"sh", "-c", `echo "$DCSYNC_SEMAPHORE_SLOTS $DCSYNC_SEMAPHORE_TOKENS"; exit 7`)
	if code != 7 || (out != "0,1 1,1\n" && out != "1,0 1,1\n") {
		t.Fatalf("semaphore run: exit %d, stdout %q, stderr %q; want 7 and both slots with token 1", code, out, errs)
	}
	if st := c.want(0, "semaphore", "status", "jobs"); st != "permits=2 held=0\n" {
		t.Fatalf("permits not released after run: %q", st)
	}
	c.want(0, "semaphore", "acquire", "jobs", "--permits", "2", "--ttl", "1m")
	c.want(3, "semaphore", "run", "jobs", "--permits", "2", "-n", "2", "--", "true")
	c.want(75, "semaphore", "run", "jobs", "--permits", "2", "-n", "2", "--conflict-exit-code", "75", "--", "true")
	c.want(4, "semaphore", "run", "jobs", "--permits", "2", "-n", "2", "--wait", "100ms", "--", "true")
	c.want(0, "semaphore", "run", "jobs", "--permits", "2", "--", "true") // one is free
	c.want(2, "semaphore", "run", "jobs", "--", "true")                   // no --permits
}

// When a permit's lease is lost (freed by owner id behind the holder's back), semaphore
// run stops the command and exits 5, as lock run does.
func TestSemaphoreRunStopsCommandWhenAPermitIsLost(t *testing.T) {
	c := semaphoreCLI(t)
	owners := filepath.Join(t.TempDir(), "owners")
	p := c.process("semaphore", "run", "jobs", "--permits", "3", "-n", "2", "--ttl", "10s", "--kill-after", "1s", "--",
		"sh", "-c", `echo "$DCSYNC_SEMAPHORE_OWNERS" > `+owners+`.tmp && mv `+owners+`.tmp `+owners+`; exec sleep 120`)
	var stderr strings.Builder
	p.Stderr = &stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	var ids []string
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(owners); err == nil {
			ids = strings.Split(strings.TrimSpace(string(b)), ",")
			break
		}
		if time.Now().After(end) {
			_ = p.Process.Kill()
			<-done
			t.Fatalf("the command did not start: %s", stderr.String())
		}
	}
	if len(ids) != 2 {
		t.Fatalf("DCSYNC_SEMAPHORE_OWNERS = %q: want two owners", ids)
	}
	c.want(0, "semaphore", "release", "jobs", "--owner", ids[1])
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = p.Process.Kill()
		<-done
		t.Fatalf("semaphore run still running two minutes after a permit was freed behind its back: %s", stderr.String())
	}
	if code := p.ProcessState.ExitCode(); code != exitNotOwner || !strings.Contains(stderr.String(), "lost") {
		t.Fatalf("semaphore run exited %d, stderr %q; want %d and the lease lost", code, stderr.String(), exitNotOwner)
	}
	if st := c.want(0, "semaphore", "status", "jobs"); st != "permits=3 held=0\n" {
		t.Fatalf("the other permit not released after the loss: %q", st)
	}
}

// semaphore run's lease clock keeps an end per permit and the earliest counts: a
// permit renewed later does not extend the lease of one renewed earlier.
func TestLeaseClockEarliestPermitCounts(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	lc := newLeaseClock(s)
	k1 := dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "p/0"}
	k2 := dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "p/1"}
	if _, err := lc.AcquireLock(ctx, k1, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	e1 := lc.End()
	if _, err := lc.AcquireLock(ctx, k2, "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if !lc.End().Equal(e1) {
		t.Fatalf("End %v after a second permit of an hour; want the first permit's %v", lc.End(), e1)
	}
	if _, err := lc.RefreshLock(ctx, k1, "a", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if e := lc.End(); !e.After(e1.Add(30*time.Minute)) || e.After(time.Now().Add(time.Hour)) {
		t.Fatalf("End %v after renewing the first permit for 2h: want the second permit's end (an hour)", e)
	}
	if err := lc.ReleaseLock(ctx, k2, "b"); err != nil {
		t.Fatal(err)
	}
	if e := lc.End(); !e.After(time.Now().Add(90 * time.Minute)) {
		t.Fatalf("End %v after releasing the second permit: want the first's 2h end", e)
	}
}
