package hbase

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// TestQueueReadsOneMulti (real HBase, one region server): ReadQueues of 16 partitions
// whose heads the store has seen (it appended their events) is one store call, one
// MultiGet, one Multi RPC; entries appended through another store since cost one more
// MultiGet (for every such partition at once); a read of more than readGetsMax rows
// is a head Get and a scan beside the MultiGet of the others. Every result is
// ReadQueue's.
func TestQueueReadsOneMulti(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	const k = 16
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: k, Groups: []string{"g"}})
	appendTo := func(st *Store, p, n int) {
		t.Helper()
		evs := make([]driver.QueueEvent, n)
		for i := range evs {
			evs[i] = driver.QueueEvent{Partition: p, Payload: fmt.Appendf(nil, "%d-%d", p, i)}
		}
		_, err := st.AppendQueue(ctx, name, evs)
		must(t, err, "AppendQueue")
	}
	for p := range k {
		appendTo(s, p, 10)
	}
	cnt := countCalls(s)
	read := func(what string, from uint64, max int, want map[string]int, wantRPCs map[string]int64) {
		t.Helper()
		reads := make([]driver.QueueReadReq, k)
		for p := range reads {
			reads[p] = driver.QueueReadReq{P: p, From: from, Max: max}
		}
		cnt.take()
		before := shared(t).Calls()
		res, err := s.ReadQueues(ctx, name, reads)
		must(t, err, what)
		got, calls := rpcs(t, before), cnt.take()
		if fmt.Sprint(calls) != fmt.Sprint(want) || (wantRPCs != nil && fmt.Sprint(got) != fmt.Sprint(wantRPCs)) {
			t.Errorf("%s: store calls %v, RPCs %v; want %v and %v", what, calls, got, want, wantRPCs)
		}
		for p, r := range res {
			single, err := s.ReadQueue(ctx, name, p, from, max)
			must(t, err, "ReadQueue")
			if r.Err != nil || r.QueueBounds != single.QueueBounds || len(r.Entries) != len(single.Entries) {
				t.Fatalf("%s: partition %d read %+v, %d entries, %v; ReadQueue reads %+v, %d entries", what, p, r.QueueBounds, len(r.Entries), r.Err, single.QueueBounds, len(single.Entries))
			}
			for i, e := range r.Entries {
				if e.Seq != single.Entries[i].Seq || string(e.Payload) != string(single.Entries[i].Payload) {
					t.Fatalf("%s: partition %d entry %d is %d %q, ReadQueue reads %d %q", what, p, i, e.Seq, e.Payload, single.Entries[i].Seq, single.Entries[i].Payload)
				}
			}
		}
	}
	read("heads seen", 0, 100, map[string]int{"MultiGet": 1}, map[string]int64{"Multi": 1})
	other := openQueueStore(t)
	defer other.Close()
	for _, p := range []int{3, 7} {
		appendTo(other, p, 5)
	}
	read("two heads unseen", 5, 100, map[string]int{"MultiGet": 2}, map[string]int64{"Multi": 2})
	appendTo(s, 9, readGetsMax+10)
	read("one long read", 0, 1000, map[string]int{"Get": 1, "MultiGet": 1, "ScanFunc": 1}, nil)
}
