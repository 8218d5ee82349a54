package queue

// Resetting a group's offsets: the operator's seek of a whole group (dcsync queue
// seek), modelled on Kafka's kafka-consumer-groups --reset-offsets.
//
// Invariants, each with the test that fails when it is broken (reset_test.go):
//
//   - A reset is refused (LockUnavailable, nothing written) while the group has live
//     members: a member slot or a partition lock held. TestResetRefusedWhileLive.
//   - Every write of a reset is made as an owner: the reset takes the partition's lock
//     (a fresh fencing token, greater than every earlier one), claims the offset record
//     with it (ClaimQueuePartition: the store refuses a token not above the stored
//     one) and writes the new offset conditioned on that token and on the Version it
//     read (CommitQueueOffset), then releases the lock. So a consumer that joins
//     mid-reset cannot take the partition until the reset wrote it, and then reads the
//     reset offset; a consumer that owned it before (a zombie, or a live owner whose
//     lock --force broke) has every later write refused by the stored token, and the
//     reset's own write is refused if any owner claimed the record in between
//     (its token is then below the stored one). TestResetFencesTheOwnerItBroke,
//     TestResetRefusedByALaterOwner.
//   - A trim never undoes a reset: the store refuses a move back below the floor and
//     holds back every trim that has not yet raised the floor past the offset written
//     (driver.QueueStore.TrimQueue); a target a trim passed after the plan read the
//     floor is raised to the new floor, as at planning. TestReviewTrimDoesNotUndoAReset,
//     TestReviewTrimDoesNotUndoAForcedReset, TestResetKeptWithinARaisedFloor.
//   - The reset takes every partition lock it needs before it writes any offset: a
//     partition found held (without Force) refuses the whole reset, nothing written.
//     TestResetRefusedWhileLive (a partition lock held, no member slot).

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// ResetTarget says where Reset moves a group's offsets: ToEarliest, ToLatest, ToSeq or
// ToTime.
type ResetTarget struct {
	kind int
	seqs map[int]uint64
	at   time.Time
}

const (
	toEarliest = iota + 1
	toLatest
	toSeq
	toTime
)

// ToEarliest moves every event partition's offset to its floor: every event still
// stored is delivered again.
func ToEarliest() ResetTarget { return ResetTarget{kind: toEarliest} }

// ToLatest moves every event partition's offset to its head: nothing stored now is
// delivered.
func ToLatest() ResetTarget { return ResetTarget{kind: toLatest} }

// ToSeq moves the offsets of the partitions named (storage partitions: the group's
// dead-letter partition may be named) to the sequence numbers given, each kept within
// the partition's [Floor, Head]. The other partitions are left alone.
func ToSeq(seqs map[int]uint64) ResetTarget {
	m := make(map[int]uint64, len(seqs))
	for p, s := range seqs {
		m[p] = s
	}
	return ResetTarget{kind: toSeq, seqs: m}
}

// ToTime moves every event partition's offset to its first event appended at or after
// t, by the store's clock (the partition's head when there is none).
func ToTime(t time.Time) ResetTarget { return ResetTarget{kind: toTime, at: t} }

// ResetOption modifies Reset.
type ResetOption func(*resetOptions)

type resetOptions struct{ force, dryRun bool }

// Force resets while the group has live members: the holders of the partition locks
// are broken (each release conditioned on the holder read) and fenced by the reset's
// fresh tokens, so their later acks are refused; they take the partitions again with
// greater tokens and deliver from the new offsets. Live member slots are left alone.
func Force() ResetOption { return func(o *resetOptions) { o.force = true } }

// DryRun computes the plan and reports the live members, and writes nothing.
func DryRun() ResetOption { return func(o *resetOptions) { o.dryRun = true } }

// PartitionReset is one partition's part of a Reset.
type PartitionReset struct {
	Partition int
	// Dead labels the group's dead-letter partition.
	Dead bool
	// From is the group's offset before the reset (raised to the floor), To after it.
	From, To uint64
	// Head and Floor are the partition's bounds when the plan was made.
	Head, Floor uint64
	// Owner is the partition lock's holder when the plan was made (nil: none); with
	// Force it was broken.
	Owner *Holder
	// Applied reports that the new offset is stored.
	Applied bool
}

// ResetResult is what Reset planned and did.
type ResetResult struct {
	Group      string
	Partitions []PartitionReset
	// Members are the live member slots of the group's consumers when the plan was
	// made (of event partitions, and DeadMembers of its dead-letter consumers).
	Members, DeadMembers []MemberSlot
	// DryRun: nothing was written.
	DryRun bool
}

