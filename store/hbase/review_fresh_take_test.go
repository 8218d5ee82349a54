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

// Review of the batched fresh-key take (AcquireLocks creating D:F in the take by an
// Increment naming version fenceBase, freshIncrement): the HBase semantics it relies
// on, and tokens across the single and the batched path, late takes and concurrent
// batches.

// freshTakeAction is the batched take's action for row: "D:L absent" put L and O,
// with inc.
func freshTakeAction(row []byte, owner string, inc *hbaserpc.Increment) hbaserpc.Action {
	cond := hbaserpc.IfAbsent(famLock, qualLock)
	return hbaserpc.Action{
		Mutation: &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{
			{Family: famLock, Qualifier: qualLock, Value: lockMarker},
			{Family: famLock, Qualifier: qualOwner, Value: []byte(owner)},
			{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(time.Now().Add(time.Minute).UnixMilli()))},
		}, TTL: time.Minute},
		More: []hbaserpc.Mutation{inc},
		Cond: &cond,
	}
}

// rowCounter reads row's D:F: value, version, found.
func rowCounter(t *testing.T, ctx context.Context, row []byte) (uint64, int64, bool) {
	t.Helper()
	cells, err := shared(t).Get(ctx, fixture.lockTable, row, hbaserpc.Column{Family: famLock, Qualifier: qualFence})
	must(t, err, "read D:F")
	if len(cells) == 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(cells[0].Value), cells[0].Timestamp, true
}

// TestReviewFreshIncrementVersions (real HBase): what the HBase server does with an
// Increment naming version fenceBase inside the take's conditional write: a counter
// it creates is kept at fenceBase; one that exists above fenceBase is incremented at
// its previous version + 1 (never at fenceBase, below it, which would leave an issued
// token on top); one that exists below fenceBase stays below (server time); one
// hidden by a row delete marker is created afresh at fenceBase without the hidden
// value; and a later take of the single path increments a counter so created at
// fenceBase + 1, without moving it (no Put at fenceBase on top of it).
func TestReviewFreshIncrementVersions(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := shared(t)
	s := openStore(t)
	defer s.Close()
	take := func(row []byte, inc *hbaserpc.Increment) {
		t.Helper()
		res, err := c.MultiMutate(ctx, fixture.lockTable, []hbaserpc.Action{freshTakeAction(row, "probe", inc)})
		must(t, err, "take")
		if !res[0].Applied {
			t.Fatal("take not applied")
		}
		r, err := s.readLock(ctx, row)
		must(t, err, "read the take")
		_, _, err = c.CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte("probe")), ownedRelease(r))
		must(t, err, "free")
	}

	// Created: at fenceBase, old + 1.
	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	take(row, freshIncrement(41))
	if v, ts, ok := rowCounter(t, ctx, row); !ok || v != 42 || ts != fenceBase {
		t.Fatalf("created counter %d at %d (found %v), want 42 at fenceBase", v, ts, ok)
	}
	// A single-path take on it: fenceBase + 1, token 43, no move.
	st, err := s.AcquireLock(ctx, k, "single", time.Minute)
	must(t, err, "AcquireLock")
	if v, ts, _ := rowCounter(t, ctx, row); st.Token != 43 || v != 43 || ts != fenceBase+1 {
		t.Fatalf("single take on a created counter: token %d, counter %d at %d; want 43 at fenceBase+1", st.Token, v, ts)
	}
	must(t, s.ReleaseLock(ctx, k, "single"), "release")

	// Existing above fenceBase: previous version + 1, explicit version ignored.
	row2 := layout.HBaseLockRow(key(dcsync.XDC, "dc1"))
	err = c.Put(ctx, fixture.lockTable, &hbaserpc.Put{Row: row2, Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualFence, Value: be64(100)}}, Timestamp: fenceBase + 7})
	must(t, err, "put D:F above fenceBase")
	take(row2, freshIncrement(0))
	if v, ts, _ := rowCounter(t, ctx, row2); v != 101 || ts != fenceBase+8 {
		t.Fatalf("increment over a counter at fenceBase+7: %d at %d, want 101 at fenceBase+8", v, ts)
	}

	// Existing below fenceBase: stays below.
	row3 := layout.HBaseLockRow(key(dcsync.XDC, "dc1"))
	_, err = c.Increment(ctx, fixture.lockTable, &hbaserpc.Increment{Row: row3, Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 3}}})
	must(t, err, "counter below fenceBase")
	take(row3, freshIncrement(9))
	if v, ts, _ := rowCounter(t, ctx, row3); v != 13 || ts >= fenceBase {
		t.Fatalf("increment over a counter below fenceBase: %d at %d, want 13 below fenceBase", v, ts)
	}

	// Hidden by a row delete: created afresh at fenceBase.
	row4 := layout.HBaseLockRow(key(dcsync.XDC, "dc1"))
	_, err = c.Increment(ctx, fixture.lockTable, &hbaserpc.Increment{Row: row4, Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 500}}})
	must(t, err, "counter below fenceBase")
	must(t, c.Delete(ctx, fixture.lockTable, &hbaserpc.Delete{Row: row4}), "row delete (a Java release)")
	take(row4, freshIncrement(5))
	if v, ts, _ := rowCounter(t, ctx, row4); v != 6 || ts != fenceBase {
		t.Fatalf("increment over a hidden counter: %d at %d, want 6 at fenceBase", v, ts)
	}
}

