package aerospike_test

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestReviewElectionRegisterRepliesLost: through the fault proxy, every reply of the
// register writes of a Campaign and then of a Proclaim is lost (each lands). The
// election must not trip over its own writes (no Conflict with itself, no LockLost):
// Campaign returns the leadership with value a, Proclaim succeeds, each landed once
// (generations 1 and 2), and Leader reports the leader with b.
func TestReviewElectionRegisterRepliesLost(t *testing.T) {
	p, _, s := inDoubtStore(t)
	ctx := ctxT(t)
	m, err := election.New(s, client, "dc1", election.WithTTL(time.Minute))
	must(t, err, "election.New")
	name := unique("review-elect")
	p.DropResponses(5, writesTo(dc1Registers))
	ld, err := m.Campaign(ctx, name, "a")
	p.ClearDrops()
	must(t, err, "Campaign with the register write's replies lost")
	if d := p.Stats().Dropped; d == 0 {
		t.Fatal("the proxy dropped no reply during Campaign")
	}
	wantRegisterGen(t, s, ld.Key(), 1, "after Campaign")
	p.DropResponses(5, writesTo(dc1Registers))
	err = ld.Proclaim(ctx, "b")
	p.ClearDrops()
	must(t, err, "Proclaim with the register write's replies lost")
	t.Logf("replies dropped: %d", p.Stats().Dropped)
	wantRegisterGen(t, s, ld.Key(), 2, "after Proclaim")
	got, err := m.Leader(ctx, name)
	if err != nil || got.Token != ld.Token() || got.Value != "b" {
		t.Fatalf("Leader = %+v, %v; want token %d value b", got, err, ld.Token())
	}
	if ld.Context().Err() != nil {
		t.Fatalf("leadership ended: %v", ld.Context().Err())
	}
	must(t, ld.Resign(ctx), "Resign")
}

func wantRegisterGen(t *testing.T, s *aerospike.Store, k dcsync.Key, gen uint64, what string) {
	t.Helper()
	res, err := s.ReadRegisters(ctxT(t), []dcsync.Key{k})
	must(t, err, what+": ReadRegisters")
	must(t, res[0].Err, what+": ReadRegisters result")
	if r := res[0].Register; r.Gen != gen {
		t.Fatalf("%s: the register is at generation %d (% x), want %d", what, r.Gen, r.Value, gen)
	}
}