// Live reports whether the group had live members when the plan was made: a member
// slot or a partition lock held.
func (r ResetResult) Live() bool {
	if len(r.Members)+len(r.DeadMembers) > 0 {
		return true
	}
	for _, p := range r.Partitions {
		if p.Owner != nil {
			return true
		}
	}
	return false
}

// Reset moves group's offsets to target (see ResetTarget), as Kafka's
// --reset-offsets does: the events from the new offset on are delivered to the group
// (again), with no attempts and no acks recorded above it. It returns an error
// matching dcsync.ErrLockUnavailable, and writes nothing, while the group has live
// members (a member slot or a partition lock held) unless Force is given; with
// DryRun it returns the plan and writes nothing. Every write is fenced (see the
// invariants in reset.go): a consumer that joins during the reset waits for its
// partition until the reset wrote it, and an owner that claimed the partition after
// the reset took its lock (the reset's lease lapsed) wins: the reset's write is
// refused with LockLost. The result says which partitions were written (Applied),
// also with an error. Locks are those of consumers with this handle's identity
// (WithIdentity): give the one the group's consumers use.
func (q *Queue) Reset(ctx context.Context, group string, target ResetTarget, opts ...ResetOption) (ResetResult, error) {
	const op = "queue.Reset"
	var o resetOptions
	for _, f := range opts {
		f(&o)
	}
	if target.kind == 0 {
		return ResetResult{}, driver.Errorf(dcsync.InvalidArgument, op, "no reset target")
	}
	if target.kind == toSeq && len(target.seqs) == 0 {
		return ResetResult{}, driver.Errorf(dcsync.InvalidArgument, op, "no partition to reset")
	}
	spec, err := q.store.ReadQueueSpec(ctx, q.Name())
	if err != nil {
		return ResetResult{}, err
	}
	q.spec.Store(&spec)
	gs, err := q.describeGroup(ctx, spec, group)
	if err != nil {
		return ResetResult{}, err
	}
	gi := spec.GroupIndex(group)
	res := ResetResult{Group: group, Members: gs.Members, DeadMembers: gs.DeadMembers, DryRun: o.dryRun}
	var ps []PartitionState
	switch target.kind {
	case toSeq:
		for p := range target.seqs {
			if p < 0 || (p >= spec.Partitions && p != spec.Partitions+gi) {
				return ResetResult{}, driver.Errorf(dcsync.InvalidArgument, op, "queue %q has no partition %d for group %q (event partitions 0 to %d, dead letters %d)", spec.Name, p, group, spec.Partitions-1, spec.Partitions+gi)
			}
			i := p
			if p >= spec.Partitions {
				i = spec.Partitions
			}
			ps = append(ps, gs.Partitions[i])
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
	default:
		ps = gs.Partitions[:spec.Partitions]
	}
	for _, st := range ps {
		pr := PartitionReset{Partition: st.Partition, Dead: st.Dead, From: st.Next, Head: st.Head, Floor: st.Floor, Owner: st.Owner}
		switch target.kind {
		case toEarliest:
			pr.To = st.Floor
		case toLatest:
			pr.To = st.Head
		case toSeq:
			pr.To = min(max(target.seqs[st.Partition], st.Floor), st.Head)
		case toTime:
			if pr.To, err = q.seqAt(ctx, spec.Name, st, target.at); err != nil {
				return ResetResult{}, err
			}
		}
		res.Partitions = append(res.Partitions, pr)
	}
	// Live members: the event partitions' consumers when an event partition is reset,
	// the dead-letter consumers when the dead-letter partition is.
	var live []MemberSlot
	if !res.Partitions[0].Dead {
		live = append(live, res.Members...)
	}
	if res.Partitions[len(res.Partitions)-1].Dead {
		live = append(live, res.DeadMembers...)
	}
	held := 0
	for _, pr := range res.Partitions {
		if pr.Owner != nil {
			held++
		}
	}
	if o.dryRun {
		return res, nil
	}
	if (len(live) > 0 || held > 0) && !o.force {
		return res, driver.Errorf(dcsync.LockUnavailable, op, "group %q of queue %q has live members (%d member slots and %d partition locks held): stop its consumers, or force the reset", group, spec.Name, len(live), held)
	}
	return q.applyReset(ctx, spec, res, o.force)
}

// applyReset takes every partition's lock (breaking a holder's with force), then
// claims and writes each offset, then releases the locks.
func (q *Queue) applyReset(ctx context.Context, spec Spec, res ResetResult, force bool) (ResetResult, error) {
	const op = "queue.Reset"
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	locks := make([]*lock.Lock, len(res.Partitions))
	defer func() {
		for _, lk := range locks {
			if lk != nil {
				q.releaseResetLock(lk)
			}
		}
	}()
	for i, pr := range res.Partitions {
		name := lockName(spec.Name, res.Group, "p", pr.Dead, pr.Partition)
		lk, err := q.locks.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
		if errors.Is(err, dcsync.ErrLockUnavailable) && force {
			var st lock.State
			if st, err = q.locks.Inspect(ctx, name, lock.Level(dcsync.XDC)); err == nil {
				err = q.locks.Release(ctx, name, st.Owner, lock.Level(dcsync.XDC))
				if err == nil || errors.Is(err, dcsync.ErrLockLost) || errors.Is(err, dcsync.ErrNotFound) {
					lk, err = q.locks.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
				}
			} else if errors.Is(err, dcsync.ErrNotFound) {
				lk, err = q.locks.TryAcquire(ctx, name, lock.Level(dcsync.XDC))
			}
		}
		if err != nil {
			return res, driver.Errorf(dcsync.CodeOf(err), op, "partition %d of group %q (nothing reset): %w", pr.Partition, res.Group, err)
		}
		locks[i] = lk
		lk.KeepAlive(kctx)
	}
	for i, pr := range res.Partitions {
		lk := locks[i]
		off, err := q.store.ClaimQueuePartition(ctx, spec.Name, res.Group, pr.Partition, lk.Token())
		if err != nil {
			return res, driver.Errorf(dcsync.CodeOf(err), op, "partition %d of group %q: claim: %w", pr.Partition, res.Group, err)
		}
		next := driver.QueueOffset{Token: lk.Token(), Next: pr.To, Version: off.Version + 1}
		for try := 0; ; try++ {
			err := q.store.CommitQueueOffset(ctx, spec.Name, res.Group, pr.Partition, next)
			if err == nil {
				break
			}
			if dcsync.CodeOf(err) == dcsync.InvalidArgument && try < 3 {
				// A trim raised the floor above the target after the plan read it (the
				// store refuses a move back below the floor, writing nothing): the
				// target is kept within the floor, as at planning.
				b, berr := q.store.QueueBounds(ctx, spec.Name, []int{pr.Partition})
				if berr == nil && b[0].Floor > next.Next {
					res.Partitions[i].Floor, res.Partitions[i].To = b[0].Floor, b[0].Floor
					next.Next, next.Version = b[0].Floor, next.Version+1
					continue
				}
			}
			if dcsync.CodeOf(err) == dcsync.InvalidArgument {
				return res, driver.Errorf(dcsync.InvalidArgument, op, "partition %d of group %q: the events from seq %d on were trimmed while the reset ran (the partitions before it are reset): seek again: %w", pr.Partition, res.Group, next.Next, err)
			}
			return res, driver.Errorf(dcsync.CodeOf(err), op, "partition %d of group %q: %w", pr.Partition, res.Group, err)
		}
		res.Partitions[i].Applied = true
	}
	return res, nil
}

func (q *Queue) releaseResetLock(lk *lock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lk.Release(ctx)
}

// seqAt returns the sequence number of partition st's first event appended at or
// after t (by a binary search over [Floor, Head) with reads of a few entries), or
// Head when every stored event is older. Tombstones and unwritten seqs carry no time:
// a probe takes the first timed entry at or after its seq.
func (q *Queue) seqAt(ctx context.Context, name string, st PartitionState, t time.Time) (uint64, error) {
	lo, hi := st.Floor, st.Head
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := q.store.ReadQueue(ctx, name, st.Partition, mid, 16)
		if err != nil {
			return 0, err
		}
		var probe *driver.QueueEntry
		for i := range r.Entries {
			if e := &r.Entries[i]; !e.Aborted && !e.At.IsZero() && e.Seq < hi {
				probe = e
				break
			}
		}
		switch {
		case probe == nil:
			// Nothing timed in [mid, hi) as far as read: treat mid as older.
			lo = mid + 1
		case probe.At.Before(t):
			lo = probe.Seq + 1
		default:
			hi = mid
		}
	}
	return lo, nil
}
