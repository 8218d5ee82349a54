package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
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
	// driver.MaxQueueKeyLen).
	DeadFrom string

	// pt and en are the delivery's partition and entry: Ack, Nack and Extend judge the
	// delivery itself (it may have timed out, been delivered again or dead-lettered).
	pt *part
	en *entry
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
	// held: the offset record says Held for this token (written before the first
	// delivery, kept by commits while an event at the offset was delivered or the
	// partition is streaming, see streaming).
	held bool
	// clearing: a write that clears Held is under way; nothing is delivered until the
	// record says Held again.
	clearing bool
	// init: the stored state of entries not read yet (seq >= read), sorted by Seq: the
	// attempts of the entry at the claimed offset and the claimed Marks.
	init []driver.QueueMark
	// version: the Version of the latest write of the record (or of the claimed one);
	// last: the record as stored, when known (Version left out).
	version   uint64
	last      driver.QueueOffset
	known     bool
	draining  bool
	holeSeq   uint64
	holeSince time.Time
	// commitMu serializes the writes of the offset record, each with the next Version.
	commitMu  sync.Mutex
	lastTrim  time.Time
	trimmedTo uint64 // the offset the latest trim was started for
}

// Entry states.
const (
	pending  = iota // waiting for its (next) delivery
	inflight        // delivered, not acked, nacked or timed out yet
	acked           // acked by the application, aborted, or dead-lettered
	dead            // reached MaxAttempts (recorded in the offset): being dead-lettered
	gone            // dropped from the buffer by a Seek: its deliveries can no longer be acked
)

type entry struct {
	e     driver.QueueEntry
	state int
	// attempts counts the entry's failed deliveries, plus the one in flight (state
	// inflight): the Attempt of its latest delivery.
	attempts int
	// loaded: the failed attempts stored for it when this owner read it.
	loaded int
	// persisted: the failed attempts the offset record holds for it.
	persisted int
	// durable: the record holds its ack (Next is above it, or an Acked mark).
	durable bool
	// busy: an append of it to the dead-letter partition is under way.
	busy bool
	// deadLettered: acked by dead-lettering, not by the application.
	deadLettered bool
	deadline     time.Time
	notBefore    time.Time
}

