package aerospike_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// fillQueue appends three events with ids (id-<p>-<i>, payload <tag>-<p>-<i>) to every
// storage partition of spec's queue, and has group g claim every partition it reads
// with token 1 and commit Next 2: every kind of record (heads, entries, id records,
// offsets).
func fillQueue(t *testing.T, ctx context.Context, s *aerospike.Store, spec driver.QueueSpec, tag string) {
	t.Helper()
	var evs []driver.QueueEvent
	for p := 0; p < spec.StoragePartitions(); p++ {
		for i := 0; i < 3; i++ {
			evs = append(evs, driver.QueueEvent{Partition: p, ID: fmt.Sprintf("id-%d-%d", p, i), Payload: []byte(fmt.Sprintf("%s-%d-%d", tag, p, i))})
		}
	}
	res, err := s.AppendQueue(ctx, spec.Name, evs)
	must(t, err, tag+": AppendQueue")
	for i, r := range res {
		if r.Duplicate || r.Seq != uint64(i%3) {
			t.Fatalf("%s: event %d appended as %+v, want seq %d, not a duplicate", tag, i, r, i%3)
		}
	}
	for p := 0; p < spec.StoragePartitions(); p++ {
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", p, 1)
		must(t, err, tag+": ClaimQueuePartition")
		must(t, s.CommitQueueOffset(ctx, spec.Name, "g", p, driver.QueueOffset{Token: 1, Next: 2, Version: 1}), tag+": CommitQueueOffset")
	}
}

// TestDeleteQueueLateBatchKeepsNewQueue holds back, in the fault proxy, the first try of
// each of DeleteQueue's two batch deletes (the entries, offsets and id records; then
// the heads): the client times out, in doubt, runBatch sends them again, and the
// delete finishes. The queue is then created again under the name and gets the same
// records (the same event ids and seqs, offsets of the same group), and the held tries
// are delivered. They must change nothing: the new queue keeps its events, heads,
// offsets and ids. Without the incarnation filter on the batch deletes (DeleteQueue),
// they deleted all of them: the events lost, the heads reset to 0 (seqs reused), the
// offsets lost, the ids forgotten.
func TestDeleteQueueLateBatchKeepsNewQueue(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr()) // the deleting store
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 2, "g")
	name := spec.Name
	defer func() { _ = queueStore(t, addr).DeleteQueue(context.Background(), name) }()
	fillQueue(t, ctx, queueStore(t, addr), spec, "old")

	// DeleteQueue's batches, in order: the heads' read, the deletes of entries,
	// offsets and ids (held), their retry, the heads' deletes (held), their retry.
	var batches atomic.Int32
	proxy.HoldRequests(2, func(c command) bool {
		if c.Kind != "batch" {
			return false
		}
		n := batches.Add(1)
		return n == 2 || n == 4
	})
	must(t, s.DeleteQueue(ctx, name), "DeleteQueue whose batch deletes' first tries were held back")
	proxy.ClearDrops()
	if n := proxy.Held(); n != 2 {
		t.Fatalf("%d requests held, want 2 (the first try of each batch delete)", n)
	}

	n := queueStore(t, addr) // another process
	must(t, n.CreateQueue(ctx, spec), "CreateQueue again")
	fillQueue(t, ctx, n, spec, "new")
	codes, err := proxy.Deliver()
	must(t, err, "Deliver")
	t.Logf("the late tries were answered with result codes %v", codes)

	checkFilledQueue(t, ctx, queueStore(t, addr), spec, "after the late tries")
}

