package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// committer is a memory store with driver.QueueCommitter (the loop of single commits
// behind one call, as driver.CommitQueueOffsets does without it), counting its calls.
// lose, when set, makes the next CommitQueueOffsets apply every record and then
// report a Connection error for the call as a whole: a reply lost.
type committer struct {
	driver.Store
	mu      sync.Mutex
	batches int
	keys    int
	singles int
	lose    bool
}

func (s *committer) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	s.mu.Lock()
	s.singles++
	s.mu.Unlock()
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

func (s *committer) CommitQueueOffsets(ctx context.Context, name, group string, commits []driver.QueueCommit) ([]error, error) {
	s.mu.Lock()
	s.batches++
	s.keys += len(commits)
	lose := s.lose
	s.lose = false
	s.mu.Unlock()
	res, err := driver.CommitQueueOffsets(ctx, s.Store, name, group, commits)
	if lose && err == nil {
		return nil, driver.Errorf(dcsync.Connection, "test.CommitQueueOffsets", "reply lost")
	}
	return res, err
}

func (s *committer) take() (batches, keys, singles int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	batches, keys, singles = s.batches, s.keys, s.singles
	s.batches, s.keys, s.singles = 0, 0, 0
	return
}

// On a store with driver.QueueCommitter an Ack of messages of several partitions is one
// CommitQueueOffsets call carrying every partition's record (no CommitQueueOffset); a
// record refused in it (its partition claimed by a later owner) changes nothing of it
// and does not stop the others; a call whose reply is lost leaves the acks in doubt
// (the Ack fails) and a later Ack completes them.
func TestAckOfSeveralPartitionsIsOneBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &committer{Store: memory.New()}
	defer s.Close()
	const parts = 3
	q, err := queue.Create(ctx, s, queue.Spec{Name: "b", Partitions: parts, Groups: []string{"g"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond), queue.WithVisibility(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Three events in each partition.
	n := map[int]int{}
	var evs []queue.Event
	for k := 0; len(evs) < 3*parts; k++ {
		key := string(rune('a' + k))
		if p := queue.Partition(key, parts); n[p] < 3 {
			n[p]++
			evs = append(evs, queue.Event{Key: key, Payload: []byte(key)})
		}
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	msgs := receiveAll(t, ctx, c, 3*parts, false)
	bySeq := map[uint64][]*queue.Message{}
	for _, m := range msgs {
		bySeq[m.Seq] = append(bySeq[m.Seq], m)
	}
	s.take()

	// The first events of every partition, acked together: one call of 3 records.
	if err := c.Ack(ctx, bySeq[0]...); err != nil {
		t.Fatal(err)
	}
	if b, k, one := s.take(); b != 1 || k != parts || one != 0 {
		t.Fatalf("an ack of %d partitions made %d CommitQueueOffsets of %d records and %d CommitQueueOffset, want 1 of %d and 0", parts, b, k, one, parts)
	}

	// The reply of the second events' call is lost: the Ack fails; acking them again
	// succeeds and every offset is where the acks put it.
	s.mu.Lock()
	s.lose = true
	s.mu.Unlock()
	if err := c.Ack(ctx, bySeq[1]...); err == nil {
		t.Fatal("Ack whose commit call lost its reply returned nil")
	}
	if err := c.Ack(ctx, bySeq[1]...); err != nil {
		t.Fatalf("Ack again after a lost reply: %v", err)
	}
	checkNext(t, ctx, q, func(int) uint64 { return 2 })

	// A later owner claims partition lost; the others' acks still land.
	lost := bySeq[2][0].Partition
	if _, err := s.Store.ClaimQueuePartition(ctx, "b", "g", lost, bySeq[2][0].Token+1000); err != nil {
		t.Fatal(err)
	}
	s.take()
	err = c.Ack(ctx, bySeq[2]...)
	if !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack with partition %d claimed by another: %v, want LockLost", lost, err)
	}
	if b, _, one := s.take(); b != 1 || one != 0 {
		t.Fatalf("the ack made %d CommitQueueOffsets and %d CommitQueueOffset, want 1 and 0", b, one)
	}
	checkNext(t, ctx, q, func(p int) uint64 {
		if p == lost {
			return 2 // the claim kept the stored offset; the refused write changed nothing
		}
		return 3
	})
}

// checkNext checks group g's offset in every partition of q against want.
func checkNext(t *testing.T, ctx context.Context, q *queue.Queue, want func(p int) uint64) {
	t.Helper()
	lag, err := q.Lag(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := range lag {
		if lag[p].Dead {
			continue
		}
		if lag[p].Next != want(p) {
			t.Fatalf("partition %d: offset %d, want %d (lag %+v)", p, lag[p].Next, want(p), lag)
		}
	}
}
