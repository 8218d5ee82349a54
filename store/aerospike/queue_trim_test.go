package aerospike_test

import (
	"sync"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// trimRace makes a queue of one partition read by group "g", with 10 events all acked
// by g (token 1, version 1), and arms the queue test hook to run do once at stage of
// that queue.
func trimRace(t *testing.T, s *aerospike.Store, stage string, do func(name string)) (name string, ran func() bool) {
	t.Helper()
	ctx := ctxT(t)
	spec := newQueue(t, s, 1)
	var evs []driver.QueueEvent
	for i := range 10 {
		evs = append(evs, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}})
	}
	must(t, appendErr(s.AppendQueue(ctx, spec.Name, evs)), "AppendQueue")
	_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 1, Next: 10, Held: true, Version: 1}), "CommitQueueOffset next 10")
	var once sync.Once
	done := false
	aerospike.SetQueueTestHook(func(q, st string) error {
		if q == spec.Name && st == stage {
			once.Do(func() { do(spec.Name); done = true })
		}
		return nil
	})
	t.Cleanup(func() { aerospike.SetQueueTestHook(nil) })
	return spec.Name, func() bool { return done }
}

func appendErr(_ []driver.QueueAppend, err error) error { return err }

func floorOf(t *testing.T, s *aerospike.Store, name string) uint64 {
	t.Helper()
	b, err := s.QueueBounds(ctxT(t), name, []int{0})
	must(t, err, "QueueBounds")
	return b[0].Floor
}

// TestQueueTrimAfterRewindRead: a rewind (Next 10 -> 3) lands between the trim's read
// of the offsets (10) and its raise of the floor. The raise is filtered on the trim
// guard the rewind's pin replaced: refused, the trim reads again and stops at 3.
// Without the filter the floor goes to 10, above the rewound offset.
func TestQueueTrimAfterRewindRead(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	name, ran := trimRace(t, s, "trim-offsets-read", func(name string) {
		must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 3, Held: true, Version: 2}), "rewind to 3 inside the trim")
	})
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10")
	if !ran() {
		t.Fatal("the trim read no offsets")
	}
	if f := floorOf(t, s, name); f > 3 {
		t.Fatalf("a trim whose offsets read (10) a rewind to 3 followed raised the floor to %d: events 3..%d the rewind asked for are gone", f, f-1)
	}
	r := mustRead(t, s, name, 0, 3, 10)
	if len(r.Entries) != 7 || r.Entries[0].Seq != 3 {
		t.Fatalf("entries from the rewound offset 3: %+v", r.Entries)
	}
}

// TestQueueTrimBetweenPinAndRewind: a trim runs after a rewind pinned (Next 10 -> 3)
// and before it wrote the offset: the trim reads the old offset (10) but stops at the
// pin (3). Once the rewind's write is stored, the next trim drops the pin. Without the
// pin the floor goes to 10.
func TestQueueTrimBetweenPinAndRewind(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	name, ran := trimRace(t, s, "rewind-pinned", func(name string) {
		must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 inside the rewind")
	})
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 3, Held: true, Version: 2}), "rewind to 3")
	if !ran() {
		t.Fatal("the rewind did not pin")
	}
	if f := floorOf(t, s, name); f > 3 {
		t.Fatalf("a trim between a rewind's pin and its write raised the floor to %d, above the rewind's 3", f)
	}
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 after the rewind")
	if f := floorOf(t, s, name); f != 3 {
		t.Fatalf("floor %d after the rewind to 3 and a trim below 10, want 3", f)
	}
	// The pin is gone once the rewind's write is seen: acks move the floor again.
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 8, Held: true, Version: 3}), "ack to 8")
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10 after acks to 8")
	if f := floorOf(t, s, name); f != 8 {
		t.Fatalf("floor %d after acks to 8, want 8 (a stale pin holds it back)", f)
	}
	// A rewind below the floor is refused, writing nothing.
	wantCode(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 5, Held: true, Version: 4}), dcsync.InvalidArgument, "rewind to 5 below the floor 8")
	offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0].Next != 8 || offs[0].Version != 3 {
		t.Fatalf("offset after a refused rewind: %+v, want next 8 version 3", offs[0])
	}
}
