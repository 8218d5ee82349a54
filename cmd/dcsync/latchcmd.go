package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dcsync/dcsync/latch"
)

type latchFlags struct {
	count   int64
	ttl     time.Duration
	timeout time.Duration
	poll    time.Duration
	json    bool // --json
}

func (a *app) latchManager(ctx context.Context, f *latchFlags) (*latch.Manager, []latch.CallOption, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := latch.New(s, a.client, a.farm, latch.WithPollInterval(f.poll), latch.WithLogger(a.cliLogger()))
	if err != nil {
		return nil, nil, err
	}
	return m, []latch.CallOption{latch.Level(level), latch.TTL(f.ttl)}, nil
}

func newLatchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "latch", Short: "Create, count down, count up, read and await distributed latches"}
	f := &latchFlags{ttl: latch.DefaultTTL, poll: latch.DefaultPollInterval}

	create := &cobra.Command{
		Use:   "create NAME --count N",
		Short: "Create a latch with count N (exit 1 if it exists; its count is left alone)",
		Long: `Create a latch with count N (0 to 9223372036854775807). It fails with exit 1 if the
latch exists, leaving its count alone. Counts are 64-bit: an update that would take the
count past that range is refused with exit 2 and changes nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.latchManager(c.Context(), f)
			if err != nil {
				return err
			}
			_, err = m.CreateCountUpDown(c.Context(), args[0], f.count, opts...)
			return err
		},
	}
	create.Flags().Int64Var(&f.count, "count", 0, "initial count (>= 0)")
	_ = create.MarkFlagRequired("count")

	update := func(use, short string, delta int64) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				m, opts, err := a.latchManager(c.Context(), f)
				if err != nil {
					return err
				}
				l, err := m.GetCountUpDown(args[0], opts...)
				if err != nil {
					return err
				}
				var n int64
				if delta < 0 {
					n, err = l.CountDown(c.Context())
				} else {
					n, err = l.CountUp(c.Context())
				}
				if err != nil {
					return err
				}
				if f.json {
					return a.printJSON(latchJSON{Name: args[0], Level: l.Key().Level.String(), Farm: a.farm, Count: n})
				}
				fmt.Fprintln(a.stdout, n)
				return nil
			},
		}
	}
	down := update("countdown", "Decrement the count by one and print the count after it", -1)
	up := update("countup", "Increment the count by one and print the count after it", 1)
	for _, c := range []*cobra.Command{down, up} {
		c.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","count"}: the count after the update`)
	}

	count := &cobra.Command{
		Use:   "count NAME",
		Short: "Print the count (the farm's cell for dc, the sum of all farms for xdc)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, opts, err := a.latchManager(c.Context(), f)
			if err != nil {
				return err
			}
			l, err := m.GetCountDown(args[0], opts...)
			if err != nil {
				return err
			}
			n, err := l.Count(c.Context())
			if err != nil {
				return err
			}
			if f.json {
				j := latchJSON{Name: args[0], Level: l.Key().Level.String(), Farm: a.farm, Count: n}
				return a.printJSON(j)
			}
			fmt.Fprintln(a.stdout, n)
			return nil
		},
	}
	count.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","count"}`)

	await := &cobra.Command{
		Use:   "await NAME [--timeout D]",
		Short: "Wait until the count is zero or less (exit 4 on timeout)",
		Long: `Wait until the count is zero or less. On a terminal the remaining count is shown
live; otherwise each change of the count is printed on a line of its own.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if f.timeout < 0 {
				// As timeout(1) does: a negative limit is a mistake, not "now" or "never".
				return withCode(exitUsage, fmt.Errorf("--timeout %v is negative (0 waits for ever)", f.timeout))
			}
			m, opts, err := a.latchManager(c.Context(), f)
			if err != nil {
				return err
			}
			l, err := m.GetCountDown(args[0], opts...)
			if err != nil {
				return err
			}
			ctx := c.Context()
			if f.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, f.timeout)
				defer cancel()
			}
			return a.await(ctx, l, f.poll)
		},
	}
	await.Flags().DurationVar(&f.timeout, "timeout", 0, "give up after this long, exit 4 (0: wait for ever; negative: usage error)")

	// Each command takes only the flags it uses: a flag that would do nothing is refused
	// as unknown (exit 2), not silently accepted.
	create.Flags().DurationVar(&f.ttl, "ttl", latch.DefaultTTL, "latch lifetime from its creation (updates never extend it)")
	await.Flags().DurationVar(&f.poll, "poll", latch.DefaultPollInterval, "how often to read the count while waiting")
	for _, c := range []*cobra.Command{create, down, up, count, await} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	var listJSON bool
	list := newLatchListCmd(a, &listJSON)
	list.Flags().BoolVar(&listJSON, "json", false, "print a JSON array (see above)")
	cmd.AddCommand(list, newLatchDeleteCmd(a))
	return cmd
}

// await waits on l while showing its remaining count.
func (a *app) await(ctx context.Context, l *latch.CountDownLatch, poll time.Duration) error {
	tty := false
	if f, ok := a.stdout.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	show := func(n int64) {
		if tty {
			fmt.Fprintf(a.stdout, "\rremaining: %-12d", n)
		} else {
			fmt.Fprintf(a.stdout, "remaining: %d\n", n)
		}
	}
	last := int64(-1 << 63)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if n, err := l.Count(ctx); err == nil && n != last {
			last = n
			show(n)
		}
		select {
		case err := <-done:
			if tty {
				fmt.Fprintln(a.stdout)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return withCode(exitTimeout, fmt.Errorf("await %s: timed out", l.Key().Name))
			}
			if err == nil {
				fmt.Fprintln(a.stdout, "done")
			}
			return err
		case <-tick.C:
		}
	}
}
