package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
)

// ErrClosed is returned by a Consumer's methods after Close.
var ErrClosed = errors.New("queue: consumer closed")

// Message is one delivery of an event to a consumer.
type Message struct {
	// Partition and Seq locate the event in the queue.
	Partition int
	Seq       uint64
	// Key, ID and Payload are the event's.
	Key     string
	ID      string
	Payload []byte
	// At is when the event was enqueued, by the store's clock where it has one.
	At time.Time
	// Attempt is this delivery's number, from 1 (deliveries to consumers that died
	// holding the event count).
	Attempt int
	// Token is the fencing token of the partition's owner: greater than every earlier
	// owner's. Condition the application's own writes on it to refuse a stale owner's.
	Token uint64
	// Deadline is when the message becomes visible again unless acked or extended.
	Deadline time.Time
	// DeadFrom, on a dead-letter consumer, is where the event was when it was
	// dead-lettered ("partition/seq"); empty otherwise. ID is then the event's own id
	// (empty if it had none, or if with the origin it exceeded
	// dcsync.MaxQueueKeyLen).
	DeadFrom string
}

// ConsumerOption configures one consumer.
type ConsumerOption func(*consumerOptions)

type consumerOptions struct {
	dead     bool
	prefetch int
}

// DeadLetters makes the consumer read the group's dead-letter partition instead of the
// queue's partitions. Its messages are never dead-lettered again.
func DeadLetters() ConsumerOption { return func(o *consumerOptions) { o.dead = true } }

// Prefetch sets how many events per partition the consumer buffers ahead (default 512).
func Prefetch(n int) ConsumerOption { return func(o *consumerOptions) { o.prefetch = n } }

// Consumer is one member of a consumer group. Its methods are safe for concurrent use.
type Consumer struct {
	q     *Queue
	group string
	gi    int
	name  string
	dead  bool
	parts []int // the partitions its group's members share
	co    consumerOptions

	mu      sync.Mutex
	owned   map[int]*part
	waiting int
	pokeDue bool
	closing bool
	wakeCh  chan struct{}
	slot    int

	tick     chan struct{}
	hub      *hub
	bg       context.Context
	bgCancel context.CancelFunc
	wg       sync.WaitGroup
	fillMu   sync.Mutex
	rot      int
}

// part is an owned partition.
type part struct {
	p     int
	lk    *lock.Lock
	token uint64
	// next is the committed offset: buf[i] holds seq next+i.
	next uint64
	read uint64
	buf  []*entry
	head uint64
	// dirty: the partition may have events beyond read (or a hole to wait out).
	dirty bool
	// held: the offset record says Held for this token (set by arm before the first
	// delivery, kept by commits while an event at the offset was delivered or the
	// partition is streaming, see streaming).
	held bool
	// firstSeq, firstAttempts: the stored attempts of the entry at the claimed offset.
	firstSeq      uint64
	firstAttempts int
	draining      bool
	holeSeq       uint64
	holeSince     time.Time
	commitMu      sync.Mutex
	lastTrim      time.Time
	trimmedTo     uint64 // the offset the latest trim was started for
}

const (
	pending = iota
	inflight
	acked
)

type entry struct {
	e         dcsync.QueueEntry
	state     int
	attempts  int
	deadline  time.Time
	notBefore time.Time
}

// Consumer joins group and returns a consumer that owns its share of the partitions as
// soon as it can take their locks. Close it to leave the group cleanly.
func (q *Queue) Consumer(ctx context.Context, group string, opts ...ConsumerOption) (*Consumer, error) {
	spec, gi, err := q.group(ctx, group)
	if err != nil {
		return nil, err
	}
	co := consumerOptions{prefetch: 512}
	for _, o := range opts {
		o(&co)
	}
	if co.prefetch < 1 || co.prefetch > dcsync.MaxQueueBatch {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "queue.Consumer", "prefetch %d is outside [1, %d]", co.prefetch, dcsync.MaxQueueBatch)
	}
	c := &Consumer{q: q, group: group, gi: gi, name: spec.Name, dead: co.dead, co: co,
		owned: map[int]*part{}, wakeCh: make(chan struct{}, 1), tick: make(chan struct{}, 1), slot: -1, pokeDue: true}
	if co.dead {
		c.parts = []int{spec.Partitions + gi}
	} else {
		for p := 0; p < spec.Partitions; p++ {
			c.parts = append(c.parts, p)
		}
	}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	c.hub = subscribe(q.store, spec.Name, q.opts.pollInterval, c)
	c.wg.Add(1)
	go c.run()
	return c, nil
}

