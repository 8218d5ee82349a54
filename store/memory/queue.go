package memory

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The memory store is the reference implementation of driver.QueueStore. It has no
// holes: a sequence number is reserved and its event stored in one step under the
// store's mutex, so every seq below a partition's Head holds an event (or was trimmed),
// and AbortQueueSeq never finds an unwritten seq. Payloads are copied in and out.
var _ driver.QueueStore = (*Store)(nil)

// memQueue is one queue's state; guarded by the store's mutex.
type memQueue struct {
	spec    driver.QueueSpec
	parts   map[int]*memPart
	offsets map[offsetID]driver.QueueOffset
	ids     map[string]idRecord // event id -> where it went, while in the dedup window
	idOrder []idSeen            // ids in append order, to forget them when they expire
}

// memPart is one storage partition: entries[i].Seq == floor+i, head == floor+len(entries).
type memPart struct {
	floor   uint64
	entries []driver.QueueEntry
}

func (p *memPart) head() uint64 { return p.floor + uint64(len(p.entries)) }

type offsetID struct {
	group string
	p     int
}

type idRecord struct {
	p   int
	seq uint64
	at  time.Time
}

type idSeen struct {
	id string
	at time.Time
}

// queues returns the store's queues; the caller holds s.mu.
func (s *Store) queues() map[string]*memQueue {
	if s.qs == nil {
		s.qs = map[string]*memQueue{}
	}
	return s.qs
}

// queue returns queue name, or NotFound; the caller holds s.mu.
func (s *Store) queue(op, name string) (*memQueue, error) {
	q, ok := s.queues()[name]
	if !ok {
		return nil, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist", name)
	}
	return q, nil
}

func (q *memQueue) part(p int) *memPart {
	mp, ok := q.parts[p]
	if !ok {
		mp = &memPart{}
		q.parts[p] = mp
	}
	return mp
}

// forget drops the ids older than the dedup window.
func (q *memQueue) forget(now time.Time) {
	window := q.spec.DedupWindow()
	n := 0
	for n < len(q.idOrder) && !now.Before(q.idOrder[n].at.Add(window)) {
		seen := q.idOrder[n]
		if r, ok := q.ids[seen.id]; ok && r.at.Equal(seen.at) {
			delete(q.ids, seen.id)
		}
		n++
	}
	if n > 0 {
		q.idOrder = slices.Delete(q.idOrder, 0, n)
	}
}

func copySpec(s driver.QueueSpec) driver.QueueSpec {
	s.Groups = slices.Clone(s.Groups)
	return s
}

func copyBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// checkQueueGroup validates a queue name, a group and a storage partition.
func checkQueueGroup(name, group string, p int) error {
	if err := driver.ValidateID("queue", name); err != nil {
		return err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return err
	}
	return driver.ValidateQueuePartition(p)
}

// CreateQueue implements driver.QueueStore.
func (s *Store) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	if err := s.begin(ctx, driver.ValidateQueueSpec(spec)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	qs := s.queues()
	if _, ok := qs[spec.Name]; ok {
		return driver.Errorf(dcsync.AlreadyExists, "memory.CreateQueue", "queue %q exists", spec.Name)
	}
	spec = copySpec(spec)
	spec.Created = s.now()
	qs[spec.Name] = &memQueue{
		spec:    spec,
		parts:   map[int]*memPart{},
		offsets: map[offsetID]driver.QueueOffset{},
		ids:     map[string]idRecord{},
	}
	return nil
}

// ReadQueueSpec implements driver.QueueStore.
func (s *Store) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	if err := s.begin(ctx, driver.ValidateID("queue", name)); err != nil {
		return driver.QueueSpec{}, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.ReadQueueSpec", name)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	return copySpec(q.spec), nil
}

