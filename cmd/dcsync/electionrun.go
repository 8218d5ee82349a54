//go:build linux || darwin || freebsd || openbsd

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/dcsync/dcsync"
)

// runElected campaigns for election name and runs argv while leading, through lock
// run's guardian (runGuarded); see the help of 'election campaign'.
func (a *app) runElected(ctx context.Context, name string, f *electionFlags, argv []string) error {
	path, err := lookCommand(argv[0])
	if err != nil {
		return err
	}
	m, lc, err := a.electionManager(ctx, f, true)
	if err != nil {
		return err
	}
	// From here on the signals are ours: before the command runs one ends the
	// campaign; then it is forwarded.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	watched := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			cancel(&interrupted{s})
			watched <- s
		case <-done:
			watched <- nil
		}
	}()
	ld, err := m.Campaign(cctx, name, f.value)
	close(done)
	if s := <-watched; s != nil {
		if ld != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			_ = ld.Resign(rctx)
		}
		return &interrupted{s}
	}
	if err != nil {
		return err
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		if err := ld.Resign(rctx); err != nil && !errors.Is(err, dcsync.ErrLockLost) {
			fmt.Fprintln(a.stderr, "dcsync: resign:", errorLine(err))
		}
	}()
	return a.runGuarded(guarded{lease: fmt.Sprintf("leadership of election %q", name), name: name, path: path, argv: argv,
		lc: lc, held: ld.Context(), ttl: ld.TTL(), killAfter: f.killAfter, sigs: sigs,
		env: []string{fmt.Sprintf("DCSYNC_ELECTION_TOKEN=%d", ld.Token())}})
}
