package queue

import (
	"context"
	"errors"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// WithForce makes Delete delete a queue whose consumers still hold locks: it frees
// their partition locks and member slots first. Other functions ignore it.
func WithForce() Option { return func(o *options) { o.force = true } }

// releaseTries bounds how often Delete, with WithForce, frees one lock that another
// consumer keeps taking again.
const releaseTries = 8

// Delete deletes queue name and every record the store keeps of it (its spec,
// partitions, events, dead letters, offsets, remembered event ids: see
// driver.QueueDeleter), so that a queue created again under the name starts empty.
// It returns an error matching dcsync.ErrNotFound when there is no such queue, and
// NotImplemented when the store cannot delete queues (every store of this module can).
//
// While a consumer of the queue holds a partition lock or a member slot, Delete refuses
// with an error matching dcsync.ErrLockUnavailable and deletes nothing, unless
// WithForce is given: it then frees those locks (their consumers get LockLost at their
// next renewal, and NotFound or LockLost from their next store call) and deletes. The
// locks are looked up under the identity of WithIdentity (the default one when
// absent): give the one the consumers use. Their fencing counters stay in the store,
// so that tokens keep increasing across the queue's deletion and re-creation: a
// consumer of the deleted queue can never ack into a new one of the same name.
//
// The check and the delete are not one atomic step: a consumer that joins between
// them is cut off as with WithForce. Stop producers first too: on HBase and Aerospike
// an event appended while Delete runs may outlive it (see driver.QueueDeleter). A
// Delete cut short (an error, a crash) leaves the queue, or on HBase a queue that reads
// as deleted, which another Delete (or, on HBase, a Create of the name) finishes.
func Delete(ctx context.Context, s driver.Store, name string, opts ...Option) error {
	const op = "queue.Delete"
	if s == nil {
		return driver.Errorf(dcsync.InvalidArgument, op, "store is nil")
	}
	if err := driver.ValidateID("queue", name); err != nil {
		return err
	}
	o, err := newOptions(opts)
	if err != nil {
		return err
	}
	del, ok := s.(driver.QueueDeleter)
	if !ok {
		return driver.Errorf(dcsync.NotImplemented, op, "the store (%T) cannot delete queues", s)
	}
	spec, err := s.ReadQueueSpec(ctx, name)
	if errors.Is(err, dcsync.ErrNotFound) {
		// No queue, or (HBase) one whose Delete was cut short after it marked the queue
		// deleted: the store's DeleteQueue finishes that one, and reports NotFound
		// otherwise.
		return del.DeleteQueue(ctx, name)
	}
	if err != nil {
		return err
	}
	keys := lockKeys(spec, o.client, o.farm)
	res, err := inspectLocks(ctx, s, keys)
	if err != nil {
		return err
	}
	var held []int
	for i, r := range res {
		if r.Err == nil {
			held = append(held, i)
		}
	}
	if len(held) > 0 && !o.force {
		return driver.Errorf(dcsync.LockUnavailable, op, "queue %q: %d partition locks and member slots are held by consumers (%s, ...): stop them, or delete WithForce", name, len(held), keys[held[0]].Name)
	}
	for _, i := range held {
		if err := free(ctx, s, keys[i], res[i].State.Owner); err != nil {
			return err
		}
	}
	return del.DeleteQueue(ctx, name)
}

// free releases the lock at k, held by owner when inspected, whoever holds it by then.
func free(ctx context.Context, s driver.Store, k dcsync.Key, owner string) error {
	for try := 0; ; try++ {
		err := s.ReleaseLock(ctx, k, owner)
		if err == nil || !errors.Is(err, dcsync.ErrLockLost) {
			return err
		}
		st, err := s.InspectLock(ctx, k)
		switch {
		case errors.Is(err, dcsync.ErrNotFound):
			return nil
		case err != nil:
			return err
		case try >= releaseTries:
			return driver.Errorf(dcsync.LockUnavailable, "queue.Delete", "%s: consumers keep taking it", k)
		}
		owner = st.Owner
	}
}

// lockKeys are the keys of every lock a consumer of spec's queue can take under
// identity (client, farm): for each group, the partition locks and member slots of its
// consumers (one of each per partition) and of its dead-letter consumers (its
// dead-letter partition, slot 0).
func lockKeys(spec Spec, client, farm string) []dcsync.Key {
	keys := make([]dcsync.Key, 0, len(spec.Groups)*(2*spec.Partitions+2))
	for gi := range spec.Groups {
		keys = append(keys, groupLockKeys(spec, gi, client, farm)...)
	}
	return keys
}

// groupLockKeys returns the keys of the locks group gi's consumers of identity
// (client, farm) take, in this order: the P partition locks, the dead-letter
// partition's, the P member slots, the dead-letter consumers' slot.
func groupLockKeys(spec Spec, gi int, client, farm string) []dcsync.Key {
	P, g := spec.Partitions, spec.Groups[gi]
	keys := make([]dcsync.Key, 0, 2*P+2)
	key := func(kind string, dead bool, n int) {
		keys = append(keys, dcsync.Key{Level: dcsync.XDC, Client: client, Farm: farm, Name: lockName(spec.Name, g, kind, dead, n)})
	}
	for p := 0; p < P; p++ {
		key("p", false, p)
	}
	key("p", true, P+gi)
	for s := 0; s < P; s++ {
		key("m", false, s)
	}
	key("m", true, 0)
	return keys
}