// lockName names the lock of a member slot ("m") or partition ("p") of the group:
// the queue's and group's names are length-prefixed, so names never collide.
func (c *Consumer) lockName(kind string, n int) string {
	d := ""
	if c.dead {
		d = "d"
	}
	return fmt.Sprintf("queue:%d:%s%d:%s%s%s/%d", len(c.name), c.name, len(c.group), c.group, kind, d, n)
}

func (c *Consumer) signal() {
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

// Partitions returns the partitions the consumer owns now, in order.
func (c *Consumer) Partitions() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, 0, len(c.owned))
	for p, pt := range c.owned {
		if !pt.draining {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// run keeps a member slot and the partitions assigned to the consumer.
func (c *Consumer) run() {
	defer c.wg.Done()
	o := c.q.opts
	period := o.lease / 3
	fast := min(period, 200*time.Millisecond)
	for c.bg.Err() == nil {
		member, lost := c.join()
		if member == nil {
			return
		}
		for c.bg.Err() == nil && lost.Err() == nil {
			wait := period
			if c.rebalance(c.bg) {
				wait = fast
			}
			select {
			case <-c.bg.Done():
			case <-lost.Done():
			case <-c.tick:
			case <-time.After(jitter(wait)):
			}
		}
		if c.bg.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = member.Release(rctx)
			cancel()
			return
		}
		o.log.Warn("queue: consumer lost its member slot; rejoining", "queue", c.name, "group", c.group)
	}
}

func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// join takes the first free member slot, waiting while all are taken.
func (c *Consumer) join() (*lock.Lock, context.Context) {
	for c.bg.Err() == nil {
		for s := range c.parts {
			lk, err := c.q.locks.TryAcquire(c.bg, c.lockName("m", s))
			if err == nil {
				c.mu.Lock()
				c.slot = s
				c.mu.Unlock()
				return lk, lk.KeepAlive(c.bg)
			}
			if !errors.Is(err, dcsync.ErrLockUnavailable) {
				c.q.opts.log.Debug("queue: member slot", "queue", c.name, "slot", s, "err", err)
				break
			}
		}
		select {
		case <-c.bg.Done():
		case <-time.After(jitter(c.q.opts.lease / 3)):
		}
	}
	return nil, nil
}

// rebalance works out the consumer's share from the live member slots, starts draining
// partitions outside it, releases drained ones and takes free ones inside it. It
// reports whether some assigned partition is still held by another consumer.
func (c *Consumer) rebalance(ctx context.Context) (waiting bool) {
	c.mu.Lock()
	slot := c.slot
	c.mu.Unlock()
	rank, members := 0, 0
	for s := range c.parts {
		if s == slot {
			rank = members
			members++
			continue
		}
		_, err := c.q.locks.Inspect(ctx, c.lockName("m", s))
		switch {
		case err == nil:
			members++
		case errors.Is(err, dcsync.ErrNotFound):
		default:
			c.q.opts.log.Debug("queue: reading members", "queue", c.name, "err", err)
			return true
		}
	}
	assigned := map[int]bool{}
	for i, p := range c.parts {
		if i%members == rank {
			assigned[p] = true
		}
	}
	var release []*part
	now := time.Now()
	c.mu.Lock()
	for p, pt := range c.owned {
		if !assigned[p] && !pt.draining {
			pt.draining = true
		}
		if pt.draining && !pt.busy(now) {
			release = append(release, pt)
		}
	}
	c.mu.Unlock()
	for _, pt := range release {
		c.release(ctx, pt)
	}
	c.mu.Lock()
	owned := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		owned = append(owned, pt)
	}
	c.mu.Unlock()
	for _, pt := range owned {
		c.maybeTrim(pt)
	}
	for i, p := range c.parts {
		if i%members != rank {
			continue
		}
		c.mu.Lock()
		pt := c.owned[p]
		if pt != nil && pt.draining && assigned[p] {
			pt.draining = false // assigned again before it was released
		}
		c.mu.Unlock()
		if pt != nil {
			continue
		}
		if err := c.take(ctx, p); err != nil {
			if !errors.Is(err, dcsync.ErrLockUnavailable) && ctx.Err() == nil {
				c.q.opts.log.Debug("queue: taking partition", "queue", c.name, "partition", p, "err", err)
			}
			waiting = true
		}
	}
	return waiting
}

// busy reports whether the partition has messages in flight (not yet past their
// visibility deadline).
func (pt *part) busy(now time.Time) bool {
	for _, en := range pt.buf {
		if en.state == inflight && now.Before(en.deadline) {
			return true
		}
	}
	return false
}

