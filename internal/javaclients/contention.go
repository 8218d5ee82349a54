package javaclients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// Hold is one hold of the lock with what the holder learnt: a dcsync holder's fencing
// token, and whether its release found the lock gone (LockLost: someone removed or took
// it while it was held).
type Hold struct {
	Interval
	Token uint64
	Lost  bool
}

// Mixed configures a mixed contention run: DcsyncWorkers goroutines, each a lock.Manager
// of (Client, Farm) on Store, contend with the Java workers that RunJava starts, for
// Duration, all on the lock Name.
type Mixed struct {
	Store         driver.LockStore
	Client, Farm  string
	Level         dcsync.Level
	Name          string
	DcsyncWorkers int
	Duration      time.Duration
	Hold          time.Duration
	TTL           time.Duration
	// RunJava runs the Java workers for about Duration and returns their holds.
	RunJava func(ctx context.Context) (ContentionResult, error)
}

// MixedResult is the outcome of a mixed run.
type MixedResult struct {
	Holds  []Hold
	Report OverlapReport
	Java   ContentionResult
	// DcsyncLost counts dcsync holds whose release returned LockLost.
	DcsyncLost int
	// DcsyncWaitTimeouts counts dcsync acquires that gave up waiting.
	DcsyncWaitTimeouts int
}

