package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
)

type electionFlags struct {
	value     string
	ttl       time.Duration
	killAfter time.Duration
	poll      time.Duration
	count     int
	json      bool
}

// electionStore is the store of 'election campaign': its lock operations go through a
// leaseClock (the guardian's deadline), its registers straight to the store.
type electionStore struct {
	*leaseClock
	driver.RegisterStore
}

// electionManager returns an election manager on the store; with lc set, its lock
// operations go through a new leaseClock, returned.
func (a *app) electionManager(ctx context.Context, f *electionFlags, withClock bool) (*election.Manager, *leaseClock, error) {
	s, level, err := a.setup(ctx)
	if err != nil {
		return nil, nil, err
	}
	regs, err := driver.Registers(s, "election")
	if err != nil {
		return nil, nil, err
	}
	var ls driver.LockStore = s
	var lc *leaseClock
	if withClock {
		lc = newLeaseClock(s)
		ls = electionStore{leaseClock: lc, RegisterStore: regs}
	}
	opts := []election.Option{election.WithLevel(level), election.WithLogger(a.cliLogger())}
	if f.ttl > 0 {
		opts = append(opts, election.WithTTL(f.ttl))
	}
	if f.poll > 0 {
		opts = append(opts, election.WithPollInterval(f.poll))
	}
	m, err := election.New(ls, a.client, a.farm, opts...)
	return m, lc, err
}

// leaderJSON is an election's leader as 'election leader --json' and 'election observe
// --json' print it.
type leaderJSON struct {
	Name    string `json:"name"`
	Level   string `json:"level"`
	Farm    string `json:"farm,omitempty"`
	Leader  bool   `json:"leader"`
	Pending bool   `json:"pending,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Value   string `json:"value"`
}

func (a *app) leaderJSON(name string, l *election.Leader) leaderJSON {
	level, _ := dcsync.ParseLevel(a.level)
	j := leaderJSON{Name: name, Level: level.String(), Farm: a.farm}
	if level == dcsync.XDC {
		j.Farm = ""
	}
	if l != nil {
		j.Leader, j.Pending, j.Token, j.Value = !l.Pending, l.Pending, l.Token, l.Value
	}
	return j
}

// valueText prints a value as it is when it is one plain word, else quoted (Go syntax),
// so that a change is always one line.
func valueText(v string) string {
	if v == "" || strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' }) >= 0 {
		return strconv.Quote(v)
	}
	return v
}

func newElectionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "election", Short: "Campaign in, inspect and observe leader elections"}
	f := &electionFlags{}

	campaign := &cobra.Command{
		Use:   "campaign NAME --value V [flags] -- CMD [ARGS...]",
		Short: "Wait to lead the election, publish V, and run CMD while leader; resign when it exits",
		Long: `Wait until this candidate leads election NAME (candidates take turns; there is no
order across processes), publish V as the leader's value (what 'election leader' and
'election observe' show), then run CMD while leading, and resign when CMD exits.

Leadership is a lease (--ttl), renewed every TTL/3, and CMD is guarded exactly as by
'dcsync lock run' (see its help): it runs in a process group of its own, with
DCSYNC_ELECTION_TOKEN (the leader's fencing token, greater than every earlier
leader's) in its environment, and is stopped (SIGTERM, SIGKILL --kill-after later)
before the lease would end unrenewed, at once when leadership is lost, and when dcsync
dies. Signals sent to dcsync are forwarded to CMD; before CMD starts they end the
campaign.

Exit codes: CMD's own; 128+N when signal N ended it; 127 CMD not found, 126 not
executable (no campaign); 5 leadership was lost or could not be renewed in time.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return withCode(exitUsage, errors.New("usage: dcsync election campaign NAME --value V [flags] -- CMD [ARGS...]"))
			}
			if err := checkKillAfter(c, f.killAfter, f.ttl); err != nil {
				return err
			}
			return a.runElected(c.Context(), args[0], f, args[1:])
		},
	}
	campaign.Flags().StringVar(&f.value, "value", "", "the leader's value to publish (at most 16,375 bytes)")
	campaign.Flags().DurationVar(&f.ttl, "ttl", election.DefaultTTL, "lease of the leadership")
	campaign.Flags().DurationVar(&f.killAfter, "kill-after", defaultKillAfter, "grace between SIGTERM and SIGKILL when CMD must stop (at most TTL/3; 0: SIGKILL only)")
	_ = campaign.MarkFlagRequired("value")

	leader := &cobra.Command{
		Use:   "leader NAME",
		Short: "Print the election's leader: token=<n> value=<v>, 'pending token=<n>', or 'none'",
		Long: `Print the election's leader: token=<n> value=<v>. 'none' when nobody leads; 'pending
token=<n>' when a candidate holds leadership but has not yet published its value (a
moment after it won, or a candidate that died then: its lease ends it). A value with
spaces or special characters is printed quoted (Go syntax); --json prints it as is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, _, err := a.electionManager(c.Context(), f, false)
			if err != nil {
				return err
			}
			l, err := m.Leader(c.Context(), args[0])
			if err != nil && !errors.Is(err, dcsync.ErrNotFound) {
				return err
			}
			if f.json {
				if err != nil {
					return a.printJSON(a.leaderJSON(args[0], nil))
				}
				return a.printJSON(a.leaderJSON(args[0], &l))
			}
			switch {
			case err != nil:
				fmt.Fprintln(a.stdout, "none")
			case l.Pending:
				fmt.Fprintf(a.stdout, "pending token=%d\n", l.Token)
			default:
				fmt.Fprintf(a.stdout, "token=%d value=%s\n", l.Token, valueText(l.Value))
			}
			return nil
		},
	}
	leader.Flags().BoolVar(&f.json, "json", false, `print one JSON object {"name","level","farm","leader","pending","token","value"}`)

	observe := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print a line per leader change (token=<n> value=<v>) until interrupted",
		Long: `Print the election's leader, then one line per change of leader or of its value,
in order (tokens never go down): token=<n> value=<v>, or with --json one JSON object
per line. The store is read every --poll; a leader that led for less than that may be
missed. Runs until interrupted (exit 130 on SIGINT), or until --count changes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if f.count < 0 {
				return withCode(exitUsage, fmt.Errorf("--count %d is negative", f.count))
			}
			m, _, err := a.electionManager(c.Context(), f, false)
			if err != nil {
				return err
			}
			ch, err := m.Observe(c.Context(), args[0])
			if err != nil {
				return err
			}
			n := 0
			for l := range ch {
				if f.json {
					if err := a.printJSON(a.leaderJSON(args[0], &l)); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(a.stdout, "token=%d value=%s\n", l.Token, valueText(l.Value))
				}
				if n++; f.count > 0 && n >= f.count {
					return nil
				}
			}
			return context.Cause(c.Context())
		},
	}
	observe.Flags().BoolVar(&f.json, "json", false, `print one JSON object per change {"name","level","farm","leader","token","value"}`)
	observe.Flags().DurationVar(&f.poll, "poll", election.DefaultPollInterval, "how often to read the store")
	observe.Flags().IntVar(&f.count, "count", 0, "exit after this many lines (0: run until interrupted)")

	for _, c := range []*cobra.Command{campaign, leader, observe} {
		addLevelFlag(c, a)
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newElectionListCmd(a))
	return cmd
}
