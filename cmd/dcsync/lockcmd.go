package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// defaultKillAfter is how long a command that lock run stops gets between SIGTERM and
// SIGKILL, unless --kill-after says otherwise.
const defaultKillAfter = 10 * time.Second

type lockFlags struct {
	ttl          time.Duration
	wait         time.Duration
	owner        string
	killAfter    time.Duration
	conflictCode int
	conflictSet  bool // --conflict-exit-code was given
	fair         bool // --fair: lock.Fair(true)
	json         bool // --json
	force        bool // release --force
}

// holderTick is how often 'lock acquire --wait' redraws, on a terminal, who holds the
// lock it waits for and the time their lease has left.
const holderTick = 250 * time.Millisecond

// lockManager returns a lock manager on the store; wrap, if not nil, wraps the store's
// lock operations first.
func (a *app) lockManager(ctx context.Context, wrap func(driver.LockStore) driver.LockStore) (*lock.Manager, []lock.CallOption, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, nil, err
	}
	var ls driver.LockStore = s
	if wrap != nil {
		ls = wrap(ls)
	}
	m, err := lock.New(ls, a.client, a.farm, lock.WithLogger(a.cliLogger()))
	if err != nil {
		return nil, nil, err
	}
	return m, []lock.CallOption{lock.Level(level)}, nil
}

// acquire takes the lock, at once (wait 0: exit 3 when held) or waiting (exit 4 when
// the wait runs out).
func acquire(ctx context.Context, m *lock.Manager, name string, f *lockFlags, opts []lock.CallOption) (*lock.Lock, error) {
	opts = append(opts, lock.TTL(f.ttl))
	if f.fair {
		opts = append(opts, lock.Fair(true))
	}
	if f.wait == 0 {
		l, err := m.TryAcquire(ctx, name, opts...)
		return l, heldBy(ctx, m, name, opts, err)
	}
	l, err := m.Acquire(ctx, name, append(opts, lock.Wait(f.wait))...)
	if errors.Is(err, dcsync.ErrLockUnavailable) && !errors.Is(err, context.Canceled) {
		// The wait is over: the holder is read with a context of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return nil, withCode(exitTimeout, fmt.Errorf("waited %v: %w", f.wait, heldBy(rctx, m, name, opts, err)))
	}
	return l, err
}

func newLockCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "lock", Short: "Acquire, release, inspect and run under distributed locks"}
	f := &lockFlags{}
	addTTLWait := func(c *cobra.Command) {
		c.Flags().DurationVar(&f.ttl, "ttl", lock.DefaultTTL, "lease length")
		c.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for a held lock (0: fail at once with exit 3)")
		c.Flags().BoolVar(&f.fair, "fair", false, "wait fairly: waiters take the lock in turn instead of a releasing process re-taking it first (see 'go doc github.com/dcsync/dcsync/lock' Fairness)")
	}

	acq := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Acquire a lock and print owner=<id> token=<n>",
		Long: `Acquire a lock and print owner=<id> token=<n>. The lock is held until its
lease (--ttl) ends or 'dcsync lock release NAME --owner ID' frees it.

With --wait, while the lock is held by another, who holds it is shown on stderr: on a
terminal, one line updated in place with the holder's owner, token and time left;
nothing more when stderr is not a terminal.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var watch *holderWatch
			var wrap func(driver.LockStore) driver.LockStore
			if f.wait > 0 {
				wrap = func(s driver.LockStore) driver.LockStore {
					watch = newHolderWatch(s)
					return watch
				}
			}
			m, opts, err := a.lockManager(c.Context(), wrap)
			if err != nil {
				return err
			}
			var stop func()
			if watch != nil {
				stop = a.showHolder(watch, args[0], holderTick)
			}
			l, err := acquire(c.Context(), m, args[0], f, opts)
			if stop != nil {
				stop()
			}
			if err != nil {
				return err
			}
			if f.json {
				at, in := expiry(l.Expires())
				return a.printJSON(lockJSON{Name: args[0], Level: l.Key().Level.String(), Farm: l.Key().Farm, Held: true,
					Owner: l.Owner(), Token: l.Token(), ExpiresAt: at, ExpiresInMS: in})
			}
			fmt.Fprintf(a.stdout, "owner=%s token=%d\n", l.Owner(), l.Token())
			return nil
		},
	}
	addTTLWait(acq)
	acq.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","held","owner","token","expires_at","expires_in_ms"}`)

	rel := &cobra.Command{
		Use:   "release NAME (--owner ID | --force)",
		Short: "Release a lock held by owner ID (exit 5 if ID does not hold it), or break it with --force",
		Long: `Release a lock held by owner ID (exit 5 if ID does not hold it).

With --force instead of --owner, break the lock whoever holds it (a stale lock whose
holder is gone but whose lease has long to run): dcsync reads the holder and releases
the lock as that holder, and prints whom it removed. The release is conditional on
that holder: if the lock changed hands in between, nothing is removed (exit 5). The
holder, if alive, loses its lease at its next renewal, and its fencing token is older
than the next holder's. A lock a Java client holds records no owner and cannot be
broken this way (exit 1). Free: exit 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if f.force == (f.owner != "") {
				return withCode(exitUsage, errors.New("give one of --owner ID and --force"))
			}
			m, opts, err := a.lockManager(c.Context(), nil)
			if err != nil {
				return err
			}
			if !f.force {
				return notHeldBy(args[0], f.owner, m.Release(c.Context(), args[0], f.owner, opts...))
			}
			return a.breakLock(c.Context(), m, args[0], opts, f.json)
		},
	}
	rel.Flags().StringVar(&f.owner, "owner", "", "owner id printed by 'lock acquire'")
	rel.Flags().BoolVar(&f.force, "force", false, "break the lock whoever holds it, printing whom it removed")
	rel.Flags().BoolVar(&f.json, "json", false, `with --force: print the holder removed as 'lock status --json' does`)

	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Print the lock's holder, token and time left, or 'free'",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.lockManager(c.Context(), nil)
			if err != nil {
				return err
			}
			st, err := m.Inspect(c.Context(), args[0], opts...)
			if err != nil && !errors.Is(err, dcsync.ErrNotFound) {
				return err
			}
			if f.json {
				level, _ := dcsync.ParseLevel(a.level)
				j := lockJSON{Name: args[0], Level: level.String(), Farm: a.farm}
				if level == dcsync.XDC {
					j.Farm = ""
				}
				if err == nil {
					j.Held, j.Owner, j.Token = true, st.Owner, st.Token
					j.ExpiresAt, j.ExpiresInMS = expiry(st.Expires)
				}
				return a.printJSON(j)
			}
			if err != nil {
				fmt.Fprintln(a.stdout, "free")
				return nil
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
		Long: `Run CMD while holding the lock, and never let it run on without the lock.

The lease (--ttl) is renewed every TTL/3 for as long as CMD runs. CMD runs in a process
group of its own, with DCSYNC_LOCK_TOKEN (the fencing token) and DCSYNC_LOCK_OWNER in its
environment; signals go to that whole group, so what CMD starts (sh -c, make, scripts)
is stopped with it:
  - the lease cannot be renewed (store unreachable, dcsync paused): CMD is sent SIGTERM
    --kill-after before the lease would end and SIGKILL when it ends, by this host's
    clock less a safety margin (5% of the TTL + 100ms), so that it is gone before
    anyone else can take the lock;
  - the lease is lost (the store says another owner holds it, or it was deleted): the
    same, SIGTERM now and SIGKILL --kill-after later (or at the lease's end, if
    sooner); dcsync exits 5 in both cases;
  - dcsync itself dies (SIGKILL, the OOM killer): the group is killed at once;
  - CMD exits: what it left running in its group is stopped before the lock is
    released.
The grace period is --kill-after, at most a third of the TTL; --kill-after 0 sends
SIGKILL only. A process that leaves the group (setsid, a daemon) is not followed.

On a terminal CMD is the foreground job: it reads the terminal, and Ctrl-C, Ctrl-\
and Ctrl-Z reach it (once) straight from the terminal. SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 sent to dcsync are forwarded to CMD's group (once);
before CMD starts, they end the wait for the lock.

Exit codes: CMD's own; 128+N when signal N ended it (130 SIGINT, 137 SIGKILL, 143
SIGTERM); 127 CMD not found, 126 not executable (the lock is not taken); 3 lock held,
4 --wait ran out (both --conflict-exit-code when given, as flock -E, to tell them from
CMD's own exit codes); 5 the lease was lost or could not be renewed in time.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return withCode(exitUsage, errors.New("usage: dcsync lock run NAME [flags] -- CMD [ARGS...]"))
			}
			if err := checkKillAfter(c, f.killAfter, f.ttl); err != nil {
				return err
			}
			var err error
			if f.conflictSet, err = checkConflictCode(c, f.conflictCode); err != nil {
				return err
			}
			return a.runLocked(c.Context(), args[0], f, args[1:])
		},
	}
	addTTLWait(runCmd)
	runCmd.Flags().DurationVar(&f.killAfter, "kill-after", defaultKillAfter, "grace between SIGTERM and SIGKILL when CMD must stop (at most TTL/3; 0: SIGKILL only)")
	runCmd.Flags().IntVar(&f.conflictCode, "conflict-exit-code", 0, "exit code when the lock is held or --wait runs out (default 3 and 4), to tell them from CMD's")

	status.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","held","owner","token","expires_at","expires_in_ms"}`)
	var listJSON bool
	list := newLockListCmd(a, &listJSON)
	list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array (see above)")
	cmd.AddCommand(list)

	for _, c := range []*cobra.Command{acq, rel, status, runCmd, newLockRefreshCmd(a)} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	return cmd
}

// breakLock releases lock name as its current holder (lock release --force) and prints
// whom it removed. The release is conditioned on the holder read: a lock that changed
// hands in between is left alone.
func (a *app) breakLock(ctx context.Context, m *lock.Manager, name string, opts []lock.CallOption, asJSON bool) error {
	st, err := m.Inspect(ctx, name, opts...)
	if errors.Is(err, dcsync.ErrNotFound) {
		return &said{msg: fmt.Sprintf("lock %q is not held: nothing to break", name), err: err}
	}
	if err != nil {
		return err
	}
	if st.Owner == "" {
		return &said{msg: fmt.Sprintf("lock %q is held by a Java client, which records no owner: it cannot be broken from dcsync; it ends with its lease (%s)", name, remaining(st.Expires))}
	}
	if err := m.Release(ctx, name, st.Owner, opts...); err != nil {
		if dcsync.CodeOf(err) == dcsync.LockLost {
			return &said{msg: fmt.Sprintf("lock %q changed hands while it was being broken (it was held by %s): nothing was removed", name, st.Owner), err: err}
		}
		return err
	}
	if asJSON {
		level, _ := dcsync.ParseLevel(a.level)
		return a.printJSON(heldJSON(dcsync.Key{Level: level, Client: a.client, Farm: a.farm, Name: name}, st.Owner, st))
	}
	fmt.Fprintf(a.stdout, "released owner=%s token=%d expires_in=%s\n", st.Owner, st.Token, remaining(st.Expires))
	return nil
}
