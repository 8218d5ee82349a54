package hbase

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// faulty wraps the real client. For the calls it is told to, it either sends the call and
// then reports a lost reply (the mutation is applied, the caller sees "outcome unknown"),
// or reports the same error without sending (not applied): the two cases a caller
// cannot tell apart.
type faulty struct {
	ops
	mu    sync.Mutex
	plan  []fault // consumed in order by CheckAndMutate / Increment calls
	calls int
}

type fault int

const (
	pass    fault = iota
	lostAck       // applied, reply lost
	notSent       // not applied, same error
)

func (f *faulty) next() fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(f.plan) == 0 {
		return pass
	}
	x := f.plan[0]
	f.plan = f.plan[1:]
	return x
}

func (f *faulty) set(plan ...fault) {
	f.mu.Lock()
	f.plan = plan
	f.calls = 0
	f.mu.Unlock()
}

// lostOrNotSent is a chaos fault (chaos.Scenario.Fault): the next conditional write is
// applied with its reply lost, or (half the time) not sent, with the same error.
func (f *faulty) lostOrNotSent(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		f.set(lostAck)
		return "dropped-reply"
	}
	f.set(notSent)
	return "not-sent"
}

func errUnknown() error {
	return driver.Errorf(dcsync.Connection, "hbase.CheckAndMutate", "outcome unknown: injected lost reply")
}

func (f *faulty) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	switch f.next() {
	case lostAck:
		f.ops.CheckAndMutate(ctx, table, row, cond, muts...)
		return false, nil, errUnknown()
	case notSent:
		return false, nil, errUnknown()
	}
	return f.ops.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (f *faulty) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	switch f.next() {
	case lostAck:
		f.ops.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
		return false, nil, nil, errUnknown()
	case notSent:
		return false, nil, nil, errUnknown()
	}
	return f.ops.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

func faultyStore(t *testing.T) (*Store, *faulty) {
	s := openStore(t)
	t.Cleanup(func() { s.Close() })
	f := &faulty{ops: s.db}
	s.db = f
	return s, f
}

func TestInDoubtLock(t *testing.T) {
	s, f := faultyStore(t)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct {
		name string
		plan []fault // acquire: the take, then the move of the row's fencing counter (its first acquire)
	}{
		{"TakeLost", []fault{lostAck}},
		{"TakeNotSent", []fault{notSent}},
		{"TakeNotSentThenLost", []fault{notSent, lostAck}},
		{"RecordLost", []fault{pass, lostAck}},
		{"RecordNotSent", []fault{pass, notSent}},
		{"BothLost", []fault{lostAck, lostAck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(dcsync.XDC, "dc1")
			f.set(tc.plan...)
			st, err := s.AcquireLock(ctx, k, "me", time.Minute)
			must(t, err, "AcquireLock with a lost reply")
			in, err := s.InspectLock(ctx, k)
			must(t, err, "Inspect")
			if in.Owner != "me" || in.Token != st.Token || st.Token == 0 {
				t.Fatalf("acquired %+v, stored %+v", st, in)
			}
			_, err = s.AcquireLock(ctx, k, "other", time.Minute)
			wantCode(t, err, dcsync.LockUnavailable, "second acquire")

			f.set(lostAck)
			st2, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
			must(t, err, "RefreshLock with a lost reply")
			if st2.Token != st.Token || !st2.Expires.After(st.Expires) {
				t.Fatalf("refresh %+v after %+v", st2, st)
			}
			f.set(notSent)
			_, err = s.RefreshLock(ctx, k, "me", 2*time.Minute)
			must(t, err, "RefreshLock not sent the first time")

			wantCode(t, s.ReleaseLock(ctx, k, "other"), dcsync.LockLost, "release by another owner")
			f.set(notSent)
			wantCode(t, s.ReleaseLock(ctx, k, "other"), dcsync.LockLost, "release by another owner, with a fault armed")
			if in, err := s.InspectLock(ctx, k); err != nil || in.Owner != "me" {
				t.Fatalf("holder after another owner's in-doubt release: %+v, %v", in, err)
			}
			f.set(lostAck)
			must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock with a lost reply")
			_, err = s.InspectLock(ctx, k)
			wantCode(t, err, dcsync.NotFound, "Inspect after release")
			wantCode(t, s.ReleaseLock(ctx, k, "me"), dcsync.LockLost, "second release")
			st3, err := s.AcquireLock(ctx, k, "next", time.Minute)
			must(t, err, "acquire after")
			if st3.Token <= st.Token {
				t.Fatalf("token %d after %d", st3.Token, st.Token)
			}
			must(t, s.ReleaseLock(ctx, k, "next"), "release")
		})
	}

	t.Run("LostToAnother", func(t *testing.T) {
		// Step 1's outcome is unknown and another owner holds the lock: unavailable.
		k := key(dcsync.DC, "dc1")
		_, err := s.AcquireLock(ctx, k, "holder", time.Minute)
		must(t, err, "acquire")
		f.set(notSent)
		st, err := s.AcquireLock(ctx, k, "me", time.Minute)
		wantCode(t, err, dcsync.LockUnavailable, "acquire in doubt while held")
		if st.Owner != "holder" {
			t.Fatalf("holder state %+v", st)
		}
		must(t, s.ReleaseLock(ctx, k, "holder"), "release")
	})
}