// failed returns the failed attempts of en to record; final counts a delivery in
// flight as failed (the owner is letting the partition go).
func (en *entry) failed(final bool) int {
	switch en.state {
	case inflight:
		if final {
			return en.attempts
		}
		return en.attempts - 1
	case pending, dead:
		return en.attempts
	}
	return 0
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
	if co.prefetch < 1 || co.prefetch > driver.MaxQueueBatch {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Consumer", "prefetch %d is outside [1, %d]", co.prefetch, driver.MaxQueueBatch)
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

// take acquires partition p's lock and claims its offset with the lock's token. The
// claim writes the token only. When the record says Held (the previous owner died
// while it delivered), the entry at the offset is charged one failed attempt, and Held
// cleared, in one write; otherwise taking costs the claim alone.
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
	marks, err := off.Marks.Decode(off.Next)
	if err != nil {
		c.releaseLock(lk)
		return err
	}
	if off.Held {
		// The previous owner died while it had delivered the event at the offset (it
		// marks the offset held before it delivers): that delivery counts as a failed
		// attempt. Held stays clear until this consumer delivers: an owner that dies
		// before it delivers anything costs the event no attempt.
		off.Attempts++
		off.Held = false
		off.Version++
		if err := st.CommitQueueOffset(ctx, c.name, c.group, p, off); err != nil {
			c.releaseLock(lk)
			return err
		}
	}
	pt := &part{p: p, lk: lk, token: lk.Token(), next: off.Next, read: off.Next, dirty: true,
		version: off.Version, last: off, known: true}
	pt.last.Version = 0
	if off.Attempts > 0 {
		pt.init = append(pt.init, driver.QueueMark{Seq: off.Next, Attempts: off.Attempts})
	}
	pt.init = append(pt.init, marks...)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		c.releaseLock(lk)
		return ErrClosed
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

// release writes pt's whole state (the acked prefix, acks above it and every failed
// attempt, deliveries in flight included, as Marks; Held cleared) in one write, and
// frees the lock: the next owner delivers exactly the entries not acked, each with
// its attempts. A Nack's backoff is not kept: the next owner delivers at once.
func (c *Consumer) release(ctx context.Context, pt *part) {
	pt.commitMu.Lock()
	c.mu.Lock()
	s, err := c.snapshot(pt, writeRelease)
	if c.owned[pt.p] == pt {
		delete(c.owned, pt.p)
	}
	c.mu.Unlock()
	if err == nil {
		err = c.put(ctx, pt, s, false)
	}
	pt.commitMu.Unlock()
	if err != nil {
		c.q.opts.log.Debug("queue: releasing partition", "queue", c.name, "partition", pt.p, "err", err)
	}
	c.releaseLock(pt.lk)
}

// Receive returns up to n messages, blocking until at least one is available, ctx
// ends (its error) or the consumer closes (ErrClosed).
func (c *Consumer) Receive(ctx context.Context, n int) ([]*Message, error) {
	if n < 1 || n > driver.MaxQueueBatch {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Receive", "max %d is outside [1, %d]", n, driver.MaxQueueBatch)
	}
	for {
		now := time.Now()
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		msgs, dead, pre, wake := c.collect(n, now)
		c.mu.Unlock()
		if len(pre) > 0 {
			err := c.prepare(ctx, pre)
			if len(msgs) == 0 && len(dead) == 0 {
				if err == nil {
					continue
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				c.q.opts.log.Debug("queue: writing offsets before delivery", "queue", c.name, "err", err)
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

// collect hands out up to n messages (under c.mu). It returns the entries to
// dead-letter (their attempts, recorded, reached the limit), the partitions whose
// offset must be written before they deliver (to mark them Held, or to record failed
// attempts of entries about to be delivered again), and the earliest time a waiting
// entry becomes deliverable.
func (c *Consumer) collect(n int, now time.Time) (msgs []*Message, doomed []deadRef, pre []*part, wake time.Time) {
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
		if pt.draining || !pt.lk.Held() {
			// A partition whose lease is over hands nothing out (its successor may be
			// delivering the same events); it is dropped once the lock says it is lost.
			continue
		}
		needWrite := false
		write := func() {
			if !needWrite {
				needWrite = true
				pre = append(pre, pt)
			}
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
			case dead:
				block(en.e.Key)
				if en.busy {
					continue
				}
				if en.notBefore.After(now) {
					note(en.notBefore)
					continue
				}
				en.busy = true
				doomed = append(doomed, deadRef{pt, en})
				continue
			case inflight:
				if now.Before(en.deadline) {
					if !batch[en] {
						block(en.e.Key)
					}
					note(en.deadline)
					continue
				}
				en.state = pending // visibility timeout: a failed attempt; deliver again
				en.notBefore = now
			}
			if en.attempts > en.persisted {
				// A failed attempt not recorded yet: record it before the entry is
				// delivered again (or dead-lettered), so that MaxAttempts counts it
				// whoever owns the partition next.
				block(en.e.Key)
				write()
				continue
			}
			if !c.dead && en.attempts >= c.q.opts.maxAttempts {
				// The record says it reached the limit: dead-letter it, never deliver.
				en.state, en.busy = dead, true
				doomed = append(doomed, deadRef{pt, en})
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
			if !pt.held || pt.clearing {
				write() // deliver once the offset says held
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
				return msgs, doomed, pre, wake
			}
		}
	}
	return msgs, doomed, pre, wake
}

// prepare writes the offset of each partition before it delivers from it: marked
// held by this consumer's token, so that a successor counts a failed attempt if it
// dies with a delivery in flight, and with every failed attempt recorded. One write
// per partition per claim (and again after commits left nothing delivered at the
// offset, or after a visibility timeout).
func (c *Consumer) prepare(ctx context.Context, pts []*part) error {
	var errs []error
	for _, pt := range pts {
		errs = append(errs, c.write(ctx, pt, writeHeld))
	}
	return errors.Join(errs...)
}

func (c *Consumer) message(pt *part, en *entry) *Message {
	m := &Message{Partition: pt.p, Seq: en.e.Seq, Key: en.e.Key, ID: en.e.ID,
		Payload: en.e.Payload, At: en.e.At, Attempt: en.attempts, Token: pt.token, Deadline: en.deadline,
		pt: pt, en: en}
	if c.dead {
		if from, orig, ok := parseDeadID(en.e.ID); ok {
			m.DeadFrom, m.ID = from, orig
		}
	}
	return m
}

// deadID is the idempotency id of a dead-lettered event: unique per (group,
// partition, seq), so that dead-lettering it again (by a successor) appends it once.
// The event's own id follows when it fits in driver.MaxQueueKeyLen.
func deadID(group string, p int, seq uint64, orig string) string {
	id := "\x00dead\x00" + strconv.Itoa(p) + "/" + strconv.FormatUint(seq, 10) + "\x00" + strconv.Itoa(len(group)) + ":" + group
	if len(id)+len(orig) < driver.MaxQueueKeyLen {
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

// deadLetter completes the dead-lettering of entries whose attempts, as recorded in
// the offset by a fenced write, reached MaxAttempts (state dead, busy): it appends
// them to the group's dead-letter partition, each with its reserved id (so an append
// by this owner or any later one lands once), then acks them with one write per
// partition. An owner that finds such an entry recorded does the same: a crash
// between the append and the ack is completed by the next owner. A consumer that no
// longer owns the partition appends nothing.
func (c *Consumer) deadLetter(ctx context.Context, refs []deadRef) error {
	spec := c.q.Spec()
	var events []driver.QueueEvent
	var live []deadRef
	c.mu.Lock()
	for _, r := range refs {
		if c.owned[r.pt.p] != r.pt || r.en.persisted < c.q.opts.maxAttempts {
			r.en.busy = false
			continue
		}
		live = append(live, r)
		events = append(events, driver.QueueEvent{Partition: spec.Partitions + c.gi, Key: r.en.e.Key,
			ID: deadID(c.group, r.pt.p, r.en.e.Seq, r.en.e.ID), Payload: r.en.e.Payload})
	}
	c.mu.Unlock()
	if len(live) == 0 {
		return driver.Errorf(dcsync.LockLost, "queue.deadLetter", "the partitions are no longer owned by this consumer")
	}
	if _, err := c.q.append(ctx, events); err != nil {
		c.mu.Lock()
		for _, r := range live {
			r.en.busy, r.en.notBefore = false, time.Now().Add(c.q.opts.minBackoff)
		}
		c.mu.Unlock()
		c.signal()
		c.q.opts.log.Warn("queue: dead-lettering failed; will retry", "queue", c.name, "group", c.group, "err", err)
		return err
	}
	c.q.opts.log.Info("queue: dead-lettered", "queue", c.name, "group", c.group, "events", len(live))
	var pts []*part
	c.mu.Lock()
	for _, r := range live {
		r.en.state, r.en.deadLettered, r.en.busy = acked, true, false
		if !slices.Contains(pts, r.pt) {
			pts = append(pts, r.pt)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, pt := range pts {
		errs = append(errs, c.write(ctx, pt, writeAck))
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
	return c.fillLocked(ctx)
}

// capacity is how many entries a partition buffers: the Prefetch option, clamped so
// that no entry more than driver.MaxQueueMarks above the committed offset is ever
// delivered, and the offset's Marks always fit.
func (c *Consumer) capacity() int { return min(c.co.prefetch, driver.MaxQueueMarks+1) }

// prefetch refills, in the background, the partitions whose buffers ran below half
// while the application works on what Receive returned: the next Receive then finds
// events buffered instead of waiting for a read. At most one fill runs at a time.
func (c *Consumer) prefetch() {
	c.mu.Lock()
	low := false
	for _, pt := range c.owned {
		if pt.dirty && !pt.draining && len(pt.buf) < c.capacity()/2 {
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
		got, _ := c.fillLocked(c.bg)
		c.fillMu.Unlock()
		if got {
			c.signal()
		}
	}()
}

// fillLocked is fill with c.fillMu held.
func (c *Consumer) fillLocked(ctx context.Context) (bool, error) {
	prefetch := c.capacity()
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
		r   driver.QueueRead
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
			for _, en := range pt.buf {
				en.state = gone
			}
			pt.buf = nil
			pt.next, pt.read = r.Entries[0].Seq, r.Entries[0].Seq
		} else if len(r.Entries) == 0 && r.Floor > pt.read && len(pt.buf) == 0 {
			pt.next, pt.read = r.Floor, r.Floor
		}
		for _, e := range r.Entries {
			en := &entry{e: e}
			for len(pt.init) > 0 && pt.init[0].Seq < e.Seq {
				pt.init = pt.init[1:] // trimmed away
			}
			if len(pt.init) > 0 && pt.init[0].Seq == e.Seq {
				// The stored state of the entry: acked out of order (never delivered
				// again), or its failed attempts so far.
				m := pt.init[0]
				pt.init = pt.init[1:]
				if m.Acked {
					en.state, en.durable = acked, true
				}
				en.attempts, en.loaded, en.persisted = m.Attempts, m.Attempts, m.Attempts
			}
			if e.Aborted {
				en.state = acked
			}
			pt.buf = append(pt.buf, en)
		}
		pt.read += uint64(len(r.Entries))
		switch {
		case pt.read >= pt.head:
			// Caught up with the newest head known: a read that began before the hub
			// saw later events (pt.head above r.Head) leaves the partition dirty.
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
func (c *Consumer) observe(by map[int]driver.QueueBounds) bool {
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
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "message is nil")
	}
	if c.closing {
		return nil, ErrClosed
	}
	pt := c.owned[m.Partition]
	if pt == nil || pt.token != m.Token {
		return nil, driver.Errorf(dcsync.LockLost, op, "partition %d (token %d) is no longer owned by this consumer", m.Partition, m.Token)
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

// Ack acknowledges messages. It returns nil only once every ack is in the offset
// record: each partition's offset advances over its acked prefix, and acks above an
// un-acked message are recorded as marks, in one conditional write per partition.
// It returns an error matching dcsync.ErrLockLost for messages the consumer no longer
// holds: of partitions it no longer owns (their events are, or will be, delivered to
// the new owner), and deliveries whose visibility deadline passed, that were nacked,
// delivered again or dead-lettered. The other messages' acks still apply.
func (c *Consumer) Ack(ctx context.Context, msgs ...*Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	byPart, pts, err := c.mark("queue.Ack", msgs)
	errs := []error{err}
	for _, pt := range pts {
		werr := c.write(ctx, pt, writeAck)
		c.mu.Lock()
		recorded := true
		for _, en := range byPart[pt] {
			recorded = recorded && en.durable
		}
		c.mu.Unlock()
		if !recorded {
			if werr == nil {
				werr = driver.Errorf(dcsync.LockLost, "queue.Ack", "partition %d: the ack was not recorded", pt.p)
			}
			errs = append(errs, werr)
		}
	}
	return errors.Join(errs...)
}

// mark records acks in memory and returns the acked entries by partition.
func (c *Consumer) mark(op string, msgs []*Message) (map[*part][]*entry, []*part, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	byPart := map[*part][]*entry{}
	var pts []*part
	for _, m := range msgs {
		pt, en, err := c.holding(op, m, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		en.state = acked
		if byPart[pt] == nil {
			pts = append(pts, pt)
		}
		byPart[pt] = append(byPart[pt], en)
	}
	return byPart, pts, errors.Join(errs...)
}

// holding returns m's partition and entry when the consumer still holds m's delivery
// (in flight, before its deadline; or acked already by the application), an error
// matching dcsync.ErrLockLost otherwise (under c.mu).
func (c *Consumer) holding(op string, m *Message, now time.Time) (*part, *entry, error) {
	pt, err := c.owner(op, m)
	if err != nil {
		return nil, nil, err
	}
	en := m.en
	if en == nil || m.pt != pt {
		en = pt.at(m.Seq)
	}
	if en == nil || en.e.Seq != m.Seq {
		return nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "message %d/%d was not delivered by this consumer", m.Partition, m.Seq)
	}
	why := ""
	switch {
	case en.state == acked && en.deadLettered:
		why = "it was dead-lettered"
	case en.attempts != m.Attempt:
		why = fmt.Sprintf("it was delivered again (attempt %d)", en.attempts)
	case en.state == acked:
		return pt, en, nil // acked already
	case en.state == dead:
		why = "it reached the attempt limit and is being dead-lettered"
	case en.state == gone:
		why = "a Seek dropped it"
	case en.state != inflight:
		why = "it was nacked or its visibility deadline passed"
	case !now.Before(en.deadline):
		why = "its visibility deadline passed"
	default:
		return pt, en, nil
	}
	return nil, nil, driver.Errorf(dcsync.LockLost, op, "message %d/%d (attempt %d) is no longer held: %s", m.Partition, m.Seq, m.Attempt, why)
}

// deliveredFrom reports whether an entry from buf[n] on was delivered by this owner
// and is not acked (in flight, or waiting for a retry): then the offset stays marked
// held (under c.mu).
func (pt *part) deliveredFrom(n int) bool {
	for _, en := range pt.buf[n:] {
		if en.state != acked && en.attempts > en.loaded {
			return true
		}
	}
	return false
}

// streaming reports whether the owner is delivering pt's events in a stream after an
// ack of n entries: events are buffered behind them, or known to be in the store
// beyond what it read (under c.mu). The commit then keeps the offset marked held, so
// that the next Receive needs no write of its own before it delivers: one write
// per batch instead of two. The price is that a death in that state counts an attempt
// against the event at the offset even if it was not delivered yet; an owner that
// dies before it delivered anything, or after it caught up, costs none.
func (pt *part) streaming(n int) bool {
	return pt.held && (len(pt.buf) > n || pt.dirty)
}

// Kinds of offset writes.
const (
	writeAck     = iota // acks, attempts, dead-lettering: Held while delivering
	writeHeld           // before a delivery: Held
	writeRelease        // the owner lets the partition go: Held clear, deliveries in flight failed
)

// snapshot is one write of a partition's offset record, and what it records.
type snapshot struct {
	off  driver.QueueOffset
	same bool   // the record is stored already: nothing to write
	base uint64 // pt.next when it was taken
	n    int    // buffered entries below off.Next
	ents []*entry
	fail []int    // the failed attempts recorded for ents[i]
	acks []*entry // the entries recorded as acked
}

// snapshot computes the offset record that describes pt (under c.mu): Next over the
// acked prefix (buffered entries, then acked marks of entries not read yet), the
// failed attempts of the entry at Next, and Marks for acks and failed attempts above
// it. Its Version is set when it is written (put).
func (c *Consumer) snapshot(pt *part, kind int) (snapshot, error) {
	s := snapshot{base: pt.next}
	n := 0
	for n < len(pt.buf) && pt.buf[n].state == acked {
		n++
	}
	next := pt.next + uint64(n)
	init := pt.init
	if n == len(pt.buf) {
		for len(init) > 0 && init[0].Seq == next && init[0].Acked {
			init = init[1:]
			next++
		}
	}
	s.n, s.off.Token, s.off.Next = n, pt.token, next
	var marks []driver.QueueMark
	for i, en := range pt.buf {
		f := en.failed(kind == writeRelease)
		s.ents, s.fail = append(s.ents, en), append(s.fail, f)
		if en.state == acked {
			s.acks = append(s.acks, en)
		}
		switch {
		case i < n:
		case i == n:
			s.off.Attempts = f
		case en.state == acked:
			marks = append(marks, driver.QueueMark{Seq: en.e.Seq, Acked: true})
		case f > 0:
			marks = append(marks, driver.QueueMark{Seq: en.e.Seq, Attempts: f})
		}
	}
	for _, m := range init {
		if m.Seq == next {
			s.off.Attempts = m.Attempts
			continue
		}
		marks = append(marks, m)
	}
	var err error
	if s.off.Marks, err = driver.EncodeQueueMarks(next, marks); err != nil {
		return s, err
	}
	switch kind {
	case writeAck:
		s.off.Held = pt.deliveredFrom(n) || pt.streaming(n)
	case writeHeld:
		s.off.Held = true
	}
	s.same = pt.known && s.off == pt.last
	if !s.off.Held && pt.held && !s.same {
		pt.clearing = true
	}
	return s, nil
}

// write takes a snapshot of pt and writes it: one conditional write, skipped when the
// record is stored already.
func (c *Consumer) write(ctx context.Context, pt *part, kind int) error {
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	c.mu.Lock()
	if c.owned[pt.p] != pt {
		c.mu.Unlock()
		return driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d (token %d) is no longer owned by this consumer", pt.p, pt.token)
	}
	s, err := c.snapshot(pt, kind)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.put(ctx, pt, s, true); err != nil {
		return err
	}
	c.maybeTrim(pt)
	return nil
}

// put writes s with pt.commitMu held, with the next Version of the record. A
// LockLost (another owner's token, or a later write of this owner is stored: it is
// confused) drops the partition. live refuses the write once the lease is over.
func (c *Consumer) put(ctx context.Context, pt *part, s snapshot, live bool) error {
	var err error
	switch {
	case s.same:
	case live && !pt.lk.Held():
		err = driver.Errorf(dcsync.LockLost, "queue.commit", "partition %d: the lease of token %d is over", pt.p, pt.token)
	default:
		pt.version++
		s.off.Version = pt.version
		err = c.q.store.CommitQueueOffset(ctx, c.name, c.group, pt.p, s.off)
	}
	c.mu.Lock()
	c.apply(pt, s, err == nil)
	c.mu.Unlock()
	if errors.Is(err, dcsync.ErrLockLost) {
		c.drop(pt)
	}
	return err
}

// apply takes the outcome of writing s (under c.mu): on success the entries below
// Next leave the buffer, recorded acks are durable and recorded attempts persisted.
func (c *Consumer) apply(pt *part, s snapshot, ok bool) {
	pt.clearing = false
	if !ok {
		pt.known = false // in doubt
		return
	}
	pt.last, pt.known = s.off, true
	pt.last.Version = 0
	for i, en := range s.ents {
		en.persisted = max(en.persisted, s.fail[i])
	}
	for _, en := range s.acks {
		en.durable = true
	}
	if pt.next == s.base && len(pt.buf) >= s.n {
		pt.buf = append([]*entry(nil), pt.buf[s.n:]...)
		pt.next = s.off.Next
		if pt.next > pt.read {
			pt.read, pt.dirty = pt.next, true
		}
		for len(pt.init) > 0 && pt.init[0].Seq < pt.read {
			pt.init = pt.init[1:]
		}
	}
	pt.held = s.off.Held
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

// Nack asks for m to be delivered again after a backoff that doubles with each
// attempt. It returns once the failed attempt is recorded in the offset (one write),
// so that it counts whoever owns the partition next. A message that had MaxAttempts
// deliveries goes to the dead-letter partition instead (Nack returns once it is
// there). A Nack of a delivery the consumer no longer holds (acked, timed out and
// delivered again) does nothing; of a partition it no longer owns, it returns an error
// matching dcsync.ErrLockLost.
func (c *Consumer) Nack(ctx context.Context, m *Message) error {
	c.mu.Lock()
	pt, err := c.owner("queue.Nack", m)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	en := m.en
	if en == nil || m.pt != pt {
		en = pt.at(m.Seq)
	}
	if en == nil || en.state != inflight || en.attempts != m.Attempt {
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
	en.state, en.notBefore = pending, notBefore
	c.mu.Unlock()
	c.signal()
	if err := c.write(ctx, pt, writeAck); err != nil {
		return err
	}
	if c.dead || en.attempts < o.maxAttempts {
		return nil
	}
	// The record says the entry reached the limit (a fenced write): dead-letter it.
	c.mu.Lock()
	mine := en.state == pending && en.persisted >= o.maxAttempts
	if mine {
		en.state, en.busy = dead, true
	}
	c.mu.Unlock()
	if !mine {
		return nil // a Receive is dead-lettering it
	}
	return c.deadLetter(ctx, []deadRef{{pt, en}})
}

// Extend moves m's visibility deadline to d from now. It returns an error matching
// dcsync.ErrLockLost when the consumer no longer holds m (see Ack).
func (c *Consumer) Extend(ctx context.Context, m *Message, d time.Duration) error {
	if d <= 0 {
		return driver.Errorf(dcsync.InvalidArgument, "queue.Extend", "extension %v must be positive", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, en, err := c.holding("queue.Extend", m, time.Now())
	if err != nil {
		return err
	}
	if en.state != inflight {
		return driver.Errorf(dcsync.InvalidArgument, "queue.Extend", "message %d/%d is not in flight", m.Partition, m.Seq)
	}
	en.deadline = time.Now().Add(d)
	m.Deadline = en.deadline
	return nil
}

// Seek moves the group's offset in partition p, which the consumer must own, to seq:
// the events from seq on are delivered (again), with no attempts and no acks recorded
// above it. Events below the partition's floor are gone; a seek below it starts at
// the floor. Deliveries from before the Seek can no longer be acked.
func (c *Consumer) Seek(ctx context.Context, p int, seq uint64) error {
	c.mu.Lock()
	pt := c.owned[p]
	c.mu.Unlock()
	if pt == nil {
		return driver.Errorf(dcsync.LockLost, "queue.Seek", "partition %d is not owned by this consumer", p)
	}
	pt.commitMu.Lock()
	defer pt.commitMu.Unlock()
	pt.version++
	off := driver.QueueOffset{Token: pt.token, Next: seq, Version: pt.version}
	if err := c.q.store.CommitQueueOffset(ctx, c.name, c.group, p, off); err != nil {
		c.mu.Lock()
		pt.known = false
		c.mu.Unlock()
		if errors.Is(err, dcsync.ErrLockLost) {
			c.drop(pt)
		}
		return err
	}
	c.fillMu.Lock()
	c.mu.Lock()
	for _, en := range pt.buf {
		if en.state != acked {
			en.state = gone
		}
	}
	pt.buf, pt.next, pt.read, pt.dirty = nil, seq, seq, true
	pt.init, pt.held, pt.clearing = nil, false, false
	off.Version = 0
	pt.last, pt.known = off, true
	c.mu.Unlock()
	c.fillMu.Unlock()
	c.signal()
	return nil
}

// Close leaves the group: it releases the consumer's partitions (recording its acks
// and attempts; unacked messages are delivered to the next owner, those in flight as
// a failed attempt) and its member slot. Receives waiting on it return ErrClosed.
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
