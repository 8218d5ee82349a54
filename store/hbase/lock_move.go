package hbase

import (
	"context"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LockMover = (*Store)(nil)

// AcquireLocks implements driver.LockMover: it takes the locks of reqs with one
// MultiMutate, one Multi RPC per region server (more only past 1,000 actions or 4 MiB
// per server), each lock's write exactly AcquireLock's (casTake): a conditional
// RowMutations "D:L absent" putting L, O and E with the lease as cell TTL and
// incrementing the row's fencing counter D:F in the same atomic write (the token: above
// every earlier holder's, each having bumped it while it held the row alone), then, in
// the same request, the row read back (and read raw, for a Java hold hidden by a Java
// release: lock_masked.go). Another holder read back means LockUnavailable with its
// state. A row whose counter is not yet above fenceBase (a row no dcsync acquire has
// taken since the counter moved into the lock row, such as every new key) has its
// counter moved as AcquireLock's moveFence does, batched too: one MultiGet of the
// earlier layout's counters and one MultiMutate of the conditional Puts.
//
// Everything AcquireLock would decide with more calls goes to AcquireLock itself, one
// lock at a time, after the batch, in the order of the requests: a key that shares its
// Java lock row with another (acquireShared), a row remembered as hiding a Java hold,
// a row named a second time in the batch (the first request takes it, the later ones
// then find it held, as the single operations one after another would), a write whose
// outcome is unknown or that was refused (AcquireLock reads the row: our owner there
// means the write landed), and a take the read back does not show (a delete marker of
// the same millisecond: AcquireLock starts over). Result i belongs to reqs[i].
func (s *Store) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	const op = "hbase.AcquireLocks"
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
	_, rawOK := s.db.(rawGetOps)
	raw := rawOK && s.maskedCheck()
	alone := make([]bool, len(reqs))
	seen := make(map[string]bool, len(reqs))
	var actions []hbaserpc.Action
	var idx []int
	for i, q := range reqs {
		row := layout.HBaseLockRow(q.Key)
		if seen[string(row)] || layout.AmbiguousLockKey(q.Key) || raw && isRememberedMasked(s.lockTable, row) {
			seen[string(row)] = true
			alone[i] = true
			continue
		}
		seen[string(row)] = true
		expires := time.Now().Add(q.TTL)
		cond := hbaserpc.IfAbsent(famLock, qualLock)
		a := hbaserpc.Action{
			Mutation: &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{
				{Family: famLock, Qualifier: qualLock, Value: lockMarker},
				{Family: famLock, Qualifier: qualOwner, Value: []byte(q.Owner)},
				{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(expires.UnixMilli()))},
			}, TTL: q.TTL},
			More: []hbaserpc.Mutation{&hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 1}}}},
			Cond: &cond,
			Gets: []hbaserpc.Get{{Columns: []hbaserpc.Column{{Family: famLock}}}},
		}
		if raw {
			a.Gets = append(a.Gets, rawLockGet())
		}
		actions, idx = append(actions, a), append(idx, i)
	}
	sent := time.Now()
	var fresh []freshTake // taken by this batch (or earlier), counter still to move
	if len(actions) > 0 {
		res, err := s.db.MultiMutate(ctx, s.lockTable, actions)
		if res == nil {
			s.log.Debug("hbase: batched acquire refused; acquiring one by one", "err", err)
			for _, i := range idx {
				alone[i] = true
			}
		}
		for j, ar := range res {
			i := idx[j]
			q := reqs[i]
			if ar.Err != nil || len(ar.Reads) != len(actions[j].Gets) {
				alone[i] = true // unknown or refused: AcquireLock reads the row and decides
				continue
			}
			row := layout.HBaseLockRow(q.Key)
			r := parseLock(ar.Reads[0])
			if raw {
				r.javaHidden = javaMaskedHolds(ar.Reads[1]) > 0
			}
			switch {
			case r.held && r.owner != q.Owner:
				out[i].State, out[i].Err = r.state(), unavailable("hbase.AcquireLock", q.Key, r)
			case !r.held:
				alone[i] = true // hidden by a delete marker, or freed again: start over
			case r.javaHidden:
				out[i].State, out[i].Err = s.yieldToHiddenJava("hbase.AcquireLock", q.Key, row, q.Owner, r)
			case r.token != 0:
				if ar.Applied {
					s.held.remember(row, q.Owner, heldLock{r: r, anchorS: r.ts, anchorC: sent})
				}
				out[i].State = r.state()
			default:
				fresh = append(fresh, freshTake{i: i, row: row, r: r, applied: ar.Applied})
			}
		}
	}
	if len(fresh) > 0 {
		s.moveFences(ctx, reqs, fresh, sent, out, alone)
	}
	for i, q := range reqs {
		if alone[i] {
			out[i].State, out[i].Err = s.AcquireLock(ctx, q.Key, q.Owner, q.TTL)
		}
	}
	return out, nil
}

// freshTake is a lock of an AcquireLocks batch held by its owner whose row's counter
// is not yet above fenceBase.
type freshTake struct {
	i       int // the request
	row     []byte
	r       lockRow // as read back after the take
	applied bool    // taken by the batch's write
}