// take acquires partition p's lock and claims its offset with the lock's token.
func (c *Consumer) take(ctx context.Context, p int) error {
	lk, err := c.q.locks.TryAcquire(ctx, c.lockName("p", p))
	if err != nil {
		return err
	}
	lost := lk.KeepAlive(c.bg)
	st := c.q.store
	off, err := st.ClaimQueuePartition(ctx, c.name, c.group, p, lk.Token())
	if err != nil {
		c.releaseLock(lk)
		return err
	}
	attempts := off.Attempts
	// From here a failure must not leave the offset marked held: the next owner would
	// count an attempt nobody made.
	giveUp := func(err error) error {
		gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.CommitQueueOffset(gctx, c.name, c.group, p, dcsync.QueueOffset{Token: lk.Token(), Next: off.Next, Attempts: attempts})
		c.releaseLock(lk)
		return err
	}
	if off.Held {
		// The previous owner died while it had delivered the event at the offset (it
		// marks the offset held before it delivers, see arm): that delivery counts as
		// a failed attempt.
		attempts++
	}
	// Held stays clear until this consumer delivers (arm): an owner that dies before
	// it delivers anything costs the event no attempt.
	off.Attempts, off.Held = attempts, false
	if err := st.CommitQueueOffset(ctx, c.name, c.group, p, off); err != nil {
		return giveUp(err)
	}
	pt := &part{p: p, lk: lk, token: lk.Token(), next: off.Next, read: off.Next, dirty: true,
		firstSeq: off.Next, firstAttempts: attempts}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return giveUp(ErrClosed)
	}
	c.owned[p] = pt
	c.wg.Add(1) // under c.mu, before Close can wait
	c.mu.Unlock()
	c.signal()
	c.hub.poke()
	go func() {
		defer c.wg.Done()
		<-lost.Done()
		c.drop(pt)
	}()
	return nil
}

func (c *Consumer) releaseLock(lk *lock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lk.Release(ctx)
}

// drop forgets pt: its lease ended, or the store refused its token. It frees the lock
// in case this consumer still holds it (a Release of a lost lock does nothing).
func (c *Consumer) drop(pt *part) {
	c.mu.Lock()
	if c.owned[pt.p] == pt && !c.closing {
		delete(c.owned, pt.p)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.releaseLock(pt.lk)
		}()
	}
	c.mu.Unlock()
	c.signal()
	select {
	case c.tick <- struct{}{}:
	default:
	}
}

// release commits pt's acked prefix and marks the offset as not held (keeping the
// attempts of the event at the offset), in one write, and frees the lock.
func (c *Consumer) release(ctx context.Context, pt *part) {
	pt.commitMu.Lock()
	c.mu.Lock()
	n := pt.ackedPrefix()
	off := dcsync.QueueOffset{Token: pt.token, Next: pt.next + uint64(n)}
	if n < len(pt.buf) {
		off.Attempts = pt.buf[n].attempts
	} else if off.Next == pt.firstSeq {
		off.Attempts = pt.firstAttempts
	}
	if c.owned[pt.p] == pt {
		delete(c.owned, pt.p)
	}
	c.mu.Unlock()
	err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, pt.p, off)
	pt.commitMu.Unlock()
	if err != nil {
		c.q.opts.log.Debug("queue: releasing partition", "queue", c.name, "partition", pt.p, "err", err)
	}
	c.releaseLock(pt.lk)
}

