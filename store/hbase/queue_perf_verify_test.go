package hbase

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// scanFaults wraps the client's queue calls for the appends verified by scans: the
// planned plain-Put MultiMutates are applied and then report a lost reply, the
// planned scans fail as if their connection broke; it counts the scans.
type scanFaults struct {
	queueOps
	mu    sync.Mutex
	puts  int // plain-Put MultiMutates still to lose
	scans int // scans still to fail
	lost  map[string]int
	seen  int // scans of q:a
}

func (f *scanFaults) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	plain := len(acts) > 0
	for _, a := range acts {
		_, put := a.Mutation.(*hbaserpc.Put)
		plain = plain && put && a.Cond == nil && a.Read == nil
	}
	f.mu.Lock()
	lose := plain && f.puts > 0
	if lose {
		f.puts--
		f.lost["puts"]++
	}
	f.mu.Unlock()
	res, err := f.queueOps.MultiMutate(ctx, table, acts)
	if !lose || res == nil {
		return res, err
	}
	return lostReplies(len(res))
}

func (f *scanFaults) ScanFunc(ctx context.Context, table string, s hbaserpc.Scan, fn func(hbaserpc.Row) error) error {
	f.mu.Lock()
	abortScan := len(s.Columns) == 1 && string(s.Columns[0].Qualifier) == string(qualAbort)
	fail := abortScan && f.scans > 0
	if abortScan {
		f.seen++
	}
	if fail {
		f.scans--
		f.lost["scans"]++
	}
	f.mu.Unlock()
	if fail {
		return errLost
	}
	return f.queueOps.ScanFunc(ctx, table, s, fn)
}

// TestQueueAppendScanVerify: a large batch is verified by scans of the tombstones;
// lost replies of its Puts and failed scans are retried (each event stored once), and
// seqs aborted between the reservation and the write (found by the scans) are
// appended again, ids included.
func TestQueueAppendScanVerify(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	f := &scanFaults{queueOps: s.client, lost: map[string]int{}}
	s.queue().db = f
	name := qname(t)
	const parts, per = 4, scanPerPartition * 2
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: parts, Groups: []string{"g"}})
	batch := func(tag string) []driver.QueueEvent {
		evs := make([]driver.QueueEvent, parts*per)
		for i := range evs {
			evs[i] = ev(i%parts, fmt.Sprintf("%s%d", tag, i))
			if i%5 == 0 {
				evs[i].ID = fmt.Sprintf("%s-id%d", tag, i)
			}
		}
		return evs
	}
	check := func(evs []driver.QueueEvent, res []driver.QueueAppend, skip map[int]map[uint64]bool) {
		t.Helper()
		at := map[int]map[uint64]string{}
		for i, r := range res {
			if r.Duplicate || r.Partition != evs[i].Partition {
				t.Fatalf("event %d: %+v", i, r)
			}
			if at[r.Partition] == nil {
				at[r.Partition] = map[uint64]string{}
			}
			if _, dup := at[r.Partition][r.Seq]; dup {
				t.Fatalf("two events at %d/%d", r.Partition, r.Seq)
			}
			at[r.Partition][r.Seq] = string(evs[i].Payload)
		}
		for p := 0; p < parts; p++ {
			n := 0
			for _, e := range readAll(t, s, name, p, 0) {
				if e.Aborted {
					if !skip[p][e.Seq] {
						t.Fatalf("partition %d: unexpected tombstone at %d", p, e.Seq)
					}
					continue
				}
				if want, ok := at[p][e.Seq]; ok {
					if string(e.Payload) != want {
						t.Fatalf("partition %d seq %d: %q, want %q", p, e.Seq, e.Payload, want)
					}
					n++
				}
			}
			if n != len(at[p]) {
				t.Fatalf("partition %d: %d of the batch's %d events read", p, n, len(at[p]))
			}
		}
	}

	// Lost replies of the Puts (applied) and failed scans.
	f.mu.Lock()
	f.puts, f.scans = 2, 3
	f.mu.Unlock()
	evs := batch("a")
	res, err := s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue with lost replies")
	check(evs, res, nil)
	for i, r := range res {
		if r.Seq != uint64(i/parts) {
			t.Fatalf("event %d at seq %d, want %d", i, r.Seq, i/parts)
		}
	}
	if f.lost["puts"] != 2 || f.lost["scans"] != 3 || f.seen < parts+3 {
		t.Fatalf("faults injected %v, %d scans: the batch was not verified by scans", f.lost, f.seen)
	}

	// Aborts between the reservation and the write: the first, a middle and the last
	// seq of partition 0 (an event with an id among them) and one of partition 3.
	aborts := map[int]map[uint64]bool{0: {per: true, per + 5: true, 2*per - 1: true}, 3: {per + 1: true}}
	hook := func(a *appender, round int, idx []int) {
		if a.name != name || round != 0 {
			return
		}
		for _, i := range idx {
			if p := a.events[i].Partition; aborts[p][a.seq[i]] {
				ok, err := s.AbortQueueSeq(context.Background(), name, p, a.seq[i])
				if err != nil || !ok {
					t.Errorf("abort in hook: %v, %v", ok, err)
				}
			}
		}
	}
	appendTestHook.Store(&hook)
	defer appendTestHook.Store(nil)
	f.mu.Lock()
	f.seen = 0
	f.mu.Unlock()
	evs = batch("b")
	res, err = s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue with aborted seqs")
	appendTestHook.Store(nil)
	check(evs, res, aborts)
	if f.seen < parts {
		t.Fatalf("%d scans: the batch was not verified by scans", f.seen)
	}
	moved := 0
	for i, r := range res {
		if r.Seq >= 2*per {
			moved++
			if !aborts[r.Partition][per+uint64(i/parts)] {
				t.Fatalf("event %d moved to %d/%d though its seq was not aborted", i, r.Partition, r.Seq)
			}
		}
	}
	if moved != 4 {
		t.Fatalf("%d events re-appended, want 4: %+v", moved, res)
	}
	// The id whose seq was aborted is at its new seq.
	again, err := s.AppendQueue(ctx, name, []driver.QueueEvent{evs[20]})
	must(t, err, "AppendQueue of an id again")
	if evs[20].ID == "" || !again[0].Duplicate || again[0].Seq != res[20].Seq || again[0].Partition != 0 {
		t.Fatalf("id %q again: %+v, first at %+v", evs[20].ID, again[0], res[20])
	}
}
