package chaos

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/semaphore"
)

// Kinds of operation of the primitives' workers (issue 18).
const (
	KindCampaign   = "campaign"   // election: a Campaign publishing Value; Token on success
	KindProclaim   = "proclaim"   // election: a leader's Proclaim of Value under Token
	KindLeader     = "leader"     // election: a Leader read returning Token and Value
	KindLead       = "lead"       // election: a leader's claim that it leads with Token now
	KindSemAcquire = "semacquire" // semaphore: an Acquire of Delta permits
	KindPermit     = "permit"     // semaphore: a holder's claim that it holds slot Lock with Token now
	KindRWAcquire  = "rwacquire"  // rwlock: an acquisition (Delta 1 read, 2 write, 3 downgrade)
	KindReadHold   = "readhold"   // rwlock: a reader's claim that it holds slot Lock with Token now
	KindWriteHold  = "writehold"  // rwlock: a writer's claim that it holds W with Token now
)

// Shape of the primitives a run uses: one election, one semaphore of SemaphorePermits
// permits, one read-write lock of rwReaders reader slots.
const (
	SemaphorePermits = 3
	rwReaders        = 3
)

// PrimitiveNames are the names of a run's election, semaphore and read-write lock.
type PrimitiveNames struct{ Election, Semaphore, RWLock string }

func primitiveNames(prefix string) PrimitiveNames {
	return PrimitiveNames{Election: prefix + "-election", Semaphore: prefix + "-sem", RWLock: prefix + "-rw"}
}

// primitiveClients is how many client ids one PrimitiveWorker uses.
const primitiveClients = 4

// PrimitiveWorker drives an election (a candidate and a reader), a semaphore and a
// read-write lock until ctx ends, recording every call, return and claim. Its client
// ids are First to First+3. Like LockWorker's, every hold claims ("I hold token t now")
// each Slice while this process's clock is before the hold's Deadline, so a store that
// lets another in before the lease's end shows overlapping claims.
type PrimitiveWorker struct {
	First int
	Store driver.Store
	Names PrimitiveNames
	TTL   time.Duration
	Slice time.Duration
	// Pause bounds the pause between operations (uniform in [0, Pause)).
	Pause time.Duration
	Out   Sink
	// Logger, when set, receives the primitives' logs (discarded if nil).
	Logger *slog.Logger
}

