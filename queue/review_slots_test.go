package queue

import (
	"context"
	"errors"
	"maps"
	"strings"
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
// counts member slot acquires by name and membership reads (of group "g").
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
	if len(keys) > 0 && strings.HasSuffix(keys[0].Name, "gm/0") {
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

// marksOf returns a copy of the slot registry's marks of c's group.
func marksOf(c *Consumer) map[int]int {
	g, _ := c.slotGroup()
	localSlots.Lock()
	defer localSlots.Unlock()
	out := map[int]int{}
	for s, n := range localSlots.m[g] {
		out[s] = n
	}
	return out
}

func slotOf(c *Consumer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slot
}

// The slot registry marks exactly the slots the process's consumers hold, whatever
// path a consumer took: a member slot lost (another owner took it: the consumer
// joins again, elsewhere), a standby of a full group closed while it waits, and every
// consumer closed: no mark is left behind.
func TestSlotMarksFollowTheSlotsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &gatedStore{Store: memory.New(), acquires: map[string]int{}}
	defer s.Close()
	q, err := Create(ctx, s, Spec{Name: "marks", Partitions: 3, Groups: []string{"g"}},
		WithLease(10*time.Second), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Consumer
	for i := 0; i < 3; i++ {
		c, err := q.Consumer(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	held := func() map[int]int {
		out := map[int]int{}
		for _, c := range cs {
			if sl := slotOf(c); sl >= 0 {
				out[sl]++
			}
		}
		return out
	}
	for len(held()) < 3 {
		if ctx.Err() != nil {
			t.Fatal("the consumers never joined")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, want := marksOf(cs[0]), held(); !maps.Equal(got, want) {
		t.Fatalf("marks %v, slots held %v", got, want)
	}
	standby, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	// Some membership reads on (most likely the standby's among them: it finds the
	// group full; what follows holds either way).
	for from := s.reads.Load(); s.reads.Load() < from+20; {
		if ctx.Err() != nil {
			t.Fatal("the consumers stopped reading the membership")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The standby of the full group leaves: no mark of it stays.
	if err := standby.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := marksOf(cs[0]), held(); !maps.Equal(got, want) {
		t.Fatalf("after the standby closed: marks %v, slots held %v", got, want)
	}
	// Another owner takes the first consumer's slot: it loses it, and joins again
	// once the last of the others leaves.
	lost := slotOf(cs[0])
	k := cs[0].memberKey(lost)
	st, err := s.InspectLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLock(ctx, k, st.Owner); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLock(ctx, k, "thief", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for {
		m := marksOf(cs[0])
		if m[lost] == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the first consumer never noticed its slot was lost")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The group is full (the thief and two consumers): free a slot.
	if err := cs[2].Close(ctx); err != nil {
		t.Fatal(err)
	}
	freed := slotOf(cs[2])
	cs = cs[:2]
	for slotOf(cs[0]) != freed {
		if ctx.Err() != nil {
			t.Fatalf("the first consumer never joined again at slot %d (it is at %d)", freed, slotOf(cs[0]))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, want := marksOf(cs[0]), held(); !maps.Equal(got, want) {
		t.Fatalf("after a lost slot: marks %v, slots held %v", got, want)
	}
	for _, c := range cs {
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := marksOf(standby); len(got) != 0 {
		t.Fatalf("marks left after every consumer closed: %v", got)
	}
	localSlots.Lock()
	defer localSlots.Unlock()
	if g, _ := standby.slotGroup(); localSlots.m[g] != nil {
		t.Fatal("the group's entry stays in the registry after every consumer closed")
	}
}

// A consumer of a queue deleted (with WithForce) and created again under its name
// takes nothing from the new queue; it must not keep a member slot of the new queue's
// group either, or the partitions assigned to it there are never taken (it keeps
// them from the new queue's consumers): here the new queue's consumer must come to be
// the group's only member and own every partition.
func TestConsumerOfADeletedQueueLeavesTheNewGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	opts := []Option{WithLease(10 * time.Second), WithPollInterval(20 * time.Millisecond)}
	spec := Spec{Name: "reborn", Partitions: 2, Groups: []string{"g"}}
	q1, err := Create(ctx, s, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	old, err := q1.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	for len(old.Partitions()) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the first consumer never owned the partitions")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := Delete(ctx, s, "reborn", append(opts, WithForce())...); err != nil {
		t.Fatal(err)
	}
	q2, err := Create(ctx, s, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := q2.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	// The old consumer finds its queue gone (once it joined the new group and tried
	// to take a partition).
	for {
		old.mu.Lock()
		gone := old.gone
		old.mu.Unlock()
		if gone != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the old consumer never found its queue gone")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Then the new consumer is the group's only member, and owns both partitions.
	probe := &Consumer{q: q2, group: "g", name: "reborn", parts: []int{0, 1}}
	var members []int
	for {
		if occ, err := probe.readMembers(ctx, 0); err == nil {
			members = occ
		}
		if len(members) == 1 && len(c.Partitions()) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("members %v; the new queue's consumer owns %v of 2 partitions: the old queue's consumer keeps a member slot", members, c.Partitions())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Handles of two clients (WithIdentity) on one store handle keep slot marks of their
// own, as their member locks are keys of their own: a joiner of one client does not
// leave out the slots the other client's consumers are taking.
func TestSlotMarksArePerClient(t *testing.T) {
	base := memory.New()
	defer base.Close()
	_, a := memberTestQueue(t, base, 4)
	b := &Consumer{q: &Queue{store: a.q.store, opts: a.q.opts}, group: "g", name: "m", parts: a.parts}
	b.q.opts.client = "other"
	sa, ok := a.pickSlot(nil, 4, 1)
	if !ok || sa != 0 {
		t.Fatalf("client a picked %d, %v; want 0, true", sa, ok)
	}
	defer a.unmarkSlot(sa)
	sb, ok := b.pickSlot(nil, 4, 1)
	if !ok || sb != 0 {
		t.Fatalf("client b picked %d, %v; want slot 0 (client a's mark is not its own)", sb, ok)
	}
	b.unmarkSlot(sb)
}

// A consumer that lost its member slot is no member: the others' assignment gives its
// partitions away, so it frees them (nothing is in flight here) while it waits for a
// slot, rather than keep them from whoever took its place. Here the group's one slot
// is taken by another owner for good: the consumer must end up owning nothing and the
// partition's lock must be free.
func TestConsumerWithoutASlotFreesItsPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q, err := Create(ctx, s, Spec{Name: "slotless", Partitions: 1, Groups: []string{"g"}},
		WithLease(10*time.Second), WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 1 {
		if ctx.Err() != nil {
			t.Fatal("the consumer never took the partition")
		}
		time.Sleep(5 * time.Millisecond)
	}
	k := c.memberKey(slotOf(c))
	st, err := s.InspectLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLock(ctx, k, st.Owner); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLock(ctx, k, "thief", time.Minute); err != nil {
		t.Fatal(err)
	}
	pk := dcsync.Key{Level: dcsync.XDC, Client: c.q.opts.client, Farm: c.q.opts.farm, Name: c.lockName("p", 0)}
	for {
		_, err := s.InspectLock(ctx, pk)
		if len(c.Partitions()) == 0 && errors.Is(err, dcsync.ErrNotFound) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("a consumer without a member slot still owns %v (partition lock: %v)", c.Partitions(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
