package hbase

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// fenceHooks wraps the real client under a store's AcquireLocks: it counts the
// conditional actions sent, keeps the MultiMutate batches sent, and runs a hook once
// right after the next MultiGet returns (between the batch's read of the counters and
// its take).
type fenceHooks struct {
	storeOps
	mu        sync.Mutex
	conds     int
	batches   [][]hbaserpc.Action
	afterRead func()
}

func hookFences(s *Store) *fenceHooks {
	h := &fenceHooks{storeOps: s.client}
	s.db = h
	return h
}

func (h *fenceHooks) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	cells, err := h.storeOps.MultiGet(ctx, table, gets)
	h.mu.Lock()
	f := h.afterRead
	h.afterRead = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return cells, err
}

func (h *fenceHooks) MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	h.mu.Lock()
	for _, a := range actions {
		if a.Cond != nil {
			h.conds++
		}
	}
	h.batches = append(h.batches, actions)
	h.mu.Unlock()
	return h.storeOps.MultiMutate(ctx, table, actions)
}

// CheckAndMutateGets keeps the store's raw read of a hidden Java hold (rawGetOps).
func (h *fenceHooks) CheckAndMutateGets(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, gets ...hbaserpc.Get) (bool, []hbaserpc.Cell, [][]hbaserpc.Cell, error) {
	return h.storeOps.(rawGetOps).CheckAndMutateGets(ctx, table, row, cond, muts, gets...)
}

func (h *fenceHooks) takeConds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.conds
	h.conds = 0
	return n
}

// counterCell reads k's lock row's fencing counter D:F: its value and version, found
// false when the row has none.
func counterCell(t *testing.T, ctx context.Context, k dcsync.Key) (v uint64, ts int64, found bool) {
	t.Helper()
	cells, err := shared(t).Get(ctx, fixture.lockTable, layout.HBaseLockRow(k), hbaserpc.Column{Family: famLock, Qualifier: qualFence})
	must(t, err, "read the counter")
	if len(cells) == 0 {
		return 0, 0, false
	}
	if len(cells) != 1 || len(cells[0].Value) != 8 {
		t.Fatalf("counter cells %v, want one 8-byte counter", cells)
	}
	return binary.BigEndian.Uint64(cells[0].Value), cells[0].Timestamp, true
}

// earlierCounter sets k's counter of the earlier layout (fenceRow) to n.
func earlierCounter(t *testing.T, ctx context.Context, k dcsync.Key, n int64) {
	t.Helper()
	_, err := shared(t).Increment(ctx, fixture.lockTable, &hbaserpc.Increment{Row: fenceRow(k),
		Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: n}}})
	must(t, err, "the earlier layout's counter")
}

// acquireOne takes k for owner through s's AcquireLocks and checks that the token it
// reports is the one InspectLock and the counter D:F show, at a version at or above
// fenceBase.
func acquireOne(t *testing.T, ctx context.Context, s *Store, k dcsync.Key, owner string) uint64 {
	t.Helper()
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: owner, TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	must(t, res[0].Err, "AcquireLocks of "+k.String())
	in, err := s.InspectLock(ctx, k)
	must(t, err, "InspectLock")
	v, ts, found := counterCell(t, ctx, k)
	if in.Owner != owner || in.Token != res[0].State.Token || !found || v != in.Token || ts < fenceBase {
		t.Fatalf("after AcquireLocks: reported %+v, InspectLock %+v, counter %d at version %d (found %v, fenceBase %d)", res[0].State, in, v, ts, found, fenceBase)
	}
	return in.Token
}

