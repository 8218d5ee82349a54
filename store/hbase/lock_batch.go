package hbase

import (
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LockBatcher = (*Store)(nil)

// RefreshLocks implements driver.LockBatcher: it refreshes every lease of reqs that this
// store remembers (lock_held.go: each acquired or last refreshed by it) with one
// MultiMutate, one Multi RPC per region server (more only past 1,000 actions or 4 MiB
// per server), each lock's write exactly RefreshLock's: a check-and-mutate conditioned
// on the row state remembered (ownedBy: owner, D:E, token), putting L, O and E at the
// holder's version with a TTL from the remembered server-clock anchor (a conditional
// RegionAction of its own per lock, HBase 2.4+). A try that lands late finds D:E
// changed and changes nothing, as RefreshLock's does.
//
// A lock the store does not remember, one whose write was not applied (the memory was
// out of date, or the lock is lost), and one whose write's outcome is unknown, is then
// refreshed by RefreshLock, alone: it reads the row and decides (LockLost, or
// refreshed), as it does for a single lease. Result i belongs to reqs[i].
func (s *Store) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	const op = "hbase.RefreshLocks"
	for _, r := range reqs {
		if err := driver.CheckLease(r.Key, r.Owner, r.TTL); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(reqs))
	if start, err := s.startLockBatch(ctx, op, len(reqs)); err != nil || !start {
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	var actions []hbaserpc.Action
	var idx []int // request of each action
	var held []heldLock
	var states []driver.LockState
	alone := make([]bool, len(reqs))
	sent := time.Now()
	for i, q := range reqs {
		row := layout.HBaseLockRow(q.Key)
		h, ok := s.held.get(row, q.Owner)
		if !ok || !sent.Before(h.r.expires) {
			alone[i] = true
			continue
		}
		cond, put, st := refreshWrite(q.Owner, q.TTL, h, sent)
		put.Row = row
		actions = append(actions, hbaserpc.Action{Mutation: put, Cond: &cond})
		idx, held, states = append(idx, i), append(held, h), append(states, st)
	}
	if len(actions) > 0 {
		res, err := s.db.MultiMutate(ctx, s.lockTable, actions)
		if res == nil {
			// Malformed (not expected: each write is RefreshLock's): every lock alone.
			s.log.Debug("hbase: batched refresh refused; refreshing one by one", "err", err)
			for _, i := range idx {
				alone[i] = true
			}
		}
		for j, ar := range res {
			i := idx[j]
			q := reqs[i]
			row := layout.HBaseLockRow(q.Key)
			if ar.Err == nil && ar.Applied {
				s.held.remember(row, q.Owner, refreshed(held[j], states[j]))
				out[i].State = states[j]
				continue
			}
			// Not applied, or not known to be: decide as RefreshLock does, from the row.
			s.held.forget(row, q.Owner)
			alone[i] = true
		}
	}
	for i, q := range reqs {
		if alone[i] {
			out[i].State, out[i].Err = s.RefreshLock(ctx, q.Key, q.Owner, q.TTL)
		}
	}
	return out, nil
}

// InspectLocks implements driver.LockBatcher: it reads every lock row of keys in one
// MultiGet (one Multi RPC per region server; a single key is one Get) and returns what
// InspectLock would for each: the holder's state, or NotFound for a free lock. When the
// read fails, each lock's result carries its error.
func (s *Store) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	const op = "hbase.InspectLocks"
	for _, k := range keys {
		if err := driver.ValidateKey("lock", k); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LockResult, len(keys))
	if start, err := s.startLockBatch(ctx, op, len(keys)); err != nil || !start {
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	var rows [][]hbaserpc.Cell
	var err error
	if len(keys) == 1 {
		var cells []hbaserpc.Cell
		cells, err = s.db.Get(ctx, s.lockTable, layout.HBaseLockRow(keys[0]), hbaserpc.Column{Family: famLock})
		rows = [][]hbaserpc.Cell{cells}
	} else {
		gets := make([]hbaserpc.Get, len(keys))
		for i, k := range keys {
			gets[i] = hbaserpc.Get{Row: layout.HBaseLockRow(k), Columns: []hbaserpc.Column{{Family: famLock}}}
		}
		rows, err = s.db.MultiGet(ctx, s.lockTable, gets)
	}
	if err == nil && len(rows) != len(keys) {
		err = driver.Errorf(dcsync.Internal, op, "%d results for %d keys", len(rows), len(keys))
	}
	for i, k := range keys {
		switch {
		case err != nil:
			out[i].Err = wrap(err, op)
		default:
			r := parseLock(rows[i])
			if !r.held {
				out[i].Err = driver.Errorf(dcsync.NotFound, op, "%s is free", k)
				continue
			}
			out[i].State = r.state()
		}
	}
	return out, nil
}

// startLockBatch is the start every batched lock operation (RefreshLocks, InspectLocks,
// AcquireLocks, ReleaseLocks) shares once its requests are valid: the store open, then,
// for n > 0 requests, the lock table ready and the context live. It reports whether
// there is anything to send (false with a nil error: n == 0, nothing to do).
func (s *Store) startLockBatch(ctx context.Context, op string, n int) (bool, error) {
	if err := s.check(op); err != nil {
		return false, err
	}
	if n == 0 {
		return false, nil
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, driver.Wrap(err, dcsync.Connection, op)
	}
	return true, nil
}
