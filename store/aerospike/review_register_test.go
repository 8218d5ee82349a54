package aerospike_test

import (
	"testing"

	"github.com/dcsync/dcsync"
)

// TestReviewRegisterInDoubtResolvedByRead: every try of a swap reaches the server and
// every reply is lost (the proxy drops the replies of the swap's writes only; reads get
// through). The first try lands, the later ones are filtered out. driver.RegisterStore
// promises that an unknown outcome is resolved by reading the register back, and an
// error only when neither the read nor a resend gets through: here a read gets through
// and finds this call's own write at gen+1, so the swap is a success. (Before the fix
// the store resent until its tries ran out and returned RetriesExhausted, never
// reading, so a caller was told "unknown" about a write that had landed.)
func TestReviewRegisterInDoubtResolvedByRead(t *testing.T) {
	p, _, s := inDoubtStore(t)
	ctx := ctxT(t)
	for _, gen := range []uint64{0, 1} {
		k := registerKey("allreplies")
		if gen == 1 {
			_, err := s.SwapRegister(ctx, k, 0, []byte("v0"))
			must(t, err, "create")
		}
		p.DropResponses(5, writesTo(dc1Registers)) // every try (Config.Attempts, 5 by default)
		r, err := s.SwapRegister(ctx, k, gen, []byte("mine"))
		p.ClearDrops()
		if err != nil || r.Gen != gen+1 || string(r.Value) != "mine" {
			res, rerr := s.ReadRegisters(ctx, []dcsync.Key{k})
			t.Fatalf("swap at generation %d with every write's reply lost = %+v, %v; the register then reads %+v, %v", gen, r, err, res, rerr)
		}
		wantRegisterIs(t, s, k, gen+1, "mine", "after the swap")
	}
}
