package semaphore

import "testing"

// ParseSlotName reads back every name slotName builds, and nothing else.
func TestParseSlotName(t *testing.T) {
	for _, n := range []string{"a", "pool", "x:1:y", "a/7", "semaphore:3:abc/1"} {
		for _, i := range []int{0, 1, 9, 10, MaxPermits - 1} {
			if got, slot, ok := ParseSlotName(slotName(n, i)); !ok || got != n || slot != i {
				t.Errorf("ParseSlotName(%q) = %q, %d, %v; want %q, %d", slotName(n, i), got, slot, ok, n, i)
			}
		}
	}
	for _, s := range []string{"pool", regName("pool"), "semaphore:4:pool/", "semaphore:4:pool/01", "semaphore:4:pool/x",
		"semaphore:4:pool/-1", "semaphore:4:pool7", "election:4:pool", "rwlock:4:pool/r0", "semaphore:5:pool/0"} {
		if got, slot, ok := ParseSlotName(s); ok {
			t.Errorf("ParseSlotName(%q) = %q, %d, true; want false", s, got, slot)
		}
	}
}

func TestParseCount(t *testing.T) {
	n, max, err := ParseCount(count{N: 3, Max: 5}.encode())
	if err != nil || n != 3 || max != 5 {
		t.Fatalf("ParseCount = %d, %d, %v", n, max, err)
	}
	if _, _, err := ParseCount([]byte{1, 0, 0}); err == nil {
		t.Fatal("ParseCount of N 0: no error")
	}
}
