package hbase

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.LockMover = (*Store)(nil)

// AcquireLocks implements driver.LockMover: it takes the locks of reqs with one
// MultiMutate, one Multi RPC per region server (more only past 1,000 actions or 4 MiB
// per server), each lock's write AcquireLock's (casTake): a conditional RowMutations
// "D:L absent" putting L, O and E with the lease as cell TTL and incrementing the
// row's fencing counter D:F in the same atomic write (the token: above every earlier
// holder's, each having bumped it while it held the row alone), then, in the same
// request, the row read back (and read raw, for a Java hold hidden by a Java release:
// lock_masked.go). Another holder read back means LockUnavailable with its state.
//
// A row this store has not seen with its counter above fenceBase (movedRows: every new
// key, and every key this store has not touched yet) costs one call more, before the
// take: one MultiGet of the rows' counters D:F and of the keys' counters of the earlier
// layout (fenceRow). A row without D:F gets, in its take, an Increment by the earlier
// counter + 1 at the explicit version fenceBase (freshIncrement): HBase creates an
// absent counter at the version the Increment names, so a row still without D:F when
// the take lands has its counter created there, above fenceBase and above every token
// of the earlier layout, in the take's one conditional write. A counter that appeared
// meanwhile is incremented as every counter is (stamped max(server time, previous
// version + 1), the explicit version ignored): the token is still above its previous
// value. So a new key costs two calls and one conditional action, where moving the
// counter after the take (moveFence) cost three calls and two. AcquireLock reads and
// takes the same way, one lock at a time (readFence).
//
// A row whose counter is still below fenceBase after the take (created by a take that
// did not move it, or the MultiGet failed) has its counter moved as AcquireLock's
// moveFence does, batched too: the earlier layout's counters (one MultiGet, unless
// read before the take) and one MultiMutate of the conditional Puts (moveFences).
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
	var idx []int
	for i, q := range reqs {
		row := layout.HBaseLockRow(q.Key)
		if seen[string(row)] || layout.AmbiguousLockKey(q.Key) || raw && isRememberedMasked(s.lockTable, row) {
			seen[string(row)] = true
			alone[i] = true
			continue
		}
		seen[string(row)] = true
		idx = append(idx, i)
	}
	pre := s.readFences(ctx, reqs, idx)
	actions := make([]hbaserpc.Action, 0, len(idx))
	for j, i := range idx {
		q := reqs[i]
		expires := time.Now().Add(q.TTL)
		cond := hbaserpc.IfAbsent(famLock, qualLock)
		inc := takeIncrement(pre[j])
		a := hbaserpc.Action{
			Mutation: &hbaserpc.Put{Row: layout.HBaseLockRow(q.Key), Values: []hbaserpc.Value{
				{Family: famLock, Qualifier: qualLock, Value: lockMarker},
				{Family: famLock, Qualifier: qualOwner, Value: []byte(q.Owner)},
				{Family: famLock, Qualifier: qualExpiry, Value: be64(uint64(expires.UnixMilli()))},
			}, TTL: q.TTL},
			More: []hbaserpc.Mutation{inc},
			Cond: &cond,
			Gets: []hbaserpc.Get{{Columns: []hbaserpc.Column{{Family: famLock}}}},
		}
		if raw {
			a.Gets = append(a.Gets, rawLockGet())
		}
		actions = append(actions, a)
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
			if r.fenceTs >= fenceBase {
				s.moved.add(row)
			}
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
				fresh = append(fresh, freshTake{i: i, row: row, r: r, applied: ar.Applied, old: pre[j].old, oldRead: pre[j].read})
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

// fenceRead is what AcquireLocks read of a lock's counters before its take.
type fenceRead struct {
	read   bool   // both counters were read: old and absent hold
	old    uint64 // the key's counter of the earlier layout (fenceRow), 0 when absent
	absent bool   // the lock row had no counter D:F
}

// readFences reads, in one MultiGet, the counter D:F of each lock row of reqs[idx]
// that this store has not seen above fenceBase (movedRows), and its key's counter of
// the earlier layout (fenceRow). Result j belongs to reqs[idx[j]]; a lock not read
// (known to be moved, or the read failed or held no counter value) has read false, and
// its take increments the counter as a row's first take used to (takeIncrement).
func (s *Store) readFences(ctx context.Context, reqs []driver.LockAcquire, idx []int) []fenceRead {
	out := make([]fenceRead, len(idx))
	var gets []hbaserpc.Get
	var which []int
	for j, i := range idx {
		row := layout.HBaseLockRow(reqs[i].Key)
		if s.moved.has(row) {
			continue
		}
		gets = append(gets, fenceGets(reqs[i].Key, row, hbaserpc.Column{Family: famLock, Qualifier: qualFence})...)
		which = append(which, j)
	}
	if len(gets) == 0 {
		return out
	}
	cells, err := s.db.MultiGet(ctx, s.lockTable, gets)
	if err != nil || len(cells) != len(gets) {
		s.log.Debug("hbase: reading the fencing counters before a batched acquire failed; taking as AcquireLock does", "err", err)
		return out
	}
	for n, j := range which {
		out[j] = s.parseFences(layout.HBaseLockRow(reqs[idx[j]].Key), cells[2*n], cells[2*n+1])
	}
	return out
}

// fenceGets are the two Gets that tell a take of k (lock row row) how to create the
// row's counter (takeIncrement): the lock row's column col (its counter D:F, or the
// whole lock family) and the key's counter of the earlier layout (fenceRow).
func fenceGets(k dcsync.Key, row []byte, col hbaserpc.Column) []hbaserpc.Get {
	return []hbaserpc.Get{
		{Row: row, Columns: []hbaserpc.Column{col}},
		{Row: fenceRow(k), Columns: []hbaserpc.Column{{Family: famLock, Qualifier: qualFence}}},
	}
}

// parseFences reads what fenceGets returned for lock row row: rowCells of the lock
// row, oldCells of the earlier layout's counter. A row seen with its counter above
// fenceBase is remembered (movedRows). A counter of the earlier layout that cannot be
// decoded makes read false.
func (s *Store) parseFences(row []byte, rowCells, oldCells []hbaserpc.Cell) fenceRead {
	const op = "hbase.AcquireLock"
	f := fenceRead{read: true, absent: true}
	for _, c := range rowCells {
		if !bytes.Equal(c.Family, famLock) || !bytes.Equal(c.Qualifier, qualFence) {
			continue
		}
		f.absent = false
		if c.Timestamp >= fenceBase {
			s.moved.add(row)
		}
	}
	for _, c := range oldCells {
		v, err := decode64(op, c)
		if err != nil {
			return fenceRead{}
		}
		f.old = uint64(max(v, 0))
	}
	return f
}

// takeIncrement is the fencing counter's part of a take that f was read for: the
// counter created at fenceBase above the earlier layout's (freshIncrement) when f read
// the row without one, else an Increment by 1 (a counter above fenceBase gives the
// token; one created or found below it is moved after the take: moveFence).
func takeIncrement(f fenceRead) *hbaserpc.Increment {
	if f.read && f.absent {
		return freshIncrement(f.old)
	}
	return &hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 1}}}
}

