package drivertest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// Queue deletion (driver.QueueDeleter and queue.Delete): after a delete every read of
// the queue is NotFound, a queue created again under the name starts empty (heads at
// 0, no offsets, no remembered ids), and other queues are untouched. Each store's own
// tests add a count of its raw records (PopulateQueue, then the count before and
// after a DeleteQueue), which fails for any record kind the delete leaves.

// DeleteGroups are the consumer groups of a queue PopulateQueue makes.
var DeleteGroups = []string{"g1", "g2"}

// deleteParts is the partition count of a queue PopulateQueue makes.
const deleteParts = 3

// PopulateQueue creates queue name (3 partitions, groups DeleteGroups, a dedup window
// of an hour) and writes every kind of record a queue has: events with and without
// ids in every partition, dead letters (in both groups' dead-letter partitions), a
// trim (partition 0 below 2), claimed and committed offsets of both groups (the
// dead-letter partitions' too). It returns the spec as read back.
func PopulateQueue(t *testing.T, ctx context.Context, s driver.QueueStore, name string) driver.QueueSpec {
	t.Helper()
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: deleteParts, Groups: DeleteGroups, Dedup: time.Hour}), "CreateQueue "+name)
	spec, err := s.ReadQueueSpec(ctx, name)
	must(t, err, "ReadQueueSpec")
	var evs []driver.QueueEvent
	for p := 0; p < spec.StoragePartitions(); p++ {
		for i := 0; i < 4; i++ {
			e := driver.QueueEvent{Partition: p, Key: fmt.Sprintf("k%d", i), Payload: []byte(fmt.Sprintf("p%d-%d", p, i))}
			if i%2 == 0 {
				e.ID = populatedID(p, i)
			}
			evs = append(evs, e)
		}
	}
	_, err = s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue")
	for gi, g := range spec.Groups {
		for p := 0; p < spec.StoragePartitions(); p++ {
			if p >= spec.Partitions && p != spec.Partitions+gi {
				continue
			}
			tok := uint64(gi + 1)
			_, err := s.ClaimQueuePartition(ctx, name, g, p, tok)
			must(t, err, "ClaimQueuePartition")
			next := uint64(1)
			if p == 0 {
				next = 2 // every group acked partition 0 below 2: the trim below deletes them
			}
			must(t, s.CommitQueueOffset(ctx, name, g, p, driver.QueueOffset{Token: tok, Next: next, Held: true, Version: 1}), "CommitQueueOffset")
		}
	}
	return spec
}

func populatedID(p, i int) string { return fmt.Sprintf("id-%d-%d", p, i) }

// PopulatedIDs are the event ids PopulateQueue appends to a queue of spec.
func PopulatedIDs(spec driver.QueueSpec) []string {
	var ids []string
	for p := 0; p < spec.StoragePartitions(); p++ {
		ids = append(ids, populatedID(p, 0), populatedID(p, 2))
	}
	return ids
}

// queueSnapshot is everything the store API shows of a queue.
type queueSnapshot struct {
	Spec    driver.QueueSpec
	Bounds  []driver.QueueBounds
	Entries [][]driver.QueueEntry
	Offsets map[string][]driver.QueueOffset
}

func snapshot(t *testing.T, ctx context.Context, s driver.QueueStore, name string) queueSnapshot {
	t.Helper()
	spec, err := s.ReadQueueSpec(ctx, name)
	must(t, err, "ReadQueueSpec")
	snap := queueSnapshot{Spec: spec, Offsets: map[string][]driver.QueueOffset{}}
	ps := make([]int, spec.StoragePartitions())
	for p := range ps {
		ps[p] = p
		es, _ := readAll(t, ctx, s, name, p, 0)
		snap.Entries = append(snap.Entries, es)
	}
	snap.Bounds, err = s.QueueBounds(ctx, name, ps)
	must(t, err, "QueueBounds")
	for _, g := range spec.Groups {
		snap.Offsets[g], err = s.ReadQueueOffsets(ctx, name, g, ps)
		must(t, err, "ReadQueueOffsets")
	}
	return snap
}

