package hbase

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// trimHooks runs a hook once, inside a trim or a rewind, at the step where the other
// side could slip in on a loaded cluster (any timing allows it).
type trimHooks struct {
	queueOps
	row []byte // the offset row watched

	mu sync.Mutex
	// afterOffsetsRead runs once after a MultiGet that read row (a trim's read of
	// the offsets), before the trim decides.
	afterOffsetsRead func()
	// beforeOffsetWrite runs once before a compare-and-set of row (a commit's write,
	// after its pin).
	beforeOffsetWrite func()
}

func (h *trimHooks) take(f *func()) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := *f
	*f = nil
	return g
}

func (h *trimHooks) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	rows, err := h.queueOps.MultiGet(ctx, table, gets)
	for _, g := range gets {
		if bytes.Equal(g.Row, h.row) {
			if f := h.take(&h.afterOffsetsRead); f != nil {
				f()
			}
			break
		}
	}
	return rows, err
}

func (h *trimHooks) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	if bytes.Equal(row, h.row) {
		if f := h.take(&h.beforeOffsetWrite); f != nil {
			f()
		}
	}
	return h.queueOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

// trimRace makes a queue of one partition read by group "g", with 10 events all
// acked by g (token 1, version 1), on a store whose queue calls go through hooks.
func trimRace(t *testing.T) (s *Store, h *trimHooks, ctx context.Context, name string) {
	s = openQueueStore(t)
	ctx = ctxT(t, time.Minute)
	name = qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}})
	var evs []driver.QueueEvent
	for i := range 10 {
		evs = append(evs, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}})
	}
	_, err := s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue")
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 10, Held: true, Version: 1}), "CommitQueueOffset next 10")
	_, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	h = &trimHooks{queueOps: db, row: offsetRow(name, "g", 0)}
	s.queue().db = h
	return s, h, ctx, name
}

func trimFloor(t *testing.T, ctx context.Context, s *Store, name string) uint64 {
	t.Helper()
	b, err := s.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	return b[0].Floor
}

// TestQueueTrimAfterRewindRead: a rewind (Next 10 -> 3) lands between the trim's read
// of the offsets (10) and its raise of the floor. The raise is conditioned on the
// trim guard the rewind's pin replaced: refused, the trim reads again and stops at 3.
// Without the condition the floor goes to 10, above the rewound offset.
func TestQueueTrimAfterRewindRead(t *testing.T) {
	s, h, ctx, name := trimRace(t)
	h.afterOffsetsRead = func() {
		must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 3, Held: true, Version: 2}), "rewind to 3 inside the trim")
	}
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10")
	if h.afterOffsetsRead != nil {
		t.Fatal("the trim read no offsets")
	}
	if f := trimFloor(t, ctx, s, name); f > 3 {
		t.Fatalf("a trim whose offsets read (10) a rewind to 3 followed raised the floor to %d: events 3..%d the rewind asked for are gone", f, f-1)
	}
	r, err := s.ReadQueue(ctx, name, 0, 3, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 7 || r.Entries[0].Seq != 3 {
		t.Fatalf("entries from the rewound offset 3: %+v", r.Entries)
	}
}

