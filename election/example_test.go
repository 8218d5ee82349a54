package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/store/memory"
)

// A candidate campaigns, leads under its leadership's context, and resigns; an
// observer sees the leader and its new value.
func Example() {
	ctx := context.Background()
	store := memory.New() // any store: storeurl.Open(ctx, "sqlite:///var/lib/app/dcsync.db")
	m, err := election.New(store, "billing", "dc1", election.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	leaders, err := m.Observe(octx, "scheduler")
	if err != nil {
		panic(err)
	}

	ld, err := m.Campaign(ctx, "scheduler", "host-a:8080")
	if err != nil {
		panic(err)
	}
	l := <-leaders
	fmt.Println("leader", l.Token, l.Value)

	// Lead: the work runs under ld.Context(), which ends if leadership is lost, and
	// passes ld.Token() to what it writes to.
	if err := ld.Proclaim(ctx, "host-a:9090"); err != nil {
		panic(err)
	}
	l = <-leaders
	fmt.Println("leader", l.Token, l.Value)

	if err := ld.Resign(ctx); err != nil {
		panic(err)
	}
	_, err = m.Leader(ctx, "scheduler")
	fmt.Println(err)
	// Output:
	// leader 1 host-a:8080
	// leader 1 host-a:9090
	// election.Leader: not found: election "scheduler" has no leader
}