// freshIncrement is the fencing counter's part of the take of a lock row read without
// D:F, whose key's counter of the earlier layout is old: an Increment by old + 1 at
// the explicit version fenceBase. HBase gives a counter the Increment creates the
// version the Increment names (a counter that exists gets max(server time, previous
// version + 1) and the amount added), so:
//
//   - D:F still absent when the take lands: D:F = old + 1 at fenceBase, the token:
//     above every token of the earlier layout (at most old) and of this one (none: no
//     take of this layout has bumped the counter, or it would exist; nothing deletes
//     it, as it is above every delete marker's version);
//   - D:F created meanwhile, above fenceBase: it is incremented, and the token is above
//     its previous value, as every take's;
//   - D:F created meanwhile below fenceBase (a take that has not moved it): it stays
//     below, the read back shows no token, and moveFences moves it, as after any such
//     take.
//
// The Increment is part of the conditional take: not applied, it bumps nothing.
func freshIncrement(old uint64) *hbaserpc.Increment {
	return &hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: int64(old) + 1}}, Timestamp: fenceBase}
}

// movedRows remembers lock rows that this store has seen with their counter D:F above
// fenceBase, so that AcquireLocks and AcquireLock take them at once, without reading
// their counters first. A counter once above fenceBase stays there (nothing deletes
// it); a memory that is wrong all the same (a table dropped and created again) costs
// the calls the read would have saved, nothing more: the take increments the counter
// by 1, and a counter found below fenceBase after it is moved (moveFence,
// moveFences). At most maxMoved rows are kept; beyond, the memory starts again empty.
// Safe for concurrent use; the zero value is empty.
type movedRows struct {
	mu   sync.Mutex
	rows map[string]struct{}
}

// maxMoved bounds the rows a movedRows remembers.
const maxMoved = 1 << 16

func (m *movedRows) has(row []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.rows[string(row)]
	return ok
}

func (m *movedRows) add(row []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == nil || len(m.rows) >= maxMoved {
		m.rows = make(map[string]struct{})
	}
	m.rows[string(row)] = struct{}{}
}

// freshTake is a lock of an AcquireLocks batch held by its owner whose row's counter
// is not yet above fenceBase.
type freshTake struct {
	i       int // the request
	row     []byte
	r       lockRow // as read back after the take
	applied bool    // taken by the batch's write
	old     uint64  // the key's counter of the earlier layout, when oldRead
	oldRead bool    // read before the take (readFences)
}

// moveFences is moveFence for the locks of fresh, batched: one MultiGet of their
// counters of the earlier layout (fenceRow) not read before the take, then one
// MultiMutate putting max(that, D:F) + 1 into D:F at version fenceBase, each
// conditioned on the owner still holding the row as taken (ownedBy). A lock whose read
// or write failed or was not applied is left to AcquireLock (alone): it finds the row
// ours and moves the counter, or finds the lease lapsed and starts over.
func (s *Store) moveFences(ctx context.Context, reqs []driver.LockAcquire, fresh []freshTake, sent time.Time, out []driver.LockResult, alone []bool) {
	const op = "hbase.AcquireLock"
	var gets []hbaserpc.Get
	var unread []int
	for j, f := range fresh {
		if !f.oldRead {
			gets = append(gets, hbaserpc.Get{Row: fenceRow(reqs[f.i].Key), Columns: []hbaserpc.Column{{Family: famLock, Qualifier: qualFence}}})
			unread = append(unread, j)
		}
	}
	if len(gets) > 0 {
		olds, err := s.db.MultiGet(ctx, s.lockTable, gets)
		if err != nil || len(olds) != len(gets) {
			for _, j := range unread {
				alone[fresh[j].i] = true
			}
			olds = nil
		}
		for n, cells := range olds {
			f := &fresh[unread[n]]
			f.oldRead = true
			for _, c := range cells {
				v, err := decode64(op, c)
				if err != nil {
					alone[f.i], f.oldRead = true, false
					break
				}
				f.old = uint64(max(v, 0))
			}
		}
	}
	actions := make([]hbaserpc.Action, 0, len(fresh))
	var moving []freshTake
	var tokens []uint64
	for _, f := range fresh {
		if !f.oldRead {
			continue
		}
		token := max(f.old, f.r.fence) + 1
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
		s.moved.add(f.row)
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
