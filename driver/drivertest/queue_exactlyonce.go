package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// longLease is the partition lease of the cases below: long enough that a loaded
// machine keeps every lease it means to keep. Owner changes are driven by members
// joining or closing, or by a consumer whose store calls fail (its lease then lapses).
const longLease = 10 * time.Second

// runExactlyOnceAcrossOwners runs the cases of acks and attempts that must survive an
// owner change: what an owner recorded, its successor honours.
func runExactlyOnceAcrossOwners(t *testing.T, h Harness) {
	t.Run("RebalanceKeepsAcksAboveANack", func(t *testing.T) { runRebalanceKeepsAcks(t, h) })
	t.Run("DeathKeepsAcksAndAttempts", func(t *testing.T) { runDeathKeepsAcks(t, h) })
	t.Run("VisibilityAttemptsSurviveAMove", func(t *testing.T) { runVisibilityAttemptsMove(t, h) })
	t.Run("DeadLetterAcrossOwners", func(t *testing.T) { runDeadLetterAcrossOwners(t, h) })
	t.Run("DeadLetterCompletedBySuccessor", func(t *testing.T) { runDeadLetterCompleted(t, h) })
	t.Run("FencedDeadLetter", func(t *testing.T) { runFencedDeadLetter(t, h) })
	t.Run("AckAfterDeadlineRefused", func(t *testing.T) { runAckAfterDeadline(t, h) })
	t.Run("MarksWindow", func(t *testing.T) { runMarksWindow(t, h) })
}

// keysIn returns n distinct keys that go to partition p of a queue of parts partitions.
func keysIn(parts, p, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if k := fmt.Sprint("key", i); queue.Partition(k, parts) == p {
			out = append(out, k)
		}
	}
	return out
}

// enqueueKeyed enqueues one event per key, its payload the key.
func enqueueKeyed(t *testing.T, ctx context.Context, q *queue.Queue, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_, err := q.Enqueue(ctx, queue.Event{Key: k, ID: k, Payload: []byte(k)})
		must(t, err, "Enqueue "+k)
	}
}

// receiveUntil receives from c until it got a message with payload last, and returns
// every message received, last included.
func receiveUntil(t *testing.T, ctx context.Context, c *queue.Consumer, last string) []*queue.Message {
	t.Helper()
	var got []*queue.Message
	for {
		msgs, err := c.Receive(ctx, 10)
		must(t, err, fmt.Sprintf("Receive (waiting for %s; got %s)", last, describe(got)))
		got = append(got, msgs...)
		for _, m := range msgs {
			if string(m.Payload) == last {
				return got
			}
		}
	}
}

// byPayload returns the messages of msgs with payload p.
func byPayload(msgs []*queue.Message, p string) []*queue.Message {
	var out []*queue.Message
	for _, m := range msgs {
		if string(m.Payload) == p {
			out = append(out, m)
		}
	}
	return out
}