// Receive returns up to n messages, blocking until at least one is available, ctx
// ends (its error) or the consumer closes (ErrClosed).
func (c *Consumer) Receive(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 || n > dcsync.MaxQueueBatch {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "queue.Receive", "max %d is outside [1, %d]", n, dcsync.MaxQueueBatch)
	}
	for {
		now := time.Now()
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		msgs, dead, arm, wake := c.collect(n, now)
		c.mu.Unlock()
		if len(arm) > 0 {
			err := c.arm(ctx, arm)
			if len(msgs) == 0 && len(dead) == 0 {
				if err == nil {
					continue
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				c.q.opts.log.Debug("queue: marking partitions held", "queue", c.name, "err", err)
			}
		}
		if len(dead) > 0 {
			// msgs are in flight already: hand them out even if dead-lettering fails
			// (it is retried on a later Receive).
			if err := c.deadLetter(ctx, dead); err != nil && ctx.Err() != nil && len(msgs) == 0 {
				return nil, ctx.Err()
			}
		}
		if len(msgs) > 0 {
			c.mu.Lock()
			c.pokeDue = true
			c.mu.Unlock()
			c.prefetch()
			return msgs, nil
		}
		filled, err := c.fill(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if filled {
			continue
		}
		d := c.q.opts.pollInterval
		if !wake.IsZero() {
			d = min(d, time.Until(wake))
		}
		c.mu.Lock()
		c.waiting++
		// Ask the hub for a read now only when this consumer was busy since its last
		// wait (or never waited): idle consumers leave the hub at one read per interval,
		// however many there are.
		poke := c.pokeDue
		c.pokeDue = false
		c.mu.Unlock()
		if poke {
			c.hub.poke()
		}
		t := time.NewTimer(max(d, time.Millisecond))
		select {
		case <-ctx.Done():
		case <-c.wakeCh:
		case <-t.C:
		}
		t.Stop()
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

type deadRef struct {
	pt *part
	en *entry
}

// collect hands out up to n messages (under c.mu). It returns the entries that
// reached the attempt limit, and the earliest time a waiting entry becomes
// deliverable.
func (c *Consumer) collect(n int, now time.Time) (msgs []*Message, dead []deadRef, arm []*part, wake time.Time) {
	ps := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		ps = append(ps, pt)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].p < ps[j].p })
	c.rot++
	note := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for k := range ps {
		pt := ps[(k+c.rot)%len(ps)]
		if pt.draining {
			continue
		}
		if !pt.held {
			if pt.ackedPrefix() < len(pt.buf) {
				arm = append(arm, pt) // deliver once the offset says held
			}
			continue
		}
		blocked := map[string]bool{}
		batch := map[*entry]bool{}
		block := func(key string) {
			if key != "" {
				blocked[key] = true
			}
		}
		for _, en := range pt.buf {
			switch en.state {
			case acked:
				continue
			case inflight:
				if now.Before(en.deadline) {
					if !batch[en] {
						block(en.e.Key)
					}
					note(en.deadline)
					continue
				}
				en.state = pending // visibility timeout: deliver again
				en.notBefore = now
			}
			if !c.dead && en.attempts >= c.q.opts.maxAttempts {
				en.state = inflight
				en.deadline = now.Add(c.q.opts.visibility)
				dead = append(dead, deadRef{pt, en})
				block(en.e.Key)
				continue
			}
			if en.notBefore.After(now) {
				block(en.e.Key)
				note(en.notBefore)
				continue
			}
			if en.e.Key != "" && blocked[en.e.Key] {
				continue
			}
			// Not blocked: later events of the key may follow in this same batch, in
			// order (Nack sends them back with it).
			en.state = inflight
			en.attempts++
			en.deadline = now.Add(c.q.opts.visibility)
			note(en.deadline)
			batch[en] = true
			msgs = append(msgs, c.message(pt, en))
			if len(msgs) == n {
				return msgs, dead, arm, wake
			}
		}
	}
	return msgs, dead, arm, wake
}

// arm marks the offset of each partition held by this consumer's token before it
// delivers from it, so that a successor counts a failed attempt if it dies with a
// delivery in flight. One write per partition per claim (and again after commits
// left nothing delivered at the offset).
func (c *Consumer) arm(ctx context.Context, pts []*part) error {
	var errs []error
	for _, pt := range pts {
		pt.commitMu.Lock()
		c.mu.Lock()
		off := dcsync.QueueOffset{Token: pt.token, Next: pt.next, Held: true}
		if pt.next == pt.firstSeq {
			off.Attempts = pt.firstAttempts
		}
		owned := c.owned[pt.p] == pt && !pt.held
		c.mu.Unlock()
		if owned {
			err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, pt.p, off)
			switch {
			case err == nil:
				c.mu.Lock()
				if pt.next == off.Next {
					pt.held = true
				}
				c.mu.Unlock()
			case errors.Is(err, dcsync.ErrLockLost):
				c.drop(pt)
				errs = append(errs, err)
			default:
				errs = append(errs, err)
			}
		}
		pt.commitMu.Unlock()
	}
	return errors.Join(errs...)
}

func (c *Consumer) message(pt *part, en *entry) *Message {
	m := &Message{Partition: pt.p, Seq: en.e.Seq, Key: en.e.Key, ID: en.e.ID,
		Payload: en.e.Payload, At: en.e.At, Attempt: en.attempts, Token: pt.token, Deadline: en.deadline}
	if c.dead {
		if from, orig, ok := parseDeadID(en.e.ID); ok {
			m.DeadFrom, m.ID = from, orig
		}
	}
	return m
}

// deadID is the idempotency id of a dead-lettered event: unique per (group,
// partition, seq), so that dead-lettering it again (by a successor) appends it once.
// The event's own id follows when it fits in dcsync.MaxQueueKeyLen.
func deadID(group string, p int, seq uint64, orig string) string {
	id := "\x00dead\x00" + strconv.Itoa(p) + "/" + strconv.FormatUint(seq, 10) + "\x00" + strconv.Itoa(len(group)) + ":" + group
	if len(id)+len(orig) < dcsync.MaxQueueKeyLen {
		id += "\x00" + orig
	}
	return id
}

