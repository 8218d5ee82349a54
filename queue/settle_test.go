package queue_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// callOrder is a memory store (every capability of it) that records, in order, its
// membership reads ("members": an InspectLocks of member slots) and its batched
// partition takes ("take": an AcquireLocks of partition locks).
type callOrder struct {
	*memory.Store
	mu  sync.Mutex
	seq []string
}

// lockKind is the kind of queue lock k names: 'm' (member slot), 'p' (partition), or 0.
func lockKind(k dcsync.Key) byte {
	i := strings.LastIndexByte(k.Name, '/')
	if !strings.HasPrefix(k.Name, "queue:") || i < 1 {
		return 0
	}
	return k.Name[i-1]
}

func (s *callOrder) record(what string) {
	s.mu.Lock()
	s.seq = append(s.seq, what)
	s.mu.Unlock()
}

func (s *callOrder) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	if len(keys) > 0 && lockKind(keys[0]) == 'm' {
		s.record("members")
	}
	return s.Store.InspectLocks(ctx, keys)
}

func (s *callOrder) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	if len(reqs) > 0 && lockKind(reqs[0].Key) == 'p' {
		s.record("take")
	}
	return s.Store.AcquireLocks(ctx, reqs)
}

// A consumer takes partitions only once the membership it reads has held for a round
// (settleRounds in rebalance.go): a lone joiner reads the members when it joins (one
// read), sees a new view in its first round (a second read) and takes nothing then;
// its first take follows its third read. Taking in the round that saw the view change
// makes the first take follow the second read.
func TestJoinerTakesOnceTheMembershipHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &callOrder{Store: memory.New()}
	defer s.Close()
	q, err := queue.Create(ctx, s, queue.Spec{Name: "settle", Partitions: 4, Groups: []string{"g"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 4 {
		if ctx.Err() != nil {
			t.Fatal("the consumer never owned the 4 partitions")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	seq := append([]string(nil), s.seq...)
	s.mu.Unlock()
	reads := 0
	for _, what := range seq {
		if what == "take" {
			break
		}
		reads++
	}
	if reads == len(seq) {
		t.Fatalf("no batched take recorded: %v", seq)
	}
	if reads < 3 {
		t.Fatalf("the first take followed %d membership reads, want 3 (the join's, the round that saw the new view, the round that saw it hold): %v", reads, seq)
	}
}

// flicker is a memory store whose member slot 2 reads as held on every other
// membership read: a group whose membership changes every round.
type flicker struct {
	*memory.Store
	mu    sync.Mutex
	reads int
}

func (s *flicker) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	res, err := s.Store.InspectLocks(ctx, keys)
	if err != nil || len(keys) == 0 || lockKind(keys[0]) != 'm' {
		return res, err
	}
	s.mu.Lock()
	s.reads++
	odd := s.reads%2 == 1
	s.mu.Unlock()
	for i, k := range keys {
		if odd && strings.HasSuffix(k.Name, "/2") {
			res[i] = driver.LockResult{State: driver.LockState{Owner: "phantom", Token: 1, Expires: time.Now().Add(time.Hour)}}
		}
	}
	return res, nil
}

// A membership that never holds still gets its partitions taken: after settleRounds
// rounds in a row of a changed view the consumer takes its share of the view it read.
// Without that bound it would wait forever.
func TestFlickeringMembershipStillTakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &flicker{Store: memory.New()}
	defer s.Close()
	q, err := queue.Create(ctx, s, queue.Spec{Name: "flicker", Partitions: 4, Groups: []string{"g"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("a consumer whose membership view changes every round never took a partition")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
