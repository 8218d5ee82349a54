package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// --- The primitives' checks can fail ---------------------------------------------------

func claim(kind string, client, slot int, tok uint64, at int64) Record {
	return Record{Client: client, Phase: PhaseCall, Kind: kind, Lock: slot, Token: tok, At: at}
}

func TestCheckElectionClaims(t *testing.T) {
	good := []Record{claim(KindLead, 1, 0, 1, 10), claim(KindLead, 1, 0, 1, 20), claim(KindLead, 2, 0, 2, 30)}
	if r := CheckElectionClaims(good); !r.OK || r.Holds != 2 || r.Claims != 3 {
		t.Fatalf("two leaders one after the other: %v", r)
	}
	if r := CheckElectionClaims(append(good, claim(KindLead, 1, 0, 1, 35))); r.OK {
		t.Fatalf("two leaders at once passed: %v", r)
	}
	if r := CheckElectionClaims(append(good, claim(KindLead, 3, 0, 2, 40))); r.OK {
		t.Fatalf("a leader's token repeated passed: %v", r)
	}
}

func TestCheckSemaphore(t *testing.T) {
	// Three permits: three holds at once on slots 0-2, then slot 1 again.
	good := []Record{
		claim(KindPermit, 1, 0, 1, 10), claim(KindPermit, 1, 0, 1, 50),
		claim(KindPermit, 2, 1, 1, 10), claim(KindPermit, 2, 1, 1, 40),
		claim(KindPermit, 3, 2, 7, 20), claim(KindPermit, 3, 2, 7, 60),
		claim(KindPermit, 4, 1, 2, 45),
	}
	if r := CheckSemaphore(good, 3); !r.OK {
		t.Fatalf("three permits of three: %v", r)
	}
	if r := CheckSemaphore(good, 2); r.OK {
		t.Fatalf("three permits held of two passed: %v", r)
	}
	if r := CheckSemaphore(append(good, claim(KindPermit, 5, 1, 3, 42)), 4); r.OK {
		t.Fatalf("two holders of slot 1 at once passed: %v", r)
	}
	if r := CheckSemaphore(append(good, claim(KindPermit, 5, 0, 1, 70)), 3); r.OK {
		t.Fatalf("slot 0's token repeated passed: %v", r)
	}
}

func TestCheckRWLock(t *testing.T) {
	good := []Record{
		claim(KindReadHold, 1, 0, 1, 10), claim(KindReadHold, 1, 0, 1, 30),
		claim(KindReadHold, 2, 1, 1, 20), claim(KindReadHold, 2, 1, 1, 35),
		claim(KindWriteHold, 3, 0, 5, 40), claim(KindWriteHold, 3, 0, 5, 50),
		// Downgraded: the same client reads from slot 0 after its write.
		claim(KindReadHold, 3, 0, 2, 51), claim(KindReadHold, 4, 2, 1, 52),
		claim(KindWriteHold, 4, 0, 6, 60),
	}
	if r := CheckRWLock(good); !r.OK || r.Holds != 6 {
		t.Fatalf("readers, then a writer, then readers, then a writer: %v", r)
	}
	if r := CheckRWLock(append(good, claim(KindReadHold, 1, 0, 1, 45))); r.OK {
		t.Fatalf("a reader during a write passed: %v", r)
	}
	if r := CheckRWLock(append(good, claim(KindWriteHold, 5, 0, 9, 45))); r.OK {
		t.Fatalf("two writers at once passed: %v", r)
	}
	if r := CheckRWLock(append(good, claim(KindWriteHold, 5, 0, 4, 70))); r.OK {
		t.Fatalf("a writer's token going down passed: %v", r)
	}
}

func op(c, s int, p, k string, tok uint64, v int64, o string, at int64) Record {
	return Record{Client: c, Seq: s, Phase: p, Kind: k, Token: tok, Value: v, Outcome: o, At: at}
}

