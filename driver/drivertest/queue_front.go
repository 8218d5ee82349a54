package drivertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// lease is the partition and member lease of the front-end cases: long enough that a
// loaded machine (load average 40 on 2 cores) renews it in time, since the cases check
// what happens while leases are kept. Owner changes come from members joining or
// closing, or from a consumer meant to lose its leases (lapsing).
const lease = 10 * time.Second

// lapsing is the lease of a consumer whose store calls the case makes fail (or whose
// process it kills or stops), so that a successor takes over soon. Nothing is asserted
// on it being renewed: it may lapse early on a loaded machine, and the cases' checks
// hold either way.
const lapsing = 2 * time.Second

// frontOpts are the queue options of the front-end cases, then extra.
func frontOpts(extra ...queue.Option) []queue.Option {
	return append([]queue.Option{queue.WithLease(lease), queue.WithPollInterval(50 * time.Millisecond),
		queue.WithIdentity(client, "dc1"), queue.WithLogger(quiet)}, extra...)
}

// createQueue creates a queue with a unique name through package queue.
func createQueue(t *testing.T, ctx context.Context, s driver.Store, parts int, groups []string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := queue.Create(ctx, s, driver.QueueSpec{Name: unique(t), Partitions: parts, Groups: groups}, frontOpts(opts...)...)
	must(t, err, "queue.Create")
	return q
}

// runFront runs the cases of package queue.
func runFront(t *testing.T, h Harness) {
	t.Run("ExactlyOncePerGroup", func(t *testing.T) { runExactlyOnce(t, h) })
	t.Run("DuplicateEnqueue", func(t *testing.T) { runDuplicateEnqueue(t, h) })
	t.Run("DeadLetters", func(t *testing.T) { runDeadLetters(t, h) })
	t.Run("Retention", func(t *testing.T) { runRetention(t, h) })
	t.Run("Lag", func(t *testing.T) { runLag(t, h) })
	t.Run("AddGroupKeepsLaterEvents", func(t *testing.T) { runAddGroup(t, h) })
	t.Run("Visibility", func(t *testing.T) { runVisibility(t, h) })
	t.Run("Close", func(t *testing.T) { runClose(t, h) })
	t.Run("TakeoverAfterClose", func(t *testing.T) { runTakeoverAfterClose(t, h) })
	t.Run("TakeoverAfterDeath", func(t *testing.T) { runTakeoverAfterDeath(t, h) })
	t.Run("ZombieAck", func(t *testing.T) { runZombieAck(t, h) })
	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		runFrontProcesses(t, h)
	})
}

// noQueueGoroutines checks, when the test ends, that no goroutine of package queue is
// left that the test started (the consumers were closed, the watcher stopped). Only the
// queue's own goroutines are checked: a store may keep its connections' goroutines.
func noQueueGoroutines(t *testing.T) {
	before := queueGoroutines(nil)
	t.Cleanup(func() {
		// Generous: on a loaded machine goroutines that were told to stop may take a
		// while to be scheduled and return.
		var left map[string]string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if left = queueGoroutines(before); len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				break
			}
		}
		var all []string
		for _, g := range left {
			all = append(all, g)
		}
		t.Errorf("goroutines of package queue left after every consumer closed:\n%s", strings.Join(all, "\n\n"))
	})
}

// queueGoroutines returns the stacks of the goroutines running package queue's code, by
// goroutine id, leaving out those in ignore.
func queueGoroutines(ignore map[string]string) map[string]string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/dcsync/dcsync/queue.") {
			continue
		}
		id, _, _ := strings.Cut(g, " [")
		if _, old := ignore[id]; !old {
			out[id] = g
		}
	}
	return out
}

// tally counts acknowledged events per group and checks per-key order, judged by
// what the library guarantees rather than by when the test saw things happen:
//
//   - under one owner of a partition (one fencing token), an event is first delivered
//     only after every earlier event of its key it delivered was acked (a later event
//     may share the batch, behind it); checked at each Receive;
//   - the acks that succeeded, ordered by fencing token and, within one token, in the
//     order its owner made them, run in event order for each key; checked by check.
//
// A partition's owner whose lease lapsed (a loaded machine) may have delivered events
// that its successor delivers again from the first un-acked one: that is a redelivery
// of events whose acks were refused, not a reordering, so receipts are never compared
// across owners, nor by clock.
type tally struct {
	mu    sync.Mutex
	acked map[string]map[string]int     // group -> payload -> acks
	acks  map[string]map[string][]acked // group -> key -> its acks that succeeded, in call order
	owner map[string]map[ownerKey]*keys // group -> partition owner -> what it delivered
	errs  []string
}

// acked is an ack that succeeded.
type acked struct {
	token uint64
	index int
	desc  string
}

// ownerKey is one owner of a partition: the fencing token of one tenure.
type ownerKey struct {
	partition int
	token     uint64
}

