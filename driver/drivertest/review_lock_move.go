package drivertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// ReviewLockMoveLikeSingle (review, issue 15/17) checks batched acquires and releases
// the conformance suite leaves out against the single operations applied one after
// another on a twin key prepared the same way: a lock the batch's own owner holds, a
// lock the batch's owner held on a lapsed lease, a key named twice by the same owner,
// and a release named twice. Each outcome's code, owner and whether the token is
// fresh must be the single operation's.
func ReviewLockMoveLikeSingle(t *testing.T, s driver.Store, farm string) {
	b, ok := s.(driver.LockMover)
	if !ok {
		t.Skip("not a LockMover")
	}
	ctx := ctxT(t, 2*time.Minute)
	name := unique(t)
	type outcome struct {
		code  dcsync.Code
		owner string
		fresh bool // token above every earlier one of the key
	}
	key := func(what string) dcsync.Key {
		return dcsync.Key{Level: dcsync.XDC, Client: client, Farm: farm, Name: name + "-" + what}
	}
	codeOf := func(err error) dcsync.Code {
		if err == nil {
			return 0
		}
		return dcsync.CodeOf(err)
	}
	acq := func(k dcsync.Key, owner string, ttl time.Duration) uint64 {
		st, err := s.AcquireLock(ctx, k, owner, ttl)
		must(t, err, "AcquireLock "+k.Name)
		return st.Token
	}
	type scenario struct {
		what    string
		prepare func(k dcsync.Key) uint64 // the last token given
		acquire []string                  // owners of the acquires (all of key k)
		release []string                  // owners of the releases
	}
	scenarios := []scenario{
		{"held by the batch's owner", func(k dcsync.Key) uint64 { return acq(k, "me", time.Minute) }, []string{"me"}, nil},
		{"lapsed lease of the batch's owner", func(k dcsync.Key) uint64 { return acq(k, "me", time.Second) }, []string{"me"}, nil},
		{"free, named twice by one owner", func(dcsync.Key) uint64 { return 0 }, []string{"me", "me"}, nil},
		{"held, released twice by its owner", func(k dcsync.Key) uint64 { return acq(k, "me", time.Minute) }, nil, []string{"me", "me"}},
		{"held, released by its owner then by another", func(k dcsync.Key) uint64 { return acq(k, "me", time.Minute) }, nil, []string{"me", "other"}},
	}
	type prepared struct {
		kb, ks     dcsync.Key
		lastB, lsS uint64
	}
	ps := make([]prepared, len(scenarios))
	for i, sc := range scenarios {
		p := prepared{kb: key(fmt.Sprint(i, "-b")), ks: key(fmt.Sprint(i, "-s"))}
		p.lastB, p.lsS = sc.prepare(p.kb), sc.prepare(p.ks)
		ps[i] = p
	}
	time.Sleep(1500 * time.Millisecond) // the 1 s leases lapse
	for i, sc := range scenarios {
		p := ps[i]
		var batch, single []outcome
		if len(sc.acquire) > 0 {
			reqs := make([]driver.LockAcquire, len(sc.acquire))
			for j, o := range sc.acquire {
				reqs[j] = driver.LockAcquire{Key: p.kb, Owner: o, TTL: time.Minute}
			}
			res, err := b.AcquireLocks(ctx, reqs)
			must(t, err, "AcquireLocks "+sc.what)
			last := p.lastB
			for _, r := range res {
				batch = append(batch, outcome{codeOf(r.Err), r.State.Owner, r.State.Token > last})
				last = max(last, r.State.Token)
			}
			last = p.lsS
			for _, o := range sc.acquire {
				st, err := s.AcquireLock(ctx, p.ks, o, time.Minute)
				single = append(single, outcome{codeOf(err), st.Owner, st.Token > last})
				last = max(last, st.Token)
			}
		} else {
			reqs := make([]driver.LockRelease, len(sc.release))
			for j, o := range sc.release {
				reqs[j] = driver.LockRelease{Key: p.kb, Owner: o}
			}
			res, err := b.ReleaseLocks(ctx, reqs)
			must(t, err, "ReleaseLocks "+sc.what)
			for _, r := range res {
				batch = append(batch, outcome{code: codeOf(r.Err)})
			}
			for _, o := range sc.release {
				single = append(single, outcome{code: codeOf(s.ReleaseLock(ctx, p.ks, o))})
			}
		}
		if fmt.Sprint(batch) != fmt.Sprint(single) {
			t.Errorf("%s: the batch's outcomes %+v, the single operations' %+v", sc.what, batch, single)
		}
		for _, k := range []dcsync.Key{p.kb, p.ks} {
			if st, err := s.InspectLock(ctx, k); err == nil {
				_ = s.ReleaseLock(ctx, k, st.Owner)
			}
		}
	}
}
