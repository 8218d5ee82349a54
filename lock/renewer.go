package lock

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/telemetry"
)

// This file holds the renewer: the one scheduler of a Manager that renews the leases of
// all its running KeepAlives and declares them lost at their deadlines. It has one timer
// and no goroutine of its own; a renewal round is one goroutine making one store call
// (driver.LockBatcher.RefreshLocks) for every lease renewed in it, whatever their number
// (on a store without LockBatcher, one RefreshLock per lease, fallbackCalls at a time).
//
// Invariants (each checked by the test named):
//
//   - A lease is renewed at the latest a third into the lease counted from the last
//     send, as a lone KeepAlive always was (TestKeepAliveRenewsAThirdIntoTheLease); a
//     lease due within the next half of its renewal interval is renewed early, in the
//     round of a lease that is due, so that leases of one Manager share their rounds:
//     one store call per renewal interval in the steady state, whatever their number
//     (TestKeepAliveBatchesOneCallPerInterval).
//   - Every lease is declared lost at its own deadline by the scheduler's timer, whether
//     or not a round renewing it is still in its store call
//     (TestKeepAliveHangingBatchEndsEveryContextAtItsDeadline,
//     TestKeepAliveLossDoesNotWaitForBlockedRefresh).
//   - A lock's outcome in a round is its own: LockLost for one lease ends that lease's
//     KeepAlive only (TestKeepAliveBatchLosesOnlyTheLostLease); a failure that may pass
//     is retried for that lease until its deadline.
//   - At most one round renews a lock at a time; Release waits for it (or for its ctx),
//     and the round's store call is cancelled once every KeepAlive in it has stopped,
//     not before (TestReleaseCancelsTheRoundOnlyWithItsLastKeepAlive).
//
// Lock order: renewer.tickMu, then Lock.mu, then renewer.mu.

// fallbackCalls bounds the RefreshLock calls a round makes at once on a store without
// driver.LockBatcher (16 kept 1,000 leases of 10 s on a loaded HBase from being renewed
// in time: 444 were lost; a lone KeepAlive made its calls concurrently, one each).
const fallbackCalls = 256

// renewer schedules the renewals of a Manager's running KeepAlives.
type renewer struct {
	m       *Manager
	out     atomic.Int64 // rounds out (sent and not yet ticked after)
	tickMu  sync.Mutex   // serialises ticks; guards scratch
	scratch []*keeper    // tick's copy of keepers

	mu      sync.Mutex // guards the fields below
	keepers map[*keeper]struct{}
	timer   stopper       // nil when none is armed
	at      time.Duration // when timer fires, on the monotonic clock
	gen     uint64        // of the armed timer
}

// renewal is one round: the leases it renews and the store call's context.
type renewal struct {
	ks      []*keeper
	prior   []stamp // each lease's send time when the round took it
	maxLeft time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	live    atomic.Int64 // keepers of ks not yet halted
}

// renewer returns m's renewer, made on first use.
func (m *Manager) renewer() *renewer {
	m.rnOnce.Do(func() { m.rn = &renewer{m: m, keepers: map[*keeper]struct{}{}} })
	return m.rn
}

// retryAfter is how soon a renewal that failed for a passing reason is tried again.
func retryAfter(lease time.Duration) time.Duration { return max(lease/10, 100*time.Millisecond) }

// add schedules k, a new KeepAlive of k.l. A lease due already is renewed at once: the
// timer is armed for now (so that KeepAlives started together late make one tick).
func (r *renewer) add(k *keeper) {
	l := k.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.halted {
		return
	}
	now := r.m.clk.now()
	left := l.leftLocked(now)
	wait := left - (l.lease - l.lease/3)
	r.mu.Lock()
	r.keepers[k] = struct{}{}
	r.armLocked(now.mono + max(min(wait, left, l.lease/10), 0))
	r.mu.Unlock()
}