// lateTakes holds back the first conditional batch of a store's AcquireLocks (not
// sent; its caller sees "outcome unknown") so that the test sends it later.
type lateTakes struct {
	storeOps
	mu   sync.Mutex
	held [][]hbaserpc.Action
	arm  bool
}

func (l *lateTakes) MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	l.mu.Lock()
	hold := l.arm && len(actions) > 0 && actions[0].Cond != nil
	if hold {
		l.arm = false
		l.held = append(l.held, actions)
	}
	l.mu.Unlock()
	if hold {
		res := make([]hbaserpc.ActionResult, len(actions))
		for i := range res {
			res[i].Err = errUnknown()
		}
		return res, res[0].Err
	}
	return l.storeOps.MultiMutate(ctx, table, actions)
}

// CheckAndMutateGets keeps the store's raw read of a hidden Java hold (rawGetOps).
func (l *lateTakes) CheckAndMutateGets(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, gets ...hbaserpc.Get) (bool, []hbaserpc.Cell, [][]hbaserpc.Cell, error) {
	return l.storeOps.(rawGetOps).CheckAndMutateGets(ctx, table, row, cond, muts, gets...)
}

// TestReviewFreshTakeLateFirstAttempt (real HBase): a batched take of a new key (with
// an earlier layout's counter) whose reply is lost goes to AcquireLock, which takes
// it on the single path (counter moved by moveFence); the holder releases, another
// store takes and releases twice; then the batch's first attempt (the Increment by
// the earlier counter + 1 at fenceBase) lands late on the free row. Every token is
// above the one before, and the counter ends above the last token issued.
func TestReviewFreshTakeLateFirstAttempt(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s := openStore(t)
	defer s.Close()
	l := &lateTakes{storeOps: s.client, arm: true}
	s.db = l
	k := key(dcsync.XDC, "dc1")
	earlierCounter(t, ctx, k, 30)
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "x", TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	must(t, res[0].Err, "AcquireLocks (alone after the lost reply)")
	tokens := []uint64{res[0].State.Token}
	must(t, s.ReleaseLock(ctx, k, "x"), "release x")
	o := openStore(t)
	defer o.Close()
	for range 2 {
		st, err := o.AcquireLock(ctx, k, "z", time.Minute)
		must(t, err, "z acquire")
		tokens = append(tokens, st.Token)
		must(t, o.ReleaseLock(ctx, k, "z"), "z release")
	}
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	if len(held) != 1 {
		t.Fatalf("held %d batches, want 1", len(held))
	}
	late, err := shared(t).MultiMutate(ctx, fixture.lockTable, held[0])
	must(t, err, "the late first attempt")
	in, err := o.InspectLock(ctx, k)
	t.Logf("late first attempt applied %v, holder %+v", late[0].Applied, in)
	if late[0].Applied {
		must(t, err, "InspectLock")
		tokens = append(tokens, in.Token)
	}
	if v, ts, _ := counterCell(t, ctx, k); ts < fenceBase || v < tokens[len(tokens)-1] {
		t.Fatalf("counter %d at %d after tokens %v", v, ts, tokens)
	}
	if late[0].Applied {
		// The ghost hold of x lapses with its lease; free it for the next take.
		_, _, err = shared(t).CheckAndMutate(ctx, fixture.lockTable, layout.HBaseLockRow(k), hbaserpc.IfEquals(famLock, qualOwner, []byte("x")),
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock}, {Family: famLock, Qualifier: qualOwner}}, TTL: time.Hour})
		must(t, err, "free the ghost")
	}
	st, err := o.AcquireLock(ctx, k, "w", time.Minute)
	must(t, err, "w acquire")
	tokens = append(tokens, st.Token)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] || tokens[0] <= 30 {
			t.Fatalf("tokens %v (earlier counter 30): not strictly increasing above it", tokens)
		}
	}
	must(t, o.ReleaseLock(ctx, k, "w"), "w release")
}

