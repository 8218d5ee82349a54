package chaos

import (
	"context"
	"github.com/dcsync/dcsync/queue"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// queueFreezer is a queue store for one in-process consumer that can be frozen: while
// frozen, every call waits (a call made during a freeze reaches the store only when it
// thaws, late). It is the in-process counterpart of SIGSTOP: the consumer's lease
// lapses because its renewals wait, another consumer takes its partitions, and when it
// thaws its held-back writes land after its successor's. Close is not forwarded.
type queueFreezer struct {
	driver.Store
	mu   sync.Mutex
	gate chan struct{} // closed while not frozen
}

func newQueueFreezer(s driver.Store) *queueFreezer {
	g := make(chan struct{})
	close(g)
	return &queueFreezer{Store: s, gate: g}
}

// freeze holds every call back for d, then lets them through.
func (f *queueFreezer) freeze(d time.Duration) {
	f.mu.Lock()
	g := make(chan struct{})
	f.gate = g
	f.mu.Unlock()
	time.Sleep(d)
	f.mu.Lock()
	close(g)
	f.mu.Unlock()
}

func (f *queueFreezer) wait() {
	f.mu.Lock()
	g := f.gate
	f.mu.Unlock()
	<-g
}

func (f *queueFreezer) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	f.wait()
	return f.Store.AcquireLock(ctx, k, owner, ttl)
}

func (f *queueFreezer) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	f.wait()
	return f.Store.RefreshLock(ctx, k, owner, ttl)
}

func (f *queueFreezer) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	f.wait()
	return f.Store.ReleaseLock(ctx, k, owner)
}

func (f *queueFreezer) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	f.wait()
	return f.Store.InspectLock(ctx, k)
}

func (f *queueFreezer) CreateQueue(ctx context.Context, spec queue.Spec) error {
	f.wait()
	return f.Store.CreateQueue(ctx, spec)
}

func (f *queueFreezer) ReadQueueSpec(ctx context.Context, name string) (queue.Spec, error) {
	f.wait()
	return f.Store.ReadQueueSpec(ctx, name)
}

func (f *queueFreezer) AddQueueGroup(ctx context.Context, name, group string) (queue.Spec, error) {
	f.wait()
	return f.Store.AddQueueGroup(ctx, name, group)
}

func (f *queueFreezer) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	f.wait()
	return f.Store.AppendQueue(ctx, name, events)
}

func (f *queueFreezer) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	f.wait()
	return f.Store.ReadQueue(ctx, name, p, from, max)
}

func (f *queueFreezer) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	f.wait()
	return f.Store.AbortQueueSeq(ctx, name, p, seq)
}

func (f *queueFreezer) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	f.wait()
	return f.Store.QueueBounds(ctx, name, ps)
}

func (f *queueFreezer) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	f.wait()
	return f.Store.ClaimQueuePartition(ctx, name, group, p, token)
}

func (f *queueFreezer) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	f.wait()
	return f.Store.CommitQueueOffset(ctx, name, group, p, off)
}

func (f *queueFreezer) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	f.wait()
	return f.Store.ReadQueueOffsets(ctx, name, group, ps)
}

func (f *queueFreezer) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	f.wait()
	return f.Store.TrimQueue(ctx, name, p, below)
}