// AddQueueGroup implements driver.QueueStore.
func (s *Store) AddQueueGroup(ctx context.Context, name, group string) (driver.QueueSpec, error) {
	check := driver.ValidateID("queue", name)
	if check == nil {
		check = driver.ValidateID("group", group)
	}
	if err := s.begin(ctx, check); err != nil {
		return driver.QueueSpec{}, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.AddQueueGroup", name)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	if q.spec.GroupIndex(group) >= 0 {
		return copySpec(q.spec), driver.Errorf(dcsync.AlreadyExists, "memory.AddQueueGroup", "queue %q has group %q", name, group)
	}
	if len(q.spec.Groups) >= driver.MaxQueueGroups {
		return driver.QueueSpec{}, driver.Errorf(dcsync.InvalidArgument, "memory.AddQueueGroup", "queue %q has %d groups, the most it can have", name, len(q.spec.Groups))
	}
	q.spec.Groups = append(slices.Clone(q.spec.Groups), group)
	return copySpec(q.spec), nil
}

// AppendQueue implements driver.QueueStore. Each event's sequence number is reserved
// and its event stored in one step, so the store never has holes.
func (s *Store) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	check := driver.ValidateID("queue", name)
	if check == nil {
		check = driver.ValidateQueueEvents(events)
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.AppendQueue", name)
	if err != nil {
		return nil, err
	}
	now := s.now()
	q.forget(now)
	out := make([]driver.QueueAppend, len(events))
	for i, e := range events {
		if e.ID != "" {
			if r, ok := q.ids[e.ID]; ok {
				out[i] = driver.QueueAppend{Partition: r.p, Seq: r.seq, Duplicate: true}
				continue
			}
		}
		mp := q.part(e.Partition)
		seq := mp.head()
		mp.entries = append(mp.entries, driver.QueueEntry{
			Seq: seq, Key: e.Key, ID: e.ID, Payload: copyBytes(e.Payload), At: now,
		})
		if e.ID != "" {
			q.ids[e.ID] = idRecord{p: e.Partition, seq: seq, at: now}
			q.idOrder = append(q.idOrder, idSeen{id: e.ID, at: now})
		}
		out[i] = driver.QueueAppend{Partition: e.Partition, Seq: seq}
	}
	return out, nil
}

// ReadQueue implements driver.QueueStore.
func (s *Store) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	if err := s.begin(ctx, driver.ValidateQueueRead(name, p, max)); err != nil {
		return driver.QueueRead{}, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.ReadQueue", name)
	if err != nil {
		return driver.QueueRead{}, err
	}
	return q.read(p, from, max), nil
}

// read is ReadQueue of partition p on q; the caller holds the store's mutex.
func (q *memQueue) read(p int, from uint64, max int) driver.QueueRead {
	var r driver.QueueRead
	mp, ok := q.parts[p]
	if !ok {
		return r
	}
	r.Head, r.Floor = mp.head(), mp.floor
	from = max64(from, mp.floor)
	if from >= r.Head {
		return r
	}
	src := mp.entries[from-mp.floor:]
	if len(src) > max {
		src = src[:max]
	}
	r.Entries = make([]driver.QueueEntry, len(src))
	for i, e := range src {
		e.Payload = copyBytes(e.Payload)
		r.Entries[i] = e
	}
	return r
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// AbortQueueSeq implements driver.QueueStore. Every seq below Head holds an event in
// this store (it has no holes), so it reports false for every seq it accepts, trimmed
// ones included; seq at or beyond Head is InvalidArgument.
func (s *Store) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	if err := s.begin(ctx, driver.ValidateQueueRead(name, p, 1)); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.AbortQueueSeq", name)
	if err != nil {
		return false, err
	}
	var head uint64
	if mp, ok := q.parts[p]; ok {
		head = mp.head()
	}
	if seq >= head {
		return false, driver.Errorf(dcsync.InvalidArgument, "memory.AbortQueueSeq", "seq %d of partition %d is not below its head %d", seq, p, head)
	}
	return false, nil
}

// QueueBounds implements driver.QueueStore.
func (s *Store) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	if err := s.begin(ctx, driver.ValidateQueuePartitions(name, ps)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.QueueBounds", name)
	if err != nil {
		return nil, err
	}
	out := make([]driver.QueueBounds, len(ps))
	for i, p := range ps {
		if mp, ok := q.parts[p]; ok {
			out[i] = driver.QueueBounds{Head: mp.head(), Floor: mp.floor}
		}
	}
	return out, nil
}

