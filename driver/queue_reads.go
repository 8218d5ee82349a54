package driver

import (
	"context"

	"github.com/dcsync/dcsync"
)

// QueueReadReq is one read of a [QueueBatchReader.ReadQueues] call: partition P from
// seq From, at most Max entries, as ReadQueue(name, P, From, Max).
type QueueReadReq struct {
	P    int
	From uint64
	Max  int
}

// QueueReadResult is the outcome of one read of a batch: what ReadQueue would have
// returned for it, its QueueRead or its error.
type QueueReadResult struct {
	QueueRead
	Err error
}

// QueueBatchReader is implemented by stores that can read many partitions of one
// queue in one round trip per store node (a consumer filling the buffers of the
// partitions it owns). Each read's outcome is exactly that of ReadQueue for it: the
// entries from max(From, Floor), consecutive, stopping at Max, at Head or before the
// first reserved seq neither written nor aborted, aborted seqs as tombstones, and the
// partition's Head and Floor. The reads are independent: they need not see one
// snapshot of the queue (ReadQueue of different partitions does not either), and one
// failing does not fail the others. Partitions are distinct. Result i belongs to
// reads[i]. The returned error is for the batch as a whole (validation of any read
// before any I/O, an unknown queue, the context ending before anything was sent, a
// failure of the round trip every read shares): results are nil then; per-read
// failures are in the results' Err. With no reads, nothing is read (the queue's
// existence is not checked).
type QueueBatchReader interface {
	ReadQueues(ctx context.Context, name string, reads []QueueReadReq) ([]QueueReadResult, error)
}

// ReadQueues reads every read of reads through s's QueueBatchReader when it has one,
// else one ReadQueue at a time; see [QueueBatchReader].
func ReadQueues(ctx context.Context, s QueueStore, name string, reads []QueueReadReq) ([]QueueReadResult, error) {
	if b, ok := s.(QueueBatchReader); ok {
		return b.ReadQueues(ctx, name, reads)
	}
	if err := ValidateQueueReads(name, reads); err != nil {
		return nil, err
	}
	out := make([]QueueReadResult, len(reads))
	for i, r := range reads {
		if err := ctx.Err(); err != nil && i == 0 {
			return nil, Wrap(err, dcsync.Internal, "driver.ReadQueues")
		}
		out[i].QueueRead, out[i].Err = s.ReadQueue(ctx, name, r.P, r.From, r.Max)
		if i == 0 && dcsync.CodeOf(out[i].Err) == dcsync.NotFound {
			return nil, out[i].Err // an unknown queue fails the batch as a whole
		}
	}
	return out, nil
}

// ValidateQueueReads checks the arguments of a ReadQueues call as each ReadQueue
// checks its own (the queue name, each partition, each Max in [1, MaxQueueBatch]), and
// that no partition appears twice.
func ValidateQueueReads(name string, reads []QueueReadReq) error {
	const op = "driver.ReadQueues"
	if err := ValidateID("queue", name); err != nil {
		return err
	}
	seen := make(map[int]bool, len(reads))
	for _, r := range reads {
		if err := ValidateQueueRead(name, r.P, r.Max); err != nil {
			return err
		}
		if seen[r.P] {
			return Errorf(dcsync.InvalidArgument, op, "partition %d appears twice", r.P)
		}
		seen[r.P] = true
	}
	return nil
}
