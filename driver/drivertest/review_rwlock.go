package drivertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/rwlock"
)

// rwMaxReaders uses a read-write lock at its limits: M = rwlock.MaxReaders slots (a
// writer reads all 1024 in one batched call per poll) and the longest name whose last
// slot's key fits dcsync.MaxNameLen. Readers share, a writer is refused beside them and
// gets in once they left, a downgrade holds a slot, Inspect sees it all.
func rwMaxReaders(t *testing.T, h Harness) {
	noLeaks(t)
	ctx := ctxT(t, 2*time.Minute)
	s := h.open(t)
	m := rwManager(t, s, h.Farm, rwlock.WithReaders(rwlock.MaxReaders))
	u := unique(t)
	name := u + strings.Repeat("x", dcsync.MaxNameLen-len("rwlock:495:/r1023")-len(u))
	if len(name) != 495 {
		t.Fatalf("name of %d bytes, want 495", len(name))
	}
	if _, err := m.AcquireRead(ctx, name+"x"); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("read of a name one byte too long: %v, want InvalidArgument", err)
	}
	r1, err := m.AcquireRead(ctx, name)
	must(t, err, "read 1")
	r2, err := m.AcquireRead(ctx, name, rwlock.Wait(0))
	must(t, err, "read 2")
	if r1.Slot() == r2.Slot() {
		t.Fatalf("two readers in slot %d", r1.Slot())
	}
	if _, err := m.AcquireWrite(ctx, name, rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("writer beside 2 readers of 1024 slots: %v, want LockUnavailable", err)
	}
	st, err := m.Inspect(ctx, name)
	must(t, err, "inspect")
	if st.Slots != rwlock.MaxReaders || st.Writer != nil || len(st.Readers) != 2 {
		t.Fatalf("inspect with 2 readers: %d slots, writer %v, %d readers", st.Slots, st.Writer, len(st.Readers))
	}
	must(t, r1.Release(ctx), "release 1")
	must(t, r2.Release(ctx), "release 2")
	w, err := m.AcquireWrite(ctx, name, rwlock.Wait(0))
	must(t, err, "writer once the readers left")
	if _, err := m.AcquireRead(ctx, name, rwlock.Wait(0)); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("reader beside the writer: %v, want LockUnavailable", err)
	}
	r, err := w.Downgrade(ctx)
	must(t, err, "downgrade")
	st, err = m.Inspect(ctx, name)
	must(t, err, "inspect")
	if st.Writer != nil || len(st.Readers) != 1 || st.Readers[0].Slot != r.Slot() {
		t.Fatalf("inspect after the downgrade: writer %v, readers %+v (want slot %d)", st.Writer, st.Readers, r.Slot())
	}
	must(t, r.Release(context.Background()), "release the downgraded hold")
}

// rwCrashedHolders: a holder that stops renewing and never releases (a crashed
// process) keeps the other side out until its lease ends and no longer: a writer waiting
// for a crashed reader gets in, and only after that reader's deadline; a reader waiting
// for a crashed writer likewise. (Leases of 10 s; no assertion on how soon.)
func rwCrashedHolders(t *testing.T, h Harness) {
	noLeaks(t)
	ctx := ctxT(t, 2*time.Minute)
	s := h.open(t)
	crashed := rwManager(t, s, h.Farm, rwlock.WithReaders(2), rwlock.WithTTL(10*time.Second))
	m := rwManager(t, h.open(t), h.Farm, rwlock.WithReaders(2))
	name := unique(t)
	r, err := crashed.AcquireRead(ctx, name)
	must(t, err, "the reader that crashes")
	w, err := m.AcquireWrite(ctx, name)
	must(t, err, "writer waiting for a crashed reader")
	if now := time.Now(); now.Before(r.Deadline()) {
		t.Fatalf("the writer got in at %v, before the crashed reader's deadline %v", now, r.Deadline())
	}
	must(t, w.Release(ctx), "release the writer")
	w2, err := crashed.AcquireWrite(ctx, name)
	must(t, err, "the writer that crashes")
	r2, err := m.AcquireRead(ctx, name)
	must(t, err, "reader waiting for a crashed writer")
	if now := time.Now(); now.Before(w2.Deadline()) {
		t.Fatalf("the reader got in at %v, before the crashed writer's deadline %v", now, w2.Deadline())
	}
	must(t, r2.Release(ctx), "release the reader")
}