// keys is what one owner delivered: per key, the highest event index and every index.
type keys struct {
	top  map[string]int
	seen map[string]map[int]bool
}

func newTally() *tally {
	return &tally{acked: map[string]map[string]int{}, acks: map[string]map[string][]acked{}, owner: map[string]map[ownerKey]*keys{}}
}

// event makes producer w's event i: key "w<w>-k<i mod 5>", id and payload "w<w>/<i>".
func event(prefix string, w, i int) queue.Event {
	p := fmt.Sprintf("%sw%d/%d", prefix, w, i)
	return queue.Event{Key: fmt.Sprintf("%sw%d-k%d", prefix, w, i%5), ID: p, Payload: []byte(p)}
}

func index(payload string) int {
	var i int
	if j := strings.LastIndexByte(payload, '/'); j >= 0 {
		fmt.Sscan(payload[j+1:], &i)
	}
	return i
}

func (tl *tally) init(group string) {
	if tl.acked[group] == nil {
		tl.acked[group], tl.acks[group], tl.owner[group] = map[string]int{}, map[string][]acked{}, map[ownerKey]*keys{}
	}
}

// note describes m for a failure message.
func note(m *queue.Message) string {
	return fmt.Sprintf("%q (partition %d seq %d token %d attempt %d)", m.Payload, m.Partition, m.Seq, m.Token, m.Attempt)
}

// received checks msgs, just received by a consumer of group, in the order received:
// an event that its partition's owner (token) delivers for the first time must come
// after every event of its key that the same owner delivered before (an earlier event
// not acked blocks its key; one acked before is not delivered). The same event again
// (a redelivery after a visibility timeout or a Nack) is not a reordering.
func (tl *tally) received(group string, msgs []*queue.Message) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.init(group)
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		o := ownerKey{m.Partition, m.Token}
		ks := tl.owner[group][o]
		if ks == nil {
			ks = &keys{top: map[string]int{}, seen: map[string]map[int]bool{}}
			tl.owner[group][o] = ks
		}
		i := index(string(m.Payload))
		if ks.seen[m.Key] == nil {
			ks.seen[m.Key] = map[int]bool{}
		}
		if top, ok := ks.top[m.Key]; ok && i < top && !ks.seen[m.Key][i] {
			tl.errs = append(tl.errs, fmt.Sprintf("group %s key %s: event %d first delivered by token %d after event %d of the same key: %s",
				group, m.Key, i, m.Token, top, note(m)))
		}
		ks.seen[m.Key][i] = true
		if top, ok := ks.top[m.Key]; !ok || i > top {
			ks.top[m.Key] = i
		}
	}
}

// record notes the acks of msgs (one partition, acked in one call, in this order) by
// a consumer of group.
func (tl *tally) record(group string, msgs []*queue.Message) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.init(group)
	for _, m := range msgs {
		tl.acked[group][string(m.Payload)]++
		if m.Key != "" {
			tl.acks[group][m.Key] = append(tl.acks[group][m.Key], acked{m.Token, index(string(m.Payload)), note(m)})
		}
	}
}

// ackOrder returns the violations of per-key order among group's acks that
// succeeded: ordered by fencing token (a key lives in one partition, whose tokens
// grow with each owner, and a store refuses an older token's ack once a newer owner
// claimed), then in the order the owner of a token acked (one goroutine per
// consumer), a key's acks must run in event order.
func (tl *tally) ackOrder(group string) []string {
	var errs []string
	for key, as := range tl.acks[group] {
		as = slices.Clone(as)
		slices.SortStableFunc(as, func(a, b acked) int { return cmp.Compare(a.token, b.token) })
		for i := 1; i < len(as); i++ {
			if as[i].index <= as[i-1].index {
				errs = append(errs, fmt.Sprintf("group %s key %s: event %d acked after event %d, in fencing-token order: %s then %s",
					group, key, as[i].index, as[i-1].index, as[i-1].desc, as[i].desc))
			}
		}
	}
	sort.Strings(errs)
	return errs
}

func (tl *tally) count(group string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.acked[group])
}

// check verifies that every payload of want was acked exactly once by group.
func (tl *tally) check(t *testing.T, group string, want []string) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.errs {
		t.Error(e)
	}
	tl.errs = nil
	for _, e := range tl.ackOrder(group) {
		t.Error(e)
	}
	got := tl.acked[group]
	for _, p := range want {
		if got[p] != 1 {
			t.Errorf("group %s: event %s acked %d times, want exactly 1", group, p, got[p])
		}
	}
	if len(got) != len(want) {
		t.Errorf("group %s: %d distinct events acked, want %d", group, len(got), len(want))
	}
}

// consume receives and acks until done reports true or ctx ends, checking per-key
// order and recording the acks that succeeded; acks refused with LockLost are
// redelivered to the next owner and not recorded. Any other error is returned.
func consume(ctx context.Context, c *queue.Consumer, group string, tl *tally, done func() bool) error {
	return consumeWith(ctx, c, nil, group, tl, done)
}

