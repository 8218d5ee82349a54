package rwlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/store/memory"
)

// doubting wraps a store: the first AcquireLock of a key whose name ends with suffix
// lands and then reports a Connection error (the reply was lost), and it counts the
// lock calls that reach the store.
type doubting struct {
	driver.Store
	suffix string
	done   atomic.Bool
	calls  atomic.Int64
}

func (d *doubting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	d.calls.Add(1)
	st, err := d.Store.AcquireLock(ctx, k, owner, ttl)
	if err == nil && d.suffix != "" && strings.HasSuffix(k.Name, d.suffix) && d.done.CompareAndSwap(false, true) {
		return driver.LockState{}, driver.Errorf(dcsync.Connection, "test", "reply lost (the take landed)")
	}
	return st, err
}

func (d *doubting) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	d.calls.Add(1)
	return d.Store.InspectLock(ctx, k)
}

func (d *doubting) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	return d.Store.(driver.RegisterStore).SwapRegister(ctx, k, gen, v)
}

func (d *doubting) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	return d.Store.(driver.RegisterStore).ReadRegisters(ctx, keys)
}

// TestReviewReaderSlotTakeInDoubt: a reader's slot take lands but is reported failed
// (Connection). The reader retries and gets in; once it has released, nothing may stay
// held: a leaked slot would keep every writer out until its lease (1 minute) ends.
func TestReviewReaderSlotTakeInDoubt(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	d := &doubting{Store: s, suffix: "/r0"}
	m := newManager(t, d, rwlock.WithReaders(1))
	r, err := m.AcquireRead(ctx, "doubt-r", rwlock.Wait(5*time.Second))
	must(t, err, "read (its first take in doubt)")
	must(t, r.Release(ctx), "release")
	st, err := m.Inspect(ctx, "doubt-r")
	must(t, err, "inspect")
	if len(st.Readers) != 0 {
		t.Errorf("after the only reader released, %d reader slot(s) still held (owner %s): the take in doubt was not given back", len(st.Readers), st.Readers[0].Owner)
	}
	w, err := m.AcquireWrite(ctx, "doubt-r", rwlock.Wait(0))
	if err != nil {
		t.Fatalf("writer after every reader released: %v", err)
	}
	must(t, w.Release(ctx), "release write")
}

// TestReviewWriterTakeInDoubt: a writer's take of W lands but is reported failed
// (Connection). AcquireWrite fails; afterwards W must be free: a leaked W would keep
// every reader and writer out until its lease (1 minute) ends.
func TestReviewWriterTakeInDoubt(t *testing.T) {
	ctx := context.Background()
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		s := memory.New()
		d := &doubting{Store: s, suffix: "/w"}
		m := newManager(t, d)
		if _, err := m.AcquireWrite(ctx, "doubt-w", rwlock.Wait(wait)); err == nil {
			t.Fatalf("wait %v: the write take in doubt succeeded", wait)
		}
		st, err := m.Inspect(ctx, "doubt-w")
		must(t, err, "inspect")
		if st.Writer != nil {
			t.Errorf("wait %v: AcquireWrite failed but W stays held by owner %s (token %d): its take in doubt was not given back", wait, st.Writer.Owner, st.Writer.Token)
		}
		r, err := m.AcquireRead(ctx, "doubt-w", rwlock.Wait(0))
		if err != nil {
			t.Errorf("wait %v: reader after the failed writer: %v", wait, err)
		} else {
			must(t, r.Release(ctx), "release")
		}
		s.Close()
	}
}

// scoped is another "process" on the same memory store: a store value of its own, so
// a Manager on it shares no process-local state with Managers on the store itself.
type scoped struct{ driver.Store }

func (p *scoped) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	return p.Store.(driver.RegisterStore).SwapRegister(ctx, k, gen, v)
}

func (p *scoped) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	return p.Store.(driver.RegisterStore).ReadRegisters(ctx, keys)
}

// TestReviewWaitingReadersDoNotSpin: every reader slot (M = 1) is held by another
// process; two readers of this process wait for one. Each waits with a backoff of at
// least 200 ms between tries, so in their 2 s of waiting they make a few dozen store
// calls at most (a slower machine makes fewer). A failed try must not wake the other
// waiter at once (nothing was freed), else they wake each other in a loop without any
// backoff.
func TestReviewWaitingReadersDoNotSpin(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	other := newManager(t, &scoped{Store: s}, rwlock.WithReaders(1))
	held, err := other.AcquireRead(ctx, "full")
	must(t, err, "the other process's reader")
	d := &doubting{Store: s}
	m := newManager(t, d, rwlock.WithBackoff(400*time.Millisecond, time.Second))
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.AcquireRead(ctx, "full", rwlock.Wait(2*time.Second)); !errors.Is(err, dcsync.ErrLockUnavailable) {
				t.Errorf("reader with every slot held elsewhere: %v, want LockUnavailable", err)
			}
		}()
	}
	wg.Wait()
	must(t, held.Release(ctx), "release")
	t.Logf("%d store calls", d.calls.Load())
	// Per reader at most 2 s / 200 ms + 1 = 11 rounds of a slot take and a read of W
	// (the slot reads go through InspectLock too, M = 1): 3 calls a round.
	if n := d.calls.Load(); n > 2*11*3 {
		t.Fatalf("two readers waiting 2 s with a backoff >= 200 ms made %d store calls (at most %d): they wake each other without backing off", n, 2*11*3)
	}
}

