package aerospike_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// How a deleteCutter cuts a DeleteQueue at its k-th write.
type cutMode int

const (
	crashBefore cutMode = iota // the process dies before sending write k: it and every later command fail
	crashAfter                 // write k is applied, its reply lost, and the process dies
	lostReply                  // write k is applied and its reply lost (the client times out, in doubt, and retries); later commands pass
)

func (m cutMode) String() string {
	return [...]string{"CrashBefore", "CrashAfter", "LostReply"}[m]
}

// crashCode is what the fault proxy answers, without forwarding, to every command of
// a process that has crashed: PARTITION_UNAVAILABLE (nothing applied; the client
// retries, then gives up).
const crashCode = 11

// deleteCutter cuts the commands a store sends through a faultProxy at the k-th
// write: single-record writes and deletes, and batches (the proxy does not tell a
// batch's reads from its writes, so the batch read of the heads is a cut point too,
// which does no harm: a cut after a read is a cut before the next write).
type deleteCutter struct {
	mode cutMode
	k    int

	mu       sync.Mutex
	n        int  // writes seen
	cut      bool // write k was reached
	tripped  bool // crashed: every later command is refused
	dropThis bool // drop the reply of the command being forwarded
}

func isWriteCommand(c command) bool {
	return c.Kind == "write" || c.Kind == "delete" || c.Kind == "batch"
}

// install adds the cutter's rules to p (cleared by p.ClearDrops).
func (c *deleteCutter) install(p *faultProxy) {
	p.RefuseResponses(1<<30, crashCode, c.refuse)
	p.DropResponses(1<<30, c.drop)
}

func (c *deleteCutter) refuse(cmd command) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tripped {
		return true
	}
	if !isWriteCommand(cmd) {
		return false
	}
	c.n++
	if c.n != c.k {
		return false
	}
	c.cut = true
	switch c.mode {
	case crashBefore:
		c.tripped = true
		return true
	case crashAfter:
		c.tripped = true // from the next command on
	}
	c.dropThis = true
	return false
}

func (c *deleteCutter) drop(command) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dropThis
	c.dropThis = false
	return d
}

func (c *deleteCutter) wasCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// queueHeads returns the head of every storage partition of spec's queue.
func queueHeads(t *testing.T, ctx context.Context, s *aerospike.Store, spec driver.QueueSpec) []uint64 {
	t.Helper()
	ps := make([]int, spec.StoragePartitions())
	for p := range ps {
		ps[p] = p
	}
	b, err := s.QueueBounds(ctx, spec.Name, ps)
	must(t, err, "QueueBounds")
	heads := make([]uint64, len(b))
	for p := range b {
		heads[p] = b[p].Head
	}
	return heads
}

