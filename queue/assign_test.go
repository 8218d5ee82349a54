package queue

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func loads(owners, members []int) map[int]int {
	out := map[int]int{}
	for _, s := range members {
		out[s] = 0
	}
	for _, s := range owners {
		out[s]++
	}
	return out
}

// Every partition has one owner among the members, each member n/m or n/m+1 (the
// first n mod m slots the more), and each keeps its home partition.
func TestAssignBalanced(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 16, 100, 256, 4096} {
		for _, m := range []int{1, 2, 3, 7, 64, 300} {
			if m > n {
				continue // slots are 0..n-1
			}
			members := r.Perm(n)[:m]
			slices.Sort(members)
			owners := computeAssign(n, members)
			if len(owners) != n {
				t.Fatalf("n=%d m=%d: %d owners", n, m, len(owners))
			}
			l := loads(owners, members)
			if len(l) != len(members) {
				t.Fatalf("n=%d members %v: owners outside the members: %v", n, members, l)
			}
			q, rem := n/len(members), n%len(members)
			for k, s := range members {
				want := q
				if k < rem {
					want++
				}
				if l[s] != want {
					t.Fatalf("n=%d m=%d: slot %d owns %d partitions, want %d", n, len(members), s, l[s], want)
				}
				if want > 0 && owners[s] != s {
					t.Fatalf("n=%d m=%d: slot %d does not own its home partition (owner %d)", n, len(members), s, owners[s])
				}
			}
		}
	}
	// The small case the package doc describes: two members, two partitions.
	if got := computeAssign(2, []int{0, 1}); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("assign(2, [0 1]) = %v, want [0 1]", got)
	}
}

// A member joining (or leaving) moves about its share, not most partitions: at most
// 2 n/(m+1) + m partitions change owner (p mod m would move nearly all).
func TestAssignMovesLittle(t *testing.T) {
	for _, n := range []int{256, 4096} {
		members := []int{0}
		prev := computeAssign(n, members)
		worst := 0
		for s := 1; s < 64; s++ {
			members = append(members, s)
			cur := computeAssign(n, members)
			moved := 0
			for i := range cur {
				if cur[i] != prev[i] {
					moved++
				}
			}
			if limit := 2*n/len(members) + len(members); moved > limit {
				t.Fatalf("n=%d: member %d joining %d moved %d partitions, want at most %d", n, s, len(members)-1, moved, limit)
			}
			worst = max(worst, moved*len(members)*100/n)
			prev = cur
		}
		t.Logf("n=%d: a join moved at most %d%% of the minimum (n/members)", n, worst)
		// One in the middle leaves.
		less := slices.Delete(slices.Clone(members), 20, 21)
		cur := computeAssign(n, less)
		moved := 0
		for i := range cur {
			if cur[i] != prev[i] {
				moved++
			}
		}
		if limit := 2*n/len(members) + len(members); moved > limit {
			t.Fatalf("n=%d: a member leaving moved %d partitions, want at most %d", n, moved, limit)
		}
	}
}
