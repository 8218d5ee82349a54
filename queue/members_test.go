package queue

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// inspectCounting counts the locks inspected, one at a time or in batches (the memory
// store is a driver.LockBatcher: both must be counted).
type inspectCounting struct {
	*memory.Store
	single atomic.Int64
}

func (s *inspectCounting) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	s.single.Add(1)
	return s.Store.InspectLock(ctx, k)
}

func (s *inspectCounting) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	s.single.Add(int64(len(keys)))
	return s.Store.InspectLocks(ctx, keys)
}

func memberTestQueue(t *testing.T, s driver.Store, parts int) (*Queue, *Consumer) {
	t.Helper()
	ctx := context.Background()
	q, err := Create(ctx, s, Spec{Name: "m", Partitions: parts, Groups: []string{"g"}}, WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := &Consumer{q: q, group: "g", name: "m"}
	for p := 0; p < parts; p++ {
		c.parts = append(c.parts, p)
	}
	return q, c
}

// A membership read from slot 0 finds every member whose slot is less than
// memberWindow/2 above the one below it, however high the chain goes, and reads only
// as far as it must: one window past the highest member.
func TestReadMembersFollowsTheChain(t *testing.T) {
	ctx := context.Background()
	base := memory.New()
	defer base.Close()
	s := &inspectCounting{Store: base}
	q, c := memberTestQueue(t, s, 300)
	want := []int{0, 15, 30, 45, 60, 75, 90, 105}
	for _, slot := range want {
		lk, err := q.locks.TryAcquire(ctx, c.lockName("m", slot), lock.Level(dcsync.XDC))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Release(ctx)
	}
	got, err := c.readMembers(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("readMembers = %v, want %v", got, want)
	}
	// Slots 0..105+memberWindow at most, not the 300 of the group.
	if n := s.single.Load(); n > int64(105+memberWindow) {
		t.Fatalf("read %d slots of 300 to find members up to slot 105", n)
	}
	// The key read is the key the lock manager writes.
	if c.memberKey(15) != (dcsync.Key{Level: dcsync.XDC, Client: DefaultClient, Farm: DefaultFarm, Name: c.lockName("m", 15)}) {
		t.Fatal("memberKey differs from the lock manager's key")
	}
	if got := freeSlots(want, 300, 3); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("freeSlots = %v", got)
	}
	if got := freeSlots([]int{0, 1, 2}, 3, 3); len(got) != 0 {
		t.Fatalf("freeSlots of a full group = %v", got)
	}
}

// A member left with memberWindow/2 or more free slots below it (the members there
// left) moves down, so that members reading from slot 0 see it.
func TestMemberAboveAGapMovesDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q, probe := memberTestQueue(t, s, 64)
	var held []*lock.Lock
	for slot := 0; slot < 20; slot++ {
		lk, err := q.locks.TryAcquire(ctx, probe.lockName("m", slot), lock.Level(dcsync.XDC))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	slot := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.slot
	}
	for slot() < 0 {
		if ctx.Err() != nil {
			t.Fatal("the consumer never joined")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := slot(); got != 20 {
		t.Fatalf("the consumer took slot %d, want 20, the lowest free", got)
	}
	for _, lk := range held[1:] {
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer held[0].Release(context.Background())
	for slot() >= memberWindow/2 {
		if ctx.Err() != nil {
			t.Fatalf("the consumer stayed at slot %d, 19 free slots above slot 0", slot())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