// Run works until ctx ends. It returns the number of holds (leaderships, permit sets
// and read-write holds).
func (w PrimitiveWorker) Run(ctx context.Context) int {
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if w.Slice == 0 {
		w.Slice = lockSlice
	}
	if w.Pause == 0 {
		w.Pause = 50 * time.Millisecond
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	run := func(f func(context.Context) int) {
		wg.Add(1)
		go func() { defer wg.Done(); n := f(ctx); mu.Lock(); total += n; mu.Unlock() }()
	}
	// A yield after each leadership: without it a process with candidates waiting
	// keeps leadership, and the child processes' candidates would never lead.
	em, err := election.New(w.Store, "chaos", "dc1", election.WithTTL(w.TTL), election.WithLogger(log), election.WithYield(w.TTL/4))
	if err == nil {
		run(func(ctx context.Context) int { return w.candidate(ctx, em) })
		run(func(ctx context.Context) int { w.reader(ctx, em); return 0 })
	}
	if sm, err := semaphore.New(w.Store, "chaos", "dc1", semaphore.WithTTL(w.TTL), semaphore.WithLogger(log)); err == nil {
		run(func(ctx context.Context) int { return w.semaphore(ctx, sm) })
	}
	if rm, err := rwlock.New(w.Store, "chaos", "dc1", rwlock.WithTTL(w.TTL), rwlock.WithReaders(rwReaders), rwlock.WithLogger(log)); err == nil {
		run(func(ctx context.Context) int { return w.rwlock(ctx, rm) })
	}
	wg.Wait()
	return total
}

// recorder numbers one client's operations.
type recorder struct {
	client, seq int
	out         Sink
}

func (r *recorder) next() int { r.seq++; return r.seq }

func (r *recorder) rec(seq int, x Record) {
	x.Client, x.Seq = r.client, seq
	r.out(x)
}

// claimWhile claims with claim each slice while now is before deadline() and held()
// (and before end); it returns when a reading fails.
func claimWhile(ctx context.Context, slice time.Duration, end time.Time, deadline func() time.Time, held func() bool, claim func(at int64)) {
	for {
		t := time.Now()
		if !t.Before(deadline()) || !t.Before(end) || !held() {
			return
		}
		claim(t.UnixNano())
		if !sleep(ctx, slice) {
			return
		}
	}
}

// holdEnd is when a hold ends at the latest: half the holds are short (under a
// quarter of the TTL), the others last up to 1.2 TTLs (past the first lease, so that
// renewals are tested too).
func holdEnd(ttl time.Duration) time.Time {
	if rand.IntN(2) == 0 {
		return time.Now().Add(rand.N(ttl / 4))
	}
	return time.Now().Add(ttl/5 + rand.N(ttl))
}

// candidate campaigns, leads (claiming, and proclaiming a new value now and then), and
// resigns, until ctx ends. Values are unique in the run: client*1e9 + operation number.
func (w PrimitiveWorker) candidate(ctx context.Context, m *election.Manager) int {
	r := &recorder{client: w.First, out: w.Out}
	led := 0
	for sleep(ctx, rand.N(w.Pause)) {
		seq := r.next()
		val := int64(r.client)*1e9 + int64(seq)
		r.rec(seq, Record{Phase: PhaseCall, Kind: KindCampaign, Value: val, At: now()})
		ld, err := m.Campaign(ctx, w.Names.Election, strconv.FormatInt(val, 10))
		if err != nil {
			r.rec(seq, Record{Phase: PhaseReturn, Kind: KindCampaign, Value: val, Outcome: outcomeOf(err), At: now()})
			continue
		}
		tok := ld.Token()
		r.rec(seq, Record{Phase: PhaseReturn, Kind: KindCampaign, Value: val, Token: tok, Outcome: OK, At: now()})
		led++
		end := holdEnd(ld.TTL())
		held := func() bool { return ld.Context().Err() == nil }
		for time.Now().Before(end) && held() && ctx.Err() == nil {
			claimWhile(ctx, w.Slice, time.Now().Add(ld.TTL()/5), ld.Deadline, held, func(at int64) {
				r.rec(0, Record{Phase: PhaseCall, Kind: KindLead, Token: tok, At: at})
			})
			if !time.Now().Before(ld.Deadline()) || !held() || ctx.Err() != nil || rand.IntN(2) == 0 {
				continue
			}
			seq := r.next()
			val := int64(r.client)*1e9 + int64(seq)
			r.rec(seq, Record{Phase: PhaseCall, Kind: KindProclaim, Token: tok, Value: val, At: now()})
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := ld.Proclaim(pctx, strconv.FormatInt(val, 10))
			cancel()
			r.rec(seq, Record{Phase: PhaseReturn, Kind: KindProclaim, Token: tok, Value: val, Outcome: outcomeOf(err), At: now()})
		}
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = ld.Resign(rctx) // LockLost once leadership was lost is expected
		cancel()
	}
	return led
}

// reader reads the leader every Pause or so until ctx ends.
func (w PrimitiveWorker) reader(ctx context.Context, m *election.Manager) {
	r := &recorder{client: w.First + 1, out: w.Out}
	for sleep(ctx, rand.N(w.Pause)) {
		seq := r.next()
		r.rec(seq, Record{Phase: PhaseCall, Kind: KindLeader, At: now()})
		l, err := m.Leader(ctx, w.Names.Election)
		out := outcomeOf(err)
		if err == nil && l.Pending {
			out = Failed // no value published: no register read to check
		}
		var val int64
		if err == nil && !l.Pending {
			val, err = strconv.ParseInt(l.Value, 10, 64)
			if err != nil {
				val = -1 // a value no worker published: the checker rejects it
			}
		}
		r.rec(seq, Record{Phase: PhaseReturn, Kind: KindLeader, Token: l.Token, Value: val, Outcome: out, At: now()})
	}
}

// semaphore acquires 1 or 2 permits, claims each slot while the set is held, and
// releases them (or, one time in four, lets the leases lapse), until ctx ends.
func (w PrimitiveWorker) semaphore(ctx context.Context, m *semaphore.Manager) int {
	r := &recorder{client: w.First + 2, out: w.Out}
	var s *semaphore.Semaphore
	for s == nil && ctx.Err() == nil {
		var err error
		if s, err = m.Open(ctx, w.Names.Semaphore, SemaphorePermits); err != nil {
			sleep(ctx, 200*time.Millisecond)
		}
	}
	if s == nil {
		return 0
	}
	held := 0
	for sleep(ctx, rand.N(w.Pause)) {
		n := 1 + rand.IntN(2)
		seq := r.next()
		r.rec(seq, Record{Phase: PhaseCall, Kind: KindSemAcquire, Delta: int64(n), At: now()})
		p, err := s.Acquire(ctx, n, semaphore.Wait(2*w.TTL))
		if err != nil {
			r.rec(seq, Record{Phase: PhaseReturn, Kind: KindSemAcquire, Delta: int64(n), Outcome: outcomeOf(err), At: now()})
			continue
		}
		r.rec(seq, Record{Phase: PhaseReturn, Kind: KindSemAcquire, Delta: int64(n), Outcome: OK, At: now()})
		held++
		kctx, stop := context.WithCancel(ctx)
		kept := rand.IntN(2) == 0
		if kept {
			p.KeepAlive(kctx)
		}
		permits := p.Permits()
		claimWhile(ctx, w.Slice, holdEnd(w.TTL), p.Deadline, func() bool { return true }, func(at int64) {
			for _, pm := range permits {
				r.rec(0, Record{Phase: PhaseCall, Kind: KindPermit, Lock: pm.Slot, Token: pm.Token, At: at})
			}
		})
		stop()
		if kept || ctx.Err() != nil || rand.IntN(4) != 0 {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.Release(rctx)
			cancel()
		}
	}
	return held
}

// rwlock takes read holds (two in three) and write holds, some of the writes downgraded
// to a read, claims each while held, and releases, until ctx ends.
func (w PrimitiveWorker) rwlock(ctx context.Context, m *rwlock.Manager) int {
	r := &recorder{client: w.First + 3, out: w.Out}
	held := 0
	for sleep(ctx, rand.N(w.Pause)) {
		write := rand.IntN(3) == 0
		mode := int64(1)
		if write {
			mode = 2
		}
		seq := r.next()
		r.rec(seq, Record{Phase: PhaseCall, Kind: KindRWAcquire, Delta: mode, At: now()})
		var l *rwlock.Lock
		var err error
		if write {
			l, err = m.AcquireWrite(ctx, w.Names.RWLock, rwlock.Wait(2*w.TTL))
		} else {
			l, err = m.AcquireRead(ctx, w.Names.RWLock, rwlock.Wait(2*w.TTL))
		}
		if err != nil {
			r.rec(seq, Record{Phase: PhaseReturn, Kind: KindRWAcquire, Delta: mode, Outcome: outcomeOf(err), At: now()})
			continue
		}
		r.rec(seq, Record{Phase: PhaseReturn, Kind: KindRWAcquire, Delta: mode, Token: l.Token(), Lock: l.Slot(), Outcome: OK, At: now()})
		held++
		l = w.holdRW(ctx, r, l)
		if l != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Release(rctx)
			cancel()
		}
	}
	return held
}

