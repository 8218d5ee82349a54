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

// specFirstRead is the real client whose nth MultiGet of the spec row together with
// other rows (a trim's first: the head row and the spec; its second: the offsets and
// the spec) is held up: with specFirst it reads the spec row first, signals read,
// waits for open, and only then reads the other rows (a MultiGet whose rows are on
// different region servers, the spec's answering long before the others'); without,
// it reads all the rows, then signals and waits.
type specFirstRead struct {
	queueOps
	spec      []byte
	nth       int
	specFirst bool
	mu        sync.Mutex
	seen      int
	read      chan struct{}
	open      chan struct{}
}

func (f *specFirstRead) MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error) {
	at := -1
	for i, gt := range gets {
		if bytes.Equal(gt.Row, f.spec) {
			at = i
		}
	}
	hit := false
	if at >= 0 && len(gets) > 1 {
		f.mu.Lock()
		f.seen++
		hit = f.seen == f.nth
		f.mu.Unlock()
	}
	if !hit {
		return f.queueOps.MultiGet(ctx, table, gets)
	}
	if !f.specFirst {
		rows, err := f.queueOps.MultiGet(ctx, table, gets)
		close(f.read)
		<-f.open
		return rows, err
	}
	spec, err := f.queueOps.MultiGet(ctx, table, gets[at:at+1])
	if err != nil {
		return nil, err
	}
	close(f.read)
	<-f.open
	rest := append(append([]hbaserpc.Get(nil), gets[:at]...), gets[at+1:]...)
	rows, err := f.queueOps.MultiGet(ctx, table, rest)
	if err != nil {
		return nil, err
	}
	return append(append(append([][]hbaserpc.Cell(nil), rows[:at]...), spec[0]), rows[at:]...), nil
}

// TestTrimSpecReadBeforeAGroupAddedAndHeadReadAfter (issue 15; real HBase): a trim
// whose read of the spec row comes before AddQueueGroup's spec write and whose read of
// the head row comes after AddQueueGroup's bump of the trim guard (one MultiGet, the
// rows answered in that order) has the guard it conditions on current; only its
// second read of the spec (with the offsets) finds the group, and holds the Floor at
// the group's offset (0). Without that read the Floor passes it.
func TestTrimSpecReadBeforeAGroupAddedAndHeadReadAfter(t *testing.T) {
	trimAroundAddGroup(t, 1, true)
}

// TestTrimOffsetsReadBeforeAGroupAdded (issue 15; real HBase): a trim whose second
// read of the spec (with the offsets) comes before AddQueueGroup returns raises the
// Floor conditioned on a trim guard that the AddQueueGroup's bump replaced: refused,
// it reads again and stops at the new group's offset (0). Without the bump the Floor
// passes it.
func TestTrimOffsetsReadBeforeAGroupAdded(t *testing.T) {
	trimAroundAddGroup(t, 2, false)
}

// trimAroundAddGroup runs a trim of a queue whose group g is at 4, holding up the
// trim's nth MultiGet of the spec (specFirst: see specFirstRead) while another store
// adds group g2, and checks the Floor stays at g2's offset.
func trimAroundAddGroup(t *testing.T, nth int, specFirst bool) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "trimaddhead-" + randHex(6)
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
	f := &specFirstRead{queueOps: db, spec: specRow(name), nth: nth, specFirst: specFirst, read: make(chan struct{}), open: make(chan struct{})}
	s.queue().db = f
	done := make(chan error, 1)
	go func() { done <- s.TrimQueue(ctx, name, 0, 4) }()
	select {
	case <-f.read:
	case err := <-done:
		t.Fatalf("TrimQueue ended before reading the spec: %v", err)
	}
	r := openStore(t) // another process adds a group
	defer r.Close()
	_, err = r.AddQueueGroup(ctx, name, "g2")
	must(t, err, "AddQueueGroup")
	close(f.open)
	must(t, <-done, "TrimQueue")
	s.queue().db = nil

	b, err := r.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	offs, err := r.ReadQueueOffsets(ctx, name, "g2", []int{0})
	must(t, err, "ReadQueueOffsets")
	if b[0].Floor > offs[0].Next {
		t.Fatalf("the trim raised the Floor to %d past group g2's offset %d (added before the trim's raise)", b[0].Floor, offs[0].Next)
	}
	// The trim, done again now, still stops at g2.
	must(t, s.TrimQueue(ctx, name, 0, 4), "TrimQueue again")
	if b, err = r.QueueBounds(ctx, name, []int{0}); err != nil || b[0].Floor != 0 {
		t.Fatalf("after a second trim: bounds %+v, %v; want Floor 0", b, err)
	}
}
