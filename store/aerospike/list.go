package aerospike

import (
	"context"
	"sort"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

var (
	_ driver.LockLister  = (*Store)(nil)
	_ driver.LatchLister = (*Store)(nil)
)

// scan calls fn for every record of set (every set of the namespace when set is "")
// with bins (all when none), by a scan (ScanAll, which Community servers serve). It
// stops early when ctx ends.
func (s *Store) scan(ctx context.Context, op, set string, fn func(*as.Record), bins ...string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return driver.Errorf(dcsync.Connection, op, "the store is closed")
	}
	p := as.NewScanPolicy()
	if d, ok := ctx.Deadline(); ok {
		p.TotalTimeout = time.Until(d)
		if p.TotalTimeout <= 0 {
			return driver.Errorf(dcsync.Connection, op, "context done: %w", ctx.Err())
		}
	}
	rs, err := s.client.ScanAll(p, s.cfg.Namespace, set, bins...)
	if err != nil {
		return driver.Errorf(dcsync.Connection, op, "scan: %w", err)
	}
	defer rs.Close()
	for {
		select {
		case <-ctx.Done():
			return driver.Errorf(dcsync.Connection, op, "context done: %w", ctx.Err())
		case res, ok := <-rs.Results():
			if !ok {
				return nil
			}
			if res.Err != nil {
				return driver.Errorf(dcsync.Connection, op, "scan: %w", res.Err)
			}
			fn(res.Record)
		}
	}
}

// ListLocks implements driver.LockLister. Lock records carry no user key (the Java
// layout sends none) and lock sets are named per level and farm, so it scans every
// set of the namespace for records whose IdentityBin names a lock of client, then
// reads them all as InspectLock reads one (for the exact lease and the token), in one
// batch. The cost is a scan of the
// whole namespace: an operator's call, not one for a hot path. A lock a Java client
// holds has no IdentityBin and is not listed.
func (s *Store) ListLocks(ctx context.Context, client string) ([]driver.LockInfo, error) {
	const op = "aerospike.ListLocks"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	var keys []dcsync.Key
	err := s.scan(ctx, op, "", func(r *as.Record) {
		if _, ok := r.Bins[OwnerBin]; !ok {
			return // not a dcsync lock record
		}
		k, ok := layout.ParseIdentityKey(stringOf(r.Bins[IdentityBin]))
		if ok && k.Client == client {
			keys = append(keys, k)
		}
	}, IdentityBin, OwnerBin)
	if err != nil {
		return nil, err
	}
	ik := make([]dcsync.Key, len(keys))
	for i, k := range keys {
		ik[i] = k
		if k.Level == dcsync.XDC {
			ik[i].Farm = "-" // an XDC lock's record is the same for every farm
		}
	}
	res, err := s.inspectLocks(ctx, op, ik)
	if err != nil {
		return nil, err
	}
	var out []driver.LockInfo
	for i, r := range res {
		switch {
		case dcsync.CodeOf(r.Err) == dcsync.NotFound:
			continue // lapsed or released since the scan
		case r.Err != nil:
			return nil, r.Err
		}
		out = append(out, driver.LockInfo{Key: keys[i], LockState: r.State})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		if a.Farm != b.Farm {
			return a.Farm < b.Farm
		}
		return a.Name < b.Name
	})
	return out, nil
}

// ListLatches implements driver.LatchLister: one entry per farm cell (bin count#<farm>)
// of client's latches, with the cell's end from EndsBin. It scans the whole latch set
// (an operator's call). Records carry no user key, so a latch is known by its
// IdentityBin, which only dcsync writes: a latch a Java client created is not listed.
// Cells whose end has passed by this host's clock are left out (the store itself
// judges ends by the server's clock).
func (s *Store) ListLatches(ctx context.Context, client string) ([]driver.LatchInfo, error) {
	const op = "aerospike.ListLatches"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	var out []driver.LatchInfo
	err := s.scan(ctx, op, s.latchSet, func(r *as.Record) {
		id, ok := layout.ParseIdentityKey(stringOf(r.Bins[IdentityBin]))
		if !ok || id.Client != client {
			return
		}
		ends, _ := r.Bins[EndsBin].(map[any]any)
		for bin, v := range r.Bins {
			farm, ok := layout.ParseAerospikeLatchBin(bin)
			if !ok {
				continue
			}
			count, ok := intOf(v)
			if !ok {
				continue
			}
			li := driver.LatchInfo{Key: dcsync.Key{Level: dcsync.DC, Client: id.Client, Farm: farm, Name: id.Name}, Count: count}
			if end, ok := intOf(ends[farm]); ok {
				if end <= now {
					continue
				}
				li.Expires = time.UnixMilli(end)
			} else if r.Expiration > 0 {
				li.Expires = expires(time.Now(), r.Expiration)
			}
			out = append(out, li)
		}
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Farm < b.Farm
	})
	return out, nil
}
