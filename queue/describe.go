package queue

// Operators' reads of a queue: List (every queue of a store) and Describe (a queue's
// groups, per partition: bounds, offset and the partition lock's holder, and the
// groups' live member slots). They read, never write.

import (
	"context"
	"errors"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// List returns the spec of every queue in s, sorted by name. s must implement
// driver.QueueLister (every store of this module does); otherwise List returns a
// NotImplemented error. It is an operator's call: on HBase and Aerospike it scans
// the stored specs.
func List(ctx context.Context, s driver.Store) ([]Spec, error) {
	l, ok := s.(driver.QueueLister)
	if !ok {
		return nil, driver.Errorf(dcsync.NotImplemented, "queue.List", "the store cannot list its queues (%T does not implement driver.QueueLister)", s)
	}
	return l.ListQueues(ctx)
}

// inspect reads the locks at keys (inspectLocks).
func (q *Queue) inspect(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return inspectLocks(ctx, q.store, keys)
}

// inspectChunk bounds the keys of one InspectLocks call of the operators' calls
// (Describe, Reset, Delete: a queue of 4,096 partitions has that many partition locks
// per group).
const inspectChunk = 4096

// inspectLocks reads the locks at keys, inspectChunk at a time (one round trip each on
// a store with driver.LockBatcher); result i belongs to keys[i], its Err nil (held) or
// NotFound (free). Any other error of a lock is returned.
func inspectLocks(ctx context.Context, s driver.LockStore, keys []dcsync.Key) ([]driver.LockResult, error) {
	out := make([]driver.LockResult, 0, len(keys))
	for i := 0; i < len(keys); i += inspectChunk {
		res, err := driver.InspectLocks(ctx, s, keys[i:min(len(keys), i+inspectChunk)])
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r.Err != nil && !errors.Is(r.Err, dcsync.ErrNotFound) {
				return nil, r.Err
			}
		}
		out = append(out, res...)
	}
	return out, nil
}

// Holder is the holder of a lock of the queue's consumers: a partition's owner or a
// member slot's.
type Holder struct {
	// Owner is the acquisition's owner id (lock.Lock.Owner).
	Owner string
	// Token is the lock's fencing token: for a partition, the token its owner installs
	// in the group's offset record.
	Token uint64
	// Expires is when the lease ends unless renewed, by the store's clock.
	Expires time.Time
}

// PartitionState is one partition of a group as Describe reads it.
type PartitionState struct {
	// Partition is the storage partition: an event partition, or the group's
	// dead-letter partition (Dead).
	Partition int
	// Dead labels the group's dead-letter partition (Spec().Partitions + the group's
	// index).
	Dead bool
	// Head and Floor are the partition's bounds (driver.QueueBounds).
	Head, Floor uint64
	// Next is the group's first unacknowledged sequence number (raised to Floor); Lag
	// is Head - Next.
	Next, Lag uint64
	// Token is the fencing token stored in the group's offset record: its current or
	// last owner's.
	Token uint64
	// Attempts counts the failed deliveries of the entry at Next; Held reports that
	// the record says an owner has delivered it (an owner that dies then costs it an
	// attempt).
	Attempts int
	Held     bool
	// Owner is the partition lock's holder, nil when nobody holds it.
	Owner *Holder
}

// GroupState is one consumer group as Describe reads it.
type GroupState struct {
	Group string
	// Members are the live member slots of the group's consumers, by slot (dead-letter
	// consumers' slots in DeadMembers).
	Members, DeadMembers []MemberSlot
	// Partitions are the group's event partitions in order, then its dead-letter
	// partition.
	Partitions []PartitionState
}

// MemberSlot is a live member slot of a group: the consumer holding it.
type MemberSlot struct {
	Slot int
	Holder
}

// Description is a queue as Describe reads it.
type Description struct {
	Spec   Spec
	Groups []GroupState
}

// Describe reads the queue's spec and, for each group named (every group when none
// is), each partition's bounds, the group's offset record, the partition lock's
// holder, and the group's live member slots. Locks are those of consumers with this
// handle's identity (WithIdentity). It costs a fixed number of store calls per group:
// bounds and offsets in one batched call each, the locks (the P partition locks and
// P member slots, and the dead-letter consumers') in batched reads (driver.InspectLocks,
// 1024 locks a call). It returns an error matching dcsync.ErrNotFound for a group the
// queue does not have.
func (q *Queue) Describe(ctx context.Context, groups ...string) (Description, error) {
	spec, err := q.store.ReadQueueSpec(ctx, q.Name())
	if err != nil {
		return Description{}, err
	}
	q.spec.Store(&spec)
	if len(groups) == 0 {
		groups = spec.Groups
	}
	d := Description{Spec: spec}
	for _, g := range groups {
		gs, err := q.describeGroup(ctx, spec, g)
		if err != nil {
			return Description{}, err
		}
		d.Groups = append(d.Groups, gs)
	}
	return d, nil
}

func (q *Queue) describeGroup(ctx context.Context, spec Spec, group string) (GroupState, error) {
	if err := driver.ValidateID("group", group); err != nil {
		return GroupState{}, err
	}
	gi := spec.GroupIndex(group)
	if gi < 0 {
		return GroupState{}, driver.Errorf(dcsync.NotFound, "queue.Describe", "queue %q has no group %q", spec.Name, group)
	}
	P := spec.Partitions
	ps := make([]int, 0, P+1)
	for p := 0; p < P; p++ {
		ps = append(ps, p)
	}
	ps = append(ps, P+gi)
	bounds, err := q.store.QueueBounds(ctx, spec.Name, ps)
	if err != nil {
		return GroupState{}, err
	}
	offs, err := q.store.ReadQueueOffsets(ctx, spec.Name, group, ps)
	if err != nil {
		return GroupState{}, err
	}
	keys := groupLockKeys(spec, gi, q.opts.client, q.opts.farm)
	locks, err := q.inspect(ctx, keys)
	if err != nil {
		return GroupState{}, err
	}
	gs := GroupState{Group: group, Partitions: make([]PartitionState, len(ps))}
	for i, p := range ps {
		next := max(offs[i].Next, bounds[i].Floor)
		st := PartitionState{Partition: p, Dead: p >= P, Head: bounds[i].Head, Floor: bounds[i].Floor,
			Next: next, Token: offs[i].Token, Attempts: offs[i].Attempts, Held: offs[i].Held}
		if st.Head > next {
			st.Lag = st.Head - next
		}
		if r := locks[i]; r.Err == nil {
			st.Owner = &Holder{Owner: r.State.Owner, Token: r.State.Token, Expires: r.State.Expires}
		}
		gs.Partitions[i] = st
	}
	for s, r := range locks[P+1:] {
		if r.Err != nil {
			continue
		}
		m := MemberSlot{Slot: s, Holder: Holder{Owner: r.State.Owner, Token: r.State.Token, Expires: r.State.Expires}}
		if s == P {
			m.Slot = 0
			gs.DeadMembers = append(gs.DeadMembers, m)
		} else {
			gs.Members = append(gs.Members, m)
		}
	}
	return gs, nil
}
