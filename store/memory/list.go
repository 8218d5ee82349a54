package memory

import (
	"context"
	"sort"

	"github.com/dcsync/dcsync"
)

var (
	_ dcsync.LockLister   = (*Store)(nil)
	_ dcsync.LatchLister  = (*Store)(nil)
	_ dcsync.LatchDeleter = (*Store)(nil)
)

// ListLocks implements dcsync.LockLister: the live locks of client, sorted by level,
// farm and name. An XDC lock is listed with an empty Farm (the store keeps one lock
// for all farms).
func (s *Store) ListLocks(ctx context.Context, client string) ([]dcsync.LockInfo, error) {
	if err := s.begin(ctx, dcsync.ValidateID("client", client)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var out []dcsync.LockInfo
	for id := range s.locks {
		if id.client != client {
			continue
		}
		if e, ok := s.liveLock(id, now); ok {
			out = append(out, dcsync.LockInfo{
				Key:       dcsync.Key{Level: id.level, Client: id.client, Farm: id.farm, Name: id.name},
				LockState: e.LockState,
			})
		}
	}
	sortLocks(out)
	return out, nil
}

// ListLatches implements dcsync.LatchLister: one entry per live farm cell of client's
// latches, sorted by name and farm.
func (s *Store) ListLatches(ctx context.Context, client string) ([]dcsync.LatchInfo, error) {
	if err := s.begin(ctx, dcsync.ValidateID("client", client)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var out []dcsync.LatchInfo
	for id := range s.latches {
		if id.client != client {
			continue
		}
		for farm, c := range s.liveCells(id, now) {
			out = append(out, dcsync.LatchInfo{
				Key:   dcsync.Key{Level: dcsync.DC, Client: id.client, Farm: farm, Name: id.name},
				Count: c.count, Expires: c.expires,
			})
		}
	}
	sortLatches(out)
	return out, nil
}

// DeleteLatch implements dcsync.LatchDeleter.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	if err := s.begin(ctx, dcsync.CheckLatch(k, 0)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	id := latchID{client: k.Client, name: k.Name}
	cells := s.liveCells(id, s.now())
	if !exists(cells, k) {
		return dcsync.Errorf(dcsync.NotFound, "memory.DeleteLatch", "latch %s does not exist", k)
	}
	if k.Level == dcsync.XDC {
		delete(s.latches, id)
		return nil
	}
	delete(cells, k.Farm)
	if len(cells) == 0 {
		delete(s.latches, id)
	}
	return nil
}

func sortLocks(ls []dcsync.LockInfo) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i].Key, ls[j].Key
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		if a.Farm != b.Farm {
			return a.Farm < b.Farm
		}
		return a.Name < b.Name
	})
}

func sortLatches(ls []dcsync.LatchInfo) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i].Key, ls[j].Key
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Farm < b.Farm
	})
}