// ackEach acks msgs one partition at a time (so that a lost partition does not hide
// which acks applied) and records the acked ones.
func ackEach(ctx context.Context, c *queue.Consumer, group string, tl *tally, msgs []*queue.Message) error {
	for _, ms := range queue.ByPartition(msgs) {
		err := c.Ack(ctx, ms...)
		switch {
		case err == nil:
			tl.record(group, ms)
		case errors.Is(err, dcsync.ErrLockLost):
		default:
			return fmt.Errorf("consumer Ack: %w", err)
		}
	}
	return nil
}

// ackThenConsume acks msgs one partition at a time, then consumes with c until group
// has acked every event of want. On a very loaded machine c's own lease can lapse
// between its Receive and its Ack: those acks are refused with LockLost and
// the events come again once c takes the partition back. Every event must still be
// acked exactly once (tally.check).
func ackThenConsume(t *testing.T, ctx context.Context, c *queue.Consumer, group string, tl *tally, msgs []*queue.Message, want []string) {
	t.Helper()
	tl.received(group, msgs)
	must(t, ackEach(ctx, c, group, tl, msgs), "Ack by "+group)
	must(t, consume(ctx, c, group, tl, func() bool { return tl.count(group) >= len(want) }), "consume what a lapsed lease sent back")
}

// produce enqueues producers x n events (event(prefix, w, i)) from concurrent
// goroutines in batches of batch, and returns their payloads.
func produce(t *testing.T, ctx context.Context, q *queue.Queue, prefix string, producers, n, batch int) []string {
	t.Helper()
	all, err := produceErr(ctx, q, prefix, producers, n, batch)
	must(t, err, "produce")
	return all
}