func TestCheckElectionRegister(t *testing.T) {
	h := []Record{
		op(1, 1, PhaseCall, KindCampaign, 0, 100, "", 0), op(1, 1, PhaseReturn, KindCampaign, 4, 100, OK, 10),
		op(1, 2, PhaseCall, KindProclaim, 4, 101, "", 20), op(1, 2, PhaseReturn, KindProclaim, 4, 101, OK, 30),
		// A Campaign killed mid-call: unknown, its token unknown.
		op(2, 1, PhaseCall, KindCampaign, 0, 200, "", 40),
	}
	for _, tc := range []struct {
		name     string
		tok      uint64
		val      int64
		call, rt int64
		ok       bool
	}{
		{"the published value", 4, 101, 31, 35, true},
		{"the value overlapping its Proclaim", 4, 100, 15, 25, true},
		{"the value before the last Proclaim", 4, 100, 31, 35, false},
		{"a value nobody published", 4, 102, 31, 35, false},
		{"the killed Campaign's value under any token", 9, 200, 45, 50, true},
		{"the killed Campaign's value before its call", 9, 200, 31, 35, false},
	} {
		hist := append(append([]Record(nil), h...),
			op(3, 1, PhaseCall, KindLeader, 0, 0, "", tc.call), op(3, 1, PhaseReturn, KindLeader, tc.tok, tc.val, OK, tc.rt))
		if r := CheckElectionRegister(hist, time.Second); r.OK != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, r, tc.ok)
		}
	}
	// Once read under a token, the killed Campaign's record keeps it.
	hist := append(append([]Record(nil), h...),
		op(3, 1, PhaseCall, KindLeader, 0, 0, "", 45), op(3, 1, PhaseReturn, KindLeader, 9, 200, OK, 50),
		op(3, 2, PhaseCall, KindLeader, 0, 0, "", 55), op(3, 2, PhaseReturn, KindLeader, 8, 200, OK, 60))
	if r := CheckElectionRegister(hist, time.Second); r.OK {
		t.Errorf("one record read under two tokens passed: %v", r)
	}
}

// --- The primitives' checks fail on broken stores --------------------------------------

// lockIgnorer is a store whose locks ignore their holder: every acquisition is granted
// (with a fresh, increasing token), every renewal and release succeeds, and every lock
// reads as free. Each primitive built on locks then lets in two at once.
type lockIgnorer struct {
	driver.Store // an interface: memory's batched lock calls are not promoted
	mu           sync.Mutex
	token        uint64
}

func (b *lockIgnorer) AcquireLock(_ context.Context, _ dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token++
	return driver.LockState{Owner: owner, Token: b.token, Expires: time.Now().Add(ttl)}, nil
}

func (b *lockIgnorer) RefreshLock(_ context.Context, _ dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return driver.LockState{Owner: owner, Token: b.token, Expires: time.Now().Add(ttl)}, nil
}

func (b *lockIgnorer) ReleaseLock(context.Context, dcsync.Key, string) error { return nil }

func (b *lockIgnorer) InspectLock(_ context.Context, k dcsync.Key) (driver.LockState, error) {
	return driver.LockState{}, driver.Errorf(dcsync.NotFound, "lockIgnorer.InspectLock", "%s is free", k)
}

func runPrimitives(t *testing.T, s driver.Store, d time.Duration) Report {
	t.Helper()
	rep, err := Scenario{
		Open:      func(context.Context) (driver.Store, error) { return s, nil },
		Goroutine: 3, Locks: 4, Duration: d, TTL: time.Second, Level: dcsync.DC, Name: unique(t), Child: self,
		Primitives: true,
	}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	return rep
}

// Each claims check reports the store whose locks ignore their holder.
func TestPrimitivesFindLocksThatIgnoreTheHolder(t *testing.T) {
	rep := runPrimitives(t, &lockIgnorer{Store: memory.New()}, 3*time.Second)
	p := rep.Primitives
	if p.Election.OK || p.Semaphore.OK || p.RWLock.OK {
		t.Fatalf("a check passed a store whose locks let every acquirer in:\n%v", rep)
	}
}

// staleRegisters is a store whose register reads return, with the current generation,
// the value the register held before its latest write (after its first): a replica one
// write behind.
type staleRegisters struct {
	driver.Store
	mu   sync.Mutex
	prev map[string][]byte
}

func (s *staleRegisters) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.Store.ReadRegisters(ctx, []dcsync.Key{k})
	if err != nil {
		return driver.Register{}, err
	}
	reg, err := s.Store.SwapRegister(ctx, k, gen, value)
	if err == nil && old[0].Err == nil && old[0].Register.Gen != 0 {
		s.prev[fmt.Sprint(k)] = old[0].Register.Value
	}
	return reg, err
}

func (s *staleRegisters) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	res, err := s.Store.ReadRegisters(ctx, keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range res {
		if v, ok := s.prev[fmt.Sprint(keys[i])]; ok && res[i].Err == nil {
			res[i].Register.Value = v
		}
	}
	return res, err
}

// The register check reports Leader reads one Proclaim behind; the claims checks pass
// (the locks are sound).
func TestPrimitivesFindStaleRegisterReads(t *testing.T) {
	rep := runPrimitives(t, &staleRegisters{Store: memory.New(), prev: map[string][]byte{}}, 3*time.Second)
	p := rep.Primitives
	if p.Register.OK {
		t.Fatalf("the register check passed Leader reads one write behind:\n%v", rep)
	}
	if !p.Election.OK || !p.Semaphore.OK || !p.RWLock.OK || !rep.Lock.OK {
		t.Fatalf("a claims check failed on sound locks:\n%v", rep)
	}
}
