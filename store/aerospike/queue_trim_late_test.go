package aerospike_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestTrimQueueLateTriesKeepNewQueue holds back, in the fault proxy, the first try of a
// TrimQueue's raise of the floor and of its batch delete of the entries below it: the
// client times out, in doubt, retries, and the trim finishes. The queue is then deleted,
// created again under the name and given as many events, and the held tries are
// delivered. They must change nothing: the new queue keeps its events and its floor 0.
// Without the incarnation filter (TrimQueue) the late raise passed the new head's trim
// guard (0 again, as the old one's was when the trim read it) and set the floor over
// the new events, and the late deletes deleted them.
func TestTrimQueueLateTriesKeepNewQueue(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr()) // the trimming store
	d := queueStore(t, addr)
	ctx := ctxT(t)
	spec := newQueue(t, d, 1, "g")
	name := spec.Name
	defer func() { _ = queueStore(t, addr).DeleteQueue(context.Background(), name) }()
	appendFour := func(st *aerospike.Store, tag string) {
		t.Helper()
		var evs []driver.QueueEvent
		for i := 0; i < 4; i++ {
			evs = append(evs, driver.QueueEvent{Partition: 0, Payload: []byte(fmt.Sprintf("%s-%d", tag, i))})
		}
		_, err := st.AppendQueue(ctx, name, evs)
		must(t, err, tag+": AppendQueue")
	}
	appendFour(d, "old")
	_, err := d.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, d.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 4, Version: 1}), "CommitQueueOffset")

	// The raise: a write to the head record setting floor. TrimQueue's batches, in
	// order: the head and spec read, the offsets and spec read, the entries' deletes.
	proxy.HoldRequests(1, func(c command) bool {
		return c.Kind == "write" && c.Set == aerospike.QueueHeadSet && slices.Contains(c.Bins, "floor")
	})
	var batches atomic.Int32
	proxy.HoldRequests(1, func(c command) bool { return c.Kind == "batch" && batches.Add(1) == 3 })
	must(t, s.TrimQueue(ctx, name, 0, 4), "TrimQueue whose raise's and deletes' first tries were held back")
	proxy.ClearDrops()
	if n := proxy.Held(); n != 2 {
		t.Fatalf("%d requests held, want 2 (the raise's first try, the deletes' first try)", n)
	}

	must(t, d.DeleteQueue(ctx, name), "DeleteQueue")
	n := queueStore(t, addr) // another process
	must(t, n.CreateQueue(ctx, spec), "CreateQueue again")
	appendFour(n, "new")
	codes, err := proxy.Deliver()
	must(t, err, "Deliver")
	t.Logf("the late tries were answered with result codes %v", codes)

	r := queueStore(t, addr) // caches nothing
	b, err := r.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	if b[0] != (driver.QueueBounds{Head: 4}) {
		t.Errorf("the new queue's bounds are %+v after the late tries, want head 4, floor 0", b[0])
	}
	rd, err := r.ReadQueue(ctx, name, 0, 0, 10)
	must(t, err, "ReadQueue")
	var got []string
	for _, e := range rd.Entries {
		got = append(got, string(e.Payload))
	}
	if want := "[new-0 new-1 new-2 new-3]"; fmt.Sprint(got) != want {
		t.Errorf("the new queue's events are %v after the late tries, want %s", got, want)
	}
}
