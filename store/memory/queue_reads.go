package memory

import (
	"context"

	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueBatchReader = (*Store)(nil)

// ReadQueues implements driver.QueueBatchReader: every read under one hold of the
// store's mutex, each ReadQueue's result. Any invalid read, or an unknown queue, fails
// the whole batch.
func (s *Store) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	if err := s.begin(ctx, driver.ValidateQueueReads(name, reads)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]driver.QueueReadResult, len(reads))
	if len(reads) == 0 {
		return out, nil
	}
	q, err := s.queue("memory.ReadQueues", name)
	if err != nil {
		return nil, err
	}
	for i, r := range reads {
		out[i].QueueRead = q.read(r.P, r.From, r.Max)
	}
	return out, nil
}