func runQueueDelete(t *testing.T, h Harness) {
	if _, ok := h.open(t).(driver.QueueDeleter); !ok {
		t.Skip("store does not implement driver.QueueDeleter")
	}
	t.Run("Store", func(t *testing.T) { runDeleteStore(t, h) })
	t.Run("Front", func(t *testing.T) { runDeleteFront(t, h) })
}

// runDeleteStore checks DeleteQueue: NotFound everywhere after it, a fresh start for
// a queue created again, other queues untouched.
func runDeleteStore(t *testing.T, h Harness) {
	s := h.open(t)
	del := s.(driver.QueueDeleter)
	ctx := ctxT(t, 2*time.Minute)
	name, otherName := unique(t), unique(t)
	spec := PopulateQueue(t, ctx, s, name)
	PopulateQueue(t, ctx, s, otherName)
	other := snapshot(t, ctx, s, otherName)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = del.DeleteQueue(ctx, otherName)
		_ = del.DeleteQueue(ctx, name)
	})

	wantCode(t, del.DeleteQueue(ctx, "never-"+name[:min(len(name), 50)]), dcsync.NotFound, "DeleteQueue of a queue never created")
	wantCode(t, del.DeleteQueue(ctx, ""), dcsync.InvalidArgument, "DeleteQueue of an invalid name")
	must(t, del.DeleteQueue(ctx, name), "DeleteQueue")

	notFound := func(s driver.Store, who string) {
		t.Helper()
		_, err := s.ReadQueueSpec(ctx, name)
		wantCode(t, err, dcsync.NotFound, who+"ReadQueueSpec after DeleteQueue")
		wantCode(t, s.(driver.QueueDeleter).DeleteQueue(ctx, name), dcsync.NotFound, who+"DeleteQueue again")
	}
	notFound(s, "")
	_, err := s.ReadQueue(ctx, name, 1, 0, 10)
	wantCode(t, err, dcsync.NotFound, "ReadQueue after DeleteQueue")
	_, err = s.QueueBounds(ctx, name, []int{0, 1})
	wantCode(t, err, dcsync.NotFound, "QueueBounds after DeleteQueue")
	_, err = s.ReadQueueOffsets(ctx, name, "g1", []int{0})
	wantCode(t, err, dcsync.NotFound, "ReadQueueOffsets after DeleteQueue")
	_, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("late")}})
	wantCode(t, err, dcsync.NotFound, "AppendQueue after DeleteQueue")
	_, err = s.ClaimQueuePartition(ctx, name, "g1", 0, 9)
	wantCode(t, err, dcsync.NotFound, "ClaimQueuePartition after DeleteQueue")
	wantCode(t, s.CommitQueueOffset(ctx, name, "g1", 0, driver.QueueOffset{Token: 1, Next: 2, Version: 2}), dcsync.NotFound, "CommitQueueOffset after DeleteQueue")
	wantCode(t, s.TrimQueue(ctx, name, 1, 1), dcsync.NotFound, "TrimQueue after DeleteQueue")
	_, err = s.AddQueueGroup(ctx, name, "g3")
	wantCode(t, err, dcsync.NotFound, "AddQueueGroup after DeleteQueue")
	notFound(h.open(t), "another store: ")

	// Created again: empty, from seq 0, no offsets, no remembered ids.
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: spec.Partitions, Groups: spec.Groups, Dedup: time.Hour}), "CreateQueue again")
	again := snapshot(t, ctx, s, name)
	for p, b := range again.Bounds {
		if b != (driver.QueueBounds{}) || len(again.Entries[p]) != 0 {
			t.Fatalf("queue created again: partition %d has bounds %+v and %d entries, want none", p, b, len(again.Entries[p]))
		}
	}
	for g, offs := range again.Offsets {
		for p, o := range offs {
			if o != (driver.QueueOffset{}) {
				t.Fatalf("queue created again: group %s partition %d has offset %+v, want none", g, p, o)
			}
		}
	}
	var evs []driver.QueueEvent
	for p := 0; p < spec.StoragePartitions(); p++ {
		evs = append(evs, driver.QueueEvent{Partition: p, ID: populatedID(p, 0), Payload: []byte("new")})
	}
	res, err := s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue to the queue created again")
	for i, r := range res {
		if r.Duplicate || r.Seq != 0 || r.Partition != i {
			t.Fatalf("append of an id the deleted queue had, to the queue created again: %+v, want partition %d seq 0, not a duplicate", r, i)
		}
	}
	_, err = s.ClaimQueuePartition(ctx, name, "g1", 0, 1)
	must(t, err, "ClaimQueuePartition in the queue created again")

	// The other queue is untouched.
	if got := snapshot(t, ctx, s, otherName); !reflect.DeepEqual(got, other) {
		t.Fatalf("another queue changed under DeleteQueue:\n got %+v\nwant %+v", got, other)
	}
	res, err = s.AppendQueue(ctx, otherName, []driver.QueueEvent{{Partition: 1, ID: populatedID(1, 0), Payload: []byte("again")}})
	must(t, err, "AppendQueue to the other queue")
	if !res[0].Duplicate || res[0].Seq != 0 {
		t.Fatalf("the other queue forgot an id under DeleteQueue: %+v", res[0])
	}
}

