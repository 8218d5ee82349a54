package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// The lock is not reentrant (README, "Coming from Redisson, Curator or etcd"): a lock
// its own manager holds is refused to TryAcquire and waited for by Acquire, exactly as
// a lock another process holds; the holder keeps it and its token.
func TestNotReentrant(t *testing.T) {
	ctx := context.Background()
	m, err := lock.New(memory.New(), "app", "dc1", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := m.TryAcquire(ctx, "job"); dcsync.CodeOf(err) != dcsync.LockUnavailable {
		t.Fatalf("TryAcquire of a lock this manager holds = %v, %v; want LockUnavailable", again, err)
	}
	if again, err := m.Acquire(ctx, "job", lock.Wait(100*time.Millisecond)); dcsync.CodeOf(err) != dcsync.LockUnavailable {
		t.Fatalf("Acquire of a lock this manager holds = %v, %v; want LockUnavailable after the wait", again, err)
	}
	if st, err := m.Inspect(ctx, "job"); err != nil || st.Owner != l.Owner() || st.Token != l.Token() || !l.Held() {
		t.Fatalf("after the refused re-acquisitions: %+v, %v; want the first holder, token %d", st, err, l.Token())
	}
}