// TestReviewLongNameSmallStoredM: a name that fits with the stored M = 1 (its longest
// key rwlock:498:NAME/r0 is 512 bytes) is used by a Manager whose own WithReaders is the
// default (64, whose longest key would be 513 bytes). The docs: every Manager, whatever
// its own WithReaders, uses the stored M; so the read, the write and Inspect (the CLI's
// status) must work.
func TestReviewLongNameSmallStoredM(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	name := strings.Repeat("n", 498)
	one := newManager(t, s, rwlock.WithReaders(1))
	r, err := one.AcquireRead(ctx, name)
	must(t, err, "read by the creator (M = 1)")
	must(t, r.Release(ctx), "release")
	def := newManager(t, &scoped{Store: s})
	if st, err := def.Inspect(ctx, name); err != nil || st.Slots != 1 {
		t.Errorf("inspect by a default Manager: %+v, %v; want 1 slot", st, err)
	}
	if r, err := def.AcquireRead(ctx, name, rwlock.Wait(0)); err != nil {
		t.Errorf("read by a default Manager: %v", err)
	} else {
		must(t, r.Release(ctx), "release")
	}
	if w, err := def.AcquireWrite(ctx, name, rwlock.Wait(0)); err != nil {
		t.Errorf("write by a default Manager: %v", err)
	} else {
		must(t, w.Release(ctx), "release")
	}
}

// regDoubt wraps a store: its first SwapRegister lands and then reports a Connection
// error (the reply was lost).
type regDoubt struct {
	driver.Store
	done atomic.Bool
}

func (d *regDoubt) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	r, err := d.Store.(driver.RegisterStore).SwapRegister(ctx, k, gen, v)
	if err == nil && d.done.CompareAndSwap(false, true) {
		return driver.Register{}, driver.Errorf(dcsync.Connection, "test", "reply lost (the write landed)")
	}
	return r, err
}

func (d *regDoubt) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	return d.Store.(driver.RegisterStore).ReadRegisters(ctx, keys)
}

// TestReviewRegisterCreationInDoubt: the creation of M's register lands but is reported
// failed (Connection). Another process, with another WithReaders, must use the stored
// M; and the acquisition that created it, waiting up to 5 s, must not fail on a passing
// store error that its own slot take would have retried (Connection is retried there).
func TestReviewRegisterCreationInDoubt(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m2 := newManager(t, &regDoubt{Store: s}, rwlock.WithReaders(2))
	r, err := m2.AcquireRead(ctx, "reg", rwlock.Wait(5*time.Second))
	if err != nil {
		t.Errorf("read whose register creation was in doubt, waiting 5 s: %v", err)
	} else {
		defer r.Release(ctx)
	}
	m9 := newManager(t, &scoped{Store: s}, rwlock.WithReaders(9))
	st, err := m9.Inspect(ctx, "reg")
	must(t, err, "inspect")
	if st.Slots != 2 {
		t.Fatalf("stored M %d, want 2 (the creation in doubt landed)", st.Slots)
	}
	r2, err := m2.AcquireRead(ctx, "reg", rwlock.Wait(0))
	must(t, err, "read again")
	must(t, r2.Release(ctx), "release")
}

// relFail wraps a store: the first ReleaseLock of a key ending with "/w" fails with a
// Connection error without landing.
type relFail struct {
	driver.Store
	done atomic.Bool
}

func (d *relFail) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if strings.HasSuffix(k.Name, "/w") && d.done.CompareAndSwap(false, true) {
		return driver.Errorf(dcsync.Connection, "test", "store unreachable")
	}
	return d.Store.ReleaseLock(ctx, k, owner)
}

func (d *relFail) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, v []byte) (driver.Register, error) {
	return d.Store.(driver.RegisterStore).SwapRegister(ctx, k, gen, v)
}

func (d *relFail) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	return d.Store.(driver.RegisterStore).ReadRegisters(ctx, keys)
}

// TestReviewDowngradeReleaseFails: a downgrade whose release of W fails (Connection,
// not landed) returns the error holding no read lock (its slot given back), and the
// write hold's Release, called again, frees W: nobody waits for W's lease.
func TestReviewDowngradeReleaseFails(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()
	m := newManager(t, &relFail{Store: s})
	w, err := m.AcquireWrite(ctx, "down")
	must(t, err, "write")
	if _, err := w.Downgrade(ctx); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("downgrade whose W release fails: %v, want Connection", err)
	}
	st, err := m.Inspect(ctx, "down")
	must(t, err, "inspect")
	if len(st.Readers) != 0 || st.Writer == nil {
		t.Fatalf("after the failed downgrade: writer %v, %d readers; want W still held and no reader", st.Writer, len(st.Readers))
	}
	must(t, w.Release(ctx), "release the write hold again")
	r, err := m.AcquireRead(ctx, "down", rwlock.Wait(0))
	must(t, err, "reader once W is released")
	must(t, r.Release(ctx), "release")
}