// parseDeadID returns the origin ("partition/seq") and the original id of a
// dead-letter id.
func parseDeadID(id string) (from, orig string, ok bool) {
	const pre = "\x00dead\x00"
	rest, found := strings.CutPrefix(id, pre)
	if !found {
		return "", "", false
	}
	from, rest, found = strings.Cut(rest, "\x00")
	if !found {
		return "", "", false
	}
	n, rest, found := strings.Cut(rest, ":")
	gl, err := strconv.Atoi(n)
	if !found || err != nil || gl > len(rest) {
		return "", "", false
	}
	rest = rest[gl:]
	if r, cut := strings.CutPrefix(rest, "\x00"); cut {
		orig = r
	}
	return from, orig, true
}

// deadLetter appends the entries to the group's dead-letter partition and acks them.
func (c *Consumer) deadLetter(ctx context.Context, refs []deadRef) error {
	spec := c.q.Spec()
	events := make([]dcsync.QueueEvent, len(refs))
	for i, r := range refs {
		events[i] = dcsync.QueueEvent{Partition: spec.Partitions + c.gi, Key: r.en.e.Key,
			ID: deadID(c.group, r.pt.p, r.en.e.Seq, r.en.e.ID), Payload: r.en.e.Payload}
	}
	if _, err := c.q.append(ctx, events); err != nil {
		c.mu.Lock()
		for _, r := range refs {
			r.en.state, r.en.notBefore = pending, time.Now().Add(c.q.opts.minBackoff)
		}
		c.mu.Unlock()
		c.q.opts.log.Warn("queue: dead-lettering failed; will retry", "queue", c.name, "group", c.group, "err", err)
		return err
	}
	c.q.opts.log.Info("queue: dead-lettered", "queue", c.name, "group", c.group, "events", len(refs))
	byPart := map[*part]bool{}
	c.mu.Lock()
	for _, r := range refs {
		r.en.state = acked
		byPart[r.pt] = true
	}
	c.mu.Unlock()
	var errs []error
	for pt := range byPart {
		errs = append(errs, c.commit(ctx, pt))
	}
	return errors.Join(errs...)
}

// readers bounds the partitions one consumer reads at once.
const readers = 8

// fill reads the dirty partitions that have room in their buffers. It reports whether
// it buffered anything new.
func (c *Consumer) fill(ctx context.Context) (bool, error) {
	c.fillMu.Lock()
	defer c.fillMu.Unlock()
	return c.fillLocked(ctx, c.co.prefetch)
}

// prefetch refills, in the background, the partitions whose buffers ran below half
// while the application works on what Receive returned: the next Receive then finds
// events buffered instead of waiting for a read. At most one fill runs at a time.
func (c *Consumer) prefetch() {
	c.mu.Lock()
	low := false
	for _, pt := range c.owned {
		if pt.dirty && !pt.draining && len(pt.buf) < c.co.prefetch/2 {
			low = true
			break
		}
	}
	if !low || c.closing || !c.fillMu.TryLock() {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1) // under c.mu, before Close can wait
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		got, _ := c.fillLocked(c.bg, c.co.prefetch)
		c.fillMu.Unlock()
		if got {
			c.signal()
		}
	}()
}