// holdRW claims l while it is held; a write hold is downgraded one time in three and the
// read hold claimed in turn. It returns the lock to release (nil if none).
func (w PrimitiveWorker) holdRW(ctx context.Context, r *recorder, l *rwlock.Lock) *rwlock.Lock {
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	kept := l.KeepAlive(kctx)
	held := func() bool { return kept.Err() == nil }
	kind := KindReadHold
	if l.Mode() == rwlock.Write {
		kind = KindWriteHold
	}
	tok, slot := l.Token(), l.Slot()
	claim := func(at int64) { r.rec(0, Record{Phase: PhaseCall, Kind: kind, Lock: slot, Token: tok, At: at}) }
	claimWhile(ctx, w.Slice, holdEnd(w.TTL), l.Deadline, held, claim)
	if l.Mode() != rwlock.Write || rand.IntN(3) != 0 || ctx.Err() != nil || !time.Now().Before(l.Deadline()) {
		return l
	}
	seq := r.next()
	r.rec(seq, Record{Phase: PhaseCall, Kind: KindRWAcquire, Delta: 3, At: now()})
	dctx, cancel := context.WithTimeout(ctx, 2*w.TTL)
	rd, err := l.Downgrade(dctx)
	cancel()
	if err != nil {
		r.rec(seq, Record{Phase: PhaseReturn, Kind: KindRWAcquire, Delta: 3, Outcome: outcomeOf(err), At: now()})
		return l
	}
	r.rec(seq, Record{Phase: PhaseReturn, Kind: KindRWAcquire, Delta: 3, Token: rd.Token(), Lock: rd.Slot(), Outcome: OK, At: now()})
	stop()
	return w.holdRW(ctx, r, rd)
}