// TestQueueTrimBetweenPinAndRewind: a trim runs after a rewind pinned (Next 10 -> 3)
// and before it wrote the offset: the trim reads the old offset (10) but stops at the
// pin (3). Once the rewind's write is stored, the next trim drops the pin (the offset
// holds the floor back itself). Without the pin the floor goes to 10.
func TestQueueTrimBetweenPinAndRewind(t *testing.T) {
	s, h, ctx, name := trimRace(t)
	h.beforeOffsetWrite = func() {
		must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 inside the rewind")
	}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 3, Held: true, Version: 2}), "rewind to 3")
	if h.beforeOffsetWrite != nil {
		t.Fatal("the rewind wrote no offset")
	}
	if f := trimFloor(t, ctx, s, name); f > 3 {
		t.Fatalf("a trim between a rewind's pin and its write raised the floor to %d, above the rewind's 3", f)
	}
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 after the rewind")
	if f := trimFloor(t, ctx, s, name); f != 3 {
		t.Fatalf("floor %d after the rewind to 3 and a trim below 10, want 3", f)
	}
	// The pin is gone once the rewind's write is seen: acks move the floor again.
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 8, Held: true, Version: 3}), "ack to 8")
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 after acks to 8")
	if f := trimFloor(t, ctx, s, name); f != 8 {
		t.Fatalf("floor %d after acks to 8, want 8 (a stale pin holds it back)", f)
	}
	cells, err := s.client.Get(ctx, s.QueueTable(), headRow(name, 0), hbaserpc.Column{Family: famQueue, Qualifier: qualPins})
	must(t, err, "Get pins")
	if v, _, ok := cellValue(cells, qualPins); ok && len(v) > 0 {
		pins, _ := decodePins(v)
		t.Fatalf("pins left after the rewind landed and a trim ran: %+v", pins)
	}
	// A rewind below the floor is refused, writing nothing.
	wantCode(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 5, Held: true, Version: 4}), dcsync.InvalidArgument, "rewind to 5 below the floor 8")
	offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0].Next != 8 || offs[0].Version != 3 {
		t.Fatalf("offset after a refused rewind: %+v, want next 8 version 3", offs[0])
	}
}

// ackAll makes every group that reads partition p of queue name ack it below next
// (claiming it first where no one has), so that their offsets hold no trim below next
// back.
func ackAll(t *testing.T, ctx context.Context, s *Store, name string, p int, next uint64) {
	t.Helper()
	spec, err := s.ReadQueueSpec(ctx, name)
	must(t, err, "ReadQueueSpec")
	for i, g := range spec.Groups {
		if p >= spec.Partitions && p != spec.Partitions+i {
			continue
		}
		off, err := s.ClaimQueuePartition(ctx, name, g, p, 1)
		if err != nil && dcsync.CodeOf(err) != dcsync.LockLost {
			t.Fatalf("claim of group %s partition %d: %v", g, p, err)
		}
		must(t, s.CommitQueueOffset(ctx, name, g, p, driver.QueueOffset{Token: max(off.Token, 1), Next: next, Version: off.Version + 1}), "CommitQueueOffset of group "+g)
	}
}

// countedOps counts a store's queue calls by kind.
type countedOps struct {
	queueOps
	mu sync.Mutex
	n  map[string]int
}

func (c *countedOps) count(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
}

func (c *countedOps) Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error) {
	c.count("Get")
	return c.queueOps.Get(ctx, table, row, cols...)
}

func (c *countedOps) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	c.count("MultiGet")
	return c.queueOps.MultiGet(ctx, table, gets)
}

func (c *countedOps) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	c.count("CheckAndMutate")
	return c.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (c *countedOps) MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	c.count("MultiMutate")
	return c.queueOps.MultiMutate(ctx, table, actions)
}

// TestQueueTrimCalls counts a trim's calls: the head and spec rows (one MultiGet),
// the groups' offsets (one MultiGet), the guarded floor raise, the trimmed marks (one
// MultiMutate for 5 events) and the record of how far they go (a Get and a
// check-and-mutate). The first trim of a partition first draws its trim guard (one
// more check-and-mutate; see "Trims against a queue created again").
func TestQueueTrimCalls(t *testing.T) {
	s, h, ctx, name := trimRace(t)
	for _, c := range []struct {
		below uint64
		cams  int
	}{{5, 3}, {10, 2}} {
		n := &countedOps{queueOps: h.queueOps, n: map[string]int{}}
		s.queue().db = n
		must(t, s.TrimQueue(ctx, name, 0, c.below), fmt.Sprintf("TrimQueue below %d", c.below))
		want := map[string]int{"MultiGet": 2, "CheckAndMutate": c.cams, "MultiMutate": 1, "Get": 1}
		if fmt.Sprint(n.n) != fmt.Sprint(want) {
			t.Fatalf("trim below %d: calls %v, want %v", c.below, n.n, want)
		}
		if f := trimFloor(t, ctx, s, name); f != c.below {
			t.Fatalf("floor %d, want %d", f, c.below)
		}
	}
}
