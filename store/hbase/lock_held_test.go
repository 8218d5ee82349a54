package hbase

import (
	"fmt"
	"testing"
	"time"
)

// TestHeldLocksBounded (no server): the memory of held locks stops at maxHeld, and once
// full it drops the leases that have ended to take a new one; a live lease is never
// dropped for it.
func TestHeldLocksBounded(t *testing.T) {
	var h heldLocks
	ended := heldLock{r: lockRow{expires: time.Now().Add(-time.Second)}}
	live := heldLock{r: lockRow{expires: time.Now().Add(time.Hour)}}
	for i := 0; i < maxHeld; i++ {
		l := ended
		if i%2 == 0 {
			l = live
		}
		h.remember([]byte(fmt.Sprint("row", i)), "o", l)
	}
	if h.size() != maxHeld {
		t.Fatalf("%d remembered, want %d", h.size(), maxHeld)
	}
	h.remember([]byte("new"), "o", live)
	if _, ok := h.get([]byte("new"), "o"); !ok {
		t.Fatal("a full memory of ended leases did not take a new lock")
	}
	if h.size() != maxHeld/2+1 {
		t.Fatalf("%d remembered after the sweep, want the %d live ones and the new one", h.size(), maxHeld/2)
	}
	for i := 0; i < maxHeld; i += 2 {
		if _, ok := h.get([]byte(fmt.Sprint("row", i)), "o"); !ok {
			t.Fatalf("live lease %d dropped", i)
		}
	}
}