// checkFilledQueue checks that spec's queue holds what fillQueue(..., "new") put there
// (events, heads, offsets, ids), caching nothing before (r), and appends to it.
func checkFilledQueue(t *testing.T, ctx context.Context, r *aerospike.Store, spec driver.QueueSpec, when string) {
	t.Helper()
	name := spec.Name
	if _, err := r.ReadQueueSpec(ctx, name); err != nil {
		t.Fatalf("the queue created again, %s: %v", when, err)
	}
	ps := make([]int, spec.StoragePartitions())
	for p := range ps {
		ps[p] = p
	}
	bounds, err := r.QueueBounds(ctx, name, ps)
	must(t, err, "QueueBounds")
	offs, err := r.ReadQueueOffsets(ctx, name, "g", ps)
	must(t, err, "ReadQueueOffsets")
	for p := range ps {
		rd, err := r.ReadQueue(ctx, name, p, 0, 10)
		must(t, err, "ReadQueue")
		var got []string
		for _, e := range rd.Entries {
			got = append(got, string(e.Payload))
		}
		want := fmt.Sprint([]string{fmt.Sprintf("new-%d-0", p), fmt.Sprintf("new-%d-1", p), fmt.Sprintf("new-%d-2", p)})
		if fmt.Sprint(got) != want {
			t.Errorf("partition %d: the new queue's events are %v %s, want %v", p, got, when, want)
		}
		if bounds[p].Head != 3 {
			t.Errorf("partition %d: the new queue's head is %d %s, want 3", p, bounds[p].Head, when)
		}
		if want := (driver.QueueOffset{Token: 1, Next: 2, Version: 1}); offs[p] != want {
			t.Errorf("partition %d: the new queue's offset is %+v %s, want %+v", p, offs[p], when, want)
		}
	}
	res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "id-0-1", Payload: []byte("again")}, {Partition: 1, Payload: []byte("more")}})
	must(t, err, "AppendQueue")
	if !res[0].Duplicate || res[0].Seq != 1 {
		t.Errorf("id id-0-1 of the new queue appended again %s: %+v, want a duplicate of seq 1 (its id record kept)", when, res[0])
	}
	if res[1].Duplicate || res[1].Seq != 3 {
		t.Errorf("a new event appended to partition 1 %s: %+v, want seq 3 (the head kept)", when, res[1])
	}
}

// TestDeleteQueueSlowCallKeepsNewQueue stops a DeleteQueue after it read the heads (the
// test hook) while another process finishes the delete, creates the queue again and
// fills it; then the slow call goes on. Its deletes find the new queue's incarnation
// and are filtered out; it must not then delete those records as an earlier
// incarnation's either: its mark is gone, so it stops and returns nil (deleteRecords).
// Without the mark check it deleted the whole new queue; without the incarnation
// filter, too.
func TestDeleteQueueSlowCallKeepsNewQueue(t *testing.T) {
	addr := realServer(t)
	s := queueStore(t, addr) // the slow call's store
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 2, "g")
	name := spec.Name
	defer func() { _ = queueStore(t, addr).DeleteQueue(context.Background(), name) }()
	fillQueue(t, ctx, queueStore(t, addr), spec, "old")
	var ran atomic.Bool
	aerospike.SetQueueTestHook(func(q, stage string) error {
		if q == name && stage == "delete-bounds-read" && ran.CompareAndSwap(false, true) {
			o := queueStore(t, addr) // another process
			must(t, o.DeleteQueue(ctx, name), "DeleteQueue finishing the slow one")
			must(t, o.CreateQueue(ctx, spec), "CreateQueue again")
			fillQueue(t, ctx, o, spec, "new")
		}
		return nil
	})
	t.Cleanup(func() { aerospike.SetQueueTestHook(nil) })
	must(t, s.DeleteQueue(ctx, name), "the slow DeleteQueue")
	if !ran.Load() {
		t.Fatal("the DeleteQueue never read the heads")
	}
	aerospike.SetQueueTestHook(nil)
	checkFilledQueue(t, ctx, queueStore(t, addr), spec, "after the slow delete")
}

// queueRecordBins reads every record of spec's queue that exists (of the keys
// QueueRecordKeys gives for heads and ids), by kind.
func queueRecordBins(t *testing.T, c *as.Client, s *aerospike.Store, spec driver.QueueSpec, heads []uint64, ids []string) map[string][]as.BinMap {
	t.Helper()
	out := map[string][]as.BinMap{}
	for kind, keys := range aerospike.QueueRecordKeys(s, spec, heads, ids) {
		recs, err := c.BatchGet(nil, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r != nil {
				out[kind] = append(out[kind], r.Bins)
			}
		}
	}
	return out
}

