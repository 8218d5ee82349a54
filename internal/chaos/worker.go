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

// LockWorker takes locks over and over until ctx ends, and records every acquisition,
// claim and exit. After a hold it tries the same lock again at once (three times in
// four; else another at random), so a lock is busy most of the time; after a failed try
// it pauses and tries another lock at random, so spare workers keep trying held locks
// and take over those whose lease ended.
//
// Every hold is judged over its whole lease: the holder claims ("I hold token t now")
// every Slice for as long as time.Now() is before the lock's own Deadline() (the lease
// less lock's documented safety margin, from the instant the acquisition or the latest
// renewal was sent, by this process's monotonic clock), and then exits. Every fourth
// hold (KeepAlive) renews with the lock's KeepAlive and lasts up to 1.2 TTLs; the others
// claim until the deadline of the TTL they acquired, then release the lock or (half of
// them) let the lease lapse. A store
// that lets another acquirer in before the lease's end therefore shows two holders
// whose claims overlap.
type LockWorker struct {
	Client int           // worker id in the history
	Locks  *lock.Manager // the lock manager to acquire through
	Names  []string      // the locks it takes, one at a time; Record.Lock is the index
	TTL    time.Duration // the lease
	Slice  time.Duration // time between claims
	// Retry bounds the pause after a failed try (uniform in [0, Retry)).
	Retry     time.Duration
	KeepAlive bool // every fourth hold renews with KeepAlive and lasts up to 1.2 TTLs
	Out       Sink
}

// Run works until ctx ends. It returns the number of acquisitions.
func (w LockWorker) Run(ctx context.Context) int {
	seq, held := 0, 0
	retry := max(w.Retry, time.Millisecond)
	li := rand.IntN(len(w.Names))
	for ctx.Err() == nil {
		rec := func(r Record) { r.Client, r.Seq, r.Lock = w.Client, seq, li; w.Out(r) }
		seq++
		sent := time.Now()
		rec(Record{Phase: PhaseCall, Kind: KindEnter, At: sent.UnixNano()})
		l, err := w.Locks.TryAcquire(ctx, w.Names[li], lock.TTL(w.TTL))
		if err != nil {
			rec(Record{Phase: PhaseReturn, Kind: KindEnter, Outcome: outcomeOf(err), At: now()})
			sleep(ctx, rand.N(retry))
			li = rand.IntN(len(w.Names))
			continue
		}
		rec(Record{Phase: PhaseReturn, Kind: KindEnter, Token: l.Token(), Outcome: OK, At: now()})
		held++
		end := time.Now().Add(time.Hour) // no end of its own: the lease's
		stopKeepAlive := context.CancelFunc(func() {})
		kept := w.KeepAlive && held%4 == 0
		if kept {
			kctx, cancel := context.WithCancel(ctx)
			stopKeepAlive = cancel
			l.KeepAlive(kctx)
			end = sent.Add(6 * w.TTL / 5)
		}
		tok := l.Token()
		var last int64
		for {
			// One reading, judged by the lock's own rule: t is within the lease
			// exactly when it is before Deadline (see lock.Lock.Deadline).
			t := time.Now()
			if !t.Before(l.Deadline()) || !t.Before(end) {
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
		if kept || ctx.Err() != nil || rand.IntN(2) == 0 {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Release(rctx) // LockLost once the lease ran out is expected; the exit is recorded
			cancel()
		} else {
			// Half the holds that ran to their deadline let the lease lapse, as a
			// holder that dies does; the next try of this lock comes after its end.
			sleep(ctx, time.Until(sent.Add(w.TTL+10*time.Millisecond)))
		}
		if rand.IntN(4) == 0 {
			li = rand.IntN(len(w.Names))
		}
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
