package aerospike

import (
	"context"

	as "github.com/aerospike/aerospike-client-go/v8"
)

// SetQueueTestHook sets the hook an append calls at its stages ("reserved", "ids") with its queue; nil
// removes it. A hook must let other queues' appends through.
func SetQueueTestHook(h func(queue, stage string) error) {
	if h == nil {
		queueTestHook.Store(nil)
		return
	}
	queueTestHook.Store(&h)
}

// ReserveQueueSeqs runs one reservation of n seqs in partition p with the given nonce,
// as an append's try does, and returns its first seq.
func ReserveQueueSeqs(ctx context.Context, s *Store, name string, p, n int, nonce int64) (uint64, error) {
	inc, err := s.queueInc(ctx, "test.Reserve", name)
	if err != nil {
		return 0, err
	}
	var first uint64
	err = s.retry(ctx, "test.Reserve", true, func(*attempt) error {
		rec, err := s.client.Operate(s.writePolicy(ctx, as.TTLDontExpire), s.headKey(name, p), withInc(s.reserveOps(nonce, n), inc)...)
		if err != nil {
			return err
		}
		if was, _ := intOf(rec.Bins[qbWas]); was >= 0 {
			first = uint64(was)
			return nil
		}
		head, _ := intOf(rec.Bins[qbHead])
		first = uint64(head) - uint64(n)
		return nil
	})
	return first, err
}

// QueueEntryKey is the key of an entry record.
func QueueEntryKey(s *Store, name string, p int, seq uint64) *as.Key { return s.entryKey(name, p, seq) }

// QueueOffsetKey is the key of an offset record.
func QueueOffsetKey(s *Store, name, group string, p int) *as.Key { return s.offsetKey(name, group, p) }