// waitOwns waits until c owns partition p.
func waitOwns(t *testing.T, ctx context.Context, c *queue.Consumer, p int) {
	t.Helper()
	for !slices.Contains(c.Partitions(), p) {
		if ctx.Err() != nil {
			t.Fatalf("consumer never took partition %d: %v", p, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLost waits until c owns no partition (its leases lapsed).
func waitLost(t *testing.T, ctx context.Context, c *queue.Consumer) {
	t.Helper()
	for len(c.Partitions()) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("consumer still owns %v: %v", c.Partitions(), ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRebalanceKeepsAcks (issue 14, defect 2, no fault at all): a consumer nacks A
// (its retry is an hour away) and acks B behind it; a second member joins and the
// partition moves to it. B's Ack returned nil, so B is never delivered again; A is
// delivered at once (a Nack's backoff does not survive a move) as attempt 2.
func runRebalanceKeepsAcks(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	const parts = 2
	q := createQueue(t, ctx, s, parts, []string{"g"}, queue.WithLease(longLease), queue.WithVisibility(time.Hour),
		queue.WithRetryBackoff(time.Hour, time.Hour))
	k := keysIn(parts, 1, 3) // A, B and a later C, all in partition 1, each its own key
	enqueueKeyed(t, ctx, q, k[0], k[1])
	c1, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 1")
	defer c1.Close(context.Background())
	held := receiveAll(t, ctx, c1, 2)
	a, b := byPayload(held, k[0]), byPayload(held, k[1])
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("first owner received %s, want %s and %s", describe(held), k[0], k[1])
	}
	must(t, c1.Nack(ctx, a[0]), "Nack A")
	must(t, c1.Ack(ctx, b[0]), "Ack B (behind the nacked A)")
	// A second member takes member slot 1, so partition 1 moves to it.
	c2, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 2")
	defer c2.Close(context.Background())
	waitOwns(t, ctx, c2, 1)
	enqueueKeyed(t, ctx, q, k[2])
	got := receiveUntil(t, ctx, c2, k[2])
	if bs := byPayload(got, k[1]); len(bs) > 0 {
		t.Fatalf("the partition's next owner received %s: B was acked (Ack returned nil) and must never be delivered again", describe(bs))
	}
	as := byPayload(got, k[0])
	if len(as) != 1 || as[0].Attempt != 2 {
		t.Fatalf("the next owner received A as %s, want once, attempt 2 (the Nack counts)", describe(as))
	}
	must(t, c2.Ack(ctx, got...), "Ack by the next owner")
}

// runDeathKeepsAcksAndAttempts: a consumer holding A (in flight), B (acked behind A)
// and E (nacked behind A) dies: its store calls fail, its lease lapses, it never
// releases. Its successor delivers A (its death while A was in flight counts an
// attempt) and E (with its Nack counted), never B.
func runDeathKeepsAcks(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	opts := []queue.Option{queue.WithLease(longLease), queue.WithVisibility(time.Hour), queue.WithRetryBackoff(time.Hour, time.Hour)}
	q := createQueue(t, ctx, s, 1, []string{"g"}, opts...)
	k := keysIn(1, 0, 4) // A, B, E and a later C
	enqueueKeyed(t, ctx, q, k[0], k[1], k[2])
	dying := &stalling{Store: s}
	qd, err := queue.Open(ctx, dying, q.Name(), frontOpts(opts...)...)
	must(t, err, "queue.Open")
	c1, err := qd.Consumer(ctx, "g")
	must(t, err, "Consumer 1")
	defer c1.Close(context.Background())
	held := receiveAll(t, ctx, c1, 3)
	must(t, c1.Ack(ctx, byPayload(held, k[1])...), "Ack B (behind A)")
	must(t, c1.Nack(ctx, byPayload(held, k[2])[0]), "Nack E (behind A)")
	dying.stalled.Store(true) // it dies holding A
	waitLost(t, ctx, c1)
	c2, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 2")
	defer c2.Close(context.Background())
	enqueueKeyed(t, ctx, q, k[3])
	got := receiveUntil(t, ctx, c2, k[3])
	if bs := byPayload(got, k[1]); len(bs) > 0 {
		t.Fatalf("the dead owner's successor received %s: B was acked (Ack returned nil) and must never be delivered again", describe(bs))
	}
	if as := byPayload(got, k[0]); len(as) != 1 || as[0].Attempt != 2 {
		t.Fatalf("the successor received A as %s, want once, attempt 2 (the death while it was in flight counts)", describe(as))
	}
	if es := byPayload(got, k[2]); len(es) != 1 || es[0].Attempt != 2 {
		t.Fatalf("the successor received E as %s, want once, attempt 2 (the dead owner's Nack counts)", describe(es))
	}
	must(t, c2.Ack(ctx, got...), "Ack by the successor")
}

// runVisibilityAttemptsMove: deliveries that timed out count, across an owner change.
// A is nacked (its retry an hour away) so that the offset stays below E; E's
// visibility runs out and it is delivered again (the timed-out attempt recorded
// first), then the owner dies. The next owner delivers E as the attempt after the
// recorded ones (the death itself counts an attempt of the entry at the offset only,
// A here, not of E above it).
func runVisibilityAttemptsMove(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	opts := []queue.Option{queue.WithLease(longLease), queue.WithVisibility(300 * time.Millisecond),
		queue.WithRetryBackoff(time.Hour, time.Hour), queue.WithMaxAttempts(100)}
	q := createQueue(t, ctx, s, 1, []string{"g"}, opts...)
	k := keysIn(1, 0, 3) // A, E, and a later C
	enqueueKeyed(t, ctx, q, k[0], k[1])
	dying := &stalling{Store: s}
	qd, err := queue.Open(ctx, dying, q.Name(), frontOpts(opts...)...)
	must(t, err, "queue.Open")
	c1, err := qd.Consumer(ctx, "g")
	must(t, err, "Consumer 1")
	defer c1.Close(context.Background())
	nacked, lastE := false, 0
	for !nacked || lastE < 3 {
		msgs, err := c1.Receive(ctx, 10)
		must(t, err, "Receive")
		for _, m := range msgs {
			switch string(m.Payload) {
			case k[0]:
				if !nacked {
					must(t, c1.Nack(ctx, m), "Nack A")
					nacked = true
				}
			case k[1]:
				if m.Attempt != lastE+1 {
					t.Fatalf("E delivered as attempt %d after attempt %d", m.Attempt, lastE)
				}
				lastE = m.Attempt
			}
		}
	}
	dying.stalled.Store(true) // it dies with E in flight
	waitLost(t, ctx, c1)
	c2, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 2")
	defer c2.Close(context.Background())
	enqueueKeyed(t, ctx, q, k[2])
	got := receiveUntil(t, ctx, c2, k[2])
	if es := byPayload(got, k[1]); len(es) == 0 || es[0].Attempt != lastE {
		t.Fatalf("the next owner received E as %s, want attempt %d first: the %d timed-out deliveries count", describe(es), lastE, lastE-1)
	}
	must(t, c2.Ack(ctx, byPayload(got, k[2])...), "Ack C")
}

// deadLetters reads group's dead-letter partition from the store: its events' ids.
func deadLetters(t *testing.T, ctx context.Context, s driver.QueueStore, q *queue.Queue, group string) []driver.QueueEntry {
	t.Helper()
	spec := q.Spec()
	es, _ := readAll(t, ctx, s, q.Name(), spec.Partitions+spec.GroupIndex(group), 0)
	return es
}

// runDeadLetterAcrossOwners (issue 14, defect 3): with MaxAttempts 2, E is nacked by
// one owner and by the next: it ends in the dead-letter partition once, is never
// delivered again, and its last delivery can no longer be acked.
func runDeadLetterAcrossOwners(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	q := createQueue(t, ctx, s, 1, []string{"g"}, queue.WithLease(longLease), queue.WithVisibility(time.Hour),
		queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), queue.WithMaxAttempts(2))
	k := keysIn(1, 0, 2) // A (held in flight, so the offset stays below E) and E
	enqueueKeyed(t, ctx, q, k[0], k[1])
	c1, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 1")
	defer c1.Close(context.Background())
	held := receiveAll(t, ctx, c1, 2)
	must(t, c1.Nack(ctx, byPayload(held, k[1])[0]), "Nack E, attempt 1")
	must(t, c1.Close(ctx), "Close 1")
	c2, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 2")
	defer c2.Close(context.Background())
	got := receiveAll(t, ctx, c2, 2)
	es := byPayload(got, k[1])
	if len(es) != 1 || es[0].Attempt != 2 {
		t.Fatalf("the next owner received %s, want E as attempt 2 (the first owner's Nack counts)", describe(got))
	}
	must(t, c2.Nack(ctx, es[0]), "Nack E, attempt 2: the last")
	if err := c2.Ack(ctx, es[0]); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack of a dead-lettered delivery = %v, want an error matching ErrLockLost (never both dead-lettered and acked)", err)
	}
	must(t, c2.Ack(ctx, byPayload(got, k[0])...), "Ack A")
	// E's key again: delivered only once E is settled, so E would come first.
	_, err = q.Enqueue(ctx, queue.Event{Key: k[1], Payload: []byte("after")})
	must(t, err, "Enqueue")
	after := receiveUntil(t, ctx, c2, "after")
	if len(after) != 1 {
		t.Fatalf("after E was dead-lettered the consumer received %s, want only \"after\"", describe(after))
	}
	must(t, c2.Ack(ctx, after...), "Ack after")
	dl := deadLetters(t, ctx, s, q, "g")
	if len(dl) != 1 || string(dl[0].Payload) != k[1] {
		t.Fatalf("dead-letter partition holds %d events (%+v), want E once", len(dl), dl)
	}
}

// crashAfterDeadLetter fails every call through it once a dead-letter append has
// landed (the append's reply is lost too): the process died between dead-lettering
// an event and recording it.
type crashAfterDeadLetter struct {
	*stalling
	deadFrom int
}

func (s *crashAfterDeadLetter) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	res, err := s.Store.AppendQueue(ctx, name, events)
	if err == nil && events[0].Partition >= s.deadFrom {
		s.stalled.Store(true)
		return nil, driver.Errorf(dcsync.Connection, "drivertest", "crashed after the dead-letter append")
	}
	return res, err
}

// runDeadLetterCompleted: an owner dies between the dead-letter append and the write
// that records it; its successor completes the dead-lettering (the append, with the
// same reserved id, lands once) and never delivers the event.
func runDeadLetterCompleted(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	opts := []queue.Option{queue.WithLease(longLease), queue.WithVisibility(time.Hour),
		queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), queue.WithMaxAttempts(2)}
	q := createQueue(t, ctx, s, 1, []string{"g"}, opts...)
	k := keysIn(1, 0, 1)
	enqueueKeyed(t, ctx, q, k[0])
	crashing := &crashAfterDeadLetter{stalling: &stalling{Store: s}, deadFrom: 1}
	qc, err := queue.Open(ctx, crashing, q.Name(), frontOpts(opts...)...)
	must(t, err, "queue.Open")
	c1, err := qc.Consumer(ctx, "g")
	must(t, err, "Consumer 1")
	defer c1.Close(context.Background())
	for attempt := 1; attempt <= 2; attempt++ {
		msgs := receiveAll(t, ctx, c1, 1)
		if msgs[0].Attempt != attempt {
			t.Fatalf("delivery %s, want attempt %d", describe(msgs), attempt)
		}
		err := c1.Nack(ctx, msgs[0])
		if attempt == 1 {
			must(t, err, "Nack 1")
		} else if err == nil {
			t.Fatal("the Nack that crashed after the dead-letter append returned nil")
		}
	}
	if !crashing.stalled.Load() {
		t.Fatal("the event was never appended to the dead-letter partition")
	}
	waitLost(t, ctx, c1)
	c2, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer 2")
	defer c2.Close(context.Background())
	_, err = q.Enqueue(ctx, queue.Event{Key: k[0], Payload: []byte("after")})
	must(t, err, "Enqueue")
	after := receiveUntil(t, ctx, c2, "after")
	if len(after) != 1 {
		t.Fatalf("the successor received %s, want only \"after\": the dead-lettered event is never delivered", describe(after))
	}
	must(t, c2.Ack(ctx, after...), "Ack")
	if dl := deadLetters(t, ctx, s, q, "g"); len(dl) != 1 {
		t.Fatalf("dead-letter partition holds %d events (%+v), want 1: the successor's append must land once", len(dl), dl)
	}
}

// fencing refuses offset writes (LockLost, as when another owner's token is stored)
// while fenced, and counts dead-letter appends.
type fencing struct {
	driver.Store
	fenced   atomic.Bool
	deadFrom int
	appends  atomic.Int64
}

func (s *fencing) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	if s.fenced.Load() {
		return driver.Errorf(dcsync.LockLost, "drivertest", "fenced")
	}
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

func (s *fencing) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	if events[0].Partition >= s.deadFrom {
		s.appends.Add(1)
	}
	return s.Store.AppendQueue(ctx, name, events)
}