func produceErr(ctx context.Context, q *queue.Queue, prefix string, producers, n, batch int) ([]string, error) {
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for w := range producers {
		wg.Go(func() {
			for i := 0; i < n; i += batch {
				var evs []queue.Event
				for j := i; j < min(i+batch, n); j++ {
					evs = append(evs, event(prefix, w, j))
				}
				res, err := q.Enqueue(ctx, evs...)
				if err != nil {
					errs[w] = fmt.Errorf("producer %d: %w", w, err)
					return
				}
				for k, r := range res {
					if r.Duplicate {
						errs[w] = fmt.Errorf("fresh event %s reported a duplicate", evs[k].ID)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var all []string
	for w := range producers {
		for i := range n {
			all = append(all, string(event(prefix, w, i).Payload))
		}
	}
	return all, errors.Join(errs...)
}

func runExactlyOnce(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	q := createQueue(t, ctx, s, 6, []string{"a", "b"}, queue.WithVisibility(time.Minute))
	const producers, each = 4, 150
	tl := newTally()
	total := producers * each
	var wg sync.WaitGroup
	var failed atomic.Value
	start := func(group string) *queue.Consumer {
		c, err := q.Consumer(ctx, group)
		must(t, err, "Consumer")
		wg.Go(func() {
			defer c.Close(context.Background())
			if err := consume(ctx, c, group, tl, func() bool { return tl.count(group) >= total }); err != nil {
				failed.Store(err)
			}
		})
		return c
	}
	// One consumer per group first; more join while events flow (a rebalance): half
	// the events go before they own partitions, half after.
	start("a")
	start("b")
	first, err := produceErr(ctx, q, "1-", producers, each/2, 10)
	must(t, err, "produce")
	for tl.count("a") < total/4 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	joined := []*queue.Consumer{start("a"), start("a"), start("b")}
	for _, c := range joined {
		for len(c.Partitions()) == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	second, err := produceErr(ctx, q, "2-", producers, each/2, 10)
	must(t, err, "produce")
	want := append(first, second...)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	tl.check(t, "a", want)
	tl.check(t, "b", want)
	for _, g := range []string{"a", "b"} {
		lag, err := q.Lag(ctx, g)
		must(t, err, "Lag")
		for _, l := range lag {
			if l.Lag != 0 || l.Next != l.Head {
				t.Errorf("group %s after every ack: %+v, want lag 0", g, l)
			}
		}
	}
}

func runDuplicateEnqueue(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	q := createQueue(t, ctx, s, 3, []string{"g"})
	first, err := q.Enqueue(ctx, queue.Event{Key: "k", ID: "once", Payload: []byte("once")})
	must(t, err, "Enqueue")
	again, err := q.Enqueue(ctx, queue.Event{Key: "k", ID: "once", Payload: []byte("twice")}, queue.Event{Key: "other", ID: "once", Payload: []byte("thrice")})
	must(t, err, "Enqueue again")
	for i, r := range again {
		if !r.Duplicate || r.Partition != first[0].Partition || r.Seq != first[0].Seq {
			t.Fatalf("re-enqueue %d of id \"once\" = %+v, want a duplicate of %+v", i, r, first[0])
		}
	}
	_, err = q.Enqueue(ctx, queue.Event{Key: "k", ID: "end", Payload: []byte("end")})
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	var got []string
	for !slices.Contains(got, "end") {
		msgs, err := c.Receive(ctx, 10)
		must(t, err, "Receive")
		for _, m := range msgs {
			got = append(got, string(m.Payload))
		}
		must(t, c.Ack(ctx, msgs...), "Ack")
	}
	// Key "k" holds both events in order: a second copy of "once" would come before "end".
	if strings.Join(got, ",") != "once,end" {
		t.Fatalf("received %v, want [once end]: the duplicate must not be delivered", got)
	}
}

func runDeadLetters(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const maxAttempts = 3
	q := createQueue(t, ctx, s, 2, []string{"other", "g"}, queue.WithMaxAttempts(maxAttempts),
		queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), queue.WithVisibility(time.Hour))
	_, err := q.Enqueue(ctx, queue.Event{Key: "x", ID: "poison", Payload: []byte("poison")}, queue.Event{Key: "x", Payload: []byte("after")})
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		// "after" may come in the same batch, behind poison (same key, in order); a Nack
		// of poison sends it back undelivered.
		msgs, err := c.Receive(ctx, 10)
		must(t, err, "Receive")
		if len(msgs) == 0 || len(msgs) > 2 || string(msgs[0].Payload) != "poison" || msgs[0].Attempt != attempt ||
			(len(msgs) == 2 && (string(msgs[1].Payload) != "after" || msgs[1].Attempt != 1)) {
			t.Fatalf("delivery %d: %s; want poison attempt %d, maybe followed by after attempt 1", attempt, describe(msgs), attempt)
		}
		must(t, c.Nack(ctx, msgs[0]), "Nack")
	}
	// The last Nack dead-letters poison; "after", if it came with it, goes back as with
	// any Nack (the visibility is an hour: it must not wait for that).
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	msgs, err := c.Receive(rctx, 10)
	cancel()
	must(t, err, "Receive of \"after\" once poison is dead-lettered (within a minute, not the visibility's hour)")
	if len(msgs) != 1 || string(msgs[0].Payload) != "after" || msgs[0].Attempt != 1 {
		t.Fatalf("after %d Nacks received %s, want only \"after\", attempt 1: poison goes to the dead letters", maxAttempts, describe(msgs))
	}
	must(t, c.Ack(ctx, msgs...), "Ack")
	_, err = q.Enqueue(ctx, queue.Event{Key: "x", Payload: []byte("end")})
	must(t, err, "Enqueue")
	msgs, err = c.Receive(ctx, 10)
	must(t, err, "Receive")
	if len(msgs) != 1 || string(msgs[0].Payload) != "end" {
		t.Fatalf("received %s, want only \"end\": the dead-lettered event is not redelivered", describe(msgs))
	}
	must(t, c.Ack(ctx, msgs...), "Ack")

	d, err := q.Consumer(ctx, "g", queue.DeadLetters())
	must(t, err, "dead-letter Consumer")
	defer d.Close(context.Background())
	dm, err := d.Receive(ctx, 10)
	must(t, err, "dead-letter Receive")
	if len(dm) != 1 || string(dm[0].Payload) != "poison" || dm[0].Key != "x" || dm[0].DeadFrom == "" {
		t.Fatalf("dead letters %+v, want poison with key x and its origin", dm)
	}
	if want := fmt.Sprintf("%d/0", queue.Partition("x", 2)); dm[0].DeadFrom != want {
		t.Errorf("DeadFrom %q, want %q", dm[0].DeadFrom, want)
	}
	// The dead-letter partition is the group's: g is group 1 of 2 partitions.
	if dm[0].Partition != 3 {
		t.Errorf("dead letter in partition %d, want 3 (partitions + group index)", dm[0].Partition)
	}
	// Nacking a dead letter redelivers it; it is never dead-lettered again.
	for range maxAttempts + 1 {
		must(t, d.Nack(ctx, dm[0]), "Nack of a dead letter")
		dm, err = d.Receive(ctx, 10)
		must(t, err, "dead-letter Receive")
		if len(dm) != 1 || string(dm[0].Payload) != "poison" {
			t.Fatalf("dead letter after a Nack: %+v", dm)
		}
	}
	must(t, d.Ack(ctx, dm...), "dead-letter Ack")
	lag, err := q.Lag(ctx, "g")
	must(t, err, "Lag")
	if dl := lag[len(lag)-1]; dl.Partition != 3 || dl.Head != 1 || dl.Lag != 0 {
		t.Fatalf("dead-letter lag %+v, want partition 3, head 1, lag 0", dl)
	}
	// The other group never dead-lettered anything.
	lag, err = q.Lag(ctx, "other")
	must(t, err, "Lag")
	if dl := lag[len(lag)-1]; dl.Partition != 2 || dl.Head != 0 {
		t.Fatalf("group other's dead-letter partition %+v, want partition 2, empty", dl)
	}
}

// receiveAll receives from c until it holds want messages (not acking them).
func receiveAll(t *testing.T, ctx context.Context, c *queue.Consumer, want int) []*queue.Message {
	t.Helper()
	var got []*queue.Message
	for len(got) < want {
		msgs, err := c.Receive(ctx, want-len(got))
		must(t, err, fmt.Sprintf("Receive (holding %d of %d)", len(got), want))
		got = append(got, msgs...)
	}
	return got
}

func runRetention(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const parts, n = 2, 20
	q := createQueue(t, ctx, s, parts, []string{"a", "b"})
	var evs []queue.Event
	for i := range n {
		evs = append(evs, queue.Event{Key: fmt.Sprint("k", i%4), Payload: []byte(fmt.Sprint(i))})
	}
	_, err := q.Enqueue(ctx, evs...)
	must(t, err, "Enqueue")
	ps := []int{0, 1}
	heads, err := s.QueueBounds(ctx, q.Name(), ps)
	must(t, err, "QueueBounds")
	ackAll := func(group string) *queue.Consumer {
		c, err := q.Consumer(ctx, group)
		must(t, err, "Consumer")
		msgs := receiveAll(t, ctx, c, n)
		must(t, c.Ack(ctx, msgs...), "Ack")
		return c
	}
	a := ackAll("a")
	must(t, a.Close(ctx), "Close")
	b, err := s.QueueBounds(ctx, q.Name(), ps)
	must(t, err, "QueueBounds")
	for i, bb := range b {
		if bb.Floor != 0 {
			t.Fatalf("partition %d floor %d after only group a acked: group b's events were trimmed", i, bb.Floor)
		}
	}
	// Group b acks everything; its consumer stays and trims (soon, not at once).
	c := ackAll("b")
	defer c.Close(context.Background())
	for {
		b, err = s.QueueBounds(ctx, q.Name(), ps)
		must(t, err, "QueueBounds")
		if b[0].Floor == heads[0].Head && b[1].Floor == heads[1].Head {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("bounds %+v after both groups acked everything, want floor = head %+v: acked events not trimmed", b, heads)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range ps {
		r, err := s.ReadQueue(ctx, q.Name(), i, 0, 100)
		must(t, err, "ReadQueue")
		if len(r.Entries) != 0 {
			t.Errorf("partition %d: %d entries readable after the trim", i, len(r.Entries))
		}
	}
}

func runLag(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const parts = 3
	q := createQueue(t, ctx, s, parts, []string{"g", "h"})
	var evs []queue.Event
	for i := range 12 {
		evs = append(evs, queue.Event{Key: fmt.Sprint("key", i), Payload: []byte{byte(i)}})
	}
	res, err := q.Enqueue(ctx, evs...)
	must(t, err, "Enqueue")
	per := map[int]uint64{}
	for _, r := range res {
		per[r.Partition]++
	}
	check := func(group string, acked bool) {
		t.Helper()
		lag, err := q.Lag(ctx, group)
		must(t, err, "Lag")
		if len(lag) != parts+1 {
			t.Fatalf("Lag has %d entries, want %d partitions and the dead-letter one", len(lag), parts+1)
		}
		for p, l := range lag[:parts] {
			want := driver.QueueBounds{Head: per[p]}
			if l.Partition != p || l.Head != want.Head {
				t.Fatalf("group %s lag[%d] = %+v, want partition %d head %d", group, p, l, p, want.Head)
			}
			if acked && (l.Next != l.Head || l.Lag != 0) {
				t.Fatalf("group %s lag[%d] = %+v after every ack, want lag 0", group, p, l)
			}
			if !acked && (l.Next != 0 || l.Lag != l.Head) {
				t.Fatalf("group %s lag[%d] = %+v before any ack, want lag = head", group, p, l)
			}
		}
		gi := q.Spec().GroupIndex(group)
		if dl := lag[parts]; dl.Partition != parts+gi || dl.Lag != 0 {
			t.Fatalf("group %s dead-letter lag %+v, want partition %d, lag 0", group, dl, parts+gi)
		}
	}
	check("g", false)
	check("h", false)
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	msgs := receiveAll(t, ctx, c, len(evs))
	must(t, c.Ack(ctx, msgs...), "Ack")
	must(t, c.Close(ctx), "Close")
	check("g", true)
	check("h", false)
	if _, err := q.Lag(ctx, "nope"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("Lag of a missing group = %v, want NotFound", err)
	}
}

// runTakeoverAfterClose: a consumer closed without acking leaves its events to the next.
func runTakeoverAfterClose(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	q := createQueue(t, ctx, s, 3, []string{"g"}, queue.WithVisibility(time.Hour))
	want := produce(t, ctx, q, "", 2, 15, 5)
	a, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer a")
	t.Cleanup(func() { a.Close(context.Background()) })
	held := receiveAll(t, ctx, a, len(want))
	// Ack a few, then leave holding the rest.
	tl := newTally()
	sort.Slice(held, func(i, j int) bool {
		if held[i].Partition != held[j].Partition {
			return held[i].Partition < held[j].Partition
		}
		return held[i].Seq < held[j].Seq
	})
	first := held[:3]
	must(t, ackEach(ctx, a, "g", tl, first), "Ack")
	if tl.count("g") != 3 {
		t.Fatalf("%d acks recorded, want 3", tl.count("g"))
	}
	must(t, a.Close(ctx), "Close a")
	b, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer b")
	defer b.Close(context.Background())
	must(t, consume(ctx, b, "g", tl, func() bool { return tl.count("g") >= len(want) }), "consume")
	tl.check(t, "g", want)
	if err := a.Ack(ctx, held[3:]...); err == nil {
		t.Fatal("Ack on a closed consumer succeeded")
	}
}

// stalling wraps a store: while stalled, every lock and queue call through it fails
// with a Connection error, as if its process were frozen or cut off; the shared store
// behind it goes on for everyone else.
type stalling struct {
	driver.Store
	stalled atomic.Bool
	calls   sync.RWMutex // read-held by each call through the wrapper; see freeze
}

// check returns the error of a stalled store, or nil.
func (s *stalling) check() error {
	if s.stalled.Load() {
		return driver.Errorf(dcsync.Connection, "drivertest", "stalled")
	}
	return nil
}

// enter is check for a call through the wrapper: on nil the call is in flight until
// the caller calls s.done.
func (s *stalling) enter() error {
	s.calls.RLock()
	if err := s.check(); err != nil {
		s.calls.RUnlock()
		return err
	}
	return nil
}

func (s *stalling) done() { s.calls.RUnlock() }

// freeze stalls the store once every call in flight through it has returned, so that
// the process can then be stopped (SIGSTOP) holding nothing of the store's: a SQLite
// process stopped inside a write transaction would hold the file's lock, and every
// other process would wait for it until it is continued.
func (s *stalling) freeze() {
	s.calls.Lock()
	s.stalled.Store(true)
	s.calls.Unlock()
}

func (s *stalling) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := s.enter(); err != nil {
		return driver.LockState{}, err
	}
	defer s.done()
	return s.Store.AcquireLock(ctx, k, owner, ttl)
}

func (s *stalling) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := s.enter(); err != nil {
		return driver.LockState{}, err
	}
	defer s.done()
	return s.Store.RefreshLock(ctx, k, owner, ttl)
}

func (s *stalling) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.done()
	return s.Store.ReleaseLock(ctx, k, owner)
}

func (s *stalling) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	if err := s.enter(); err != nil {
		return driver.LockState{}, err
	}
	defer s.done()
	return s.Store.InspectLock(ctx, k)
}

func (s *stalling) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.done()
	return s.Store.AppendQueue(ctx, name, events)
}

func (s *stalling) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	if err := s.enter(); err != nil {
		return driver.QueueRead{}, err
	}
	defer s.done()
	return s.Store.ReadQueue(ctx, name, p, from, max)
}

func (s *stalling) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.done()
	return s.Store.AbortQueueSeq(ctx, name, p, seq)
}