// TestLockMoveFreshKeys (real HBase): AcquireLocks of N keys never taken is two calls
// (one MultiGet of the counters, one MultiMutate) and N conditional actions, one per
// key, where moving the counter after the take cost three calls and 2N; each new
// counter is created at version fenceBase in the take itself (HBase keeps an
// Increment's explicit version for a counter it creates), with the key's counter of
// the earlier layout + 1 (1 without one, 58 over 57); taking them again, from this
// store (which now knows the rows moved), is one call, and from a store that does not
// know them, two, with the tokens one above the last.
func TestLockMoveFreshKeys(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	cnt := countCalls(s)
	h := hookFences(s)
	h.storeOps = cnt
	ctx := ctxT(t, 2*time.Minute)
	const n = 24
	acq := make([]driver.LockAcquire, n)
	rel := make([]driver.LockRelease, n)
	want := make([]uint64, n)
	for i := range acq {
		k := key(dcsync.XDC, "dc1")
		acq[i] = driver.LockAcquire{Key: k, Owner: fmt.Sprint("o", i), TTL: time.Minute}
		rel[i] = driver.LockRelease{Key: k, Owner: acq[i].Owner}
		want[i] = 1
		if i%2 == 1 {
			earlierCounter(t, ctx, k, 57)
			want[i] = 58
		}
	}
	_, err := s.InspectLocks(ctx, []dcsync.Key{acq[0].Key}) // warm up
	must(t, err, "InspectLocks")
	other := openStore(t)
	defer other.Close()
	for round, st := range []*Store{s, s, other} {
		cnt.take()
		h.takeConds()
		res, err := st.AcquireLocks(ctx, acq)
		must(t, err, "AcquireLocks")
		if st == s {
			calls, conds := cnt.take(), h.takeConds()
			wantCalls := map[string]int{"MultiMutate": 1}
			if round == 0 {
				wantCalls["MultiGet"] = 1
			}
			if fmt.Sprint(calls) != fmt.Sprint(wantCalls) || conds != n {
				t.Errorf("round %d: AcquireLocks of %d keys: calls %v and %d conditional actions; want %v and %d", round, n, calls, conds, wantCalls, n)
			}
		}
		for i, r := range res {
			must(t, r.Err, fmt.Sprintf("round %d, lock %d", round, i))
			if r.State.Token != want[i] {
				t.Errorf("round %d, lock %d: token %d, want %d", round, i, r.State.Token, want[i])
			}
			v, ts, found := counterCell(t, ctx, acq[i].Key)
			if !found || v != want[i] || ts < fenceBase || round == 0 && ts != fenceBase {
				t.Errorf("round %d, lock %d: counter %d at version %d (found %v), want %d at fenceBase %d (the first) or above", round, i, v, ts, found, want[i], fenceBase)
			}
			want[i]++
		}
		res, err = st.ReleaseLocks(ctx, rel)
		must(t, err, "ReleaseLocks")
		for i, r := range res {
			must(t, r.Err, fmt.Sprint("release ", i))
		}
	}
}

// TestLockMoveFreshKeyRaces (real HBase): the counter a batched acquire read absent is
// created or moved by someone else before its take lands; the take's token is still
// above every earlier one, and what InspectLock and the counter show. Each case runs
// in the window between the batch's read of the counters and its take:
//
//   - another store takes and frees the lock (AcquireLock: its counter moved to version
//     fenceBase, the version the batch's take names) once, or twice (above it);
//   - a take of the single path that has not moved its counter yet is simulated by an
//     Increment of D:F at the server's time (below fenceBase): the batch's take leaves
//     it below, and the counter is moved after it (moveFences), above the earlier
//     layout's.
func TestLockMoveFreshKeyRaces(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	for _, tc := range []struct {
		name    string
		earlier int64
		meddle  func(t *testing.T, k dcsync.Key) uint64 // returns the highest token before the batch's take
	}{
		{"taken and freed once", 0, func(t *testing.T, k dcsync.Key) uint64 { return takeFree(t, ctx, k, 1) }},
		{"taken and freed twice", 0, func(t *testing.T, k dcsync.Key) uint64 { return takeFree(t, ctx, k, 2) }},
		{"taken and freed over an earlier counter", 40, func(t *testing.T, k dcsync.Key) uint64 { return takeFree(t, ctx, k, 1) }},
		{"counter below fenceBase", 57, func(t *testing.T, k dcsync.Key) uint64 {
			_, err := shared(t).Increment(ctx, fixture.lockTable, &hbaserpc.Increment{Row: layout.HBaseLockRow(k),
				Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 5}}})
			must(t, err, "counter below fenceBase")
			return 57
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			defer s.Close()
			h := hookFences(s)
			k := key(dcsync.XDC, "dc1")
			if tc.earlier > 0 {
				earlierCounter(t, ctx, k, tc.earlier)
			}
			var before uint64
			h.afterRead = func() { before = tc.meddle(t, k) }
			token := acquireOne(t, ctx, s, k, "batch")
			if before == 0 {
				t.Fatal("the hook did not run between the read and the take")
			}
			if token <= before {
				t.Fatalf("token %d after a token (or earlier counter) of %d", token, before)
			}
			must(t, s.ReleaseLock(ctx, k, "batch"), "release")
			if next := acquireOne(t, ctx, s, k, "next"); next <= token {
				t.Fatalf("the next token %d after %d", next, token)
			}
		})
	}
}

