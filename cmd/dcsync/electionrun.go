package main

import (
	"context"
	"fmt"
)

// runElected campaigns for election name and runs argv while leading, with lock run's
// promises (runLeased: the guardian, the lease's safe end, the signals); see the help
// of 'election campaign'. The leadership is the lease: it is resigned when the command
// ends, and the command is stopped when it is lost.
func (a *app) runElected(ctx context.Context, name string, f *electionFlags, argv []string) error {
	return a.runLeased(ctx, name, argv, f.killAfter, func(ctx context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error) {
		m, lc, err := a.electionManager(ctx, f, true)
		if err != nil {
			return nil, nil, err
		}
		return lc, func(ctx context.Context) (*heldLease, error) {
			ld, err := m.Campaign(ctx, name, f.value)
			if err != nil {
				return nil, err
			}
			return &heldLease{ttl: ld.TTL(),
				keepAlive: func(context.Context) context.Context { return ld.Context() },
				release:   ld.Resign,
				what:      fmt.Sprintf("leadership of election %q", name),
				env:       []string{fmt.Sprintf("DCSYNC_ELECTION_TOKEN=%d", ld.Token())}}, nil
		}, nil
	})
}