func (s *stalling) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.done()
	return s.Store.QueueBounds(ctx, name, ps)
}

func (s *stalling) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	if err := s.enter(); err != nil {
		return driver.QueueOffset{}, err
	}
	defer s.done()
	return s.Store.ClaimQueuePartition(ctx, name, group, p, token)
}

func (s *stalling) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.done()
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

func (s *stalling) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.done()
	return s.Store.ReadQueueOffsets(ctx, name, group, ps)
}

func (s *stalling) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.done()
	return s.Store.TrimQueue(ctx, name, p, below)
}

// Close leaves the shared store open: the test closes it.
func (s *stalling) Close() error { return nil }

// runTakeoverAfterDeath: a consumer that stops renewing its leases (its process died)
// holding messages loses its partitions; the other consumer gets every event, the first
// of each partition with the dead delivery counted as an attempt. The dying consumer
// has the suite's long lease, kept until it dies: had it lapsed and been taken back
// before, the dead owner's tenures would each count an attempt.
func runTakeoverAfterDeath(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const parts = 2
	q := createQueue(t, ctx, s, parts, []string{"g"}, queue.WithVisibility(time.Hour))
	want := produce(t, ctx, q, "", 2, 10, 5)
	dying := &stalling{Store: s}
	qd, err := queue.Open(ctx, dying, q.Name(), frontOpts(queue.WithVisibility(time.Hour))...)
	must(t, err, "queue.Open")
	a, err := qd.Consumer(ctx, "g")
	must(t, err, "Consumer a")
	t.Cleanup(func() { a.Close(context.Background()) })
	held := receiveAll(t, ctx, a, len(want))
	dying.stalled.Store(true)
	b, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer b")
	defer b.Close(context.Background())
	tl := newTally()
	firstAttempt := map[int]int{}
	var mu sync.Mutex
	err = consumeWith(ctx, b, func(msgs []*queue.Message) {
		mu.Lock()
		for _, m := range msgs {
			if _, ok := firstAttempt[m.Partition]; !ok && m.Seq == 0 {
				firstAttempt[m.Partition] = m.Attempt
			}
		}
		mu.Unlock()
	}, "g", tl, func() bool { return tl.count("g") >= len(want) })
	must(t, err, "consume")
	tl.check(t, "g", want)
	for p, n := range firstAttempt {
		if n != 2 {
			t.Errorf("partition %d: first event delivered to the survivor as attempt %d, want 2 (the dead consumer's delivery counts)", p, n)
		}
	}
	if err := a.Ack(ctx, held...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Errorf("dead consumer's late Ack = %v, want an error matching ErrLockLost", err)
	}
}