// runDeleteFront checks queue.Delete: refused while a consumer holds the queue's locks
// (nothing deleted), done WithForce with every lock of the queue freed.
func runDeleteFront(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	st := &stalling{Store: s}
	q := createQueue(t, ctx, st, 2, []string{"g"})
	name := q.Name()
	_, err := q.Enqueue(ctx, queue.Event{Key: "a", Payload: []byte("1")}, queue.Event{Key: "b", Payload: []byte("2")})
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	receiveAll(t, ctx, c, 1) // it holds a partition lock and a member slot

	err = queue.Delete(ctx, s, name, frontOpts()...)
	wantCode(t, err, dcsync.LockUnavailable, "queue.Delete while a consumer holds the queue")
	if _, err := s.ReadQueueSpec(ctx, name); err != nil {
		t.Fatalf("a refused queue.Delete deleted the queue: %v", err)
	}
	if b := bounds(t, ctx, s, name, 0); b.Head+bounds(t, ctx, s, name, 1).Head != 2 {
		t.Fatalf("a refused queue.Delete changed the queue's events")
	}

	st.freeze() // the consumer's process is cut off, holding its locks
	must(t, queue.Delete(ctx, s, name, frontOpts(queue.WithForce())...), "queue.Delete WithForce")
	if _, err := s.ReadQueueSpec(ctx, name); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("ReadQueueSpec after queue.Delete: %v, want NotFound", err)
	}
	if l, ok := s.(driver.LockLister); ok {
		locks, err := l.ListLocks(ctx, client)
		must(t, err, "ListLocks")
		prefix := fmt.Sprintf("queue:%d:%s", len(name), name)
		for _, lk := range locks {
			if strings.HasPrefix(lk.Key.Name, prefix) {
				t.Fatalf("lock %s of the deleted queue is still held by %q", lk.Key, lk.Owner)
			}
		}
	}
	wantCode(t, queue.Delete(ctx, s, name, frontOpts()...), dcsync.NotFound, "queue.Delete again")

	// A queue whose consumers left is deleted without force.
	q2 := createQueue(t, ctx, s, 2, []string{"g"})
	c2, err := q2.Consumer(ctx, "g")
	must(t, err, "Consumer")
	_, err = q2.Enqueue(ctx, queue.Event{Key: "a", Payload: []byte("1")})
	must(t, err, "Enqueue")
	receiveAll(t, ctx, c2, 1)
	must(t, c2.Close(ctx), "Consumer.Close")
	must(t, queue.Delete(ctx, s, q2.Name(), frontOpts()...), "queue.Delete after its consumer closed")
	wantCode(t, queue.Delete(ctx, nil, "x"), dcsync.InvalidArgument, "queue.Delete on a nil store")
}
