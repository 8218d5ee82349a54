package queue

// Membership: a group's member slots, read in one batched call.
//
// A consumer joins its group by taking a member slot, a lock (slot s of len(parts)),
// and every member reads the slots to know the group. Reading every slot would cost
// a store call, or a batch, of P locks per read; members instead keep the occupied
// slots low and read only from slot 0 to memberWindow past the highest they know.
//
// Invariants kept here, each with the test that fails when it is broken:
//
//   - A read sees every member whose slot is at most memberWindow/2 above the member
//     below it (or above slot -1): it reads on, in another call, while it finds a
//     member in the top half of what it read. TestReadMembersFollowsTheChain.
//   - Members keep their slots so packed: a joiner takes one of the lowest free slots
//     (at most memberWindow/2 of them, rebalance.go, join), and a member with memberWindow/2 or more free
//     slots below it (left by members gone) moves down to one of the lowest free
//     slots (rebalance.go, run). TestMemberAboveAGapMovesDown.
//   - Consumers of one process joining one group together through one store handle
//     try distinct slots: a joiner leaves out the slots the others hold or are trying
//     (localSlots), so they do not race one another for the lowest free slot, one
//     winner per round. TestJoinersOfOneProcessTrySlotsOnce (internal/queuebench).
//   - A membership read is one call (driver.InspectLocks: one round trip on a store
//     with driver.LockBatcher) whatever the partition count, while the group grows by
//     less than memberWindow/2 between two reads. TestScaleIdleCallsDoNotGrowWithP
//     (internal/queuebench).
//
// Membership decides only who tries to own what: partition locks and fencing tokens
// keep every delivery invariant (rebalance.go), whatever any member's view.

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// memberWindow is how many slots past the highest member known a read covers.
const memberWindow = 32

// memberKey is the store key of member slot s: the key the lock manager builds for
// c.lockName("m", s) at level XDC.
func (c *Consumer) memberKey(s int) dcsync.Key {
	return dcsync.Key{Level: dcsync.XDC, Client: c.q.opts.client, Farm: c.q.opts.farm, Name: c.lockName("m", s)}
}

// readMembers returns the occupied member slots, in order: it reads slots 0 to
// memberWindow past from in one batched call, and reads on while it finds a member in
// the top half of what it read. Only the run goroutine calls it (it keeps the keys).
func (c *Consumer) readMembers(ctx context.Context, from int) ([]int, error) {
	slots := len(c.parts)
	var occ []int
	start, end := 0, min(slots, from+memberWindow)
	for {
		for len(c.memberKeys) < end {
			c.memberKeys = append(c.memberKeys, c.memberKey(len(c.memberKeys)))
		}
		keys := c.memberKeys[start:end]
		res, err := driver.InspectLocks(ctx, c.q.store, keys)
		if err != nil {
			return nil, err
		}
		for i, r := range res {
			switch {
			case r.Err == nil:
				occ = append(occ, start+i)
			case errors.Is(r.Err, dcsync.ErrNotFound):
			default:
				return nil, r.Err
			}
		}
		top := -1
		if len(occ) > 0 {
			top = occ[len(occ)-1]
		}
		if end >= slots || top < end-memberWindow/2 {
			return occ, nil
		}
		start, end = end, min(slots, top+1+memberWindow)
	}
}

// freeSlots returns up to n of the lowest slots below slots that occ (sorted) does
// not hold.
func freeSlots(occ []int, slots, n int) []int {
	var out []int
	j := 0
	for s := 0; s < slots && len(out) < n; s++ {
		for j < len(occ) && occ[j] < s {
			j++
		}
		if j < len(occ) && occ[j] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

// localSlots records, per store handle and group, the member slots this process's
// consumers hold or are trying to take, so that consumers joining together through one
// store handle pick distinct slots instead of racing one another for the lowest free
// one. It is a hint only: the member locks decide who holds a slot. Consumers on
// different store handles (or a store whose type cannot be a map key) race as
// consumers of different processes do.
var localSlots = struct {
	sync.Mutex
	m map[slotGroup]map[int]int // slot -> holders and triers
}{m: map[slotGroup]map[int]int{}}

// slotGroup names a group's member slots in localSlots: the store handle and the
// name of the group's slot 0.
type slotGroup struct {
	store driver.Store
	group string
}

// slotGroup returns the consumer's key in localSlots; ok is false when its store
// cannot be a map key.
func (c *Consumer) slotGroup() (slotGroup, bool) {
	if t := reflect.TypeOf(c.q.store); t == nil || !t.Comparable() {
		return slotGroup{}, false
	}
	return slotGroup{store: c.q.store, group: c.lockName("m", 0)}, true
}

// pickSlot returns, and marks as this process's, one of the n lowest slots below
// slots that neither occ (sorted) nor another consumer of this process holds or is
// trying (at random among them); ok is false when every slot is taken.
func (c *Consumer) pickSlot(occ []int, slots, n int) (s int, ok bool) {
	group, local := c.slotGroup()
	localSlots.Lock()
	defer localSlots.Unlock()
	mine := localSlots.m[group]
	if !local {
		mine = nil
	}
	taken := slices.Clone(occ)
	for t := range mine {
		taken = append(taken, t)
	}
	slices.Sort(taken)
	free := freeSlots(slices.Compact(taken), slots, n)
	if len(free) == 0 {
		return 0, false
	}
	s = free[rand.IntN(len(free))]
	if !local {
		return s, true
	}
	if mine == nil {
		mine = map[int]int{}
		localSlots.m[group] = mine
	}
	mine[s]++
	return s, true
}

// unmarkSlot ends pickSlot's mark of slot s: the consumer did not get it, or gave it
// up.
func (c *Consumer) unmarkSlot(s int) {
	group, local := c.slotGroup()
	if !local {
		return
	}
	localSlots.Lock()
	defer localSlots.Unlock()
	mine := localSlots.m[group]
	if mine == nil {
		return
	}
	if mine[s]--; mine[s] <= 0 {
		delete(mine, s)
	}
	if len(mine) == 0 {
		delete(localSlots.m, group)
	}
}
