package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
		t.Fatalf("%d violation(s):\n%v", rep.Violations(), rep)
	}
	if rep.Acquisitions == 0 || rep.LatchOps == 0 {
		t.Fatalf("the run did nothing: %v", rep)
	}
	return rep
}
