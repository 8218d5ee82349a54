package memory

import (
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueDeleter = (*Store)(nil)

// DeleteQueue implements driver.QueueDeleter: under the store's mutex it drops the
// queue, which holds every record of it (spec, partitions with their entries and
// bounds, offsets, remembered ids), so the queue goes at once.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.begin(ctx, driver.ValidateID("queue", name)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.queues()[name]; !ok {
		return driver.Errorf(dcsync.NotFound, "memory.DeleteQueue", "queue %q does not exist", name)
	}
	delete(s.qs, name)
	return nil
}
