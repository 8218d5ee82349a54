package javaclients

import (
	"os"
	"testing"
	"time"
)

// ContentionTime is how long a mixed contention test runs: DCSYNC_JAVA_CONTENTION (a Go
// duration), 15s by default.
func ContentionTime(t testing.TB) time.Duration {
	t.Helper()
	d := 15 * time.Second
	if v := os.Getenv("DCSYNC_JAVA_CONTENTION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("DCSYNC_JAVA_CONTENTION=%q: %v", v, err)
		}
	}
	return d
}

// CheckMixed logs a mixed run's figures (run says what ran) and checks what dcsync
// guarantees whoever else contends: both sides acquired the lock, no Java worker
// failed, no two dcsync holders overlapped unless one was told (its release returned
// LockLost because a Java release deleted its lock), and fencing tokens increase from
// one dcsync hold to the next.
func CheckMixed(t testing.TB, res MixedResult, run string) {
	t.Helper()
	r := res.Report
	t.Logf("%s: %v", run, r)
	t.Logf("dcsync releases that found their lock gone (LockLost): %d; dcsync waits that timed out: %d; Java waits that timed out: %d",
		res.DcsyncLost, res.DcsyncWaitTimeouts, res.Java.WaitTimeouts)
	for _, ex := range r.Examples {
		t.Logf("overlap: %s", ex)
	}
	if r.Acquisitions[KindJava] == 0 || r.Acquisitions[KindDcsync] == 0 {
		t.Fatalf("both sides must acquire the lock: %v", r.Acquisitions)
	}
	if res.Java.Errors > 0 {
		t.Errorf("Java workers failed %d times: %v", res.Java.Errors, res.Java.FirstErrors)
	}
	for _, v := range UnexplainedDcsyncOverlaps(res.Holds) {
		t.Errorf("two dcsync holders overlapped: %s", v)
	}
	for _, v := range TokenOrderViolations(res.Holds) {
		t.Errorf("fencing: %s", v)
	}
}
