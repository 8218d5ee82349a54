package javaclients

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
)

// JavaLock is the Java library's lock of one name, as a Java service uses it through
// the tool.
type JavaLock struct {
	TryAcquire func(ctx context.Context, ttl time.Duration) error
	// Acquire waits up to timeout, trying again every sleep.
	Acquire func(ctx context.Context, ttl, timeout, sleep time.Duration) error
	Release func(ctx context.Context) error
}

// LockExclusion checks, on the lock name of m and the same lock j of the Java library,
// that a Java-held lock excludes dcsync and vice versa; that dcsync's release never
// removes a Java holder's lock (nor does a late release of a lapsed dcsync lease); and
// that Java's release (an unconditional delete) removes a dcsync holder's lock, which
// dcsync reports as LockLost. javaHolds and dcsyncHolds, when set, check the stored
// lock while Java, then dcsync, holds it.
func LockExclusion(t testing.TB, ctx context.Context, m *lock.Manager, name string, j JavaLock, javaHolds, dcsyncHolds func()) {
	t.Helper()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wantCode := func(err error, code dcsync.Code, what string) {
		t.Helper()
		if dcsync.CodeOf(err) != code {
			t.Fatalf("%s: got %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
		}
	}
	javaRefused := func(what string) {
		t.Helper()
		if je := AsError(t, j.TryAcquire(ctx, time.Minute), what); !je.Unavailable() {
			t.Fatalf("%s: %v, want LOCK_UNAVAILABLE", what, je)
		}
	}

	// Java holds: dcsync cannot take it, and its release does not remove it.
	must(j.TryAcquire(ctx, time.Minute), "Java acquire")
	_, err := m.TryAcquire(ctx, name)
	wantCode(err, dcsync.LockUnavailable, "dcsync acquire of a Java-held lock")
	wantCode(m.Release(ctx, name, "someone"), dcsync.LockLost, "dcsync release of a Java-held lock")
	javaRefused("second Java acquire after a dcsync release (the Java holder's lock must survive)")
	if javaHolds != nil {
		javaHolds()
	}
	must(j.Release(ctx), "Java release")

	// dcsync holds: Java cannot take it.
	l, err := m.TryAcquire(ctx, name)
	must(err, "dcsync acquire after the Java release")
	if dcsyncHolds != nil {
		dcsyncHolds()
	}
	javaRefused("Java acquire of a dcsync-held lock")
	must(l.Release(ctx), "dcsync release")
	must(j.TryAcquire(ctx, time.Minute), "Java acquire after the dcsync release")
	must(j.Release(ctx), "Java release")

	// A Java release is an unconditional delete: a Java service that releases a lock it
	// does not hold (its lease lapsed, or a bug) removes whoever holds it. dcsync cannot
	// prevent that; it must report it as LockLost.
	l2, err := m.TryAcquire(ctx, name)
	must(err, "dcsync acquire")
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d: a Java acquisition in between must not reset the fence", l2.Token(), l.Token())
	}
	must(j.Release(ctx), "a stray Java release")
	wantCode(l2.Release(ctx), dcsync.LockLost, "dcsync release after a stray Java delete")

	// A dcsync holder whose lease lapsed while a Java service took the lock: its late
	// release must leave the Java holder's lock alone.
	l3, err := m.TryAcquire(ctx, name, lock.TTL(time.Second))
	must(err, "dcsync acquire with a 1s lease")
	lapsed := time.Now().Add(time.Second)
	time.Sleep(time.Until(lapsed))
	must(j.Acquire(ctx, time.Minute, 5*time.Second, 50*time.Millisecond), "Java acquire (waiting) after the dcsync lease lapsed")
	t.Logf("the Java acquire succeeded %v after the dcsync lease ended", time.Since(lapsed).Round(10*time.Millisecond))
	wantCode(l3.Release(ctx), dcsync.LockLost, "late dcsync release of a lapsed lease")
	javaRefused("Java acquire after the late dcsync release (the Java holder's lock must survive)")
	must(j.Release(ctx), "Java release")
}