// ClaimQueuePartition implements driver.QueueStore. token must not be 0 (the token of
// an offset no one ever owned). A greater token writes the token only; an equal token
// (a retried claim) writes nothing.
func (s *Store) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	check := checkQueueGroup(name, group, p)
	if check == nil && token == 0 {
		check = driver.Errorf(dcsync.InvalidArgument, "memory.ClaimQueuePartition", "token 0 cannot own a partition")
	}
	if err := s.begin(ctx, check); err != nil {
		return driver.QueueOffset{}, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.ClaimQueuePartition", name)
	if err != nil {
		return driver.QueueOffset{}, err
	}
	id := offsetID{group, p}
	off := q.offsets[id]
	if token < off.Token {
		return off, driver.Errorf(dcsync.LockLost, "memory.ClaimQueuePartition", "partition %d of queue %q group %q is owned by token %d, above %d", p, name, group, off.Token, token)
	}
	off.Token = token
	q.offsets[id] = off
	return off, nil
}

// CommitQueueOffset implements driver.QueueStore: it writes off when the stored token is
// off.Token and the stored Version is below off.Version, returns nil when the stored
// offset already is off, and LockLost otherwise.
func (s *Store) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	const op = "memory.CommitQueueOffset"
	check := checkQueueGroup(name, group, p)
	if check == nil && off.Attempts < 0 {
		check = driver.Errorf(dcsync.InvalidArgument, op, "attempts %d is negative", off.Attempts)
	}
	if check == nil {
		check = driver.ValidateQueueMarks(op, off)
	}
	if err := s.begin(ctx, check); err != nil {
		return err
	}
	defer s.mu.Unlock()
	q, err := s.queue(op, name)
	if err != nil {
		return err
	}
	id := offsetID{group, p}
	cur := q.offsets[id]
	switch {
	case off.Token == 0 || cur.Token != off.Token:
		return driver.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q is owned by token %d, not %d", p, name, group, cur.Token, off.Token)
	case cur == off:
		return nil // an earlier attempt of this write landed
	case cur.Version >= off.Version:
		return driver.Errorf(dcsync.LockLost, op, "partition %d of queue %q group %q holds version %d of token %d, not below %d", p, name, group, cur.Version, off.Token, off.Version)
	}
	if floor := q.part(p).floor; off.Next < cur.Next && off.Next < floor {
		return driver.Errorf(dcsync.InvalidArgument, op, "partition %d of queue %q: the events below seq %d were trimmed; group %q cannot move back to %d", p, name, floor, group, off.Next)
	}
	q.offsets[id] = off
	return nil
}

// trimLimit returns the lowest Next of the offsets that read storage partition p
// (every group's of an event partition, the owning group's of a dead-letter one).
func (q *memQueue) trimLimit(p int) uint64 {
	limit := uint64(math.MaxUint64)
	for i, g := range q.spec.Groups {
		if p < q.spec.Partitions || p == q.spec.Partitions+i {
			limit = min(limit, q.offsets[offsetID{g, p}].Next)
		}
	}
	return limit
}

// ReadQueueOffsets implements driver.QueueStore.
func (s *Store) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	check := checkQueueGroup(name, group, 0)
	if check == nil {
		check = driver.ValidateQueuePartitions(name, ps)
	}
	if err := s.begin(ctx, check); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.ReadQueueOffsets", name)
	if err != nil {
		return nil, err
	}
	out := make([]driver.QueueOffset, len(ps))
	for i, p := range ps {
		out[i] = q.offsets[offsetID{group, p}]
	}
	return out, nil
}

// TrimQueue implements driver.QueueStore: under the store's mutex it trims below the
// lowest of below and the offsets that read the partition.
func (s *Store) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	if err := s.begin(ctx, driver.ValidateQueueRead(name, p, 1)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	q, err := s.queue("memory.TrimQueue", name)
	if err != nil {
		return err
	}
	mp := q.part(p)
	if below > mp.head() {
		return driver.Errorf(dcsync.InvalidArgument, "memory.TrimQueue", "trim of partition %d below %d, beyond its head %d", p, below, mp.head())
	}
	if below = min(below, q.trimLimit(p)); below <= mp.floor {
		return nil
	}
	// Copy the rest so the trimmed entries' memory goes.
	mp.entries = slices.Clone(mp.entries[below-mp.floor:])
	mp.floor = below
	return nil
}
