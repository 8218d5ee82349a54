package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
)

// killGrace is how long a stopped command gets between SIGTERM and SIGKILL.
const killGrace = 10 * time.Second

type lockFlags struct {
	ttl   time.Duration
	wait  time.Duration
	owner string
}

func (a *app) lockManager(ctx context.Context) (*lock.Manager, []lock.CallOption, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := lock.New(s, a.client, a.farm)
	if err != nil {
		return nil, nil, err
	}
	return m, []lock.CallOption{lock.Level(level)}, nil
}

// acquire takes the lock, at once (wait 0: exit 3 when held) or waiting (exit 4 when
// the wait runs out).
func acquire(ctx context.Context, m *lock.Manager, name string, f *lockFlags, opts []lock.CallOption) (*lock.Lock, error) {
	opts = append(opts, lock.TTL(f.ttl))
	if f.wait == 0 {
		return m.TryAcquire(ctx, name, opts...)
	}
	l, err := m.Acquire(ctx, name, append(opts, lock.Wait(f.wait))...)
	if errors.Is(err, dcsync.ErrLockUnavailable) && !errors.Is(err, context.Canceled) {
		return nil, withCode(exitTimeout, fmt.Errorf("waited %v: %w", f.wait, err))
	}
	return l, err
}

func newLockCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "lock", Short: "Acquire, release, inspect and run under distributed locks"}
	f := &lockFlags{}
	addTTLWait := func(c *cobra.Command) {
		c.Flags().DurationVar(&f.ttl, "ttl", lock.DefaultTTL, "lease length")
		c.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for a held lock (0: fail at once with exit 3)")
	}

	acq := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Acquire a lock and print owner=<id> token=<n>",
		Long: `Acquire a lock and print owner=<id> token=<n>. The lock is held until its
lease (--ttl) ends or 'dcsync lock release NAME --owner ID' frees it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.lockManager(c.Context())
			if err != nil {
				return err
			}
			l, err := acquire(c.Context(), m, args[0], f, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "owner=%s token=%d\n", l.Owner(), l.Token())
			return nil
		},
	}
	addTTLWait(acq)

	rel := &cobra.Command{
		Use:   "release NAME --owner ID",
		Short: "Release a lock held by owner ID (exit 5 if ID does not hold it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.lockManager(c.Context())
			if err != nil {
				return err
			}
			return m.Release(c.Context(), args[0], f.owner, opts...)
		},
	}
	rel.Flags().StringVar(&f.owner, "owner", "", "owner id printed by 'lock acquire'")
	_ = rel.MarkFlagRequired("owner")

	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Print the lock's holder, token and time left, or 'free'",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.lockManager(c.Context())
			if err != nil {
				return err
			}
			st, err := m.Inspect(c.Context(), args[0], opts...)
			if errors.Is(err, dcsync.ErrNotFound) {
				fmt.Fprintln(a.stdout, "free")
				return nil
			}
			if err != nil {
				return err
			}
			owner := st.Owner
			if owner == "" {
				owner = "(java client)"
			}
			fmt.Fprintf(a.stdout, "held owner=%s token=%d expires_in=%s\n", owner, st.Token, remaining(st.Expires))
			return nil
		},
	}

	runCmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Run CMD while holding the lock, keeping it alive; exit with CMD's code",
		Long: `Run CMD while holding the lock. The lease is renewed every TTL/3 for as long as
CMD runs; SIGINT and SIGTERM are forwarded to CMD; the lock is released when CMD ends
and dcsync exits with CMD's exit code. If the lease is lost, CMD is sent SIGTERM (then
SIGKILL after 10s) and dcsync exits 5.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return withCode(exitUsage, errors.New("usage: dcsync lock run NAME [flags] -- CMD [ARGS...]"))
			}
			m, opts, err := a.lockManager(c.Context())
			if err != nil {
				return err
			}
			return a.runLocked(c.Context(), m, args[0], f, opts, args[1:])
		},
	}
	addTTLWait(runCmd)

	for _, c := range []*cobra.Command{acq, rel, status, runCmd} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	return cmd
}

// runLocked runs argv under the lock.
func (a *app) runLocked(ctx context.Context, m *lock.Manager, name string, f *lockFlags, opts []lock.CallOption, argv []string) error {
	// Signals go to the child, not to us: take them over before acquiring, so a
	// Ctrl-C during the wait still cancels the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	actx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-actx.Done():
		}
	}()
	l, err := acquire(actx, m, name, f, opts)
	cancel()
	if err != nil {
		return err
	}
	// Release with a fresh context: the command's own context may be cancelled by then.
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.Release(rctx); err != nil && !errors.Is(err, dcsync.ErrLockLost) {
			fmt.Fprintln(a.stderr, "dcsync: release:", err)
		}
	}()
	kctx := l.KeepAlive(context.Background())

	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, a.stdout, a.stderr
	child.Env = append(os.Environ(), fmt.Sprintf("DCSYNC_LOCK_TOKEN=%d", l.Token()), "DCSYNC_LOCK_OWNER="+l.Owner())
	if err := child.Start(); err != nil {
		return withCode(exitError, fmt.Errorf("start %s: %w", argv[0], err))
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	lost := false
	lostCh := kctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case s := <-sigs:
			_ = child.Process.Signal(s)
		case <-lostCh:
			lostCh, lost = nil, true
			fmt.Fprintf(a.stderr, "dcsync: lease on %q lost (%v); stopping %s\n", name, context.Cause(kctx), argv[0])
			_ = child.Process.Signal(syscall.SIGTERM)
			kill = time.After(killGrace)
		case <-kill:
			_ = child.Process.Kill()
		case err := <-exited:
			if lost {
				return withCode(exitNotOwner, fmt.Errorf("lease on %q lost; %s was stopped", name, argv[0]))
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code := ee.ExitCode()
				if code < 0 {
					code = 128 + 15 // killed by a signal
				}
				return &exitErr{code: code, err: err, quiet: true}
			}
			return err
		}
	}
}
