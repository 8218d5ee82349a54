package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// LockWorker acquires one lock over and over until ctx ends, holding it for a few short
// slices each time, and records every acquisition, claim and exit.
type LockWorker struct {
	Client int           // worker id in the history
	Locks  *lock.Manager // the lock manager to acquire through
	Name   string        // the lock's name
	TTL    time.Duration // the lease
	// Margin is the part of the TTL a holder gives up for safety: it stops claiming at
	// acquisition call + TTL - Margin by its own monotonic clock.
	Margin time.Duration
	Slices int           // claims per hold (at most)
	Slice  time.Duration // time between claims
	// KeepAlive makes every fourth hold last up to 1.2 TTLs, renewed by the lock's
	// KeepAlive; the holder then claims only while time.Now() is before the lock's own
	// Deadline() (the lease less its safety margin, by this process's monotonic clock).
	KeepAlive bool
	Out       Sink
}

// Run works until ctx ends. It returns the number of acquisitions.
func (w LockWorker) Run(ctx context.Context) int {
	seq, held := 0, 0
	rec := func(r Record) { r.Client, r.Seq = w.Client, seq; w.Out(r) }
	for ctx.Err() == nil {
		seq++
		sent := time.Now()
		rec(Record{Phase: PhaseCall, Kind: KindEnter, At: sent.UnixNano()})
		l, err := w.Locks.TryAcquire(ctx, w.Name, lock.TTL(w.TTL))
		if err != nil {
			rec(Record{Phase: PhaseReturn, Kind: KindEnter, Outcome: outcomeOf(err), At: now()})
			sleep(ctx, time.Duration(rand.IntN(20))*time.Millisecond)
			continue
		}
		rec(Record{Phase: PhaseReturn, Kind: KindEnter, Token: l.Token(), Outcome: OK, At: now()})
		held++
		deadline := sent.Add(w.TTL - w.Margin) // monotonic: a pause or clock step cannot extend it
		valid := func(t time.Time) bool { return t.Before(deadline) }
		slices := w.Slices
		var stopKeepAlive context.CancelFunc = func() {}
		if w.KeepAlive && held%4 == 0 {
			kctx, cancel := context.WithCancel(ctx)
			stopKeepAlive = cancel
			l.KeepAlive(kctx)
			valid = func(t time.Time) bool { return t.Before(l.Deadline()) }
			slices = int(6*w.TTL/(5*w.Slice)) + 1
		}
		tok := l.Token()
		var last int64
		for i := 0; i < slices; i++ {
			t := time.Now()
			if !valid(t) {
				break
			}
			last = t.UnixNano()
			rec(Record{Phase: PhaseCall, Kind: KindClaim, Token: tok, At: last})
			if !sleep(ctx, w.Slice) {
				break
			}
		}
		seq++
		if last == 0 {
			last = now()
		}
		rec(Record{Phase: PhaseCall, Kind: KindExit, Token: tok, At: last})
		rec(Record{Phase: PhaseReturn, Kind: KindExit, Token: tok, Outcome: OK, At: now()})
		stopKeepAlive()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Release(rctx) // LockLost after a pause is expected; the exit is already recorded
		cancel()
	}
	return held
}

// LatchWorker counts a count-up-down latch up and down and reads it until ctx ends,
// recording every call and return.
type LatchWorker struct {
	Client  int
	Latches *latch.Manager
	Name    string
	Level   dcsync.Level
	Out     Sink
	// Pause is the time between operations (a few ms keeps a history small enough for
	// the checker: it is exponential in the number of overlapping operations).
	Pause time.Duration
}

// Run works until ctx ends. It returns the number of operations.
func (w LatchWorker) Run(ctx context.Context) int {
	l, err := w.Latches.GetCountUpDown(w.Name, latch.Level(w.Level))
	if err != nil {
		return 0
	}
	seq := 0
	rec := func(r Record) { r.Client, r.Seq = w.Client, seq; w.Out(r) }
	for sleep(ctx, w.Pause) {
		seq++
		switch r := rand.IntN(10); {
		case r < 7:
			delta := int64(1)
			if r < 4 {
				delta = -1
			}
			rec(Record{Phase: PhaseCall, Kind: KindAdd, Delta: delta, At: now()})
			// The update runs to completion even when the run is ending: an update cut off
			// by our own cancellation would be in doubt for no reason.
			octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if delta > 0 {
				_, err = l.CountUp(octx)
			} else {
				_, err = l.CountDown(octx)
			}
			cancel()
			rec(Record{Phase: PhaseReturn, Kind: KindAdd, Delta: delta, Outcome: outcomeOf(err), At: now()})
		default:
			rec(Record{Phase: PhaseCall, Kind: KindRead, At: now()})
			n, err := l.Count(ctx)
			rec(Record{Phase: PhaseReturn, Kind: KindRead, Value: n, Outcome: outcomeOf(err), At: now()})
		}
	}
	return seq
}

// outcomeOf classifies an error: nil is OK; codes that say nothing was written are
// Failed; anything else (Connection, RetriesExhausted, Internal, a context error) may
// have been applied: Unknown.
func outcomeOf(err error) string {
	if err == nil {
		return OK
	}
	switch dcsync.CodeOf(err) {
	case dcsync.LockUnavailable, dcsync.NotFound, dcsync.InvalidArgument, dcsync.AlreadyExists, dcsync.LockLost:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return Failed
		}
	}
	return Unknown
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