// fillLocked is fill with c.fillMu held.
func (c *Consumer) fillLocked(ctx context.Context, prefetch int) (bool, error) {
	type job struct {
		pt   *part
		from uint64
		room int
	}
	var jobs []job
	c.mu.Lock()
	for _, pt := range c.owned {
		if pt.dirty && !pt.draining && len(pt.buf) < prefetch {
			jobs = append(jobs, job{pt, pt.read, prefetch - len(pt.buf)})
		}
	}
	c.mu.Unlock()
	got := false
	var errs []error
	// Read up to readers partitions at once, then take the results in order.
	type result struct {
		r   dcsync.QueueRead
		err error
	}
	results := make([]result, len(jobs))
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := c.q.store.ReadQueue(ctx, c.name, j.pt.p, j.from, j.room)
			results[i] = result{r, err}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		r, err := results[i].r, results[i].err
		if err != nil {
			errs = append(errs, err)
			continue
		}
		now := time.Now()
		var hole uint64
		holeDue := false
		c.mu.Lock()
		pt := j.pt
		if c.owned[pt.p] != pt || pt.read != j.from {
			c.mu.Unlock()
			continue
		}
		pt.head = max(pt.head, r.Head)
		if len(r.Entries) > 0 && r.Entries[0].Seq != pt.read {
			// Trimmed below the floor (a new group, or a seek below it): start there.
			pt.buf = nil
			pt.next, pt.read = r.Entries[0].Seq, r.Entries[0].Seq
		} else if len(r.Entries) == 0 && r.Floor > pt.read && len(pt.buf) == 0 {
			pt.next, pt.read = r.Floor, r.Floor
		}
		for _, e := range r.Entries {
			en := &entry{e: e}
			if e.Aborted {
				en.state = acked
			} else if e.Seq == pt.firstSeq {
				en.attempts = pt.firstAttempts
			}
			pt.buf = append(pt.buf, en)
		}
		pt.read += uint64(len(r.Entries))
		switch {
		case pt.read >= r.Head:
			pt.dirty = false
		case len(r.Entries) < j.room:
			// A reserved seq not yet written: a write in flight, or a producer's hole.
			if pt.holeSeq != pt.read || pt.holeSince.IsZero() {
				pt.holeSeq, pt.holeSince = pt.read, now
			} else if now.Sub(pt.holeSince) >= c.q.opts.holeTimeout {
				hole, holeDue = pt.read, true
			}
		}
		if len(r.Entries) > 0 {
			got = true // tombstones only: look again at once
		}
		c.mu.Unlock()
		if holeDue {
			aborted, err := c.q.store.AbortQueueSeq(ctx, c.name, pt.p, hole)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.q.opts.log.Info("queue: waited out a hole", "queue", c.name, "partition", pt.p, "seq", hole, "aborted", aborted)
			c.mu.Lock()
			pt.holeSince = time.Time{}
			c.mu.Unlock()
			got = true // read again at once
		}
	}
	return got, errors.Join(errs...)
}

// waitingFor returns the partitions the hub should watch for c: those it owns while a
// Receive waits.
func (c *Consumer) waitingFor() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting == 0 {
		return nil
	}
	out := make([]int, 0, len(c.owned))
	for p, pt := range c.owned {
		if !pt.draining {
			out = append(out, p)
		}
	}
	return out
}

// observe takes the hub's read of the bounds; it wakes c if a partition it owns has
// events beyond what it read.
func (c *Consumer) observe(by map[int]dcsync.QueueBounds) bool {
	c.mu.Lock()
	woke := false
	for p, pt := range c.owned {
		if b, ok := by[p]; ok && b.Head > pt.head {
			// New events (a hole or a write in flight is not news: the Receive that
			// found it reads again after a poll interval).
			pt.head = b.Head
			if b.Head > pt.read {
				pt.dirty, woke = true, true
			}
		}
	}
	c.mu.Unlock()
	if woke {
		c.signal()
	}
	return woke
}

// observeLocal marks partitions appended to in this process as dirty.
func (c *Consumer) observeLocal(ps []int) {
	c.mu.Lock()
	woke := false
	for _, p := range ps {
		if pt, ok := c.owned[p]; ok {
			pt.dirty, woke = true, true
		}
	}
	c.mu.Unlock()
	if woke {
		c.signal()
	}
}

// owner returns the owned partition of m, checking m's token; LockLost otherwise.
func (c *Consumer) owner(op string, m *Message) (*part, error) {
	if m == nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "message is nil")
	}
	if c.closing {
		return nil, ErrClosed
	}
	pt := c.owned[m.Partition]
	if pt == nil || pt.token != m.Token {
		return nil, dcsync.Errorf(dcsync.LockLost, op, "partition %d (token %d) is no longer owned by this consumer", m.Partition, m.Token)
	}
	return pt, nil
}

func (pt *part) at(seq uint64) *entry {
	if seq < pt.next || seq-pt.next >= uint64(len(pt.buf)) {
		return nil
	}
	return pt.buf[seq-pt.next]
}

// ByPartition splits msgs by partition, in the order each partition first appears,
// keeping their order within each. Acking each part on its own tells which acks
// applied: an Ack error matching dcsync.ErrLockLost then concerns that partition only.
func ByPartition(msgs []*Message) [][]*Message {
	at := map[int]int{}
	var out [][]*Message
	for _, m := range msgs {
		i, ok := at[m.Partition]
		if !ok {
			i = len(out)
			at[m.Partition] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], m)
	}
	return out
}

// Ack acknowledges messages: each partition's offset advances over its acked prefix in
// one conditional write (an ack of a later message is kept until the earlier ones are
// acked). It returns an error matching dcsync.ErrLockLost for messages of partitions
// the consumer no longer owns (their events are, or will be, delivered to the new
// owner); the other partitions' acks still apply.
func (c *Consumer) Ack(ctx context.Context, msgs ...*Message) error {
	pts, err := c.mark(ctx, "queue.Ack", msgs)
	errs := []error{err}
	for _, pt := range pts {
		errs = append(errs, c.commit(ctx, pt))
	}
	return errors.Join(errs...)
}

