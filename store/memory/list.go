package memory

import (
	"context"
	"sort"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var (
	_ driver.LockLister   = (*Store)(nil)
	_ driver.LatchLister  = (*Store)(nil)
	_ driver.LatchDeleter = (*Store)(nil)
)

// ListLocks implements driver.LockLister: the live locks of client, sorted by level,
// farm and name. An XDC lock is listed with an empty Farm (the store keeps one lock
// for all farms).
func (s *Store) ListLocks(ctx context.Context, client string) ([]driver.LockInfo, error) {
	if err := s.begin(ctx, driver.ValidateID("client", client)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var out []driver.LockInfo
	for id := range s.locks {
		if id.client != client {
			continue
		}
		if e, ok := s.liveLock(id, now); ok {
			out = append(out, driver.LockInfo{
				Key:       dcsync.Key{Level: id.level, Client: id.client, Farm: id.farm, Name: id.name},
				LockState: e.LockState,
			})
		}
	}
	sortLocks(out)
	return out, nil
}

// ListLatches implements driver.LatchLister: one entry per live farm cell of client's
// latches, sorted by name and farm.
func (s *Store) ListLatches(ctx context.Context, client string) ([]driver.LatchInfo, error) {
	if err := s.begin(ctx, driver.ValidateID("client", client)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var out []driver.LatchInfo
	for id := range s.latches {
		if id.client != client {
			continue
		}
		for farm, c := range s.liveCells(id, now) {
			out = append(out, driver.LatchInfo{
				Key:   dcsync.Key{Level: dcsync.DC, Client: id.client, Farm: farm, Name: id.name},
				Count: c.count, Expires: c.expires,
			})
		}
	}
	sortLatches(out)
	return out, nil
}

// DeleteLatch implements driver.LatchDeleter.
func (s *Store) DeleteLatch(ctx context.Context, k dcsync.Key) error {
	if err := s.begin(ctx, driver.CheckLatch(k, 0)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	id := latchID{client: k.Client, name: k.Name}
	cells := s.liveCells(id, s.now())
	if !exists(cells, k) {
		return driver.Errorf(dcsync.NotFound, "memory.DeleteLatch", "latch %s does not exist", k)
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

func sortLocks(ls []driver.LockInfo) {
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

func sortLatches(ls []driver.LatchInfo) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i].Key, ls[j].Key
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Farm < b.Farm
	})
}
