package hbase

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// gatedSpecRead is the real client whose first MultiGet that reads the spec row of
// name (a trim's read of the head row and the spec) returns only once open is closed
// (signalling read when it has read).
type gatedSpecRead struct {
	queueOps
	spec []byte
	once sync.Once
	read chan struct{}
	open chan struct{}
}

func (g *gatedSpecRead) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	rows, err := g.queueOps.MultiGet(ctx, table, gets)
	for _, gt := range gets {
		if bytes.Equal(gt.Row, g.spec) {
			g.once.Do(func() {
				close(g.read)
				<-g.open
			})
			break
		}
	}
	return rows, err
}

// TestReviewTrimHeldBackByAGroupAddedMeanwhile (review, issue 15; real HBase): the
// TrimQueue contract stops the Floor at "every group's" offset "that stand when the
// Floor is raised", a group with no offset being at 0. A trim reads the spec, then a
// group is added (AddQueueGroup returns: the new group stands at 0, "its consumers
// start at the oldest event still stored", events 0..3), then the trim raises the
// Floor: it must stop at 0, but the spec it read (not covered by the trim guard)
// leaves the new group out, and the new group's events are trimmed.
func TestReviewTrimHeldBackByAGroupAddedMeanwhile(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "revtrimadd-" + randHex(6)
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}}), "CreateQueue")
	defer func() {
		s.queue().db = nil
		_ = s.DeleteQueue(context.Background(), name)
	}()
	_, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte{0}}, {Partition: 0, Payload: []byte{1}},
		{Partition: 0, Payload: []byte{2}}, {Partition: 0, Payload: []byte{3}}})
	must(t, err, "AppendQueue")
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 4, Version: 1}), "CommitQueueOffset")

	_, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	g := &gatedSpecRead{queueOps: db, spec: specRow(name), read: make(chan struct{}), open: make(chan struct{})}
	s.queue().db = g
	done := make(chan error, 1)
	go func() { done <- s.TrimQueue(ctx, name, 0, 4) }()
	select {
	case <-g.read:
	case err := <-done:
		t.Fatalf("TrimQueue ended before reading the spec: %v", err)
	}
	r := openStore(t) // another process adds a group
	defer r.Close()
	_, err = r.AddQueueGroup(ctx, name, "g2")
	must(t, err, "AddQueueGroup")
	close(g.open)
	must(t, <-done, "TrimQueue")
	s.queue().db = nil

	b, err := r.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	offs, err := r.ReadQueueOffsets(ctx, name, "g2", []int{0})
	must(t, err, "ReadQueueOffsets")
	if b[0].Floor > offs[0].Next {
		t.Fatalf("the trim raised the Floor to %d past group g2's offset %d, which stood (added) before the Floor was raised: g2's events %d..%d are gone",
			b[0].Floor, offs[0].Next, offs[0].Next, b[0].Floor-1)
	}
}
