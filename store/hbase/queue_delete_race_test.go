package hbase

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// gatedMutates is the real client whose first MultiMutate waits until open is closed
// (signalling started) before it is sent.
type gatedMutates struct {
	queueOps
	once    sync.Once
	started chan struct{}
	open    chan struct{}
}

func (g *gatedMutates) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	first := false
	g.once.Do(func() { first = true; close(g.started) })
	if first {
		<-g.open
	}
	return g.queueOps.MultiMutate(ctx, table, acts)
}

// TestDeleteQueueLateBatchKeepsNewQueue (real HBase): a DeleteQueue D checked that its
// mark stands and sent a batch of row deletes that lands late; meanwhile a DeleteQueue
// (another process) finished D's delete, a CreateQueue created the queue again and an
// event was appended. D's late deletes are stamped with the newest cell timestamp D's
// scan read in each row, so they hide only the old incarnation's cells: the new queue
// keeps its head and its event. (TestReviewDeleteRacingCreateKeepsNewQueue covers the
// other half: a D whose scans run after the re-creation sees its mark gone and sends
// nothing.)
func TestDeleteQueueLateBatchKeepsNewQueue(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "delbat-" + randHex(6)
	spec := driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}}
	must(t, s.CreateQueue(ctx, spec), "CreateQueue")
	_, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("old")}})
	must(t, err, "AppendQueue old")
	defer func() {
		s.queue().db = nil
		_ = s.DeleteQueue(context.Background(), name)
	}()

	_, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	g := &gatedMutates{queueOps: db, started: make(chan struct{}), open: make(chan struct{})}
	s.queue().db = g
	done := make(chan error, 1)
	go func() { done <- s.DeleteQueue(ctx, name) }()
	select {
	case <-g.started: // the mark is set and checked, a batch of deletes is held
	case err := <-done:
		t.Fatalf("DeleteQueue ended before deleting: %v", err)
	}

	r := openStore(t) // another process
	defer r.Close()
	must(t, r.DeleteQueue(ctx, name), "DeleteQueue finishing the held one")
	must(t, r.CreateQueue(ctx, spec), "CreateQueue")
	res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("new")}})
	must(t, err, "AppendQueue to the new queue")

	close(g.open)
	if err := <-done; err != nil {
		t.Logf("the slow DeleteQueue returned %v", err)
	}
	s.queue().db = nil

	v := openStore(t) // caches nothing
	defer v.Close()
	if _, err := v.ReadQueueSpec(ctx, name); err != nil {
		t.Fatalf("ReadQueueSpec of the new queue: %v", err)
	}
	b, err := v.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	rd, err := v.ReadQueue(ctx, name, 0, 0, 10)
	must(t, err, "ReadQueue")
	if b[0].Head != res[0].Seq+1 || len(rd.Entries) != 1 || string(rd.Entries[0].Payload) != "new" {
		t.Fatalf("a late batch of the old delete hit the new queue: bounds %+v, entries %+v (rows %v); want head %d and the event appended",
			b[0], rd.Entries, queueRows(t, v, name), res[0].Seq+1)
	}
}