// halt takes k out of the schedule: its context has ended (Release, loss, or its ctx).
// k.done is closed now, or when the round renewing k.l comes back.
func (k *keeper) halt() {
	l := k.l
	l.mu.Lock()
	if k.halted {
		l.mu.Unlock()
		return
	}
	k.halted = true
	if b := k.batch; b != nil && b.live.Add(-1) == 0 {
		b.cancel() // nobody waits for this round any more
	}
	if l.renewing == nil {
		close(k.done)
	} else {
		l.idleWait = append(l.idleWait, k)
	}
	unhook := k.unhook
	if r := k.r; r != nil {
		r.mu.Lock()
		delete(r.keepers, k)
		if len(r.keepers) == 0 && r.timer != nil {
			r.timer.Stop()
			r.timer = nil
		}
		r.mu.Unlock()
	}
	l.mu.Unlock()
	if unhook != nil {
		unhook()
	}
}

// armLocked makes sure a tick comes at the latest at at (monotonic). r.mu must be held.
func (r *renewer) armLocked(at time.Duration) {
	if len(r.keepers) == 0 || r.timer != nil && r.at <= at {
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	r.gen++
	gen := r.gen
	r.at = at
	r.timer = r.m.clk.afterFunc(at-r.m.clk.now().mono, func() {
		r.mu.Lock()
		if r.gen == gen {
			r.timer = nil
		}
		r.mu.Unlock()
		r.tick()
	})
}

// candidate is a lease that joins the round if one is sent now.
type candidate struct {
	k      *keeper
	left   time.Duration
	ifIdle time.Duration // when it needs a tick if no round is sent
	ifSent time.Duration // when it needs a tick if it is in the round
}

// tick looks at every scheduled lease: it declares lost those whose deadline has
// passed, sends one round for those due (and those due soon, or retrying), and arms the
// timer for the next deadline, renewal or wall-clock check (every tenth of a lease).
func (r *renewer) tick() {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	clk := r.m.clk
	r.mu.Lock()
	ks := r.scratch[:0]
	for k := range r.keepers {
		ks = append(ks, k)
	}
	r.mu.Unlock()
	next := time.Duration(math.MaxInt64)
	var cands []candidate
	var lost []*keeper
	due := false
	for _, k := range ks {
		l := k.l
		l.mu.Lock()
		if k.halted || k.ctx.Err() != nil {
			l.mu.Unlock()
			continue
		}
		now := clk.now()
		left := l.leftLocked(now)
		if left <= 0 {
			l.mu.Unlock()
			lost = append(lost, k)
			continue
		}
		check := now.mono + min(left, l.lease/10)
		if l.renewing != nil {
			next = min(next, check)
			l.mu.Unlock()
			continue
		}
		if k.failed && l.sent.mono != k.failedAt {
			k.failed = false // a Refresh by the caller renewed the lease meanwhile
		}
		wait := left - (l.lease - l.lease/3)
		if k.failed {
			wait = min(k.retryAt-now.mono, left)
		}
		if wait <= 0 {
			due = true
		}
		if wait <= l.lease/6 || k.failed {
			cands = append(cands, candidate{k: k, left: left, ifIdle: min(now.mono+max(wait, 0), check), ifSent: check})
		} else {
			next = min(next, now.mono+wait, check)
		}
		l.mu.Unlock()
	}
	clear(ks)
	r.scratch = ks[:0]
	var b *renewal
	if due {
		b = &renewal{}
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
	for _, c := range cands {
		if b == nil {
			next = min(next, c.ifIdle)
			continue
		}
		l := c.k.l
		l.mu.Lock()
		if !c.k.halted && l.renewing == nil {
			l.renewing, c.k.batch = b, b
			b.ks, b.prior = append(b.ks, c.k), append(b.prior, l.sent)
			b.maxLeft = max(b.maxLeft, c.left)
			b.live.Add(1)
		}
		l.mu.Unlock()
		next = min(next, c.ifSent)
	}
	for _, k := range lost {
		k.l.lose(k.l.errRanOut())
	}
	if next != time.Duration(math.MaxInt64) {
		r.mu.Lock()
		r.armLocked(next)
		r.mu.Unlock()
	}
	if b != nil && len(b.ks) > 0 {
		r.out.Add(1)
		go r.send(b)
	} else if b != nil {
		b.cancel()
	}
}

// send makes round b's store call, applies each lease's outcome, and ticks. On a store
// with driver.LockBatcher that is one RefreshLocks call; on another, one RefreshLock per
// lease, up to fallbackCalls at a time, each outcome applied as it comes back.
func (r *renewer) send(b *renewal) {
	defer r.out.Add(-1)
	m := r.m
	ctx, cancel := m.clk.withTimeout(b.ctx, b.maxLeft) // pointless past the last deadline
	var mu sync.Mutex
	var failed int
	var firstErr error
	var firstKey dcsync.Key
	apply := func(i int, sent stamp, st driver.LockState, err error, start time.Time) {
		k := b.ks[i]
		if err = k.renewed(b.prior[i], sent, st, err, start); err != nil {
			mu.Lock()
			if failed == 0 {
				firstErr, firstKey = err, k.l.key
			}
			failed++
			mu.Unlock()
		}
	}
	if _, ok := m.store.(driver.LockBatcher); ok {
		reqs := make([]driver.LockRefresh, len(b.ks))
		for i, k := range b.ks {
			reqs[i] = driver.LockRefresh{Key: k.l.key, Owner: k.l.owner, TTL: k.l.ttl}
		}
		sent := m.clk.now()
		start := time.Now()
		res, err := driver.RefreshLocks(ctx, m.store, reqs)
		m.tel.StoreCall(ctx, "refresh_locks", start, err)
		if err == nil && len(res) != len(reqs) {
			err = driver.Errorf(dcsync.Internal, "lock.KeepAlive", "the store returned %d results for %d renewals", len(res), len(reqs))
		}
		for i := range b.ks {
			if err != nil {
				apply(i, sent, driver.LockState{}, err, start)
				continue
			}
			apply(i, sent, res[i].State, res[i].Err, start)
		}
	} else {
		var next atomic.Int64
		work := func() {
			for i := int(next.Add(1) - 1); i < len(b.ks); i = int(next.Add(1) - 1) {
				l := b.ks[i].l
				sent := m.clk.now()
				start := time.Now()
				st, err := m.store.RefreshLock(ctx, l.key, l.owner, l.ttl)
				m.tel.StoreCall(ctx, "refresh_lock", start, err)
				apply(i, sent, st, err, start)
			}
		}
		var wg sync.WaitGroup
		for range min(len(b.ks), fallbackCalls) - 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work()
			}()
		}
		work()
		wg.Wait()
	}
	cancel()
	b.cancel()
	if failed > 0 {
		m.log.Warn("dcsync lock: renewal failed; retrying", telemetry.LogStore, m.tel.Store, telemetry.LogOperation, "lock.keep_alive",
			telemetry.LogKey, firstKey.String(), "leases", failed, telemetry.LogErr, firstErr)
	}
	r.tick()
}

// renewed applies the outcome of a round to k's lease: as Refresh does, a success
// extends the lease only if it came back before the deadline, and LockLost declares the
// lease lost. A failure that may pass is retried from now on. It returns that failure,
// or nil.
func (k *keeper) renewed(prior, sent stamp, st driver.LockState, err error, start time.Time) error {
	l := k.l
	if err == nil {
		err = l.applyRenewal("lock.KeepAlive", sent, st)
	} else {
		err = driver.Wrap(err, dcsync.Internal, "lock.KeepAlive")
		if errors.Is(err, dcsync.ErrLockLost) {
			l.lose(err)
		}
	}
	l.m.tel.Renewed(context.Background(), l.key.Level, start, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewing, k.batch = nil, nil
	for _, w := range l.idleWait {
		close(w.done)
	}
	l.idleWait = nil
	switch {
	case err == nil:
		k.failed = false
	case k.halted || errors.Is(err, dcsync.ErrLockLost):
		return nil
	default:
		k.failed, k.failedAt, k.retryAt = true, prior.mono, l.m.clk.now().mono+retryAfter(l.lease)
		return err
	}
	return nil
}
