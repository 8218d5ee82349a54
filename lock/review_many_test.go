package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// GUARD (passes on main; adversarial review, issue 15): locks taken by TryAcquireMany
// (the queue's batched partition moves) are kept by KeepAlive past several leases,
// with their tokens, and ReleaseMany ends the KeepAlives and frees them. The existing
// test releases before any renewal is due, so a batch-acquired lock whose KeepAlive
// never renewed (a wrong TTL or send time given to newLock) passed it. The wait
// (2.5 leases) is a bound that holds whatever the timing: a renewal that works keeps
// the lock however late it runs within the lease.
func TestReviewTryAcquireManyLocksAreKeptAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 25 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	const ttl = 10 * time.Second
	m, err := lock.New(s, "c", "f", lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"p0", "p1", "p2"}
	taken, err := m.TryAcquireMany(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	var lks []*lock.Lock
	var kctxs []context.Context
	for i, tk := range taken {
		if tk.Err != nil {
			t.Fatalf("lock %d: %v", i, tk.Err)
		}
		lks = append(lks, tk.Lock)
		kctxs = append(kctxs, tk.Lock.KeepAlive(ctx))
	}
	time.Sleep(ttl*2 + ttl/2)
	for i, lk := range lks {
		if err := kctxs[i].Err(); err != nil {
			t.Fatalf("KeepAlive of batch-acquired lock %d ended: %v", i, context.Cause(kctxs[i]))
		}
		st, err := m.Inspect(ctx, names[i])
		if err != nil || st.Owner != lk.Owner() || st.Token != lk.Token() {
			t.Fatalf("batch-acquired lock %d after 2.5 leases: %+v, %v; want held by %s with token %d", i, st, err, lk.Owner(), lk.Token())
		}
	}
	for i, err := range m.ReleaseMany(ctx, lks) {
		if err != nil {
			t.Fatalf("ReleaseMany %d: %v", i, err)
		}
	}
	for i := range lks {
		if kctxs[i].Err() == nil {
			t.Fatalf("ReleaseMany left the KeepAlive of lock %d running", i)
		}
		if _, err := m.Inspect(ctx, names[i]); !errors.Is(err, dcsync.ErrNotFound) {
			t.Fatalf("lock %d after ReleaseMany: %v, want NotFound", i, err)
		}
	}
}
