package rwlock

import "testing"

// ParseLockName reads back every name writerName and slotName build, and nothing else.
func TestParseLockName(t *testing.T) {
	for _, n := range []string{"a", "rw", "x:1:y", "a/w", "rwlock:2:rw/w"} {
		if got, w, _, ok := ParseLockName(writerName(n)); !ok || got != n || !w {
			t.Errorf("ParseLockName(%q) = %q, %v, %v; want %q, writer", writerName(n), got, w, ok, n)
		}
		for _, i := range []int{0, 1, 10, MaxReaders - 1} {
			if got, w, slot, ok := ParseLockName(slotName(n, i)); !ok || got != n || w || slot != i {
				t.Errorf("ParseLockName(%q) = %q, %v, %d, %v; want %q, slot %d", slotName(n, i), got, w, slot, ok, n, i)
			}
		}
	}
	for _, s := range []string{"rw", base("rw"), "rwlock:2:rw/", "rwlock:2:rw/r", "rwlock:2:rw/r01", "rwlock:2:rw/W",
		"rwlock:2:rw/wx", "rwlock:2:rw/0", "rwlock:3:rw/w", "election:2:rw", "semaphore:2:rw/0"} {
		if got, w, slot, ok := ParseLockName(s); ok {
			t.Errorf("ParseLockName(%q) = %q, %v, %d, true; want false", s, got, w, slot)
		}
	}
}

func TestParseReaders(t *testing.T) {
	if n, err := ParseReaders([]byte(`{"readers":4}`)); err != nil || n != 4 {
		t.Fatalf("ParseReaders = %d, %v", n, err)
	}
	if _, err := ParseReaders([]byte(`{"readers":0}`)); err == nil {
		t.Fatal("ParseReaders of 0: no error")
	}
}
