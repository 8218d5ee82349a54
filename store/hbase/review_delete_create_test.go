package hbase

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// gatedScans is the real client whose ScanFunc waits until open is closed (the
// first scan signals started).
type gatedScans struct {
	queueOps
	once    sync.Once
	started chan struct{}
	open    chan struct{}
}

func (g *gatedScans) ScanFunc(ctx context.Context, table string, s hbaserpc.Scan, fn func(hbaserpc.Row) error) error {
	g.once.Do(func() { close(g.started) })
	<-g.open
	return g.queueOps.ScanFunc(ctx, table, s, fn)
}

// TestReviewDeleteRacingCreateKeepsNewQueue (review, issue 15; real HBase): a
// DeleteQueue D sets its deletion mark and is slow to scan; meanwhile a CreateQueue of
// the name (another process) finishes D's delete as documented, creates the queue
// again, and an event is appended to the new queue. D's scans then run: they find the
// NEW queue's rows under the name and delete them (the delete markers are stamped
// with the newest timestamp read, which is the new rows' own). The new queue then
// reads as valid (its spec stands) with its event gone: the promise "never a queue
// that reads as valid with part of its rows gone" / "a queue created again starts
// empty" is kept for the creator only until a delete already in flight deletes its rows.
func TestReviewDeleteRacingCreateKeepsNewQueue(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "revdelc-" + randHex(6)
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
	g := &gatedScans{queueOps: db, started: make(chan struct{}), open: make(chan struct{})}
	s.queue().db = g
	done := make(chan error, 1)
	go func() { done <- s.DeleteQueue(ctx, name) }()
	select {
	case <-g.started: // the mark is set, the scans wait
	case err := <-done:
		t.Fatalf("DeleteQueue ended before scanning: %v", err)
	}

	r := openStore(t) // another process
	defer r.Close()
	must(t, r.CreateQueue(ctx, spec), "CreateQueue over the marked queue")
	res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("new")}})
	must(t, err, "AppendQueue to the new queue")
	time.Sleep(5 * time.Millisecond) // D's scans see rows stamped after the new ones' millisecond

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
	if b[0].Head != res[0].Seq+1 || len(rd.Entries) != 1 {
		t.Fatalf("the new queue reads as valid but lost its rows: bounds %+v, %d entries (rows %v); want head %d and the event appended",
			b[0], len(rd.Entries), queueRows(t, v, name), res[0].Seq+1)
	}
}