// consumeWith is consume with a look (if not nil) at each batch before it is acked.
func consumeWith(ctx context.Context, c *queue.Consumer, look func([]*queue.Message), group string, tl *tally, done func() bool) error {
	for !done() && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		msgs, err := c.Receive(rctx, 20)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return fmt.Errorf("consumer Receive: %w", err)
		}
		tl.received(group, msgs)
		if look != nil {
			look(msgs)
		}
		if err := ackEach(ctx, c, group, tl, msgs); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// runZombieAck: a consumer paused past its lease (it holds messages, unacked) comes back
// and acks: refused with LockLost, and the offsets stay the new owner's.
func runZombieAck(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const parts = 2
	q := createQueue(t, ctx, s, parts, []string{"g"}, queue.WithVisibility(time.Hour))
	want := produce(t, ctx, q, "", 1, 12, 4)
	paused := &stalling{Store: s}
	qz, err := queue.Open(ctx, paused, q.Name(), frontOpts(queue.WithVisibility(time.Hour), queue.WithLease(lapsing))...)
	must(t, err, "queue.Open")
	z, err := qz.Consumer(ctx, "g")
	must(t, err, "Consumer z")
	defer z.Close(context.Background())
	held := receiveAll(t, ctx, z, len(want))
	paused.stalled.Store(true)
	b, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer b")
	defer b.Close(context.Background())
	// b holds every event before the zombie acks.
	got := receiveAll(t, ctx, b, len(want))
	for _, m := range got {
		for _, o := range held {
			if o.Partition == m.Partition && m.Token <= o.Token {
				t.Fatalf("new owner's token %d of partition %d is not above the zombie's %d", m.Token, m.Partition, o.Token)
			}
		}
	}
	paused.stalled.Store(false) // it wakes up
	if err := z.Ack(ctx, held...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("zombie's Ack = %v, want an error matching ErrLockLost", err)
	}
	lag, err := q.Lag(ctx, "g")
	must(t, err, "Lag")
	for _, l := range lag[:parts] {
		if l.Next != 0 {
			t.Fatalf("partition %d offset %d after the zombie's refused ack, want 0", l.Partition, l.Next)
		}
	}
	// The zombie leaves, so that it cannot take partitions back should b's own lease
	// lapse before b acks.
	must(t, z.Close(ctx), "Close the zombie")
	tl := newTally()
	ackThenConsume(t, ctx, b, "g", tl, got, want)
	tl.check(t, "g", want)
	lag, err = q.Lag(ctx, "g")
	must(t, err, "Lag")
	for _, l := range lag {
		if l.Lag != 0 {
			t.Fatalf("after the new owner's acks: %+v, want lag 0", l)
		}
	}
}