// takeFree takes and frees k n times through a store of its own (the single path) and
// returns the last token.
func takeFree(t *testing.T, ctx context.Context, k dcsync.Key, n int) uint64 {
	t.Helper()
	o := openStore(t)
	defer o.Close()
	var last uint64
	for range n {
		st, err := o.AcquireLock(ctx, k, "meddler", time.Minute)
		must(t, err, "the meddler's acquire")
		last = st.Token
		must(t, o.ReleaseLock(ctx, k, "meddler"), "the meddler's release")
	}
	return last
}

// TestLockMoveFreshTakeConditioned (real HBase): the counter's creation is part of the
// take's conditional write, so a take that is not applied creates and bumps nothing:
// over a Java hold (D:L put, no counter) a batched acquire gets LockUnavailable and the
// row still has no counter; and the take sent again late (a retry that reached the
// server after the lock was freed and taken by another owner) is not applied and
// leaves the holder's counter alone. A late take landing on a free row takes it with
// a token above the last.
func TestLockMoveFreshTakeConditioned(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	h := hookFences(s)
	ctx := ctxT(t, 2*time.Minute)

	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	if !javaAcquire(t, ctx, row, time.Now().UnixMilli(), time.Minute) {
		t.Fatal("Java-style acquire refused")
	}
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "go", TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	wantCode(t, res[0].Err, dcsync.LockUnavailable, "AcquireLocks over a Java hold")
	if v, ts, found := counterCell(t, ctx, k); found {
		t.Fatalf("a take refused by a Java hold left a counter %d at version %d", v, ts)
	}
	_, _, _ = shared(t).CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfEquals(famLock, qualLock, lockMarker), &hbaserpc.Delete{Row: row})

	// The late take: the batch that took k2 fresh, sent again after a release and
	// another owner's take.
	k2 := key(dcsync.XDC, "dc1")
	h.mu.Lock()
	h.batches = nil
	h.mu.Unlock()
	first := acquireOne(t, ctx, s, k2, "first")
	h.mu.Lock()
	take := h.batches[0]
	h.mu.Unlock()
	if len(take) != 1 || take[0].Cond == nil {
		t.Fatalf("the batch's take: %+v, want one conditional action", take)
	}
	must(t, s.ReleaseLock(ctx, k2, "first"), "release")
	second := acquireOne(t, ctx, s, k2, "second")
	late, err := shared(t).MultiMutate(ctx, fixture.lockTable, take)
	must(t, err, "the late take")
	if late[0].Applied {
		t.Fatal("the late take was applied over another holder")
	}
	in, err := s.InspectLock(ctx, k2)
	must(t, err, "InspectLock")
	if v, _, _ := counterCell(t, ctx, k2); in.Owner != "second" || in.Token != second || v != second || second <= first {
		t.Fatalf("after the late take: holder %+v, counter %d; want owner second with token %d (> %d) and the counter at it", in, v, second, first)
	}
	must(t, s.ReleaseLock(ctx, k2, "second"), "release")
	late, err = shared(t).MultiMutate(ctx, fixture.lockTable, take)
	must(t, err, "the late take on a free row")
	if v, _, _ := counterCell(t, ctx, k2); late[0].Applied && v <= second {
		t.Fatalf("a late take landing on a free row left the counter at %d, after token %d", v, second)
	}
}