// TestQueueRecordsCarryIncarnation checks that every record of a queue created by this
// release carries the spec's incarnation id, whichever write created it: appends (heads,
// entries, id records), ClaimQueuePartition and ClaimQueuePartitions (offsets),
// AbortQueueSeq (a tombstone) and a rewind's pin (a head record it creates). A record without it would be deleted by a try of a
// DeleteQueue of an earlier incarnation that lands late (see DeleteQueue).
func TestQueueRecordsCarryIncarnation(t *testing.T) {
	addr := realServer(t)
	s := queueStore(t, addr)
	c := dial(t, addr)
	ctx := ctxT(t)
	spec := newQueue(t, s, 4, "g", "h")
	defer func() { _ = s.DeleteQueue(context.Background(), spec.Name) }()
	name := spec.Name
	// Partition 0: events with and without ids, then a hole aborted (a tombstone).
	_, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "a", Payload: []byte("x")}, {Partition: 0, Payload: []byte("y")}})
	must(t, err, "AppendQueue")
	hole, err := aerospike.ReserveQueueSeqs(ctx, s, name, 0, 1, 7)
	must(t, err, "ReserveQueueSeqs")
	aborted, err := s.AbortQueueSeq(ctx, name, 0, hole)
	must(t, err, "AbortQueueSeq")
	if !aborted {
		t.Fatalf("seq %d not aborted", hole)
	}
	// Partition 2: offsets created by ClaimQueuePartition, then a rewind, whose pin
	// creates the head record (the partition has none).
	_, err = s.ClaimQueuePartition(ctx, name, "g", 2, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 2, driver.QueueOffset{Token: 1, Next: 5, Version: 1}), "CommitQueueOffset")
	must(t, s.CommitQueueOffset(ctx, name, "g", 2, driver.QueueOffset{Token: 1, Next: 1, Version: 2}), "CommitQueueOffset (a rewind)")
	// Partition 3: offsets created by ClaimQueuePartitions; a head and an entry created
	// by an append alone.
	_, err = s.ClaimQueuePartitions(ctx, name, "h", []driver.QueueClaim{{P: 3, Token: 1}})
	must(t, err, "ClaimQueuePartitions")
	_, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 3, Payload: []byte("z")}})
	must(t, err, "AppendQueue")

	spec, err = s.ReadQueueSpec(ctx, name)
	must(t, err, "ReadQueueSpec")
	heads := queueHeads(t, ctx, s, spec)
	bins := queueRecordBins(t, c, s, spec, heads, []string{"a"})
	inc, ok := bins["spec"][0][aerospike.QueueIncBin].(int)
	if !ok || inc == 0 {
		t.Fatalf("the spec record holds incarnation %v, want a non-zero int", bins["spec"][0][aerospike.QueueIncBin])
	}
	want := map[string]int{"spec": 1, "head": 3, "entry": 4, "offset": 2, "id": 1}
	for kind, n := range want {
		if len(bins[kind]) != n {
			t.Fatalf("%d %s records, want %d: %v", len(bins[kind]), kind, n, bins)
		}
		for _, b := range bins[kind] {
			if b[aerospike.QueueIncBin] != inc {
				t.Errorf("a %s record holds incarnation %v, want the spec's %d: %v", kind, b[aerospike.QueueIncBin], inc, b)
			}
		}
	}
	if tomb := bins["entry"]; len(tomb) == 3 && tomb[2]["x"] == nil {
		t.Errorf("the third entry of partition 0 is not the tombstone: %v", tomb[2])
	}
}

// TestDeleteQueueDeletesRecordsWithoutIncarnation rewrites the incarnation bin of a
// populated queue's records: removed (records of a release before this one), also from
// the spec (a queue created before this release), or set to another id (records that
// a process whose cache held an earlier queue of the name wrote), and checks that
// DeleteQueue still deletes every record.
func TestDeleteQueueDeletesRecordsWithoutIncarnation(t *testing.T) {
	addr := realServer(t)
	s := queueStore(t, addr)
	c := dial(t, addr)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name string
		spec bool // the spec's bin too
		inc  any  // the bin's new value (nil: removed)
	}{
		{"RecordsWithout", false, nil},
		{"SpecAndRecordsWithout", true, nil},
		{"RecordsOfAnotherIncarnation", false, 12345},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := unique("delinc")
			spec := drivertest.PopulateQueue(t, ctx, s, name)
			heads := queueHeads(t, ctx, s, spec)
			wp := as.NewWritePolicy(0, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			for kind, keys := range aerospike.QueueRecordKeys(s, spec, heads, drivertest.PopulatedIDs(spec)) {
				if kind == "spec" && !tc.spec {
					continue
				}
				for _, k := range keys {
					if _, err := c.Operate(wp, k, as.PutOp(as.NewBin(aerospike.QueueIncBin, tc.inc))); err != nil && rc(err) != types.KEY_NOT_FOUND_ERROR {
						t.Fatalf("rewriting a %s record: %v", kind, err)
					}
				}
			}
			before := queueRecords(t, c, s, spec, heads)
			must(t, s.DeleteQueue(ctx, name), "DeleteQueue")
			if got := queueRecords(t, c, s, spec, heads); len(got) != 0 {
				t.Fatalf("records left after DeleteQueue: %v (before: %v)", got, before)
			}
		})
	}
}
