package sqlite

import (
	"testing"
	"time"
)

// TestWriteGateUrgentFirst: while the gate is held, an urgent writer (a lease renewal)
// that arrives after non-urgent ones gets the gate before them; waiters of one kind
// get it in order of arrival; a waiter that gives up leaves the gate to the others,
// also when it was handed the gate as it gave up.
func TestWriteGateUrgentFirst(t *testing.T) {
	var g writeGate
	if !g.acquire(nil, nil, false) {
		t.Fatal("a free gate was not taken")
	}
	order := make(chan string, 4)
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; {
			g.mu.Lock()
			got := len(g.urgent) + len(g.normal)
			g.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", got, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	enter := func(name string, urgent bool) {
		go func() {
			if g.acquire(nil, nil, urgent) {
				order <- name
				g.release()
			}
		}()
	}
	gaveUp := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(gaveUp)
		if g.acquire(quit, nil, false) {
			t.Error("a waiter whose ctx ended got the gate")
		}
	}()
	waitFor(1)
	close(quit)
	<-gaveUp
	enter("normal-1", false)
	waitFor(1)
	enter("normal-2", false)
	waitFor(2)
	enter("urgent", true)
	waitFor(3)
	g.release()
	for _, want := range []string{"urgent", "normal-1", "normal-2"} {
		if got := <-order; got != want {
			t.Fatalf("got the gate: %s, want %s", got, want)
		}
	}
	if !g.acquire(nil, nil, true) {
		t.Fatal("the gate was not free after every writer left")
	}
	g.release()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		t.Fatal("the gate is held with no writer")
	}
}
