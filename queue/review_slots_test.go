package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// gatedStore is a memory store (every capability of it) whose member slot acquires of
// the names in gated wait until gate is closed (a slow store call in flight), and that
// counts member slot acquires by name and membership reads.
type gatedStore struct {
	*memory.Store
	gated   map[string]bool
	gate    chan struct{}
	waiting atomic.Int64 // acquires waiting at the gate
	reads   atomic.Int64 // membership reads (InspectLocks of member slots)

	mu       sync.Mutex
	acquires map[string]int
}

func (s *gatedStore) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	s.mu.Lock()
	s.acquires[k.Name]++
	s.mu.Unlock()
	if s.gated[k.Name] {
		s.waiting.Add(1)
		select {
		case <-s.gate:
		case <-ctx.Done():
			s.waiting.Add(-1)
			return driver.LockState{}, driver.Errorf(dcsync.Connection, "gated", "context done: %w", ctx.Err())
		}
		s.waiting.Add(-1)
	}
	return s.Store.AcquireLock(ctx, k, owner, ttl)
}

func (s *gatedStore) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	if len(keys) > 0 && keys[0].Name == lockName("gate", "g", "m", false, 0) {
		s.reads.Add(1)
	}
	return s.Store.InspectLocks(ctx, keys)
}

func (s *gatedStore) acquiresOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquires[name]
}

// A member does not move down (release its slot and join again) over free slots that
// other consumers of its process are taking: join leaves those slots out (localSlots),
// so it would only take the same slot again, and again, with no pause in between (a
// busy loop of store calls). Here 18 consumers of one process try slots 0..17 and
// their acquires are slow (held at a gate); a 19th takes slot 18, the lowest slot its
// process does not try, and must keep it.
func TestMemberDoesNotMoveDownOverSlotsItsProcessTries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const triers = memberWindow/2 + 2
	s := &gatedStore{Store: memory.New(), gated: map[string]bool{}, gate: make(chan struct{}), acquires: map[string]int{}}
	defer s.Close()
	for slot := 0; slot < triers; slot++ {
		s.gated[lockName("gate", "g", "m", false, slot)] = true
	}
	q, err := Create(ctx, s, Spec{Name: "gate", Partitions: 64, Groups: []string{"g"}},
		WithLease(10*time.Second), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Consumer
	defer func() {
		for _, c := range cs {
			c.Close(context.Background())
		}
	}()
	for i := 0; i < triers; i++ {
		c, err := q.Consumer(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for s.waiting.Load() < triers {
		if ctx.Err() != nil {
			t.Fatal("the first consumers never tried their slots")
		}
		time.Sleep(5 * time.Millisecond)
	}
	last, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	cs = append(cs, last)
	above := lockName("gate", "g", "m", false, triers)
	for s.acquiresOf(above) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the last consumer never tried a slot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Twenty membership reads on (the last consumer's rounds, one per poll interval):
	// it keeps slot 18 throughout.
	for from := s.reads.Load(); s.reads.Load() < from+20; {
		if ctx.Err() != nil {
			t.Fatal("the last consumer stopped reading the membership")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.acquiresOf(above); n != 1 {
		t.Errorf("the last consumer took slot %d %d times while its process's other consumers tried the slots below, want once", triers, n)
	}
	close(s.gate)
}

// valueStore is a store handle of a type that cannot be a map key (a slice field).
type valueStore struct {
	driver.Store
	tags []string
}

// wrappedStore is a comparable store type (an interface field) whose value here holds
// a valueStore: reflect reports the type comparable, yet the value cannot be hashed.
type wrappedStore struct {
	driver.Store
}

// A store handle whose value cannot be a map key (a comparable wrapper type around a
// store that is not) gets no slot registry, as a store type that cannot be one does:
// it must not panic in the consumer's goroutine.
func TestSlotRegistryTakesAStoreValueThatCannotBeAKey(t *testing.T) {
	base := memory.New()
	defer base.Close()
	s := wrappedStore{Store: valueStore{Store: base, tags: []string{"a"}}}
	_, c := memberTestQueue(t, s, 4)
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("pickSlot panicked: %v", r)
		}
	}()
	slot, ok := c.pickSlot(nil, 4, 1)
	if !ok || slot != 0 {
		t.Fatalf("pickSlot = %d, %v; want 0, true", slot, ok)
	}
	c.unmarkSlot(slot)
}

// The same store handle end to end: making a consumer (the hub's registry) and its
// joining (the slot registry) must not panic.
func TestConsumerOnAStoreValueThatCannotBeAKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := wrappedStore{Store: valueStore{Store: base, tags: []string{"a"}}}
	q, err := Create(ctx, s, Spec{Name: "unhashable", Partitions: 2, Groups: []string{"g"}},
		WithLease(10*time.Second), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var c *Consumer
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Consumer panicked: %v", r)
			}
		}()
		c, err = q.Consumer(ctx, "g")
	}()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the consumer never took its partitions")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
