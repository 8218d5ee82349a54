package aerospike_test

import (
	"fmt"
	"testing"

	"github.com/dcsync/dcsync/driver"
)

// TestQueueReadsOneBatch counts, through the proxy, the commands of ReadQueues of 16
// partitions: one batch command when the store has seen their heads (it appended
// their events), one more for all the partitions appended to through another store
// since, and none for bad input (a ReadQueue whose head the store has not seen at
// least max above its start is two: the head record, then the entries). Every result
// is ReadQueue's.
func TestQueueReadsOneBatch(t *testing.T) {
	p := startProxy(t)
	s := queueStore(t, p.Addr())
	ctx := ctxT(t)
	const k = 16
	spec := newQueue(t, s, k)
	var evs []driver.QueueEvent
	for q := range k {
		for i := range 10 {
			evs = append(evs, driver.QueueEvent{Partition: q, Payload: fmt.Appendf(nil, "%d-%d", q, i)})
		}
	}
	if _, err := s.AppendQueue(ctx, spec.Name, evs); err != nil {
		t.Fatal(err)
	}
	read := func(what string, from uint64, batches int64) {
		t.Helper()
		reads := make([]driver.QueueReadReq, k)
		for q := range reads {
			reads[q] = driver.QueueReadReq{P: q, From: from, Max: 100}
		}
		var res []driver.QueueReadResult
		wantTrips(t, what, trips(t, p, func() {
			var err error
			res, err = s.ReadQueues(ctx, spec.Name, reads)
			must(t, err, what)
		}), 0, 0, 0, batches)
		for q, r := range res {
			single := mustRead(t, s, spec.Name, q, from, 100)
			if r.Err != nil || r.QueueBounds != single.QueueBounds || len(r.Entries) != len(single.Entries) {
				t.Fatalf("%s: partition %d read %+v, %d entries, %v; ReadQueue reads %+v, %d entries", what, q, r.QueueBounds, len(r.Entries), r.Err, single.QueueBounds, len(single.Entries))
			}
			for i, e := range r.Entries {
				if e.Seq != single.Entries[i].Seq || string(e.Payload) != string(single.Entries[i].Payload) {
					t.Fatalf("%s: partition %d entry %d is %d %q, ReadQueue reads %d %q", what, q, i, e.Seq, e.Payload, single.Entries[i].Seq, single.Entries[i].Payload)
				}
			}
		}
	}
	read("ReadQueues of 16 partitions, heads seen", 0, 1)
	other := queueStore(t, p.Addr())
	if _, err := other.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Partition: 3, Payload: []byte("x")}, {Partition: 7, Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	read("ReadQueues of 16 partitions, two heads unseen", 5, 2)
	wantTrips(t, "ReadQueues with a partition twice", trips(t, p, func() {
		_, err := s.ReadQueues(ctx, spec.Name, []driver.QueueReadReq{{P: 1, Max: 1}, {P: 1, Max: 2}})
		if err == nil {
			t.Error("ReadQueues with a partition twice: no error")
		}
	}), 0, 0, 0, 0)
}
