package aerospike_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestChaosDroppedReplies runs internal/chaos's workers (goroutines on one lock and one
// count-up-down latch, every call and return recorded, checked for linearizability)
// against the real server through the fault proxy, which drops replies after the server
// applied the command and breaks connections.
func TestChaosDroppedReplies(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			p := startProxy(t)
			c := dial(t, p.Addr())
			chaos.RunT(t, chaos.Scenario{
				Open: func(context.Context) (dcsync.Store, error) {
					return aerospike.New(c, aerospike.Config{Namespace: namespace, Timeout: 150 * time.Millisecond, Attempts: 8})
				},
				Goroutine: 4,
				Locks:     32, // fewer than the default: the latch workers keep their share of the store
				Duration:  5 * time.Second,
				Level:     level,
				Name:      unique("chaos"),
				Fault: func(r *rand.Rand) string {
					if r.IntN(4) == 0 {
						p.CloseConnections()
						return "connections-reset"
					}
					p.DropResponses(1+r.IntN(2), nil)
					return "dropped-reply"
				},
				FaultEvery: 300 * time.Millisecond,
			})
		})
	}
}
