package hbase

// Adversarial review (issue 15): a DeleteQueue cut short on HBase.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// failOffsetDeletes is the real client, failing (without sending) every MultiMutate
// that deletes a row starting with prefix: a connection lost between two of
// DeleteQueue's calls.
type failOffsetDeletes struct {
	queueOps
	prefix []byte
	failed bool
}

func (f *failOffsetDeletes) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	for _, a := range acts {
		if d, ok := a.Mutation.(*hbaserpc.Delete); ok && bytes.HasPrefix(d.Row, f.prefix) {
			f.failed = true
			return nil, errors.New("injected: connection lost")
		}
	}
	return f.queueOps.MultiMutate(ctx, table, acts)
}

// FAILS ON MAIN (defect, low-medium): a DeleteQueue cut short leaves a queue that
// reads as valid but is not. Its doc says a cut-short DeleteQueue "leaves the queue,
// with its spec, for another DeleteQueue to finish"; but a partition's rows are
// deleted in key order (entries 'e', the head 'h', then the offsets 'o') in batches of
// deleteBatch rows, so a cut between two batches leaves a partition with its head
// gone (Head 0) and a group's offset still at Next = 999. The spec reads fine, an
// append lands at seq 0, below the group's offset: a consumer of the group never
// delivers it (nor the next 998). Deleting the offsets (or the spec) before the head,
// or refusing reads of a queue being deleted, would keep a cut-short delete harmless.
func TestReviewDeleteQueueCutShortLeavesAValidQueue(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "rvdel-" + randHex(6)
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}}), "CreateQueue")
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.queue().db = nil
		_ = s.DeleteQueue(ctx, name)
	}()
	// deleteBatch-1 entries: the partition's first delete batch holds them and its
	// head row, the second its offset row.
	const n = deleteBatch - 1
	evs := make([]driver.QueueEvent, n)
	for i := range evs {
		evs[i] = driver.QueueEvent{Partition: 0, Payload: []byte{1}}
	}
	_, err := s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue")
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: n, Version: 1}), "CommitQueueOffset")

	_, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	f := &failOffsetDeletes{queueOps: db, prefix: append(partPrefix(name, 0), kindOffset)}
	s.queue().db = f
	if err := s.DeleteQueue(ctx, name); err == nil || !f.failed {
		t.Fatalf("DeleteQueue with its offset deletes failing: %v (failure injected: %v)", err, f.failed)
	}
	s.queue().db = nil

	r := openStore(t) // no cache
	defer r.Close()
	if _, err := r.ReadQueueSpec(ctx, name); err != nil {
		return // the half-deleted queue is not read as valid: fine
	}
	b, err := r.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	offs, err := r.ReadQueueOffsets(ctx, name, "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0].Next > b[0].Head {
		res, err := r.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("after")}})
		must(t, err, "AppendQueue after the cut-short delete")
		t.Fatalf("a DeleteQueue cut short left a queue that reads as valid with group g's offset %d above the partition's head %d: an event appended now lands at seq %d, below the offset, and is never delivered", offs[0].Next, b[0].Head, res[0].Seq)
	}
}
