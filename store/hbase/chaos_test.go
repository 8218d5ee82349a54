package hbase

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/chaos"
)

// keepOpen hands the chaos run a store whose Close does nothing: the test closes it.
type keepOpen struct{ *Store }

func (keepOpen) Close() error { return nil }

// TestChaosInDoubtWrites runs internal/chaos's workers (goroutines on one lock and one
// count-up-down latch, every call and return recorded, checked for linearizability)
// against the real HBase, with the store's own fault layer below its retries: a
// conditional write (every lock write and latch update) now and then applied with its
// reply lost, or not sent with the same error — the two cases a caller cannot tell apart.
func TestChaosInDoubtWrites(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			s, f := faultyStore(t)
			chaos.RunT(t, chaos.Scenario{
				Open:      func(context.Context) (dcsync.Store, error) { return keepOpen{s}, nil },
				Goroutine: 4,
				Locks:     32, // fewer than the default: the latch workers keep their share of the store
				Level:     level,
				Name:      fmt.Sprintf("chaos-%s-%d", level, time.Now().UnixNano()),
				Fault: func(r *rand.Rand) string {
					if r.IntN(2) == 0 {
						f.set(lostAck)
						return "dropped-reply"
					}
					f.set(notSent)
					return "not-sent"
				},
				FaultEvery: 200 * time.Millisecond,
			})
		})
	}
}