func TestInDoubtLatch(t *testing.T) {
	s, f := faultyStore(t)
	ctx := ctxT(t, time.Minute)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			// Not applied: sent again, created.
			k := key(level, "dc1")
			f.set(notSent)
			must(t, s.CreateLatch(ctx, k, 5, time.Minute), "CreateLatch, first attempt not sent")
			// Applied but unknown: the read-back finds this create's own marker.
			k2 := key(level, "dc1")
			f.set(lostAck)
			must(t, s.CreateLatch(ctx, k2, 6, time.Minute), "CreateLatch with a lost reply")
			k3 := key(level, "dc1")
			f.set(lostAck)
			if created, err := s.EnsureLatch(ctx, k3, time.Minute); err != nil || !created {
				t.Fatalf("EnsureLatch with a lost reply = %v, %v; want true, nil", created, err)
			}
			// Unknown, and another create's latch is there: AlreadyExists.
			f.set(notSent)
			wantCode(t, s.CreateLatch(ctx, k2, 9, time.Minute), dcsync.AlreadyExists, "CreateLatch in doubt over an existing latch")
			got, err := s.ReadLatches(ctx, []dcsync.Key{k, k2, k3})
			must(t, err, "ReadLatches")
			want := []driver.LatchCount{{Found: true, Count: 5}, {Found: true, Count: 6}, {Found: true, Count: 0}}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("ReadLatches = %+v, want %+v", got, want)
				}
			}
		})
	}
}

// TestAddLatchNoWrite: AddLatch on a missing latch writes nothing, at both levels,
// and an XDC update through another farm's cell counts in the sum.
func TestAddLatchNoWrite(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		k := key(level, "dc1")
		_, err := s.AddLatch(ctx, k, -1)
		wantCode(t, err, dcsync.NotFound, "AddLatch of a missing latch")
		cells, err := s.client.Get(ctx, s.latchTable, latchRow(k))
		must(t, err, "Get")
		if len(cells) != 0 {
			t.Fatalf("AddLatch of a missing latch wrote %v", cells)
		}
	}
	k := key(dcsync.DC, "dc1")
	must(t, s.CreateLatch(ctx, k, 3, time.Minute), "create DC")
	other := k
	other.Farm = "dc2"
	_, err := s.AddLatch(ctx, other, -1)
	wantCode(t, err, dcsync.NotFound, "DC AddLatch from another farm")
	x := other
	x.Level = dcsync.XDC
	n, err := s.AddLatch(ctx, x, -5)
	if err != nil || n != -2 {
		t.Fatalf("XDC AddLatch from dc2 = %d, %v; want -2", n, err)
	}
	_, err = s.AddLatch(ctx, other, 1)
	must(t, err, "DC AddLatch from dc2 after its XDC update created its cell")
}

// TestInDoubtLate: an attempt that timed out while still queued at the server is
// applied after the read-back found nothing; the resend then meets it. Each operation
// must recognise its own first attempt.
func TestInDoubtLate(t *testing.T) {
	s := openStore(t)
	f := holdWrites(t, s, true)
	ctx := ctxT(t, time.Minute)
	t.Run("AcquireRecord", func(t *testing.T) {
		k := key(dcsync.DC, "dc1")
		f.holdAfter(1, nil)
		st, err := s.AcquireLock(ctx, k, "me", time.Minute)
		must(t, err, "AcquireLock whose token record lands late")
		in, err := s.InspectLock(ctx, k)
		must(t, err, "Inspect")
		if in.Owner != "me" || in.Token != st.Token || st.Token == 0 {
			t.Fatalf("acquired %+v, stored %+v", st, in)
		}
		must(t, s.ReleaseLock(ctx, k, "me"), "release")
	})
	t.Run("Acquire", func(t *testing.T) {
		k := key(dcsync.XDC, "dc1")
		f.holdAfter(0, nil)
		st, err := s.AcquireLock(ctx, k, "me", time.Minute)
		must(t, err, "AcquireLock whose first attempt lands late")
		in, err := s.InspectLock(ctx, k)
		must(t, err, "Inspect")
		if in.Owner != "me" || in.Token != st.Token || st.Token == 0 {
			t.Fatalf("acquired %+v, stored %+v", st, in)
		}
		must(t, s.ReleaseLock(ctx, k, "me"), "release")
	})
	t.Run("Release", func(t *testing.T) {
		k := key(dcsync.XDC, "dc1")
		_, err := s.AcquireLock(ctx, k, "me", time.Minute)
		must(t, err, "acquire")
		f.holdAfter(0, nil)
		must(t, s.ReleaseLock(ctx, k, "me"), "ReleaseLock whose first attempt lands late")
		_, err = s.InspectLock(ctx, k)
		wantCode(t, err, dcsync.NotFound, "Inspect after release")
	})
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run("Create"+level.String(), func(t *testing.T) {
			k := key(level, "dc1")
			f.holdAfter(0, nil)
			must(t, s.CreateLatch(ctx, k, 4, time.Minute), "CreateLatch whose first attempt lands late")
			got, err := s.ReadLatches(ctx, []dcsync.Key{k})
			must(t, err, "ReadLatches")
			if got[0] != (driver.LatchCount{Found: true, Count: 4}) {
				t.Fatalf("count %+v, want 4", got[0])
			}
			k2 := key(level, "dc1")
			f.holdAfter(0, nil)
			if created, err := s.EnsureLatch(ctx, k2, time.Minute); err != nil || !created {
				t.Fatalf("EnsureLatch whose first attempt lands late = %v, %v; want true, nil", created, err)
			}
		})
	}
}
