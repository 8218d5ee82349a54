package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// lock release --force breaks a held lock, printing whom it removed; the next holder
// gets a later token; a free lock is exit 1; --owner and --force go alone.
func TestLockReleaseForce(t *testing.T) {
	c := newCLI(t)
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "stale", "--ttl", "10m"))
	if m == nil {
		t.Fatal("acquire printed no owner")
	}
	out := c.want(0, "lock", "release", "stale", "--force")
	if want := regexp.MustCompile(`^released owner=` + m[1] + ` token=1 expires_in=\S+\n$`); !want.MatchString(out) {
		t.Fatalf("release --force printed %q, want %s", out, want)
	}
	if st := c.want(0, "lock", "status", "stale"); st != "free\n" {
		t.Fatalf("status after release --force: %q", st)
	}
	c.want(1, "lock", "release", "stale", "--force")
	c.want(5, "lock", "release", "stale", "--owner", m[1]) // its holder has lost it
	if m2 := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "stale")); m2 == nil || m2[2] != "2" {
		t.Fatalf("next acquisition: %v, want token 2", m2)
	}
	m3 := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "other", "--ttl", "10m"))
	var brk, ref map[string]any
	c.wantJSON(0, &ref, "lock", "refresh", "other", "--owner", m3[1], "--ttl", "5m", "--json")
	if ref["owner"] != m3[1] || ref["held"] != true || ref["name"] != "other" {
		t.Fatalf("lock refresh --json = %v", ref)
	}
	c.wantJSON(0, &brk, "lock", "release", "other", "--force", "--json")
	if brk["owner"] != m3[1] || brk["token"] != 1.0 || brk["name"] != "other" {
		t.Fatalf("lock release --force --json = %v, want the holder %s removed", brk, m3[1])
	}
	c.want(2, "lock", "release", "stale")
	c.want(2, "lock", "release", "stale", "--owner", m[1], "--force")
}

// handOver is a lock store whose InspectLock, once, hands the lock to another owner
// after reading it: the holder lock release --force read is gone by its release.
type handOver struct {
	driver.LockStore
	done bool
}

func (h *handOver) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	st, err := h.LockStore.InspectLock(ctx, k)
	if err == nil && !h.done {
		h.done = true
		if err := h.LockStore.ReleaseLock(ctx, k, st.Owner); err != nil {
			return st, err
		}
		if _, err := h.LockStore.AcquireLock(ctx, k, "newcomer", time.Minute); err != nil {
			return st, err
		}
	}
	return st, err
}

// The release --force makes is conditional on the holder it read: a lock that changed
// hands in between is left with its new holder (exit 5), never released.
func TestLockReleaseForceLeavesANewHolder(t *testing.T) {
	ctx := context.Background()
	st := &handOver{LockStore: memory.New()}
	m, err := lock.New(st, "app", "dc1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(ctx, "job", lock.TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a := &app{stdout: &out}
	err = a.breakLock(ctx, m, "job", nil, false)
	if exitCode(err) != exitNotOwner || out.Len() != 0 {
		t.Fatalf("breakLock while the lock changed hands: exit %d (%v), printed %q; want 5 and nothing", exitCode(err), err, out.String())
	}
	if held, err := m.Inspect(ctx, "job"); err != nil || held.Owner != "newcomer" {
		t.Fatalf("after the refused break the lock is %+v, %v; want held by newcomer", held, err)
	}
}