// Close leaves the shared store open: the test closes it.
func (s *fencing) Close() error { return nil }

// runFencedDeadLetter: an owner whose fenced write of the attempt limit is refused (a
// zombie that does not know it yet) appends nothing to the dead-letter partition.
// The partition's next owner (here the same consumer with a new token) finds the
// event's death counted, dead-letters it once and never delivers it.
func runFencedDeadLetter(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	opts := []queue.Option{queue.WithLease(longLease), queue.WithVisibility(time.Hour), queue.WithMaxAttempts(1)}
	q := createQueue(t, ctx, s, 1, []string{"g"}, opts...)
	k := keysIn(1, 0, 1)
	enqueueKeyed(t, ctx, q, k[0])
	fs := &fencing{Store: s, deadFrom: 1}
	qf, err := queue.Open(ctx, fs, q.Name(), frontOpts(opts...)...)
	must(t, err, "queue.Open")
	c, err := qf.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	msgs := receiveAll(t, ctx, c, 1)
	fs.fenced.Store(true)
	if err := c.Nack(ctx, msgs[0]); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Nack whose fenced write was refused = %v, want an error matching ErrLockLost", err)
	}
	if n := fs.appends.Load(); n != 0 {
		t.Fatalf("%d dead-letter appends by an owner whose fenced write was refused, want 0", n)
	}
	fs.fenced.Store(false)
	_, err = q.Enqueue(ctx, queue.Event{Key: k[0], Payload: []byte("after")})
	must(t, err, "Enqueue")
	after := receiveUntil(t, ctx, c, "after")
	if len(after) != 1 {
		t.Fatalf("received %s, want only \"after\": the event died holding its only attempt", describe(after))
	}
	must(t, c.Ack(ctx, after...), "Ack")
	if dl := deadLetters(t, ctx, s, q, "g"); len(dl) != 1 {
		t.Fatalf("dead-letter partition holds %d events, want 1", len(dl))
	}
}

