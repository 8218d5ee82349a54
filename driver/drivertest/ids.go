package drivertest

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// runIDs checks ids the Java libraries accept and their docs use ("CLIENT_ID",
// "MY_SERVICE", farms with '_'), and that two keys the Java layouts cannot tell apart
// never silently share a latch: a store keeps them apart, or refuses the second with
// InvalidArgument and writes nothing.
func runIDs(t *testing.T, h Harness) {
	t.Run("JavaStyleIDs", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		for _, c := range []string{"CLIENT_ID", "MY_SERVICE"} {
			lm, err := lock.New(s, c, h.Farm, lock.WithLogger(quiet))
			must(t, err, "lock.New "+c)
			l, err := lm.TryAcquire(ctx, name)
			must(t, err, "TryAcquire as "+c)
			if _, err := lm.TryAcquire(ctx, name); dcsync.CodeOf(err) != dcsync.LockUnavailable {
				t.Fatalf("second TryAcquire as %s = %v, want LockUnavailable", c, err)
			}
			must(t, l.Release(ctx), "Release as "+c)
			m, err := latch.New(s, c, h.Farm, latch.WithLogger(quiet))
			must(t, err, "latch.New "+c)
			d, err := m.CreateCountDown(ctx, name, 2, latch.Level(dcsync.XDC))
			must(t, err, "CreateCountDown as "+c)
			if n, err := d.CountDown(ctx); err != nil || n != 1 {
				t.Fatalf("CountDown as %s = %d, %v; want 1", c, n, err)
			}
		}
	})

	t.Run("AmbiguousJavaKeysNeverShareALatch", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		suffix := unique(t)
		for _, pair := range [][2][2]string{
			{{"amb_a_b", "c" + suffix}, {"amb_a", "b_c" + suffix}}, // one HBase row
			{{"amb#a#b", "c" + suffix}, {"amb#a", "b#c" + suffix}}, // one Aerospike key
		} {
			first, second := pair[0], pair[1]
			m1, err := latch.New(s, first[0], h.Farm, latch.WithLogger(quiet))
			must(t, err, "latch.New")
			m2, err := latch.New(s, second[0], h.Farm, latch.WithLogger(quiet))
			must(t, err, "latch.New")
			a, err := m1.CreateCountDown(ctx, first[1], 3)
			must(t, err, "create "+first[0]+"/"+first[1])
			b, err := m2.CreateCountDown(ctx, second[1], 5)
			switch dcsync.CodeOf(err) {
			case 0:
				// Kept apart: each counts on its own.
				if n, err := b.CountDown(ctx); err != nil || n != 4 {
					t.Fatalf("%s/%s CountDown = %d, %v; want 4", second[0], second[1], n, err)
				}
			case dcsync.InvalidArgument:
				// Refused: and so must be an update through a handle of the other key.
				b, _ = m2.GetCountDown(second[1])
				_, err := b.CountDown(ctx)
				wantCode(t, err, dcsync.InvalidArgument, "CountDown of a key that collides with another latch")
			default:
				t.Fatalf("create %s/%s, which the Java layout cannot tell from %s/%s: %v; want success or InvalidArgument",
					second[0], second[1], first[0], first[1], err)
			}
			if n, err := a.Count(ctx); err != nil || n != 3 {
				t.Fatalf("%s/%s count = %d, %v; want 3 (untouched by the other key)", first[0], first[1], n, err)
			}
		}
	})
}
