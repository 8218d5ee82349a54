package hbase

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// specRace runs between, once, on the first CheckAndMutate it sees (the spec write of
// an AddQueueGroup), and then applies that write (apply) or drops it, reporting its
// reply lost either way.
type specRace struct {
	queueOps
	between func()
	apply   bool
	done    bool
}

func (r *specRace) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	if r.done {
		return r.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
	}
	r.done = true
	if r.apply {
		r.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
	}
	r.between()
	return false, nil, errLost
}

// AddQueueGroup whose spec write was in doubt tells its own add from another's: when
// another store added the same group meanwhile (its own write not applied) it returns
// AlreadyExists, as the contract says of a group that exists; when its own write landed
// and another group was added after it, nil. It recognises its own add by the id it
// records in the spec (specDoc.Adders), which no other call writes.
func TestAddQueueGroupInDoubtRaces(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	t.Run("AnotherAddedTheGroup", func(t *testing.T) {
		s, other := openQueueStore(t), openQueueStore(t)
		defer s.Close()
		defer other.Close()
		name := qname(t)
		must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g"}}), "CreateQueue")
		s.queue().db = &specRace{queueOps: s.client, between: func() {
			_, err := other.AddQueueGroup(ctx, name, "c1")
			must(t, err, "the other store's AddQueueGroup")
		}}
		_, err := s.AddQueueGroup(ctx, name, "c1")
		wantCode(t, err, dcsync.AlreadyExists, "AddQueueGroup whose write was lost while another store added the group")
	})
	t.Run("OwnAddLandedThenAnotherGroup", func(t *testing.T) {
		s, other := openQueueStore(t), openQueueStore(t)
		defer s.Close()
		defer other.Close()
		name := qname(t)
		must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g"}}), "CreateQueue")
		s.queue().db = &specRace{queueOps: s.client, apply: true, between: func() {
			_, err := other.AddQueueGroup(ctx, name, "c2")
			must(t, err, "the other store's AddQueueGroup")
		}}
		spec, err := s.AddQueueGroup(ctx, name, "c1")
		must(t, err, "AddQueueGroup whose write landed with its reply lost")
		if len(spec.Groups) != 3 {
			t.Fatalf("groups %v, want g, c1, c2", spec.Groups)
		}
		_, err = other.AddQueueGroup(ctx, name, "c1")
		wantCode(t, err, dcsync.AlreadyExists, "the group added again by another store")
	})
}
