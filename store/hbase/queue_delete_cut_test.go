package hbase

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// How cutOps cuts a DeleteQueue at its k-th write.
type cutMode int

const (
	crashBefore cutMode = iota // the process dies before sending write k: it and every later call fail
	crashAfter                 // write k is applied, then the process dies
	lostReply                  // write k is applied and its reply lost (Connection); later calls pass
)

func (m cutMode) String() string {
	return [...]string{"CrashBefore", "CrashAfter", "LostReply"}[m]
}

// cutOps is the real client cut at its k-th write (CheckAndMutate, CheckAndMutateRead
// or MultiMutate) as mode says.
type cutOps struct {
	queueOps
	mode cutMode
	k    int

	mu      sync.Mutex
	writes  int
	tripped bool // crashed: every call fails
	cut     bool // write k was reached
}

var errCrash = errors.New("injected: the process died")

// write counts a write and says whether to send it and what to return after.
func (c *cutOps) write() (send bool, after error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tripped {
		return false, errCrash
	}
	c.writes++
	if c.writes != c.k {
		return true, nil
	}
	c.cut = true
	switch c.mode {
	case crashBefore:
		c.tripped = true
		return false, errCrash
	case crashAfter:
		c.tripped = true
		return true, errCrash
	default:
		return true, driver.Errorf(dcsync.Connection, "test", "injected: reply lost")
	}
}

func (c *cutOps) read() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tripped {
		return errCrash
	}
	return nil
}

func (c *cutOps) Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error) {
	if err := c.read(); err != nil {
		return nil, err
	}
	return c.queueOps.Get(ctx, table, row, cols...)
}

func (c *cutOps) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	if err := c.read(); err != nil {
		return nil, err
	}
	return c.queueOps.MultiGet(ctx, table, gets)
}

func (c *cutOps) ScanFunc(ctx context.Context, table string, s hbaserpc.Scan, fn func(hbaserpc.Row) error) error {
	if err := c.read(); err != nil {
		return err
	}
	return c.queueOps.ScanFunc(ctx, table, s, fn)
}

func (c *cutOps) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	send, after := c.write()
	if !send {
		return false, nil, after
	}
	ok, cells, err := c.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
	if after != nil {
		return false, nil, after
	}
	return ok, cells, err
}

func (c *cutOps) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	send, after := c.write()
	if !send {
		return false, nil, nil, after
	}
	ok, m, r, err := c.queueOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
	if after != nil {
		return false, nil, nil, after
	}
	return ok, m, r, err
}

func (c *cutOps) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	send, after := c.write()
	if !send {
		return nil, after
	}
	res, err := c.queueOps.MultiMutate(ctx, table, acts)
	if after != nil {
		return nil, after
	}
	return res, err
}

// TestDeleteQueueCutAtEveryWrite (real HBase) cuts a DeleteQueue at each of its writes
// in turn (the deletion mark, every batch of row deletes, the mark's removal), as a
// crash before the write, a crash after it, and a lost reply, and checks what the cut
// leaves: either the queue untouched (every row still there) or a queue that reads as
// deleted to a store that never saw it (ReadQueueSpec, AppendQueue, QueueBounds and
// AddQueueGroup get NotFound, ListQueues leaves it out): never a queue that reads as
// valid with rows gone.
// Then either a DeleteQueue run again finishes the job (no row of the queue left), or
// a CreateQueue of the name does, and the new queue starts empty (heads at 0, no
// offsets, an id of the deleted queue not a duplicate).
func TestDeleteQueueCutAtEveryWrite(t *testing.T) {
	s := openQueueStore(t) // the run's queue table: ListQueues and queueRows scan it whole
	defer s.Close()
	ctx := ctxT(t, 5*time.Minute)
	name := "delcut-" + randHex(6)
	spec := driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}, Dedup: time.Hour}
	populate := func() map[string]int {
		t.Helper()
		must(t, s.CreateQueue(ctx, spec), "CreateQueue")
		_, err := s.AppendQueue(ctx, name, []driver.QueueEvent{
			{Partition: 0, ID: "a", Payload: []byte{1}}, {Partition: 0, ID: "b", Payload: []byte{2}}, {Partition: 0, Payload: []byte{3}},
			{Partition: 1, Payload: []byte{4}}, // a dead letter
		})
		must(t, err, "AppendQueue")
		_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
		must(t, err, "ClaimQueuePartition")
		must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 2, Version: 1}), "CommitQueueOffset")
		return queueRows(t, s, name)
	}
	defer func() {
		s.queue().db = nil
		_ = s.DeleteQueue(context.Background(), name)
	}()
	listed := false
	for _, mode := range []cutMode{crashBefore, crashAfter, lostReply} {
		for k := 1; ; k++ {
			before := populate()
			_, db, err := s.qready(ctx, "test")
			must(t, err, "qready")
			c := &cutOps{queueOps: db, mode: mode, k: k}
			s.queue().db = c
			derr := s.DeleteQueue(ctx, name)
			s.queue().db = nil
			if !c.cut {
				must(t, derr, "DeleteQueue not cut")
				if got := queueRows(t, s, name); len(got) != 0 {
					t.Fatalf("rows left after a DeleteQueue not cut: %v", got)
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
			r := openQueueStore(t) // caches nothing
			_, err = r.ReadQueueSpec(ctx, name)
			intact := err == nil
			switch {
			case intact:
				if got := queueRows(t, r, name); fmt.Sprint(got) != fmt.Sprint(before) {
					t.Fatalf("%s: the queue reads as valid with rows %v, had %v", what, got, before)
				}
			case dcsync.CodeOf(err) != dcsync.NotFound:
				t.Fatalf("%s: ReadQueueSpec: %v", what, err)
			default:
				_, err = r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("late")}})
				wantCode(t, err, dcsync.NotFound, what+": AppendQueue after the cut")
				_, err = r.QueueBounds(ctx, name, []int{0})
				wantCode(t, err, dcsync.NotFound, what+": QueueBounds after the cut")
				_, err = r.AddQueueGroup(ctx, name, "g2")
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
				if got := queueRows(t, r, name); len(got) != 0 {
					t.Fatalf("%s: rows left after DeleteQueue again: %v", what, got)
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
			if got := queueRows(t, r, name); fmt.Sprint(got) != fmt.Sprint(map[string]int{"spec": 1}) {
				t.Fatalf("%s: the queue created again has rows %v, want the spec only", what, got)
			}
			b, err := r.QueueBounds(ctx, name, []int{0, 1})
			must(t, err, "QueueBounds")
			offs, err := r.ReadQueueOffsets(ctx, name, "g", []int{0})
			must(t, err, "ReadQueueOffsets")
			if b[0] != (driver.QueueBounds{}) || b[1] != (driver.QueueBounds{}) || offs[0] != (driver.QueueOffset{}) {
				t.Fatalf("%s: the queue created again has bounds %+v and offset %+v, want none", what, b, offs[0])
			}
			res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "a", Payload: []byte("new")}})
			must(t, err, "AppendQueue")
			if res[0].Duplicate || res[0].Seq != 0 {
				t.Fatalf("%s: an id of the deleted queue appended to the new one: %+v, want seq 0, not a duplicate", what, res[0])
			}
			must(t, r.DeleteQueue(ctx, name), what+": DeleteQueue of the new queue")
			r.Close()
		}
	}
}
