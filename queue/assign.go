package queue

// Assignment: which member slot owns which partition, a pure function of the live
// slots, so that every member works out the same answer from the same membership read.
//
// Invariants kept here, each with the test that fails when it is broken:
//
//   - Balanced: with m members and n partitions every member is assigned n/m or
//     n/m+1 partitions (the first n mod m slots, in order, one more), every partition
//     exactly one member. TestAssignBalanced.
//   - Home: a member keeps partition index s, s its slot, while its capacity allows
//     (fewer members than partitions, or s among the first P slots in order).
//     TestAssignBalanced.
//   - Stable: a member joining takes about its share (n/(m+1)) from the others and
//     little else moves; one leaving gives its partitions to the others and little
//     else moves (rendezvous hashing of partition and slot, capacity-bounded), not the
//     near-total reshuffle of "p mod members". TestAssignMovesLittle.
//
// Which member owns a partition never decides safety: partition locks and fencing
// tokens do (rebalance.go). A member whose view differs from another's (a membership
// read in between a join) only contends for a lock until their views agree.

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// score is the rendezvous weight of partition index i for member slot s: a hash,
// except that slot s weighs most for partition s, its home. So a member keeps its home
// partition whoever joins or leaves, and with one member per partition (the group's
// first members take slots 0, 1, ... in order) member s owns partition s.
func score(i, s int) uint64 {
	if i == s {
		return math.MaxUint64
	}
	x := uint64(i)<<32 | uint64(uint32(s))
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return (x ^ x>>31) >> 1
}

// assignments caches assign's results: the members of a process's consumers of one
// group work out the same assignment, once.
var assignments = struct {
	sync.Mutex
	m map[string][]int
}{m: map[string][]int{}}

// assign returns, for each partition index 0..n-1, the slot of members (sorted,
// distinct, not empty) that owns it. The result is shared: do not modify it.
func assign(n int, members []int) []int {
	var b strings.Builder
	b.WriteString(strconv.Itoa(n))
	for _, s := range members {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(s))
	}
	key := b.String()
	assignments.Lock()
	out, ok := assignments.m[key]
	assignments.Unlock()
	if ok {
		return out
	}
	out = computeAssign(n, members)
	assignments.Lock()
	if len(assignments.m) >= 64 {
		clear(assignments.m)
	}
	assignments.m[key] = out
	assignments.Unlock()
	return out
}

func computeAssign(n int, members []int) []int {
	m := len(members)
	q, r := n/m, n%m
	capOf := func(k int) int {
		if k < r {
			return q + 1
		}
		return q
	}
	owner := make([]int, n) // member index
	lists := make([][]int, m)
	// Each partition to its highest-scoring member.
	for i := 0; i < n; i++ {
		bk, bs := 0, uint64(0)
		for k, s := range members {
			if h := score(i, s); k == 0 || h > bs {
				bk, bs = k, h
			}
		}
		owner[i] = bk
		lists[bk] = append(lists[bk], i)
	}
	// Members over their capacity keep their highest-scoring partitions; the rest go,
	// in partition order, each to the highest-scoring member with room.
	load := make([]int, m)
	var pool []int
	for k, l := range lists {
		load[k] = len(l)
		if c := capOf(k); len(l) > c {
			s := members[k]
			slices.SortFunc(l, func(a, b int) int {
				ha, hb := score(a, s), score(b, s)
				switch {
				case ha > hb:
					return -1
				case ha < hb:
					return 1
				}
				return a - b
			})
			pool = append(pool, l[c:]...)
			load[k] = c
		}
	}
	slices.Sort(pool)
	for _, i := range pool {
		bk, bs := -1, uint64(0)
		for k, s := range members {
			if load[k] >= capOf(k) {
				continue
			}
			if h := score(i, s); bk < 0 || h > bs {
				bk, bs = k, h
			}
		}
		owner[i] = bk
		load[bk]++
	}
	for i, k := range owner {
		owner[i] = members[k]
	}
	return owner
}
