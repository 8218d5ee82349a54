package hbase

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// The single AcquireLock of a key new to the store: one read of the row and of the
// earlier layout's counter (readFence), then the take, which creates the counter at
// version fenceBase (takeIncrement). The tests mirror the batched path's
// (lock_move_fence_test.go, review_fresh_take_test.go).

// freshProbe wraps the real client under a store: it counts the calls by method and
// the conditional actions, keeps the conditional writes sent, and runs a hook once
// right after the next MultiGet returns (between AcquireLock's read and its take). It
// has no raw read (rawGetOps), so the take goes as CheckAndMutateRead.
type freshProbe struct {
	storeOps
	mu        sync.Mutex
	calls     map[string]int
	conds     int
	takes     []sentTake
	afterRead func()
}

// sentTake is a conditional write as the store sent it.
type sentTake struct {
	row  []byte
	cond hbaserpc.Condition
	muts []hbaserpc.Mutation
}

func probeFresh(s *Store) *freshProbe {
	p := &freshProbe{storeOps: s.client, calls: map[string]int{}}
	s.db = p
	return p
}

func (p *freshProbe) count(m string, conds int) {
	p.mu.Lock()
	p.calls[m]++
	p.conds += conds
	p.mu.Unlock()
}

// take returns the calls and conditional actions counted since the last take.
func (p *freshProbe) take() (map[string]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls, conds := p.calls, p.conds
	p.calls, p.conds = map[string]int{}, 0
	return calls, conds
}

func (p *freshProbe) sent() []sentTake {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takes
}

func (p *freshProbe) Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error) {
	p.count("Get", 0)
	return p.storeOps.Get(ctx, table, row, cols...)
}

func (p *freshProbe) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	p.count("MultiGet", 0)
	cells, err := p.storeOps.MultiGet(ctx, table, gets)
	p.mu.Lock()
	f := p.afterRead
	p.afterRead = nil
	p.mu.Unlock()
	if f != nil {
		f()
	}
	return cells, err
}

func (p *freshProbe) Increment(ctx context.Context, table string, inc *hbaserpc.Increment) ([]hbaserpc.Cell, error) {
	p.count("Increment", 0)
	return p.storeOps.Increment(ctx, table, inc)
}

func (p *freshProbe) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	p.count("CheckAndMutate", 1)
	return p.storeOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (p *freshProbe) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	p.count("CheckAndMutateRead", 1)
	p.mu.Lock()
	p.takes = append(p.takes, sentTake{row: row, cond: cond, muts: muts})
	p.mu.Unlock()
	return p.storeOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

func (p *freshProbe) MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	n := 0
	for _, a := range actions {
		if a.Cond != nil {
			n++
		}
	}
	p.count("MultiMutate", n)
	return p.storeOps.MultiMutate(ctx, table, actions)
}

// acquireSingle takes k for owner through s's AcquireLock and checks that the token it
// reports is the one InspectLock and the counter D:F show, at a version at or above
// fenceBase.
func acquireSingle(t *testing.T, ctx context.Context, s *Store, k dcsync.Key, owner string) uint64 {
	t.Helper()
	st, err := s.AcquireLock(ctx, k, owner, time.Minute)
	must(t, err, "AcquireLock of "+k.String())
	in, err := s.InspectLock(ctx, k)
	must(t, err, "InspectLock")
	v, ts, found := counterCell(t, ctx, k)
	if in.Owner != owner || in.Token != st.Token || !found || v != in.Token || ts < fenceBase {
		t.Fatalf("after AcquireLock: reported %+v, InspectLock %+v, counter %d at version %d (found %v, fenceBase %d)", st, in, v, ts, found, fenceBase)
	}
	return in.Token
}

