package election

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// Leadership is one candidate's leadership of an election, from Campaign to Resign or
// its loss. Its methods are safe for concurrent use.
type Leadership struct {
	m      *Manager
	name   string
	key    dcsync.Key
	lock   *lock.Lock
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex // serialises publishes
	gen   uint64     // the register's generation after this leader's latest write
	value string     // the value published last
}

// Name returns the election's name.
func (l *Leadership) Name() string { return l.name }

// Key returns the key of the election's lock and register in the store.
func (l *Leadership) Key() dcsync.Key { return l.key }

// Token returns the leadership's fencing token: greater than every earlier leader's of
// this election.
func (l *Leadership) Token() uint64 { return l.lock.Token() }

// Context returns a context that is cancelled the moment leadership ends: lost (its
// lease could not be renewed before this process's deadline, the store reported
// another holder, or Proclaim found a newer leader's record; context.Cause then has
// code LockLost) or resigned. Run the leader's work under it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Deadline returns when this process treats the leadership's lease as over unless it
// is renewed (lock.Lock.Deadline).
func (l *Leadership) Deadline() time.Time { return l.lock.Deadline() }

// TTL returns the lease of the leadership.
func (l *Leadership) TTL() time.Duration { return l.lock.TTL() }

// Value returns the value this leader published last.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// lost ends the leadership with cause err (LockLost) and stops renewing the lock; the
// lock is released if the store still has it under this leader.
func (l *Leadership) lost(err error) {
	l.cancel(err)
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = l.lock.Release(rctx)
}

// Proclaim publishes value as the leader's value without giving up leadership. It
// returns LockLost when leadership has ended or the register holds a newer leader's
// record (leadership is then ended too): it never writes over a newer leader's record.
// Like any write whose reply was lost, an earlier try of this call may still have
// landed over this leader's own record before LockLost is returned (internal/chaos
// counts such a Proclaim as of unknown outcome): a later leader's publish replaces it.
// A try that fails for a passing reason (a store outage) is retried while ctx and the
// leadership last.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if len(value) > MaxValue {
		return driver.Errorf(dcsync.InvalidArgument, "election.Proclaim", "value is %d bytes, more than %d", len(value), MaxValue)
	}
	return l.publish(ctx, "election.Proclaim", value, false)
}

// publish writes {token, value} to the register: a compare-and-set on the generation
// last seen. A Campaign (first) replaces any record of a token not greater than its
// own; a Proclaim only its own token's record. A record of another (newer) leader ends
// the leadership with LockLost.
func (l *Leadership) publish(ctx context.Context, op, value string, first bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	token := l.lock.Token()
	enc := record{token: token, value: value}.encode()
	gen := l.gen
	if first {
		gen = l.m.lastGen(l.key)
	}
	success := func(g uint64) {
		l.gen, l.value = g, value
		l.m.seen(l.key, g)
		l.m.published(l.key, l.name, g, token, value)
	}
	for {
		// Held, not only the context: a process resuming from a pause longer than its
		// lease is past its deadline before its keep-alive has noticed.
		if l.ctx.Err() != nil || !l.lock.Held() {
			return l.ended(op)
		}
		if ctx.Err() != nil {
			return driver.Errorf(dcsync.Connection, op, "publishing the value of election %q: %w", l.name, ctx.Err())
		}
		reg, err := l.m.regs.SwapRegister(ctx, l.key, gen, enc)
		switch dcsync.CodeOf(err) {
		case 0:
			success(reg.Gen)
			return nil
		case dcsync.Conflict:
		case dcsync.Connection, dcsync.RetriesExhausted:
			// The outcome is unknown: read the register again after a pause, and judge
			// what it holds as a Conflict's register (the try may have landed).
			t := time.NewTimer(l.m.retry)
			select {
			case <-t.C:
			case <-ctx.Done():
			case <-l.ctx.Done():
			}
			t.Stop()
			rs, rerr := l.m.regs.ReadRegisters(ctx, []dcsync.Key{l.key})
			if rerr != nil || len(rs) != 1 || rs[0].Err != nil || rs[0].Register.Gen == gen {
				continue
			}
			reg = rs[0].Register
		default:
			return driver.Wrap(err, dcsync.Internal, op)
		}
		// The register is at another generation than gen: judge its record.
		l.m.seen(l.key, reg.Gen)
		cur, derr := decodeRecord(reg.Value)
		if t, ok := recordToken(reg.Value); derr != nil && ok && t > token {
			// A record of another version, of a newer leader: judged by its token.
			cur, derr = record{token: t}, nil
		}
		switch {
		case reg.Gen == 0 || derr != nil && first:
			// Nothing to judge by (an unreadable record, which a Campaign replaces).
			gen = reg.Gen
			continue
		case derr != nil:
			return derr
		case cur.token > token || !first && cur.token != token:
			err := driver.Errorf(dcsync.LockLost, op, "election %q has a newer leader (token %d; this one's is %d)", l.name, cur.token, token)
			l.lost(err)
			return err
		case cur.token == token && cur.value == value:
			// This write (an earlier try whose outcome was unknown) or an equal one of
			// this leader's landed: the register says what it should.
			success(reg.Gen)
			return nil
		}
		gen = reg.Gen
	}
}

// ended returns the LockLost error of a call made after the leadership ended.
func (l *Leadership) ended(op string) error {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, dcsync.ErrLockLost) {
		return cause
	}
	return driver.Errorf(dcsync.LockLost, op, "leadership of election %q has ended: %v", l.name, cause)
}

// errResigned is the cause of a leadership's context after Resign.
var errResigned = errors.New("election: resigned")

// Resign gives up leadership: it releases the lock, so that the next candidate (first
// the next one of this process, at once) takes over, and ends the leadership's
// context. It returns LockLost when leadership had already been lost; the register is
// left as it is (the next leader overwrites it).
func (l *Leadership) Resign(ctx context.Context) error {
	l.cancel(errResigned)
	// A publish in flight (Proclaim racing Resign) lands or fails before the lock is
	// released: the write of a leadership never lands after its Resign returned, nor
	// after the next leader took the lock. The cancel above ends its retries.
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.lock.Release(ctx)
	if err != nil && dcsync.CodeOf(err) == dcsync.LockLost {
		return driver.Errorf(dcsync.LockLost, "election.Resign", "leadership of election %q had been lost before Resign: %w", l.name, err)
	}
	return driver.Wrap(err, dcsync.Internal, "election.Resign")
}
