package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/rwlock"
)

// rwStore is the store of `rwlock run`: its lock operations through the lease clock
// (whose batched calls keep the store's, driver.LockBatcher and driver.LockMover), its
// registers as they are.
type rwStore struct {
	*leaseClock
	driver.RegisterStore
}

// rwManager returns a read-write lock manager on the store, creating read-write locks
// with readers slots; with clock, its lock operations go through a lease clock, which
// it returns.
func (a *app) rwManager(ctx context.Context, readers int, clock bool) (*rwlock.Manager, *leaseClock, []rwlock.CallOption, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	regs, err := driver.Registers(s, "rwlock")
	if err != nil {
		return nil, nil, nil, err
	}
	var ls driver.LockStore = s
	var lc *leaseClock
	if clock {
		lc = newLeaseClock(s)
		ls = rwStore{leaseClock: lc, RegisterStore: regs}
	}
	m, err := rwlock.New(ls, a.client, a.farm, rwlock.WithLogger(a.cliLogger()), rwlock.WithReaders(readers))
	if err != nil {
		return nil, nil, nil, err
	}
	return m, lc, []rwlock.CallOption{rwlock.Level(level)}, nil
}

// rwHolderJSON is one hold of 'rwlock status --json'.
type rwHolderJSON struct {
	Slot        *int    `json:"slot,omitempty"`
	Owner       string  `json:"owner"`
	Token       uint64  `json:"token"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMS *int64  `json:"expires_in_ms"`
}

// rwStatusJSON is the object of 'rwlock status --json'.
type rwStatusJSON struct {
	Name    string         `json:"name"`
	Level   string         `json:"level"`
	Farm    string         `json:"farm"`
	Slots   int            `json:"slots"`
	Writer  *rwHolderJSON  `json:"writer"`
	Readers []rwHolderJSON `json:"readers"`
}

func rwHolder(st lock.State, slot *int) *rwHolderJSON {
	at, in := expiry(st.Expires)
	return &rwHolderJSON{Slot: slot, Owner: st.Owner, Token: st.Token, ExpiresAt: at, ExpiresInMS: in}
}

func newRWLockCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "rwlock", Short: "Run under and inspect distributed read-write locks (many readers or one writer)"}
	f := &lockFlags{}
	var read, write, asJSON bool
	var readers int

	run := &cobra.Command{
		Use:   "run NAME (--read | --write) [flags] -- CMD [ARGS...]",
		Short: "Run CMD while holding a read lock or the write lock, keeping it alive; exit with CMD's code",
		Long: `Run CMD while holding a read lock (--read: shared with other readers) or the write
lock (--write: alone, no reader), and never let it run on without it.

A writer waiting for the readers to leave keeps new readers out (writer preference), so a
stream of readers does not starve it. CMD runs as under 'dcsync lock run' (see its help:
the lease is renewed every TTL/3, CMD runs in a process group of its own that is stopped
when the lease is lost or cannot be renewed in time, signals are forwarded), with
DCSYNC_LOCK_TOKEN (the fencing token: the writer lock's for --write, strictly greater
than every earlier writer's; the reader slot's for --read), DCSYNC_LOCK_OWNER and
DCSYNC_RWLOCK_MODE (read or write) in its environment.

The number of reader slots (at most that many readers at once) is fixed when the
read-write lock is first used: --readers then, the stored number afterwards.

Exit codes: CMD's own; 128+N when signal N ended it; 127 CMD not found, 126 not
executable (nothing is taken); 3 held (a writer, or the readers for --write), 4 --wait
ran out (both --conflict-exit-code when given); 5 the lease was lost or could not be
renewed in time.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return withCode(exitUsage, errors.New("usage: dcsync rwlock run NAME (--read | --write) [flags] -- CMD [ARGS...]"))
			}
			if read == write {
				return withCode(exitUsage, errors.New("give one of --read and --write"))
			}
			if err := checkKillAfter(c, f.killAfter, f.ttl); err != nil {
				return err
			}
			var err error
			if f.conflictSet, err = checkConflictCode(c, f.conflictCode); err != nil {
				return err
			}
			mode := rwlock.Read
			if write {
				mode = rwlock.Write
			}
			name := args[0]
			return a.runLeased(c.Context(), name, args[1:], f.killAfter, func(ctx context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error) {
				m, lc, opts, err := a.rwManager(ctx, readers, true)
				if err != nil {
					return nil, nil, err
				}
				opts = append(opts, rwlock.TTL(f.ttl), rwlock.Wait(f.wait))
				return lc, func(ctx context.Context) (*heldLease, error) {
					var l *rwlock.Lock
					var err error
					if mode == rwlock.Write {
						l, err = m.AcquireWrite(ctx, name, opts...)
					} else {
						l, err = m.AcquireRead(ctx, name, opts...)
					}
					if err != nil {
						if f.wait > 0 && errors.Is(err, dcsync.ErrLockUnavailable) && !errors.Is(err, context.Canceled) {
							err = withCode(exitTimeout, fmt.Errorf("waited %v for the %s lock %q: %w", f.wait, mode, name, err))
						}
						if code := exitCode(err); f.conflictSet && (code == exitHeld || code == exitTimeout) {
							return nil, withCode(f.conflictCode, err)
						}
						return nil, err
					}
					return &heldLease{ttl: l.TTL(), keepAlive: l.KeepAlive, release: l.Release,
						env: []string{fmt.Sprintf("DCSYNC_LOCK_TOKEN=%d", l.Token()), "DCSYNC_LOCK_OWNER=" + l.Owner(),
							"DCSYNC_RWLOCK_MODE=" + mode.String()}}, nil
				}, nil
			})
		},
	}
	run.Flags().BoolVar(&read, "read", false, "take a read lock (shared with other readers)")
	run.Flags().BoolVar(&write, "write", false, "take the write lock (alone)")
	run.Flags().DurationVar(&f.ttl, "ttl", lock.DefaultTTL, "lease length")
	run.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for the lock (0: fail at once with exit 3)")
	run.Flags().DurationVar(&f.killAfter, "kill-after", defaultKillAfter, "grace between SIGTERM and SIGKILL when CMD must stop (at most TTL/3; 0: SIGKILL only)")
	run.Flags().IntVar(&f.conflictCode, "conflict-exit-code", 0, "exit code when the lock is held or --wait runs out (default 3 and 4), to tell them from CMD's")
	run.Flags().IntVar(&readers, "readers", rwlock.DefaultReaders, fmt.Sprintf("reader slots when this run creates the read-write lock (1..%d)", rwlock.MaxReaders))

	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Print the read-write lock's writer and readers, with tokens and time left",
		Long: `Print the read-write lock's writer (one that holds it, or that holds the writer lock
while it waits for the readers to leave) and its readers, with owners, tokens and time
left:
  writer free | writer held owner=ID token=N expires_in=D
  readers N of M slots
  reader slot=I owner=ID token=N expires_in=D      (one line per reader)
M is 0 for a read-write lock never used. --json prints one object
{"name","level","farm","slots","writer","readers"}, writer null when free, each holder
{"slot","owner","token","expires_at","expires_in_ms"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, _, opts, err := a.rwManager(c.Context(), rwlock.DefaultReaders, false)
			if err != nil {
				return err
			}
			st, err := m.Inspect(c.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			if asJSON {
				level, _ := dcsync.ParseLevel(a.level)
				j := rwStatusJSON{Name: args[0], Level: level.String(), Farm: a.farm, Slots: st.Slots, Readers: []rwHolderJSON{}}
				if level == dcsync.XDC {
					j.Farm = ""
				}
				if st.Writer != nil {
					j.Writer = rwHolder(*st.Writer, nil)
				}
				for _, r := range st.Readers {
					slot := r.Slot
					j.Readers = append(j.Readers, *rwHolder(r.State, &slot))
				}
				return a.printJSON(j)
			}
			if st.Writer == nil {
				fmt.Fprintln(a.stdout, "writer free")
			} else {
				fmt.Fprintf(a.stdout, "writer held owner=%s token=%d expires_in=%s\n", st.Writer.Owner, st.Writer.Token, remaining(st.Writer.Expires))
			}
			fmt.Fprintf(a.stdout, "readers %d of %d slots\n", len(st.Readers), st.Slots)
			for _, r := range st.Readers {
				fmt.Fprintf(a.stdout, "reader slot=%d owner=%s token=%d expires_in=%s\n", r.Slot, r.Owner, r.Token, remaining(r.Expires))
			}
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, `print one JSON object (see above)`)

	for _, c := range []*cobra.Command{run, status} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newRWLockListCmd(a))
	return cmd
}
