package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/semaphore"
)

type semFlags struct {
	permits      int
	n            int
	ttl          time.Duration
	wait         time.Duration
	owners       []string
	killAfter    time.Duration
	conflictCode int
	json         bool
	timeout      time.Duration
}

// permitJSON is one held permit slot in the JSON of the semaphore commands.
type permitJSON struct {
	Slot        int     `json:"slot"`
	Owner       string  `json:"owner"`
	Token       uint64  `json:"token"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMS *int64  `json:"expires_in_ms"`
}

// semaphoreJSON is the object 'semaphore acquire --json' and 'semaphore status --json'
// print.
type semaphoreJSON struct {
	Name    string       `json:"name"`
	Level   string       `json:"level"`
	Farm    string       `json:"farm"`
	Permits int          `json:"permits"`
	Held    []permitJSON `json:"held"`
}

// permitStore is the store of semaphore run: its lock calls go through lc, which
// learns when each permit's lease was sent; the rest goes to the store.
type permitStore struct {
	driver.Store
	lc *leaseClock
}

func (p permitStore) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	return p.lc.AcquireLock(ctx, k, owner, ttl)
}

func (p permitStore) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	return p.lc.RefreshLock(ctx, k, owner, ttl)
}

func (p permitStore) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	return p.lc.ReleaseLock(ctx, k, owner)
}

// The batched lock calls go through lc too, which keeps the store's batches: the
// permits' renewals are one call per interval whatever their number.

func (p permitStore) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return p.lc.InspectLocks(ctx, keys)
}

func (p permitStore) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return p.lc.RefreshLocks(ctx, reqs)
}

func (p permitStore) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	return p.lc.AcquireLocks(ctx, reqs)
}

func (p permitStore) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	return p.lc.ReleaseLocks(ctx, reqs)
}

// semaphores returns a semaphore manager on the store and the level of --level; with
// clock, its lock calls go through a leaseClock (returned).
func (a *app) semaphores(ctx context.Context, f *semFlags, clock bool) (*semaphore.Manager, dcsync.Level, *leaseClock, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	var lc *leaseClock
	if clock {
		lc = newLeaseClock(s)
		s = permitStore{Store: s, lc: lc}
	}
	opts := []semaphore.Option{semaphore.WithLevel(level), semaphore.WithLogger(a.cliLogger())}
	if f.ttl > 0 {
		opts = append(opts, semaphore.WithTTL(f.ttl))
	}
	m, err := semaphore.New(s, a.client, a.farm, opts...)
	return m, level, lc, err
}

// takePermits opens the semaphore with --permits and takes -n permits: at once
// (--wait 0: exit 3 when fewer are free) or waiting (exit 4 when the wait runs out).
func takePermits(ctx context.Context, m *semaphore.Manager, name string, f *semFlags) (*semaphore.Permits, error) {
	sem, err := m.Open(ctx, name, f.permits)
	if errors.Is(err, dcsync.ErrConflict) {
		return nil, fmt.Errorf("%w; see 'dcsync semaphore resize'", err)
	}
	if err != nil {
		return nil, err
	}
	if f.wait == 0 {
		return sem.TryAcquire(ctx, f.n, semaphore.TTL(f.ttl))
	}
	p, err := sem.Acquire(ctx, f.n, semaphore.TTL(f.ttl), semaphore.Wait(f.wait))
	if errors.Is(err, dcsync.ErrLockUnavailable) && !errors.Is(err, context.Canceled) {
		return nil, withCode(exitTimeout, fmt.Errorf("waited %v: %w", f.wait, err))
	}
	return p, err
}

func (a *app) semaphoreJSON(name string, level dcsync.Level, permits int, held []permitJSON) semaphoreJSON {
	j := semaphoreJSON{Name: name, Level: level.String(), Farm: a.farm, Permits: permits, Held: held}
	if level == dcsync.XDC {
		j.Farm = ""
	}
	if j.Held == nil {
		j.Held = []permitJSON{}
	}
	return j
}

func newSemaphoreCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "semaphore", Short: "Acquire, release, inspect, resize and run under counting semaphores"}
	f := &semFlags{}
	addPermits := func(c *cobra.Command, n bool) {
		c.Flags().IntVar(&f.permits, "permits", 0, "the semaphore's number of permits N (required; a semaphore that exists with another N is refused: see resize)")
		if n {
			c.Flags().IntVarP(&f.n, "n", "n", 1, "how many permits to take, all or nothing")
			c.Flags().DurationVar(&f.ttl, "ttl", semaphore.DefaultTTL, "lease of each permit")
			c.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for n free permits (0: fail at once with exit 3)")
		}
	}
	checkPermits := func() error {
		if f.permits < 1 || f.permits > semaphore.MaxPermits {
			return withCode(exitUsage, fmt.Errorf("--permits %d: give the semaphore's number of permits, 1 to %d", f.permits, semaphore.MaxPermits))
		}
		return nil
	}

	acq := &cobra.Command{
		Use:   "acquire NAME --permits N [-n K]",
		Short: "Take K permits of a semaphore of N and print slot=<i> owner=<id> token=<t> for each",
		Long: `Take K permits (-n, default 1) of the semaphore NAME of N permits (--permits),
all or nothing, and print one line slot=<i> owner=<id> token=<t> per permit. Each
permit is held until its lease (--ttl) ends or 'dcsync semaphore release NAME --owner
ID' frees it. The token is the fencing token of the permit's slot: it strictly
increases per slot. The first acquire creates the semaphore with N permits; an
acquire naming another N is refused (exit 1): change N with 'semaphore resize'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPermits(); err != nil {
				return err
			}
			m, level, _, err := a.semaphores(c.Context(), f, false)
			if err != nil {
				return err
			}
			p, err := takePermits(c.Context(), m, args[0], f)
			if err != nil {
				return err
			}
			if f.json {
				var held []permitJSON
				for _, q := range p.Permits() {
					at, in := expiry(q.Expires)
					held = append(held, permitJSON{Slot: q.Slot, Owner: q.Owner, Token: q.Token, ExpiresAt: at, ExpiresInMS: in})
				}
				return a.printJSON(a.semaphoreJSON(args[0], level, f.permits, held))
			}
			for _, q := range p.Permits() {
				fmt.Fprintf(a.stdout, "slot=%d owner=%s token=%d\n", q.Slot, q.Owner, q.Token)
			}
			return nil
		},
	}
	addPermits(acq, true)
	acq.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","permits","held":[{"slot","owner","token","expires_at","expires_in_ms"}]}`)

	rel := &cobra.Command{
		Use:   "release NAME --owner ID [--owner ID ...]",
		Short: "Release the permits held by owner IDs (exit 5 if an ID holds none)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(f.owners) == 0 {
				return withCode(exitUsage, errors.New("give --owner ID (an owner printed by 'semaphore acquire')"))
			}
			m, _, _, err := a.semaphores(c.Context(), f, false)
			if err != nil {
				return err
			}
			return m.Release(c.Context(), args[0], f.owners)
		},
	}
	rel.Flags().StringArrayVar(&f.owners, "owner", nil, "owner id printed by 'semaphore acquire' (repeat for several permits)")

	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Print the semaphore's number of permits and its holders",
		Long: `Print permits=<N> held=<k>, then one line per held permit slot:
slot=<i> owner=<id> token=<t> expires_in=<d>. A slot at or above N is held from before
a shrink (see resize). A semaphore that does not exist: exit 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, level, _, err := a.semaphores(c.Context(), f, false)
			if err != nil {
				return err
			}
			st, err := m.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			if f.json {
				var held []permitJSON
				for _, h := range st.Held {
					at, in := expiry(h.Expires)
					held = append(held, permitJSON{Slot: h.Slot, Owner: h.Owner, Token: h.Token, ExpiresAt: at, ExpiresInMS: in})
				}
				return a.printJSON(a.semaphoreJSON(args[0], level, st.Permits, held))
			}
			fmt.Fprintf(a.stdout, "permits=%d held=%d\n", st.Permits, len(st.Held))
			for _, h := range st.Held {
				fmt.Fprintf(a.stdout, "slot=%d owner=%s token=%d expires_in=%s\n", h.Slot, h.Owner, h.Token, remaining(h.Expires))
			}
			return nil
		},
	}
	status.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","permits","held":[{"slot","owner","token","expires_at","expires_in_ms"}]}`)

	resize := &cobra.Command{
		Use:   "resize NAME --permits N",
		Short: "Change the semaphore's number of permits; a shrink waits until at most N are held",
		Long: `Change the number of permits of the semaphore NAME to N. Growing applies at once.
Shrinking applies to new acquisitions at once, and resize returns only once no permit
above the new N is held (released, or its lease ended), so that from then on at most N
are held; when --timeout runs out first it exits 4 (N is changed all the same: run
resize again to wait again).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPermits(); err != nil {
				return err
			}
			m, _, _, err := a.semaphores(c.Context(), f, false)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), f.timeout)
			defer cancel()
			err = m.Resize(ctx, args[0], f.permits)
			if err != nil && errors.Is(err, context.DeadlineExceeded) {
				return withCode(exitTimeout, err)
			}
			return err
		},
	}
	addPermits(resize, false)
	resize.Flags().DurationVar(&f.timeout, "timeout", 90*time.Second, "how long a shrink waits for the permits above the new N")

	runCmd := &cobra.Command{
		Use:   "run NAME --permits N [-n K] [flags] -- CMD [ARGS...]",
		Short: "Run CMD while holding K permits, keeping them alive; exit with CMD's code",
		Long: `Run CMD while holding K permits (-n, default 1) of the semaphore NAME of N
(--permits), and never let it run on without them: exactly as 'dcsync lock run' runs a
command under a lock (see its help: the guardian, signals, --kill-after, exit codes),
with the permits' leases in place of the lock's. The command is stopped when any
permit's lease is lost or cannot be renewed in time. CMD's environment has
DCSYNC_SEMAPHORE_SLOTS, DCSYNC_SEMAPHORE_TOKENS and DCSYNC_SEMAPHORE_OWNERS: the
permits' slots, fencing tokens and owner ids, comma-separated, in the same order.
Exit codes: CMD's own; 3 fewer than K permits free, 4 --wait ran out (both
--conflict-exit-code when given); 5 a lease was lost or not renewed in time.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return withCode(exitUsage, errors.New("usage: dcsync semaphore run NAME --permits N [flags] -- CMD [ARGS...]"))
			}
			if err := checkPermits(); err != nil {
				return err
			}
			if err := checkKillAfter(c, f.killAfter, f.ttl); err != nil {
				return err
			}
			conflictSet, err := checkConflictCode(c, f.conflictCode)
			if err != nil {
				return err
			}
			name := args[0]
			return a.runLeased(c.Context(), name, args[1:], f.killAfter, func(ctx context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error) {
				m, _, lc, err := a.semaphores(ctx, f, true)
				if err != nil {
					return nil, nil, err
				}
				return lc, func(ctx context.Context) (*heldLease, error) {
					p, err := takePermits(ctx, m, name, f)
					if err != nil {
						if code := exitCode(err); conflictSet && (code == exitHeld || code == exitTimeout) {
							return nil, withCode(f.conflictCode, err)
						}
						return nil, err
					}
					var slots, tokens, owners []string
					for _, q := range p.Permits() {
						slots = append(slots, strconv.Itoa(q.Slot))
						tokens = append(tokens, strconv.FormatUint(q.Token, 10))
						owners = append(owners, q.Owner)
					}
					return &heldLease{ttl: p.TTL(), keepAlive: p.KeepAlive, release: p.Release, env: []string{
						"DCSYNC_SEMAPHORE_SLOTS=" + strings.Join(slots, ","),
						"DCSYNC_SEMAPHORE_TOKENS=" + strings.Join(tokens, ","),
						"DCSYNC_SEMAPHORE_OWNERS=" + strings.Join(owners, ",")}}, nil
				}, nil
			})
		},
	}
	addPermits(runCmd, true)
	runCmd.Flags().DurationVar(&f.killAfter, "kill-after", defaultKillAfter, "grace between SIGTERM and SIGKILL when CMD must stop (at most TTL/3; 0: SIGKILL only)")
	runCmd.Flags().IntVar(&f.conflictCode, "conflict-exit-code", 0, "exit code when the permits are taken or --wait runs out (default 3 and 4), to tell them from CMD's")

	for _, c := range []*cobra.Command{acq, rel, status, resize, runCmd} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newSemaphoreListCmd(a))
	return cmd
}