// mark records acks in memory and returns the partitions to commit.
func (c *Consumer) mark(ctx context.Context, op string, msgs []*Message) ([]*part, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	seen := map[*part]bool{}
	var pts []*part
	for _, m := range msgs {
		pt, err := c.owner(op, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if en := pt.at(m.Seq); en != nil {
			en.state = acked
		}
		if !seen[pt] {
			seen[pt] = true
			pts = append(pts, pt)
		}
	}
	return pts, errors.Join(errs...)
}

// deliveredFrom reports whether an entry from buf[n] on was delivered (in flight, or
// waiting for a retry): then the offset stays marked held (under c.mu).
func (pt *part) deliveredFrom(n int) bool {
	for _, en := range pt.buf[n:] {
		if en.state != acked && en.attempts > 0 && !(en.e.Seq == pt.firstSeq && en.attempts == pt.firstAttempts) {
			return true
		}
	}
	return false
}

// streaming reports whether the owner is delivering pt's events in a stream after an
// ack of n entries: events are buffered behind them, or known to be in the store
// beyond what it read (under c.mu). The commit then keeps the offset marked held, so
// that the next Receive needs no write of its own before it delivers (arm): one write
// per batch instead of two. The price is that a death in that state counts an attempt
// against the event at the offset even if it was not delivered yet; an owner that
// dies before it delivered anything, or after it caught up, costs none.
func (pt *part) streaming(n int) bool {
	return pt.held && (len(pt.buf) > n || pt.dirty)
}

// ackedPrefix returns how many entries at the head of pt.buf are acked (under c.mu).
func (pt *part) ackedPrefix() int {
	n := 0
	for n < len(pt.buf) && pt.buf[n].state == acked {
		n++
	}
	return n
}

// commit writes pt's acked prefix to its offset record.
func (c *Consumer) commit(ctx context.Context, pt *part) error {
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	c.mu.Lock()
	n := pt.ackedPrefix()
	off := dcsync.QueueOffset{Token: pt.token, Next: pt.next + uint64(n), Held: pt.deliveredFrom(n) || pt.streaming(n)}
	if off.Next == pt.firstSeq {
		off.Attempts = pt.firstAttempts
	}
	owned := c.owned[pt.p] == pt
	c.mu.Unlock()
	if n == 0 {
		return nil
	}
	if !owned || time.Now().After(pt.lk.Deadline()) {
		return dcsync.Errorf(dcsync.LockLost, "queue.Ack", "partition %d: the lease of token %d is over", pt.p, pt.token)
	}
	if err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, pt.p, off); err != nil {
		if errors.Is(err, dcsync.ErrLockLost) {
			c.drop(pt)
		}
		return err
	}
	c.mu.Lock()
	if pt.next+uint64(n) == off.Next && len(pt.buf) >= n {
		pt.buf = append([]*entry(nil), pt.buf[n:]...)
		pt.next = off.Next
		pt.held = off.Held
	}
	c.mu.Unlock()
	c.maybeTrim(pt)
	return nil
}