// TestDeleteQueueCutAtEveryWrite cuts a DeleteQueue at each of its writes in turn (and
// at the batch read of the heads), through the fault proxy, as a crash before the
// write, a crash after it, and a lost reply, and checks what the cut leaves: either the
// queue untouched (every record still there) or a queue that reads as deleted to a
// store that never saw it (ReadQueueSpec, AppendQueue, QueueBounds and AddQueueGroup
// get NotFound, ListQueues leaves it out): never a queue that reads as valid with
// records gone. Then either a DeleteQueue run again finishes the job (no record of the
// queue left), or a CreateQueue of the name does, and the new queue starts empty (heads
// at 0, no offsets, an id of the deleted queue not a duplicate).
func TestDeleteQueueCutAtEveryWrite(t *testing.T) {
	addr := realServer(t)
	direct := dial(t, addr)
	proxy := startProxy(t)
	viaProxy := dial(t, proxy.Addr())
	cfg := aerospike.Config{Namespace: namespace, Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond}
	fresh := func() *aerospike.Store { // a store that caches nothing yet
		t.Helper()
		s, err := aerospike.New(direct, cfg)
		must(t, err, "New")
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := unique("delcut")
	defer func() { _ = fresh().DeleteQueue(context.Background(), name) }()
	listed := false
	for _, mode := range []cutMode{crashBefore, crashAfter, lostReply} {
		for k := 1; ; k++ {
			w := fresh()
			spec := drivertest.PopulateQueue(t, ctx, w, name)
			heads := queueHeads(t, ctx, w, spec)
			before := queueRecords(t, direct, w, spec, heads)
			w.Close()

			s, err := aerospike.New(viaProxy, cfg)
			must(t, err, "New via the proxy")
			c := &deleteCutter{mode: mode, k: k}
			c.install(proxy)
			derr := s.DeleteQueue(ctx, name)
			proxy.ClearDrops()
			s.Close()
			if !c.wasCut() {
				must(t, derr, "DeleteQueue not cut")
				if got := queueRecords(t, direct, s, spec, heads); len(got) != 0 {
					t.Fatalf("records left after a DeleteQueue not cut: %v", got)
				}
				if k <= 3 {
					t.Fatalf("DeleteQueue made only %d writes", k-1)
				}
				t.Logf("%v: cut at each of %d writes", mode, k-1)
				break
			}
			what := fmt.Sprintf("%v at write %d", mode, k)
			if mode != lostReply && derr == nil {
				t.Fatalf("%s: DeleteQueue returned nil", what)
			}
			r := fresh()
			_, err = r.ReadQueueSpec(ctx, name)
			intact := err == nil
			switch {
			case intact:
				if got := queueRecords(t, direct, r, spec, heads); fmt.Sprint(got) != fmt.Sprint(before) {
					t.Fatalf("%s: the queue reads as valid with records %v, had %v", what, got, before)
				}
			case dcsync.CodeOf(err) != dcsync.NotFound:
				t.Fatalf("%s: ReadQueueSpec: %v", what, err)
			default:
				_, err = r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("late")}})
				wantCode(t, err, dcsync.NotFound, what+": AppendQueue after the cut")
				_, err = r.QueueBounds(ctx, name, []int{0})
				wantCode(t, err, dcsync.NotFound, what+": QueueBounds after the cut")
				_, err = r.AddQueueGroup(ctx, name, "g3")
				wantCode(t, err, dcsync.NotFound, what+": AddQueueGroup after the cut")
				if !listed {
					listed = true
					specs, err := r.ListQueues(ctx)
					must(t, err, "ListQueues")
					for _, sp := range specs {
						if sp.Name == name {
							t.Fatalf("%s: ListQueues lists the queue", what)
						}
					}
				}
			}
			if derr == nil && intact {
				t.Fatalf("%s: DeleteQueue returned nil and the queue is still there", what)
			}
			if k%2 == 1 {
				// Finished by a DeleteQueue run again.
				err := r.DeleteQueue(ctx, name)
				if err != nil && (intact || dcsync.CodeOf(err) != dcsync.NotFound) {
					t.Fatalf("%s: DeleteQueue again: %v", what, err)
				}
				if got := queueRecords(t, direct, r, spec, heads); len(got) != 0 {
					t.Fatalf("%s: records left after DeleteQueue again: %v", what, got)
				}
				wantCode(t, r.DeleteQueue(ctx, name), dcsync.NotFound, what+": DeleteQueue a third time")
				r.Close()
				continue
			}
			// Finished by a CreateQueue of the name: it starts empty.
			err = r.CreateQueue(ctx, spec)
			if intact {
				wantCode(t, err, dcsync.AlreadyExists, what+": CreateQueue over the queue left whole")
				must(t, r.DeleteQueue(ctx, name), what+": DeleteQueue again")
				err = r.CreateQueue(ctx, spec)
			}
			must(t, err, what+": CreateQueue after the cut")
			if got := queueRecords(t, direct, r, spec, heads); fmt.Sprint(got) != fmt.Sprint(map[string]int{"spec": 1}) {
				t.Fatalf("%s: the queue created again has records %v, want the spec only", what, got)
			}
			ps := make([]int, spec.StoragePartitions())
			for p := range ps {
				ps[p] = p
			}
			b, err := r.QueueBounds(ctx, name, ps)
			must(t, err, "QueueBounds")
			for p := range b {
				if b[p] != (driver.QueueBounds{}) {
					t.Fatalf("%s: the queue created again has bounds %+v in partition %d, want none", what, b[p], p)
				}
			}
			offs, err := r.ReadQueueOffsets(ctx, name, spec.Groups[0], ps)
			must(t, err, "ReadQueueOffsets")
			for p := range offs {
				if offs[p] != (driver.QueueOffset{}) {
					t.Fatalf("%s: the queue created again has offset %+v in partition %d, want none", what, offs[p], p)
				}
			}
			id := drivertest.PopulatedIDs(spec)[1] // an event of partition 0 not trimmed
			res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: id, Payload: []byte("new")}})
			must(t, err, "AppendQueue")
			if res[0].Duplicate || res[0].Seq != 0 {
				t.Fatalf("%s: id %q of the deleted queue appended to the new one: %+v, want seq 0, not a duplicate", what, id, res[0])
			}
			must(t, r.DeleteQueue(ctx, name), what+": DeleteQueue of the new queue")
			r.Close()
		}
	}
}
