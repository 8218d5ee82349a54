package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/memory"
)

// gated is a memory store whose next SwapRegister, once armed, signals entered and
// waits for release before it writes (a write in flight). With landThenFail it writes
// first and then waits for its ctx to end and fails with Connection (a write that
// landed but whose reply never came).
type gated struct {
	*memory.Store
	mu           sync.Mutex
	armed        bool
	landThenFail bool
	entered      chan struct{}
	release      chan struct{}
}

func (g *gated) arm(landThenFail bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.landThenFail = true, landThenFail
	g.entered, g.release = make(chan struct{}), make(chan struct{})
}

func (g *gated) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	g.mu.Lock()
	armed, land, entered, release := g.armed, g.landThenFail, g.entered, g.release
	g.armed = false
	g.mu.Unlock()
	if !armed {
		return g.Store.SwapRegister(ctx, k, gen, value)
	}
	if land {
		_, err := g.Store.SwapRegister(context.Background(), k, gen, value)
		close(entered)
		if err != nil {
			return driver.Register{}, err
		}
		<-ctx.Done()
		return driver.Register{}, driver.Errorf(dcsync.Connection, "gated", "reply lost: %w", ctx.Err())
	}
	close(entered)
	<-release
	return g.Store.SwapRegister(context.Background(), k, gen, value)
}

// A Proclaim racing Resign: Proclaim's write is in flight when Resign is called. If
// Resign returns (the lock released, leadership over) before that write lands, the
// write must not count: Proclaim must return LockLost and leave the register as it
// was. Otherwise a value is published, and reported as this leader's, after its
// leadership ended (and after the next leader may have taken the lock).
func TestReviewProclaimRacingResign(t *testing.T) {
	g := &gated{Store: memory.New()}
	m := newManager(t, g)
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	g.arm(false)
	perr := make(chan error, 1)
	go func() { perr <- ld.Proclaim(ctx, "b") }()
	<-g.entered
	rdone := make(chan error, 1)
	go func() { rdone <- ld.Resign(ctx) }()
	resignedFirst := false
	select {
	case err := <-rdone:
		// Resign did not wait for the write in flight.
		if err != nil {
			t.Fatal(err)
		}
		resignedFirst = true
	case <-time.After(2 * time.Second):
		// Resign waits for the Proclaim in flight: the linearizable order is Proclaim,
		// then Resign.
	}
	if resignedFirst {
		if _, err := m.Leader(ctx, "e"); dcsync.CodeOf(err) != dcsync.NotFound {
			t.Fatalf("Leader after Resign = %v, want NotFound", err)
		}
	}
	close(g.release)
	err = <-perr
	if !resignedFirst {
		if err := <-rdone; err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatalf("Proclaim that Resign waited for = %v, want nil", err)
		}
		return
	}
	regs, rerr := g.ReadRegisters(ctx, []dcsync.Key{ld.Key()})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if dcsync.CodeOf(err) != dcsync.LockLost {
		t.Fatalf("Proclaim whose write landed after Resign had returned = %v (register now gen %d %q), want LockLost and nothing written", err, regs[0].Register.Gen, regs[0].Register.Value)
	}
}