// maybeTrim starts a trim of pt when its offset moved since the last one and the
// last one is at least the retention check period old. Commits call it; so does the
// rebalance loop, for the trims a commit skipped.
func (c *Consumer) maybeTrim(pt *part) {
	c.mu.Lock()
	next := pt.next
	due := next > pt.trimmedTo && time.Since(pt.lastTrim) >= c.q.opts.retentionCheckPeriod && !c.closing
	if due {
		pt.lastTrim, pt.trimmedTo = time.Now(), next
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if due {
		go c.trim(pt.p, next)
	}
}

// trim deletes partition p's entries that every group has acked.
func (c *Consumer) trim(p int, next uint64) {
	defer c.wg.Done()
	// Not c.bg: a trim started by the last Ack before Close still runs (Close waits).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	below := next
	if !c.dead {
		// The groups are read fresh before the offsets, and again after: a group added
		// meanwhile (by another process) stops this trim, so an event enqueued after
		// AddGroup returned is never trimmed before the new group reads it (it is above
		// every offset read here).
		spec, err := c.q.store.ReadQueueSpec(ctx, c.name)
		if err != nil {
			return
		}
		for _, g := range spec.Groups {
			if g == c.group {
				continue
			}
			offs, err := c.q.store.ReadQueueOffsets(ctx, c.name, g, []int{p})
			if err != nil {
				return
			}
			below = min(below, offs[0].Next)
		}
		again, err := c.q.store.ReadQueueSpec(ctx, c.name)
		if err != nil || len(again.Groups) != len(spec.Groups) {
			return
		}
		c.q.spec.Store(&again)
	}
	b, err := c.q.store.QueueBounds(ctx, c.name, []int{p})
	if err != nil || below <= b[0].Floor {
		return
	}
	if keep := c.q.opts.retention; keep > 0 {
		// Keep what was enqueued within the retention: stop below the first such event.
		cutoff := time.Now().Add(-keep)
		for from := b[0].Floor; from < below; {
			r, err := c.q.store.ReadQueue(ctx, c.name, p, from, int(min(below-from, 500)))
			if err != nil || len(r.Entries) == 0 {
				below = from
				break
			}
			for _, e := range r.Entries {
				if e.Seq >= below || !e.Aborted && e.At.After(cutoff) {
					below = min(below, e.Seq)
					break
				}
			}
			from = r.Entries[len(r.Entries)-1].Seq + 1
		}
		if below <= b[0].Floor {
			return
		}
	}
	if err := c.q.store.TrimQueue(ctx, c.name, p, below); err != nil && ctx.Err() == nil {
		c.q.opts.log.Debug("queue: trim", "queue", c.name, "partition", p, "err", err)
	}
}

// Nack asks for m to be delivered again after a backoff that doubles with each attempt.
// A message that had MaxAttempts deliveries goes to the dead-letter partition instead
// (Nack returns once it is there).
func (c *Consumer) Nack(ctx context.Context, m *Message) error {
	c.mu.Lock()
	pt, err := c.owner("queue.Nack", m)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	en := pt.at(m.Seq)
	if en == nil || en.state != inflight {
		c.mu.Unlock()
		return nil
	}
	o := c.q.opts
	back := o.minBackoff
	for i := 1; i < en.attempts && back < o.maxBackoff; i++ {
		back *= 2
	}
	notBefore := time.Now().Add(min(back, o.maxBackoff))
	if en.e.Key != "" {
		// Later in-flight events of the key go back too, undelivered, to keep order.
		for _, later := range pt.buf[m.Seq-pt.next+1:] {
			if later.e.Key == en.e.Key && later.state == inflight {
				later.state, later.notBefore = pending, notBefore
				later.attempts--
			}
		}
	}
	if !c.dead && en.attempts >= o.maxAttempts {
		en.deadline = time.Now().Add(o.visibility)
		c.mu.Unlock()
		c.signal()
		return c.deadLetter(ctx, []deadRef{{pt, en}})
	}
	en.state, en.notBefore = pending, notBefore
	c.mu.Unlock()
	c.signal()
	return nil
}

// Extend moves m's visibility deadline to d from now.
func (c *Consumer) Extend(ctx context.Context, m *Message, d time.Duration) error {
	if d <= 0 {
		return dcsync.Errorf(dcsync.InvalidArgument, "queue.Extend", "extension %v must be positive", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.owner("queue.Extend", m)
	if err != nil {
		return err
	}
	en := pt.at(m.Seq)
	if en == nil || en.state != inflight {
		return dcsync.Errorf(dcsync.InvalidArgument, "queue.Extend", "message %d/%d is not in flight", m.Partition, m.Seq)
	}
	en.deadline = time.Now().Add(d)
	m.Deadline = en.deadline
	return nil
}

// Seek moves the group's offset in partition p, which the consumer must own, to seq:
// the events from seq on are delivered (again). Events below the partition's floor
// are gone; a seek below it starts at the floor.
func (c *Consumer) Seek(ctx context.Context, p int, seq uint64) error {
	c.mu.Lock()
	pt := c.owned[p]
	c.mu.Unlock()
	if pt == nil {
		return dcsync.Errorf(dcsync.LockLost, "queue.Seek", "partition %d is not owned by this consumer", p)
	}
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	off := dcsync.QueueOffset{Token: pt.token, Next: seq}
	if err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, p, off); err != nil {
		if errors.Is(err, dcsync.ErrLockLost) {
			c.drop(pt)
		}
		return err
	}
	c.fillMu.Lock()
	c.mu.Lock()
	pt.buf, pt.next, pt.read, pt.dirty = nil, seq, seq, true
	pt.firstSeq, pt.firstAttempts, pt.held = seq, 0, false
	c.mu.Unlock()
	c.fillMu.Unlock()
	c.signal()
	return nil
}

// Close leaves the group: it releases the consumer's partitions (recording its acks;
// unacked messages are delivered to the next owner) and its member slot. Receives
// waiting on it return ErrClosed.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	pts := make([]*part, 0, len(c.owned))
	for _, pt := range c.owned {
		pts = append(pts, pt)
	}
	c.mu.Unlock()
	c.bgCancel()
	c.hub.unsubscribe(c)
	c.signal()
	for _, pt := range pts {
		c.release(ctx, pt)
	}
	c.wg.Wait()
	return nil
}