// TestLockFreshKeyCalls (real HBase): AcquireLock of a key never taken is two calls (a
// MultiGet of the row and of the earlier layout's counter, then the take) and one
// conditional action, where moving the counter after the take cost three calls (take,
// Get, conditional Put) and two; the counter is created at version fenceBase in the
// take itself, with the earlier layout's counter + 1 (1 without one, 58 over 57).
// Taking it again from this store (which now knows the row moved) is one call; from a
// store that does not know the row, two (the read, then the take), with the token one
// above the last; and while the key is held, a store that does not know the row gets
// LockUnavailable with the holder's state from the read alone, one call, no write.
func TestLockFreshKeyCalls(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	p := probeFresh(s)
	other := openStore(t)
	defer other.Close()
	q := probeFresh(other)
	third := openStore(t)
	defer third.Close()
	r := probeFresh(third)
	ctx := ctxT(t, 2*time.Minute)
	const n = 4
	keys := make([]dcsync.Key, n)
	want := make([]uint64, n)
	for i := range keys {
		keys[i] = key(dcsync.XDC, "dc1")
		want[i] = 1
		if i%2 == 1 {
			earlierCounter(t, ctx, keys[i], 57)
			want[i] = 58
		}
	}
	for _, st := range []*Store{s, other, third} { // warm up: the table is ready
		_, err := st.InspectLock(ctx, keys[0])
		wantCode(t, err, dcsync.NotFound, "warm up")
	}
	for round, c := range []struct {
		st    *Store
		p     *freshProbe
		calls string
	}{
		{s, p, "map[CheckAndMutateRead:1 MultiGet:1]"},
		{s, p, "map[CheckAndMutateRead:1]"},
		{other, q, "map[CheckAndMutateRead:1 MultiGet:1]"},
	} {
		for i, k := range keys {
			owner := fmt.Sprintf("o%d-%d", round, i)
			c.p.take()
			st, err := c.st.AcquireLock(ctx, k, owner, time.Minute)
			must(t, err, fmt.Sprintf("round %d, lock %d", round, i))
			if calls, conds := c.p.take(); fmt.Sprint(calls) != c.calls || conds != 1 {
				t.Errorf("round %d, lock %d: AcquireLock: calls %v and %d conditional actions; want %s and 1", round, i, calls, conds, c.calls)
			}
			if st.Token != want[i] {
				t.Errorf("round %d, lock %d: token %d, want %d", round, i, st.Token, want[i])
			}
			v, ts, found := counterCell(t, ctx, k)
			if !found || v != want[i] || ts < fenceBase || round == 0 && ts != fenceBase {
				t.Errorf("round %d, lock %d: counter %d at version %d (found %v), want %d at fenceBase %d (the first) or above", round, i, v, ts, found, want[i], fenceBase)
			}
			if round == 2 {
				// Held: a store that does not know the row reads it and gives up.
				r.take()
				busy, err := third.AcquireLock(ctx, k, "third", time.Minute)
				wantCode(t, err, dcsync.LockUnavailable, "AcquireLock of a held key")
				if calls, conds := r.take(); fmt.Sprint(calls) != "map[MultiGet:1]" || conds != 0 {
					t.Errorf("lock %d: AcquireLock of a held key unknown to the store: calls %v and %d conditional actions; want one MultiGet and none", i, calls, conds)
				}
				if busy.Owner != owner || busy.Token != want[i] {
					t.Errorf("lock %d: LockUnavailable with %+v, want the holder %s with token %d", i, busy, owner, want[i])
				}
			}
			must(t, c.st.ReleaseLock(ctx, k, owner), "release")
			want[i]++
		}
	}
}

// TestLockFreshKeyRaces (real HBase): the counter AcquireLock read absent is created or
// moved by someone else before its take lands; the take's token is still above every
// earlier one, and what InspectLock and the counter show. Each case runs in the window
// between AcquireLock's read and its take:
//
//   - another store takes and frees the lock (its counter created at version
//     fenceBase, the version the take names) once, or twice (above it): a take that
//     put the counter instead of incrementing it would write the version fenceBase
//     again, and its token would not be above the last;
//   - a take of an earlier version that has not moved its counter is simulated by an
//     Increment of D:F at the server's time (below fenceBase): the take leaves it
//     below, and the counter is moved after it (moveFence), above the earlier
//     layout's.
func TestLockFreshKeyRaces(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	for _, tc := range []struct {
		name    string
		earlier int64
		meddle  func(t *testing.T, k dcsync.Key) uint64 // returns the highest token before the take
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
			p := probeFresh(s)
			k := key(dcsync.XDC, "dc1")
			if tc.earlier > 0 {
				earlierCounter(t, ctx, k, tc.earlier)
			}
			var before uint64
			p.afterRead = func() { before = tc.meddle(t, k) }
			token := acquireSingle(t, ctx, s, k, "single")
			if before == 0 {
				t.Fatal("the hook did not run between the read and the take")
			}
			if token <= before {
				t.Fatalf("token %d after a token (or earlier counter) of %d", token, before)
			}
			must(t, s.ReleaseLock(ctx, k, "single"), "release")
			if next := acquireSingle(t, ctx, s, k, "next"); next <= token {
				t.Fatalf("the next token %d after %d", next, token)
			}
		})
	}
}