// describe lists messages for a failure message.
func describe(msgs []*queue.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d messages", len(msgs))
	for _, m := range msgs {
		fmt.Fprintf(&b, " [%d/%d key %q id %q %q attempt %d token %d]", m.Partition, m.Seq, m.Key, m.ID, m.Payload, m.Attempt, m.Token)
	}
	return b.String()
}

// runAddGroup: a group added through another handle (another process) receives every
// event enqueued after AddGroup returned, even while the first group's consumer, which
// knew the queue without it, acks those events and trims.
func runAddGroup(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	const parts, n = 2, 10
	q := createQueue(t, ctx, s, parts, []string{"a"})
	tl := newTally()
	a, err := q.Consumer(ctx, "a")
	must(t, err, "Consumer a")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed error
	wg.Go(func() {
		failed = consume(ctx, a, "a", tl, func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		})
	})
	defer func() {
		close(stop)
		wg.Wait()
		a.Close(context.Background())
		must(t, failed, "consume a")
	}()
	other, err := queue.Open(ctx, s, q.Name(), frontOpts()...)
	must(t, err, "queue.Open")
	must(t, other.AddGroup(ctx, "b"), "AddGroup b")
	want := produce(t, ctx, q, "", 1, n, 5)
	for tl.count("a") < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	// Give a's consumer time to trim what it acked (it trims at most once a second).
	ps := []int{0, 1}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		b, err := s.QueueBounds(ctx, q.Name(), ps)
		must(t, err, "QueueBounds")
		for i, bb := range b {
			if bb.Floor > 0 {
				t.Fatalf("partition %d trimmed below %d after group a acked: group b, added before the events were enqueued, never read them", i, bb.Floor)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c, err := other.Consumer(ctx, "b")
	must(t, err, "Consumer b")
	defer c.Close(context.Background())
	msgs := receiveAll(t, ctx, c, n)
	tlb := newTally()
	ackThenConsume(t, ctx, c, "b", tlb, msgs, want)
	tlb.check(t, "b", want)
}

// runVisibility: a message not acked within its visibility is delivered again, with the
// next attempt number; after MaxAttempts deliveries it is dead-lettered, Nack or not.
func runVisibility(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	q := createQueue(t, ctx, s, 1, []string{"g"}, queue.WithVisibility(300*time.Millisecond), queue.WithMaxAttempts(2))
	_, err := q.Enqueue(ctx, queue.Event{Payload: []byte("slow")})
	must(t, err, "Enqueue")
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	defer c.Close(context.Background())
	for attempt := 1; attempt <= 2; attempt++ {
		msgs, err := c.Receive(ctx, 10)
		must(t, err, "Receive")
		if len(msgs) != 1 || string(msgs[0].Payload) != "slow" || msgs[0].Attempt != attempt {
			t.Fatalf("delivery %d: %s, want slow, attempt %d", attempt, describe(msgs), attempt)
		}
		if msgs[0].Deadline.IsZero() {
			t.Fatal("message without a visibility deadline")
		}
	}
	// The third delivery would exceed MaxAttempts: the event goes to the dead letters.
	d, err := q.Consumer(ctx, "g", queue.DeadLetters())
	must(t, err, "dead-letter Consumer")
	defer d.Close(context.Background())
	recv := make(chan []*queue.Message, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		// The main consumer must hand out nothing more: it dead-letters "slow" inside
		// this Receive, which then waits for new events until it is stopped, once the
		// dead letter was received (however long that takes).
		msgs, _ := c.Receive(rctx, 10)
		recv <- msgs
	}()
	dm, err := d.Receive(ctx, 10)
	must(t, err, "dead-letter Receive")
	if len(dm) != 1 || string(dm[0].Payload) != "slow" || dm[0].Attempt != 1 {
		t.Fatalf("dead letters %s, want slow, attempt 1 on the dead-letter consumer", describe(dm))
	}
	must(t, d.Ack(ctx, dm...), "dead-letter Ack")
	// The dead letter is appended before the main consumer's ack of the event moves its
	// offset (a fenced write of the limit, the append, then the ack), so the dead-letter
	// consumer may see it first: wait for the ack, however long a loaded machine takes,
	// while the main consumer's Receive still runs (stopping it first could cancel the
	// ack, which the next Receive or owner would then complete: nobody here).
	for {
		lag, err := q.Lag(ctx, "g")
		must(t, err, "Lag")
		if lag[0].Lag == 0 && lag[1].Head == 1 && lag[1].Lag == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("lag %+v, want the event acked by dead-lettering and the dead letter acked", lag)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if msgs := <-recv; len(msgs) != 0 {
		t.Fatalf("main consumer received %s after the event was dead-lettered", describe(msgs))
	}
}

// runClose: Close ends a waiting Receive with ErrClosed; later calls fail.
func runClose(t *testing.T, h Harness) {
	noQueueGoroutines(t)
	s := h.open(t)
	ctx := ctxT(t, 3*time.Minute)
	q := createQueue(t, ctx, s, 2, []string{"g"})
	c, err := q.Consumer(ctx, "g")
	must(t, err, "Consumer")
	errc := make(chan error, 1)
	go func() {
		_, err := c.Receive(ctx, 1)
		errc <- err
	}()
	// Let the Receive start waiting (the queue is empty).
	for len(c.Partitions()) < 2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	must(t, c.Close(ctx), "Close")
	if err := <-errc; !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Receive waiting during Close returned %v, want ErrClosed", err)
	}
	if _, err := c.Receive(ctx, 1); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Receive after Close = %v, want ErrClosed", err)
	}
	must(t, c.Close(ctx), "second Close")
	if _, err := q.Lag(ctx, "g"); err != nil {
		t.Fatalf("Lag after a consumer closed: %v", err)
	}
	if _, err := q.Consumer(ctx, "missing"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("Consumer of a missing group = %v, want NotFound", err)
	}
}