// TestReviewFreshTakeTwoBatches (real HBase): two stores' batched takes of the same
// new key read the counter absent; the second takes and frees it (its counter created
// at fenceBase, earlier counter + 1) between the first's read and its take: the
// first's token is still above, and the next above that.
func TestReviewFreshTakeTwoBatches(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	a := openStore(t)
	defer a.Close()
	b := openStore(t)
	defer b.Close()
	h := hookFences(a)
	k := key(dcsync.XDC, "dc1")
	earlierCounter(t, ctx, k, 40)
	var bt uint64
	h.afterRead = func() {
		bt = acquireOne(t, ctx, b, k, "b")
		must(t, b.ReleaseLock(ctx, k, "b"), "b release")
	}
	at := acquireOne(t, ctx, a, k, "a")
	if bt != 41 || at <= bt {
		t.Fatalf("b's token %d (want 41), then a's %d", bt, at)
	}
	must(t, a.ReleaseLock(ctx, k, "a"), "a release")
	if next := acquireOne(t, ctx, b, k, "c"); next <= at {
		t.Fatalf("next token %d after %d", next, at)
	}
}

// TestReviewFreshTakeMixedRace (real HBase): stores race for new keys (an earlier
// layout's counter on some), half of them through AcquireLock (its counter moved
// after the take: moveFence), half through AcquireLocks (created in the take:
// freshIncrement), each taking, noting its token while it holds the lock, and
// releasing, a few times. Per key, the tokens in the order of the holds strictly
// increase, starting above the earlier counter.
func TestReviewFreshTakeMixedRace(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	const workers, keys, rounds, tries = 4, 3, 6, 3
	stores := make([]*Store, workers)
	for w := range stores {
		stores[w] = openStore(t)
		defer stores[w].Close()
	}
	for round := range rounds {
		ks := make([]dcsync.Key, keys)
		earlier := make([]uint64, keys)
		for i := range ks {
			ks[i] = key(dcsync.XDC, "dc1")
			if i%2 == 0 {
				earlier[i] = uint64(10 + round)
				earlierCounter(t, ctx, ks[i], int64(earlier[i]))
			}
		}
		var mu sync.Mutex
		seen := make([][]uint64, keys)
		var wg sync.WaitGroup
		errs := make(chan error, workers*keys*tries)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[w]
				owner := func(i, n int) string { return string(rune('a'+w)) + string(rune('0'+i)) + string(rune('0'+n)) }
				for n := range tries {
					for i, k := range ks {
						o := owner(i, n)
						var st driver.LockState
						var err error
						if w%2 == 0 {
							st, err = s.AcquireLock(ctx, k, o, time.Minute)
						} else {
							var res []driver.LockResult
							res, err = s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: o, TTL: time.Minute}})
							if err == nil {
								st, err = res[0].State, res[0].Err
							}
						}
						if err != nil {
							if dcsync.CodeOf(err) != dcsync.LockUnavailable {
								errs <- err
							}
							continue
						}
						mu.Lock()
						seen[i] = append(seen[i], st.Token)
						mu.Unlock()
						if err := s.ReleaseLock(ctx, k, o); err != nil {
							errs <- err
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, toks := range seen {
			if len(toks) == 0 {
				t.Fatalf("round %d, key %d: never taken", round, i)
			}
			if toks[0] <= earlier[i] {
				t.Errorf("round %d, key %d: first token %d, earlier counter %d", round, i, toks[0], earlier[i])
			}
			for j := 1; j < len(toks); j++ {
				if toks[j] <= toks[j-1] {
					t.Errorf("round %d, key %d: tokens %v not strictly increasing", round, i, toks)
					break
				}
			}
		}
	}
}

// TestReviewFreshTakeHiddenByMarker (real HBase): a batched take of a new key whose
// cells a delete marker hides (a Java release of the same millisecond, simulated by a
// row delete stamped a few seconds ahead of the server's clock) creates the counter
// at fenceBase in the take but reports no token: it is LockUnavailable while the
// marker hides every take, and once the marker is past, the token is above every
// value the counter had, and above the earlier layout's.
func TestReviewFreshTakeHiddenByMarker(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s := openStore(t)
	defer s.Close()
	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	earlierCounter(t, ctx, k, 20)
	now := serverNow(t, ctx, fixture.lockTable, row, famLock)
	must(t, shared(t).Delete(ctx, fixture.lockTable, &hbaserpc.Delete{Row: row, Timestamp: now + 3000}), "marker ahead")
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "hidden", TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	wantCode(t, res[0].Err, dcsync.LockUnavailable, "a take hidden by a marker")
	v, ts, found := counterCell(t, ctx, k)
	if !found || ts < fenceBase || v <= 20 {
		t.Fatalf("counter after hidden takes: %d at %d (found %v)", v, ts, found)
	}
	for {
		res, err = s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "after", TTL: time.Minute}})
		must(t, err, "AcquireLocks")
		if res[0].Err == nil {
			break
		}
		wantCode(t, res[0].Err, dcsync.LockUnavailable, "while the marker hides takes")
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			t.Fatal("the marker never passed")
		}
	}
	if res[0].State.Token <= v {
		t.Fatalf("token %d after the counter reached %d under the marker", res[0].State.Token, v)
	}
	must(t, s.ReleaseLock(ctx, k, "after"), "release")
}