// runAckAfterDeadline: an Ack of a delivery whose visibility deadline passed is
// refused (the event is delivered again), and the next delivery's Ack applies.
func runAckAfterDeadline(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	q := createQueue(t, ctx, s, 1, []string{"g"}, queue.WithLease(longLease), queue.WithVisibility(200*time.Millisecond))
	_, err := q.Enqueue(ctx, queue.Event{Payload: []byte("slow")})
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	first := receiveAll(t, ctx, c, 1)
	time.Sleep(time.Until(first[0].Deadline) + 10*time.Millisecond)
	if err := c.Ack(ctx, first...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack after the visibility deadline = %v, want an error matching ErrLockLost", err)
	}
	if err := c.Extend(ctx, first[0], time.Hour); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Extend after the visibility deadline = %v, want an error matching ErrLockLost", err)
	}
	for {
		again := receiveAll(t, ctx, c, 1)
		if again[0].Attempt < 2 {
			t.Fatalf("redelivery %s, want attempt 2 or more", describe(again))
		}
		err := c.Ack(ctx, again...)
		if err == nil {
			break
		}
		if !errors.Is(err, dcsync.ErrLockLost) {
			t.Fatal(err)
		}
		// A loaded machine let this delivery's deadline pass too: the next one.
	}
	if lag, err := q.Lag(ctx, "g"); err != nil || lag[0].Next != 1 {
		t.Fatalf("lag %+v (%v), want the event acked", lag, err)
	}
}