// Campaign whose ctx ends after it took the lock, while its publish is in doubt (the
// write landed, the reply never came): the lock is released, the error matches ctx's,
// and another candidate takes leadership at once.
func TestReviewCampaignCancelledWhilePublishing(t *testing.T) {
	g := &gated{Store: memory.New()}
	m := newManager(t, g)
	ctx := context.Background()
	g.arm(true)
	cctx, cancel := context.WithCancel(ctx)
	cerr := make(chan error, 1)
	go func() {
		ld, err := m.Campaign(cctx, "e", "a")
		if err == nil {
			err = ld.Resign(ctx)
			if err == nil {
				err = errors.New("Campaign succeeded")
			}
		}
		cerr <- err
	}()
	<-g.entered
	cancel()
	err := <-cerr
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign cancelled while publishing = %v, want an error matching context.Canceled", err)
	}
	if dcsync.CodeOf(err) != dcsync.LockUnavailable {
		t.Fatalf("Campaign cancelled while publishing = %v: code %v, want LockUnavailable (Campaign's doc: when ctx ends first, LockUnavailable matching ctx's error)", err, dcsync.CodeOf(err))
	}
	if l, err := m.Leader(ctx, "e"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("Leader after the failed Campaign = %+v, %v; want NotFound (lock released)", l, err)
	}
	m2 := newManager(t, g)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	ld, err := m2.Campaign(wctx, "e", "b")
	if err != nil {
		t.Fatalf("Campaign after the failed one: %v (lock not released?)", err)
	}
	if got, err := m.Leader(ctx, "e"); err != nil || got.Value != "b" || got.Token != ld.Token() {
		t.Fatalf("Leader = %+v, %v; want token %d value b", got, err, ld.Token())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Proclaim whose write landed but whose reply was lost while its ctx ended returns
// an error; the same Proclaim again succeeds without a Conflict with its own write and
// without writing again, and a different value after it is written.
func TestReviewProclaimInDoubtThenRetried(t *testing.T) {
	g := &gated{Store: memory.New()}
	m := newManager(t, g)
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	g.arm(true)
	pctx, cancel := context.WithCancel(ctx)
	perr := make(chan error, 1)
	go func() { perr <- ld.Proclaim(pctx, "b") }()
	<-g.entered
	cancel()
	if err := <-perr; err == nil {
		t.Fatal("Proclaim whose ctx ended in doubt returned nil")
	}
	if err := ld.Proclaim(ctx, "b"); err != nil {
		t.Fatalf("Proclaim retried after a write in doubt that landed = %v", err)
	}
	if ld.Context().Err() != nil {
		t.Fatalf("leadership ended: %v", context.Cause(ld.Context()))
	}
	regs, _ := g.ReadRegisters(ctx, []dcsync.Key{ld.Key()})
	if regs[0].Register.Gen != 2 {
		t.Fatalf("register at gen %d after Campaign + one landed Proclaim, want 2", regs[0].Register.Gen)
	}
	if err := ld.Proclaim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Leader(ctx, "e"); err != nil || got.Value != "c" {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A leader that resigns and whose process campaigns again at once with the same value:
// the observer gets both leaderships (token up, same value), in order, both from the
// local publish and from a reading observer on another store value... here another
// Manager on the same store value whose observer must see token 1 then token 2.
func TestReviewObserveSameValueReCampaign(t *testing.T) {
	s := memory.New()
	m := newManager(t, s)
	obs := newManager(t, s, election.WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := obs.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint64
	for i := 0; i < 3; i++ {
		ld, err := m.Campaign(ctx, "e", "same")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ld.Token())
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, tok := range tokens {
		select {
		case got := <-ch:
			if got.Token != tok || got.Value != "same" {
				t.Fatalf("observation %d = %+v, want token %d value same", i, got, tok)
			}
		case <-time.After(time.Minute):
			t.Fatalf("observation %d (token %d) never came", i, tok)
		}
	}
	cancel()
	for range ch {
	}
}

// A slow observer does not hold up another observer of the same watcher, and gets
// every change later, in order.
func TestReviewSlowObserver(t *testing.T) {
	s := memory.New()
	m := newManager(t, s, election.WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := m.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	fast, err := m.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := m.Campaign(ctx, "e", "v0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 1; i <= n; i++ {
		if err := ld.Proclaim(ctx, "v"+itoa(i)); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-fast:
			if got.Value != "v"+itoa(i-1) {
				t.Fatalf("fast observer got %q, want v%d", got.Value, i-1)
			}
		case <-time.After(time.Minute):
			t.Fatalf("fast observer blocked behind the slow one at v%d", i-1)
		}
	}
	for i := 0; i <= n; i++ {
		got := <-slow
		if got.Value != "v"+itoa(i) {
			t.Fatalf("slow observer got %q, want v%d", got.Value, i)
		}
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range slow {
	}
	for range fast {
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// Campaign's publish finds a record of a newer format (version 2) written by a newer
// leader (its token, 2, greater than this candidate's 1, at bytes 1-8 as in version 1):
// the register must not go back to token 1. The package doc promises that Campaign
// writes only over a record of a token not greater than its own; a record it cannot
// decode is replaced whatever its token.
func TestReviewCampaignOverNewerFormatRecord(t *testing.T) {
	g := &gated{Store: memory.New()}
	m := newManager(t, g)
	ctx := context.Background()
	g.arm(false)
	type res struct {
		ld  *election.Leadership
		err error
	}
	done := make(chan res, 1)
	go func() {
		ld, err := m.Campaign(ctx, "e", "old")
		done <- res{ld, err}
	}()
	<-g.entered
	// A newer leader of a newer dcsync (token 2, after this candidate's lease lapsed)
	// published a version-2 record.
	k := dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "election:1:e"}
	newer := []byte{2, 0, 0, 0, 0, 0, 0, 0, 2, 'n', 'e', 'w'}
	if _, err := g.Store.SwapRegister(ctx, k, 0, newer); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	r := <-done
	if r.err == nil {
		defer func() { _ = r.ld.Resign(ctx) }()
	}
	regs, err := g.ReadRegisters(ctx, []dcsync.Key{k})
	if err != nil {
		t.Fatal(err)
	}
	if v := regs[0].Register.Value; len(v) < 9 || v[8] != 2 {
		t.Fatalf("Campaign of token %v (err %v) wrote over a newer-format record of token 2: register now % x", tokenOf(r.ld), r.err, v)
	}
}

func tokenOf(ld *election.Leadership) any {
	if ld == nil {
		return nil
	}
	return ld.Token()
}

// flakyRead is flaky (a SwapRegister that lands and then fails with Connection) whose
// next ReadRegisters fails too: the publish resends its write, which meets a Conflict
// with its own landed write.
type flakyRead struct {
	*flaky
	readFails int
}

func (f *flakyRead) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	f.mu.Lock()
	fail := f.readFails > 0
	if fail {
		f.readFails--
	}
	f.mu.Unlock()
	if fail {
		return nil, driver.Errorf(dcsync.Connection, "flakyRead", "read failed")
	}
	return f.flaky.ReadRegisters(ctx, keys)
}

// A Campaign and a Proclaim whose write lands with its reply lost, and whose
// following read fails too: the resend meets a Conflict with the write itself, which is
// recognised (not LockLost, not written twice).
func TestReviewResendConflictsWithOwnWrite(t *testing.T) {
	f := &flakyRead{flaky: &flaky{Store: memory.New()}}
	m := newManager(t, f)
	ctx := context.Background()
	f.fails, f.readFails = 1, 1
	ld, err := m.Campaign(ctx, "e", "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	f.fails, f.readFails = 1, 1
	if err := ld.Proclaim(ctx, "b"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if f.swaps != 2 {
		t.Fatalf("%d register writes, want 2", f.swaps)
	}
	if got, err := m.Leader(ctx, "e"); err != nil || got.Value != "b" {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A leader whose register now holds a newer leader's record of a newer format (version
// 2, token 2 at bytes 1-8): its Proclaim returns LockLost and ends its leadership, as
// for a newer leader's record of this format, and writes nothing.
func TestReviewProclaimOverNewerFormatRecord(t *testing.T) {
	s := memory.New()
	m := newManager(t, s)
	ctx := context.Background()
	ld, err := m.Campaign(ctx, "e", "old")
	if err != nil {
		t.Fatal(err)
	}
	newer := []byte{2, 0, 0, 0, 0, 0, 0, 0, byte(ld.Token() + 1), 'n', 'e', 'w'}
	if _, err := s.SwapRegister(ctx, ld.Key(), 1, newer); err != nil {
		t.Fatal(err)
	}
	err = ld.Proclaim(ctx, "stale")
	regs, _ := s.ReadRegisters(ctx, []dcsync.Key{ld.Key()})
	if dcsync.CodeOf(err) != dcsync.LockLost || ld.Context().Err() == nil || regs[0].Register.Gen != 2 {
		t.Fatalf("Proclaim over a newer leader's newer-format record = %v (leadership ctx %v, register gen %d), want LockLost, leadership ended, nothing written", err, ld.Context().Err(), regs[0].Register.Gen)
	}
	_ = ld.Resign(ctx)
}
