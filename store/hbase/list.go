package hbase

import (
	"context"
	"sort"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

var (
	_ driver.LockLister  = (*Store)(nil)
	_ driver.LatchLister = (*Store)(nil)
)

// ListLocks implements driver.LockLister. It scans the whole lock table (every salt
// bucket, every client: one Scan RPC per 100 rows per region, plus the rows of other
// clients and the fencing counters, which it skips): an operator's call, not one for
// a hot path. A row is held when its D:L cell exists, as InspectLock decides; the
// cells' TTL makes HBase drop a lapsed lease.
//
// Lock rows are named by layout.ParseHBaseLockRow, which splits the Java row at the
// first '#': the Java layout cannot tell client "a#b" lock "c" from client "a" lock
// "b#c" (layout.AmbiguousLockKey), and such a lock is listed under the first parse,
// with the client and name that split gives. A lock of client "a#b" is therefore
// listed as client "a"'s; avoid '#' in client ids to list reliably.
func (s *Store) ListLocks(ctx context.Context, client string) ([]driver.LockInfo, error) {
	const op = "hbase.ListLocks"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return nil, err
	}
	var out []driver.LockInfo
	err := s.client.ScanFunc(ctx, s.lockTable, hbaserpc.Scan{Columns: []hbaserpc.Column{{Family: famLock}}}, func(row hbaserpc.Row) error {
		k, ok := layout.ParseHBaseLockRow(row.Key)
		if !ok || k.Client != client {
			return nil
		}
		r := parseLock(row.Cells)
		if !r.held {
			return nil // a fencing counter, or a freed lock
		}
		out = append(out, driver.LockInfo{Key: k, LockState: r.state()})
		return nil
	})
	if err != nil {
		return nil, wrap(err, op)
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

// ListLatches implements driver.LatchLister: one entry per farm cell of client's
// latches. It scans the whole latch table (see ListLocks for the cost).
//
// A row dcsync wrote carries lifetime markers naming its (client, name) unambiguously
// (layout.IdentityKey); such a row is listed under that identity, and a cell is listed
// with its marker's end (cells past it, by this host's clock, are left out). A row only
// the Java library wrote has no marker: it is named by layout.ParseHBaseLatchRow, which
// splits at the first '_' (the Java layout cannot tell client "a_b" latch "c" from
// client "a" latch "b_c", layout.AmbiguousHBaseLatchRow), so an ambiguous Java latch is
// listed under the first parse; its Expires is zero (unknown).
func (s *Store) ListLatches(ctx context.Context, client string) ([]driver.LatchInfo, error) {
	const op = "hbase.ListLatches"
	if err := driver.ValidateID("client", client); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	var out []driver.LatchInfo
	err := s.client.ScanFunc(ctx, s.latchTable, hbaserpc.Scan{Columns: []hbaserpc.Column{{Family: famLatch}}}, func(row hbaserpc.Row) error {
		v := parseLatchView(row.Cells)
		var c, name string
		if len(v.markers) > 0 {
			c, name = v.markers[0].id.Client, v.markers[0].id.Name
		} else {
			var ok bool
			if c, name, ok = layout.ParseHBaseLatchRow(row.Key); !ok {
				return nil
			}
		}
		if c != client {
			return nil
		}
		for farm, cell := range v.counts {
			count, err := hbaserpc.Int64(cell.Value)
			if err != nil {
				continue
			}
			li := driver.LatchInfo{Key: dcsync.Key{Level: dcsync.DC, Client: c, Farm: farm, Name: name}, Count: count}
			if m, ok := v.markerOf(farm); ok {
				if m.endsMs <= now {
					continue
				}
				li.Expires = time.UnixMilli(m.endsMs)
			}
			out = append(out, li)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, op)
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