// runMarksWindow: a consumer never delivers an event more than driver.MaxQueueMarks
// above the committed offset, whatever its Prefetch, so acks above an un-acked event
// always fit in the offset's Marks.
func runMarksWindow(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	q := createQueue(t, ctx, s, 1, []string{"g"}, queue.WithLease(longLease), queue.WithVisibility(time.Hour))
	const n = driver.MaxQueueMarks + 100
	evs := make([]queue.Event, n)
	for i := range evs {
		evs[i] = queue.Event{Payload: []byte(fmt.Sprint(i))}
	}
	_, err := q.Enqueue(ctx, evs...)
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g", queue.Prefetch(2*n))
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	const window = driver.MaxQueueMarks + 1
	held := receiveAll(t, ctx, c, window)
	if len(held) > window {
		t.Fatalf("received %d events with none acked, want at most %d (the offset and MaxQueueMarks above it)", len(held), window)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	more, err := c.Receive(rctx, n)
	cancel()
	if len(more) > 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with %d events held and none acked, Receive returned %d more (%v), want none until the first is acked", window, len(more), err)
	}
	must(t, c.Ack(ctx, held[1:]...), "Ack of every event but the first")
	offs, err := s.ReadQueueOffsets(ctx, q.Name(), "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	marks, err := offs[0].Marks.Decode(offs[0].Next)
	must(t, err, "Marks.Decode")
	if offs[0].Next != 0 || len(marks) != driver.MaxQueueMarks {
		t.Fatalf("offset next %d with %d marks, want next 0 and %d acked marks", offs[0].Next, len(marks), driver.MaxQueueMarks)
	}
	must(t, c.Ack(ctx, held[0]), "Ack of the first")
	rest := receiveAll(t, ctx, c, n-window)
	must(t, c.Ack(ctx, rest...), "Ack of the rest")
	if lag, err := q.Lag(ctx, "g"); err != nil || lag[0].Lag != 0 {
		t.Fatalf("lag %+v (%v), want 0", lag, err)
	}
}
