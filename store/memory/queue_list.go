package memory

import (
	"context"
	"sort"

	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueLister = (*Store)(nil)

// ListQueues implements driver.QueueLister: every queue's spec, sorted by name.
func (s *Store) ListQueues(ctx context.Context) ([]driver.QueueSpec, error) {
	if err := s.begin(ctx, nil); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]driver.QueueSpec, 0, len(s.qs))
	for _, q := range s.qs {
		out = append(out, copySpec(q.spec))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