// TestReviewFreshTakeOverHiddenJavaHold (real HBase): a new key whose lock row hides a
// Java hold (a Java acquire then its release, and a second Java acquire stamped before
// that release: hidden, lock_masked.go). The batched take is applied (the row reads
// free), sees the hidden hold in its raw read and gives the row back: LockUnavailable,
// no token reported. Once the hidden hold's TTL ends, the take's token is above the
// counter the refused take created and above the earlier layout's.
func TestReviewFreshTakeOverHiddenJavaHold(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s := openStore(t)
	defer s.Close()
	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	earlierCounter(t, ctx, k, 70)
	now := serverNow(t, ctx, fixture.lockTable, row, famLock)
	if !javaAcquire(t, ctx, row, now-2000, time.Minute) {
		t.Fatal("first Java acquire refused")
	}
	must(t, shared(t).Delete(ctx, fixture.lockTable, &hbaserpc.Delete{Row: row}), "Java release")
	if !javaAcquire(t, ctx, row, now-1000, 10*time.Second) {
		t.Fatal("hidden Java acquire refused")
	}
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "go", TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	wantCode(t, res[0].Err, dcsync.LockUnavailable, "over a hidden Java hold")
	v, ts, _ := counterCell(t, ctx, k)
	t.Logf("counter after the refused take: %d at %d", v, ts)
	for {
		res, err = s.AcquireLocks(ctx, []driver.LockAcquire{{Key: k, Owner: "go2", TTL: time.Minute}})
		must(t, err, "AcquireLocks")
		if res[0].Err == nil {
			break
		}
		wantCode(t, res[0].Err, dcsync.LockUnavailable, "while the hidden Java hold lives")
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			t.Fatal("the hidden Java hold never ended")
		}
	}
	if tok := res[0].State.Token; tok <= v || tok <= 70 {
		t.Fatalf("token %d after the counter reached %d (earlier counter 70)", tok, v)
	}
	must(t, s.ReleaseLock(ctx, k, "go2"), "release")
}

// TestReviewMovedKeysNewStoreCalls (real HBase): what 88b3c0a costs a store taking
// keys that exist (counter above fenceBase) but that it has not seen: a queue consumer
// after a restart, or one taking over partitions another process held. The read of
// the counters before the take (readFences) is paid once per row and store: two
// calls (MultiGet, MultiMutate) where the take alone (one call) sufficed before
// 88b3c0a; the same store then takes them in one call.
func TestReviewMovedKeysNewStoreCalls(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	const n = 8
	acq := make([]driver.LockAcquire, n)
	rel := make([]driver.LockRelease, n)
	for i := range acq {
		k := key(dcsync.XDC, "dc1")
		acq[i] = driver.LockAcquire{Key: k, Owner: "o" + string(rune('a'+i)), TTL: time.Minute}
		rel[i] = driver.LockRelease{Key: k, Owner: acq[i].Owner}
	}
	first := openStore(t)
	defer first.Close()
	for range 2 {
		res, err := first.AcquireLocks(ctx, acq)
		must(t, err, "AcquireLocks")
		for _, r := range res {
			must(t, r.Err, "take")
		}
		_, err = first.ReleaseLocks(ctx, rel)
		must(t, err, "ReleaseLocks")
	}
	s := openStore(t)
	defer s.Close()
	cnt := countCalls(s)
	_, err := s.InspectLocks(ctx, []dcsync.Key{acq[0].Key}) // warm up
	must(t, err, "InspectLocks")
	for round, want := range []string{"map[MultiGet:1 MultiMutate:1]", "map[MultiMutate:1]"} {
		cnt.take()
		res, err := s.AcquireLocks(ctx, acq)
		must(t, err, "AcquireLocks")
		if got := cnt.take(); fmt.Sprint(got) != want {
			t.Errorf("round %d: a new store taking %d moved keys: calls %v, want %s", round, n, got, want)
		}
		for _, r := range res {
			must(t, r.Err, "take")
		}
		_, err = s.ReleaseLocks(ctx, rel)
		must(t, err, "ReleaseLocks")
	}
}