// RunMixed runs dcsync and Java lock workers on one lock at the same time and analyses
// their holds. Errors other than "held by someone else" and LockLost fail the run.
func RunMixed(ctx context.Context, m Mixed) (MixedResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr, err := lock.New(m.Store, m.Client, m.Farm, lock.WithLevel(m.Level), lock.WithTTL(m.TTL),
		lock.WithWait(2*time.Second), lock.WithBackoff(time.Millisecond, 10*time.Millisecond), lock.WithLogger(quiet))
	if err != nil {
		return MixedResult{}, err
	}
	var (
		mu     sync.Mutex
		res    MixedResult
		errs   []error
		wg     sync.WaitGroup
		javaCh = make(chan error, 1)
	)
	deadline := time.Now().Add(m.Duration)
	go func() {
		jr, err := m.RunJava(ctx)
		mu.Lock()
		res.Java = jr
		for _, iv := range jr.Intervals {
			res.Holds = append(res.Holds, Hold{Interval: iv})
		}
		mu.Unlock()
		javaCh <- err
	}()
	for w := 0; w < m.DcsyncWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprint("dcsync", w)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				l, err := mgr.Acquire(ctx, m.Name)
				if errors.Is(err, dcsync.ErrLockUnavailable) {
					mu.Lock()
					res.DcsyncWaitTimeouts++
					mu.Unlock()
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s acquire: %w", worker, err))
					mu.Unlock()
					cancel()
					return
				}
				start := time.Now().UnixNano()
				time.Sleep(m.Hold)
				end := time.Now().UnixNano()
				rerr := l.Release(context.WithoutCancel(ctx))
				h := Hold{Interval: Interval{Kind: KindDcsync, Worker: worker, Start: start, End: end}, Token: l.Token()}
				mu.Lock()
				switch {
				case rerr == nil:
				case errors.Is(rerr, dcsync.ErrLockLost):
					h.Lost = true
					res.DcsyncLost++
				default:
					errs = append(errs, fmt.Errorf("%s release: %w", worker, rerr))
				}
				res.Holds = append(res.Holds, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := <-javaCh; err != nil {
		errs = append(errs, fmt.Errorf("java workers: %w", err))
	}
	ivs := make([]Interval, len(res.Holds))
	for i, h := range res.Holds {
		ivs[i] = h.Interval
	}
	res.Report = Overlaps(ivs)
	return res, errors.Join(errs...)
}

// UnexplainedDcsyncOverlaps lists the pairs of overlapping dcsync holds that neither
// holder was told about: both releases succeeded. dcsync's lock never lets that happen. An
// overlap where one release returned LockLost is explained: a Java release (an
// unconditional delete) removed that holder's lock while it held it, and dcsync reported
// the loss.
func UnexplainedDcsyncOverlaps(holds []Hold) []string {
	s := dcsyncHolds(holds)
	var out []string
	for i := range s {
		for j := i + 1; j < len(s) && s[j].Start < s[i].End; j++ {
			if !s[i].Lost && !s[j].Lost {
				out = append(out, fmt.Sprintf("%s (token %d) and %s (token %d) both held the lock and both released it without LockLost",
					s[i].Worker, s[i].Token, s[j].Worker, s[j].Token))
			}
		}
	}
	return out
}

// TokenOrderViolations lists pairs of dcsync holds where one ended before the other began
// and the later one's fencing token is not greater. Holds whose release returned LockLost
// are left out: their lock was taken away (by a Java release) at some moment after their
// acquire returned, maybe before their start was noted, and the stale token is what
// fencing exists to refuse.
func TokenOrderViolations(holds []Hold) []string {
	var kept []Hold
	for _, h := range holds {
		if !h.Lost {
			kept = append(kept, h)
		}
	}
	s := dcsyncHolds(kept)
	var out []string
	maxEnded := struct {
		end   int64
		token uint64
		who   string
	}{}
	// Sweep in start order, tracking the largest token among holds that ended before the
	// current one started.
	ends := append([]Hold(nil), s...)
	sort.Slice(ends, func(i, j int) bool { return ends[i].End < ends[j].End })
	k := 0
	for _, h := range s {
		for k < len(ends) && ends[k].End < h.Start {
			if ends[k].Token > maxEnded.token {
				maxEnded.token, maxEnded.end, maxEnded.who = ends[k].Token, ends[k].End, ends[k].Worker
			}
			k++
		}
		if maxEnded.token != 0 && h.Token <= maxEnded.token {
			out = append(out, fmt.Sprintf("%s got token %d after %s's token %d had ended", h.Worker, h.Token, maxEnded.who, maxEnded.token))
		}
	}
	return out
}

// HiddenJavaPuts classifies the HBase Java holds that another holder overlapped from
// after their start: such a Java holder held a lock that the others saw free, because its
// Put (stamped with the Java client's clock before the request was sent) fell under a
// delete marker of the same or a later millisecond.
//
// It assumes the Java workers pause after each release, so no Java Put falls under the
// Java worker's own previous Delete, and that dcsync stamps its release Delete at the
// timestamp of the cells it owns, which were written before its acquire returned. Then a
// dcsync release can hide a Java Put only if that Put's timestamp is not later than the
// start of the dcsync hold that preceded the Java hold: the Java request was in flight
// during that whole dcsync hold, carrying a stale timestamp (stale lists those). Any other
// hidden Java Put (unexplained) was hidden by a release Delete stamped later than the
// releasing holder's cells, such as one stamped with the server's current time.
func HiddenJavaPuts(holds []Hold) (stale, unexplained []string) {
	s := append([]Hold(nil), holds...)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	for i, j := range s {
		if j.Kind != KindJava || j.PutTS == 0 {
			continue
		}
		var taker *Hold
		for k := i + 1; k < len(s) && s[k].Start < j.End; k++ {
			taker = &s[k]
			break
		}
		if taker == nil {
			continue
		}
		var prev *Hold // the latest dcsync hold that started before j
		for k := i - 1; k >= 0; k-- {
			if s[k].Kind == KindDcsync {
				prev = &s[k]
				break
			}
		}
		what := fmt.Sprintf("Java %s (Put ts %d) was taken over by %s %s %v after it acquired",
			j.Worker, j.PutTS, taker.Kind, taker.Worker, time.Duration(taker.Start-j.Start))
		if prev != nil && j.PutTS <= prev.Start/int64(time.Millisecond) {
			stale = append(stale, what+fmt.Sprintf("; its Put ts is not after the start of the preceding dcsync hold (%s at %d ms)",
				prev.Worker, prev.Start/int64(time.Millisecond)))
		} else {
			unexplained = append(unexplained, what)
		}
	}
	return stale, unexplained
}

func dcsyncHolds(holds []Hold) []Hold {
	var s []Hold
	for _, h := range holds {
		if h.Kind == KindDcsync {
			s = append(s, h)
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	return s
}
