package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// RunT runs sc in a test: it fills in what sc leaves out (10 s, a 1 s lease, an XDC
// latch, a unique name, the test binary as the child), logs the report (one line per
// store, the figures of docs/reliability.md), and fails t when a history is not
// linearizable or the run did nothing.
func RunT(t testing.TB, sc Scenario) Report {
	t.Helper()
	if sc.Duration == 0 {
		sc.Duration = 10 * time.Second
	}
	if sc.TTL == 0 {
		sc.TTL = time.Second
	}
	if sc.Level == 0 {
		sc.Level = dcsync.XDC
	}
	if sc.Name == "" {
		sc.Name = fmt.Sprintf("chaos-%d", time.Now().UnixNano())
	}
	if sc.Child == nil {
		sc.Child = func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
	}
	rep, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos %s: %v", t.Name(), rep)
	if rep.Violations() != 0 {
		logLockHistory(t, rep.FailedLock)
		t.Fatalf("%d violation(s):\n%v", rep.Violations(), rep)
	}
	if rep.Acquisitions == 0 || rep.LatchOps == 0 {
		t.Fatalf("the run did nothing: %v", rep)
	}
	if p := rep.Primitives; p != nil && (p.Election.Holds == 0 || p.Semaphore.Holds == 0 || p.RWLock.Holds == 0) {
		t.Fatalf("the primitives' workers held nothing of one of them: %v", rep)
	}
	// A run asked for a volume must check it: a checker that saw a few hundred
	// operations proves less than the figures in docs/reliability.md say.
	if checked := 2 * rep.Lock.Holds; sc.MinLockOps > 0 && checked < sc.MinLockOps {
		t.Fatalf("the run checked %d lock operations in %v, fewer than the %d asked for (MaxDuration too short for this machine?): %v",
			checked, rep.Ran.Round(100*time.Millisecond), sc.MinLockOps, rep)
	}
	return rep
}

// logLockHistory logs the history of the lock found not linearizable: its acquisitions
// and exits, and of each hold its first and last claim.
func logLockHistory(t testing.TB, recs []Record) {
	t.Helper()
	if len(recs) == 0 {
		return
	}
	type holdKey struct {
		client int
		token  uint64
	}
	first, last := map[holdKey]int64{}, map[holdKey]int64{}
	for _, r := range recs {
		if r.Kind == KindClaim {
			k := holdKey{r.Client, r.Token}
			if _, ok := first[k]; !ok {
				first[k] = r.At
			}
			last[k] = r.At
		}
	}
	t0 := recs[0].At
	var b strings.Builder
	for _, r := range recs {
		ms := float64(r.At-t0) / 1e6
		switch {
		case r.Kind != KindClaim:
			fmt.Fprintf(&b, "  %10.3f ms  client %d  %s %s token=%d %s\n", ms, r.Client, r.Kind, r.Phase, r.Token, r.Outcome)
		case first[holdKey{r.Client, r.Token}] == r.At:
			fmt.Fprintf(&b, "  %10.3f ms  client %d  first claim token=%d\n", ms, r.Client, r.Token)
		case last[holdKey{r.Client, r.Token}] == r.At:
			fmt.Fprintf(&b, "  %10.3f ms  client %d  last claim token=%d\n", ms, r.Client, r.Token)
		}
	}
	t.Logf("history of lock %d (times from its first record):\n%s", recs[0].Lock, b.String())
}
