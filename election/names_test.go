package election

import "testing"

// ParseLockName reads back every name lockName builds, and nothing else.
func TestParseLockName(t *testing.T) {
	for _, n := range []string{"a", "sched", "x:1:y", "a/b", "election:3:abc", "名前"} {
		if got, ok := ParseLockName(lockName(n)); !ok || got != n {
			t.Errorf("ParseLockName(%q) = %q, %v; want %q", lockName(n), got, ok, n)
		}
	}
	for _, s := range []string{"sched", "election:5:sched/0", "election:4:sched", "election:6:sched",
		"election:05:sched", "semaphore:5:sched/0", "rwlock:5:sched/w", "election:0:"} {
		if got, ok := ParseLockName(s); ok {
			t.Errorf("ParseLockName(%q) = %q, true; want false", s, got)
		}
	}
}

func TestParseRecord(t *testing.T) {
	tok, v, err := ParseRecord(record{token: 7, value: "host:1"}.encode())
	if err != nil || tok != 7 || v != "host:1" {
		t.Fatalf("ParseRecord = %d, %q, %v", tok, v, err)
	}
	if _, _, err := ParseRecord([]byte{2, 0, 0, 0, 0, 0, 0, 0, 7}); err == nil {
		t.Fatal("ParseRecord of version 2: no error")
	}
}