// TestLockFreshTakeConditioned (real HBase): the counter's creation is part of the
// take's conditional write, so a take that is not applied creates and bumps nothing: a
// Java hold (D:L put, no counter) appearing between AcquireLock's read and its take
// makes it LockUnavailable and the row still has no counter; and the take sent again
// late (a try that reached the server after the lock was freed and taken by another
// owner) is not applied and leaves the holder's counter alone. A late take landing on
// a free row takes it with a token above the last.
func TestLockFreshTakeConditioned(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	p := probeFresh(s)
	ctx := ctxT(t, 2*time.Minute)

	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	p.afterRead = func() {
		if !javaAcquire(t, ctx, row, time.Now().UnixMilli(), time.Minute) {
			t.Error("Java-style acquire refused")
		}
	}
	_, err := s.AcquireLock(ctx, k, "go", time.Minute)
	wantCode(t, err, dcsync.LockUnavailable, "AcquireLock over a Java hold taken after its read")
	if v, ts, found := counterCell(t, ctx, k); found {
		t.Fatalf("a take refused by a Java hold left a counter %d at version %d", v, ts)
	}
	_, _, _ = shared(t).CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfEquals(famLock, qualLock, lockMarker), &hbaserpc.Delete{Row: row})

	// The late take: the write that took k2 fresh, sent again after a release and
	// another owner's take.
	k2 := key(dcsync.XDC, "dc1")
	first := acquireSingle(t, ctx, s, k2, "first")
	takes := p.sent()
	take := takes[len(takes)-1]
	must(t, s.ReleaseLock(ctx, k2, "first"), "release")
	second := acquireSingle(t, ctx, s, k2, "second")
	applied, _, err := shared(t).CheckAndMutate(ctx, fixture.lockTable, take.row, take.cond, take.muts...)
	must(t, err, "the late take")
	if applied {
		t.Fatal("the late take was applied over another holder")
	}
	in, err := s.InspectLock(ctx, k2)
	must(t, err, "InspectLock")
	if v, _, _ := counterCell(t, ctx, k2); in.Owner != "second" || in.Token != second || v != second || second <= first {
		t.Fatalf("after the late take: holder %+v, counter %d; want owner second with token %d (> %d) and the counter at it", in, v, second, first)
	}
	must(t, s.ReleaseLock(ctx, k2, "second"), "release")
	applied, _, err = shared(t).CheckAndMutate(ctx, fixture.lockTable, take.row, take.cond, take.muts...)
	must(t, err, "the late take on a free row")
	if v, _, _ := counterCell(t, ctx, k2); applied && v <= second {
		t.Fatalf("a late take landing on a free row left the counter at %d, after token %d", v, second)
	}
}

// TestLockFreshTakeLateFirstAttempt (real HBase): AcquireLock's take of a new key (with
// an earlier layout's counter) is held back (outcome unknown); the store reads back,
// sends it again and holds the lock; the holder releases, another store takes and
// releases twice; then the first attempt (the Increment by the earlier counter + 1 at
// fenceBase) lands late on the free row. Every token is above the one before, and the
// counter ends above the last token issued.
func TestLockFreshTakeLateFirstAttempt(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s := openStore(t)
	h := holdWrites(t, s, false)
	k := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	earlierCounter(t, ctx, k, 30)
	h.holdAfter(0, row)
	st, err := s.AcquireLock(ctx, k, "x", time.Minute)
	must(t, err, "AcquireLock (sent again after the lost reply)")
	tokens := []uint64{st.Token}
	must(t, s.ReleaseLock(ctx, k, "x"), "release x")
	o := openStore(t)
	defer o.Close()
	for range 2 {
		st, err := o.AcquireLock(ctx, k, "z", time.Minute)
		must(t, err, "z acquire")
		tokens = append(tokens, st.Token)
		must(t, o.ReleaseLock(ctx, k, "z"), "z release")
	}
	late := h.deliver(t)
	in, err := o.InspectLock(ctx, k)
	t.Logf("late first attempt applied %v, holder %+v", late[0], in)
	if late[0] {
		must(t, err, "InspectLock")
		tokens = append(tokens, in.Token)
	}
	if v, ts, _ := counterCell(t, ctx, k); ts < fenceBase || v < tokens[len(tokens)-1] {
		t.Fatalf("counter %d at %d after tokens %v", v, ts, tokens)
	}
	if late[0] {
		// The ghost hold of x lapses with its lease; free it for the next take.
		_, _, err = shared(t).CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfEquals(famLock, qualOwner, []byte("x")),
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock}, {Family: famLock, Qualifier: qualOwner}}, TTL: time.Hour})
		must(t, err, "free the ghost")
	}
	st, err = o.AcquireLock(ctx, k, "w", time.Minute)
	must(t, err, "w acquire")
	tokens = append(tokens, st.Token)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] || tokens[0] <= 30 {
			t.Fatalf("tokens %v (earlier counter 30): not strictly increasing above it", tokens)
		}
	}
	must(t, o.ReleaseLock(ctx, k, "w"), "w release")
}