// moveFences is moveFence for the locks of fresh, batched: one MultiGet of their
// counters of the earlier layout (fenceRow), then one MultiMutate putting
// max(that, D:F) + 1 into D:F at version fenceBase, each conditioned on the owner
// still holding the row as taken (ownedBy). A lock whose read or write failed or was
// not applied is left to AcquireLock (alone): it finds the row ours and moves the
// counter, or finds the lease lapsed and starts over.
func (s *Store) moveFences(ctx context.Context, reqs []driver.LockAcquire, fresh []freshTake, sent time.Time, out []driver.LockResult, alone []bool) {
	const op = "hbase.AcquireLock"
	gets := make([]hbaserpc.Get, len(fresh))
	for j, f := range fresh {
		gets[j] = hbaserpc.Get{Row: fenceRow(reqs[f.i].Key), Columns: []hbaserpc.Column{{Family: famLock, Qualifier: qualFence}}}
	}
	olds, err := s.db.MultiGet(ctx, s.lockTable, gets)
	if err != nil || len(olds) != len(fresh) {
		for _, f := range fresh {
			alone[f.i] = true
		}
		return
	}
	actions := make([]hbaserpc.Action, 0, len(fresh))
	var moving []freshTake
	var tokens []uint64
	for j, f := range fresh {
		var old uint64
		bad := false
		for _, c := range olds[j] {
			v, err := decode64(op, c)
			if err != nil {
				bad = true
				break
			}
			old = uint64(max(v, 0))
		}
		if bad {
			alone[f.i] = true
			continue
		}
		token := max(old, f.r.fence) + 1
		cond := ownedBy(reqs[f.i].Owner, f.r)
		actions = append(actions, hbaserpc.Action{
			Mutation: &hbaserpc.Put{Row: f.row, Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualFence, Value: be64(token)}}, Timestamp: fenceBase},
			Cond:     &cond,
		})
		moving, tokens = append(moving, f), append(tokens, token)
	}
	if len(actions) == 0 {
		return
	}
	res, _ := s.db.MultiMutate(ctx, s.lockTable, actions)
	if res == nil {
		for _, f := range moving {
			alone[f.i] = true
		}
		return
	}
	for j, ar := range res {
		f := moving[j]
		if ar.Err != nil || !ar.Applied {
			alone[f.i] = true
			continue
		}
		r := f.r
		r.token, r.tokenQual, r.fence, r.fenceTs = tokens[j], qualFence, tokens[j], fenceBase
		if f.applied {
			s.held.remember(f.row, reqs[f.i].Owner, heldLock{r: r, anchorS: r.ts, anchorC: sent})
		}
		out[f.i].State = r.state()
	}
}

// ReleaseLocks implements driver.LockMover: it frees the locks of reqs that this store
// remembers (lock_held.go: acquired or last refreshed by it) with one MultiMutate, one
// Multi RPC per region server, each lock's write exactly ReleaseLock's: a
// check-and-mutate "D:O == owner, D:E and the token cell as remembered" (ownedBy)
// emptying the holder's cells at their version (ownedRelease), no delete marker, the
// fencing counter left alone. A lease already past its recorded expiry is freed too
// but reported as LockLost, as ReleaseLock does.
//
// A lock the store does not remember, one named a second time in the batch, and one
// whose write was not applied (refreshed by another store of the process, or not ours)
// is then released by ReleaseLock, alone, in the order of the requests: it reads the
// row and decides. One whose write's outcome is unknown is read back first: no longer
// ours means released (LockLost if the lease had run out), as ReleaseLock decides
// after an attempt in doubt; still ours, ReleaseLock sends it again. Result i belongs
// to reqs[i].
func (s *Store) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	const op = "hbase.ReleaseLocks"
	for _, r := range reqs {
		if err := driver.CheckLock(r.Key, r.Owner, 0); err != nil {
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
	alone := make([]bool, len(reqs))
	seen := make(map[string]bool, len(reqs))
	var actions []hbaserpc.Action
	var idx []int
	var rows []lockRow
	for i, q := range reqs {
		row := layout.HBaseLockRow(q.Key)
		h, known := s.held.get(row, q.Owner)
		if seen[string(row)] || !known {
			seen[string(row)] = true
			alone[i] = true
			continue
		}
		seen[string(row)] = true
		s.held.forget(row, q.Owner)
		put := ownedRelease(h.r)
		put.Row = row
		cond := ownedBy(q.Owner, h.r)
		actions = append(actions, hbaserpc.Action{Mutation: put, Cond: &cond})
		idx, rows = append(idx, i), append(rows, h.r)
	}
	if len(actions) > 0 {
		now := time.Now()
		res, err := s.db.MultiMutate(ctx, s.lockTable, actions)
		if res == nil {
			s.log.Debug("hbase: batched release refused; releasing one by one", "err", err)
			for _, i := range idx {
				alone[i] = true
			}
		}
		for j, ar := range res {
			i := idx[j]
			q := reqs[i]
			r := rows[j]
			expired := !r.expires.IsZero() && !now.Before(r.expires)
			switch {
			case ar.Err == nil && ar.Applied:
				if expired {
					out[i].Err = lost("hbase.ReleaseLock", q.Key, q.Owner)
				}
			case ar.Err != nil && inDoubt(ar.Err):
				back, rerr := s.readLock(ctx, layout.HBaseLockRow(q.Key))
				switch {
				case rerr != nil:
					out[i].Err = wrap(ar.Err, "hbase.ReleaseLock")
				case !back.held || back.owner != q.Owner:
					// The write landed (or the lease lapsed and someone took it).
					if expired || !r.expires.IsZero() && !time.Now().Before(r.expires) {
						out[i].Err = lost("hbase.ReleaseLock", q.Key, q.Owner)
					}
				default:
					alone[i] = true
				}
			default:
				alone[i] = true
			}
		}
	}
	for i, q := range reqs {
		if alone[i] {
			out[i].Err = s.ReleaseLock(ctx, q.Key, q.Owner)
		}
	}
	return out, nil
}
