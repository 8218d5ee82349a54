package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite.Open, hbase.New, aerospike.New

	locks, err := lock.New(store, "billing", "dc1", lock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	l, err := locks.Acquire(ctx, "nightly-invoices", lock.Wait(time.Minute))
	if err != nil {
		panic(err)
	}
	// Renew the lease while the job runs; jobCtx ends if the lease is lost.
	jobCtx := l.KeepAlive(ctx)
	fmt.Println("token:", l.Token(), "running:", jobCtx.Err() == nil)

	// Another acquirer is refused while the lock is held.
	_, err = locks.TryAcquire(ctx, "nightly-invoices")
	fmt.Println("held:", errors.Is(err, dcsync.ErrLockUnavailable))

	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	// A new acquisition gets a greater fencing token.
	l2, _ := locks.TryAcquire(ctx, "nightly-invoices")
	fmt.Println("next token:", l2.Token())
	_ = l2.Release(ctx)
	// Output:
	// token: 1 running: true
	// held: true
	// next token: 2
}

// A lease is treated as over a little before TTL after the acquisition was sent: here
// 2% of the TTL plus 50 ms early. Deadline says when; KeepAlive's context ends then
// unless the lease was renewed.
func ExampleWithSafetyMargin() {
	ctx := context.Background()
	locks, err := lock.New(memory.New(), "billing", "dc1", lock.WithSafetyMargin(0.02, 50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	l, err := locks.TryAcquire(ctx, "nightly-invoices", lock.TTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	left := time.Until(l.Deadline())
	fmt.Println("counted locally at most 9.75s:", left <= 9750*time.Millisecond && left > 5*time.Second)
	// Output:
	// counted locally at most 9.75s: true
}

// Fair acquirers of one process take the lock in the order they asked for it; a
// releasing goroutine that asks again queues behind them. Across processes, a process
// that held the lock leaves it free for a while (WithYield) before its next batch of
// acquirers tries: see "Waiting and fairness" in the package doc.
func ExampleWithFairness() {
	ctx := context.Background()
	locks, err := lock.New(memory.New(), "billing", "dc1", lock.WithFairness(true))
	if err != nil {
		panic(err)
	}
	held, err := locks.TryAcquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	turns := make(chan string, 3)
	for i, who := range []string{"first", "second", "third"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := locks.Acquire(ctx, "report")
			if err != nil {
				panic(err)
			}
			turns <- who
			_ = l.Release(ctx)
		}()
		for locks.Waiting("report") < i+1 {
			time.Sleep(time.Millisecond) // let each one queue before the next asks
		}
	}
	_ = held.Release(ctx)
	wg.Wait()
	close(turns)
	for who := range turns {
		fmt.Println(who)
	}
	// Output:
	// first
	// second
	// third
}

// A lease is lost when this process stops renewing it in time, for instance because it
// was paused longer than the TTL: another owner takes the lock, and the next renewal is
// refused. KeepAlive's context then ends with a LockLost cause, which tells the job to
// stop. Here the store's clock is moved an hour ahead to stand for the pause.
func ExampleLock_KeepAlive_leaseLost() {
	ctx := context.Background()
	var skew atomic.Int64 // how far the store's clock is ahead
	store := memory.New(memory.WithClock(func() time.Time {
		return time.Now().Add(time.Duration(skew.Load()))
	}))

	// The loss is logged at level WARN unless the manager is given another logger.
	mine, _ := lock.New(store, "billing", "dc1", lock.WithLogger(slog.New(slog.DiscardHandler)))
	l, err := mine.TryAcquire(ctx, "nightly-invoices", lock.TTL(time.Second))
	if err != nil {
		panic(err)
	}
	skew.Store(int64(time.Hour)) // the lease lapses while this process is paused
	theirs, _ := lock.New(store, "billing", "dc1")
	other, err := theirs.TryAcquire(ctx, "nightly-invoices", lock.TTL(time.Minute))
	if err != nil {
		panic(err)
	}
	fmt.Println("other holder's token:", other.Token())

	jobCtx := l.KeepAlive(ctx) // the first renewal is refused: another owner holds it
	<-jobCtx.Done()
	cause := context.Cause(jobCtx)
	fmt.Println("job stopped, lock lost:", errors.Is(cause, dcsync.ErrLockLost))
	// Release leaves the new holder's lock alone and reports the loss.
	fmt.Println("release says lost:", errors.Is(l.Release(ctx), dcsync.ErrLockLost))
	fmt.Println("other still holds it:", other.Refresh(ctx) == nil)
	_ = other.Release(ctx)
	// Output:
	// other holder's token: 2
	// job stopped, lock lost: true
	// release says lost: true
	// other still holds it: true
}
