package main

// The queue's operator commands: list, describe, add-group, seek.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// queueSpecJSON is one queue of 'queue list --json' and the spec of 'queue describe
// --json'.
type queueSpecJSON struct {
	Name       string   `json:"name"`
	Partitions int      `json:"partitions"`
	Groups     []string `json:"groups"`
	DedupMS    int64    `json:"dedup_ms"`
	CreatedAt  *string  `json:"created_at"`
}

func specJSON(s queue.Spec) queueSpecJSON {
	j := queueSpecJSON{Name: s.Name, Partitions: s.Partitions, Groups: s.Groups, DedupMS: s.DedupWindow().Milliseconds()}
	if j.Groups == nil {
		j.Groups = []string{}
	}
	j.CreatedAt, _ = expiry(s.Created)
	return j
}

// holderJSON is a lock holder of 'queue describe --json' and 'queue seek --json'.
type holderJSON struct {
	Owner       string  `json:"owner"`
	Token       uint64  `json:"token"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMS *int64  `json:"expires_in_ms"`
	Slot        *int    `json:"slot,omitempty"`
}

func holder(h *queue.Holder) *holderJSON {
	if h == nil {
		return nil
	}
	j := &holderJSON{Owner: h.Owner, Token: h.Token}
	j.ExpiresAt, j.ExpiresInMS = expiry(h.Expires)
	return j
}

func members(ms []queue.MemberSlot) []holderJSON {
	out := []holderJSON{}
	for _, m := range ms {
		j := *holder(&m.Holder)
		s := m.Slot
		j.Slot = &s
		out = append(out, j)
	}
	return out
}

// partitionJSON is one partition of a group in 'queue describe --json'.
type partitionJSON struct {
	Partition int         `json:"partition"`
	Dead      bool        `json:"dead"`
	Head      uint64      `json:"head"`
	Floor     uint64      `json:"floor"`
	Offset    uint64      `json:"offset"`
	Lag       uint64      `json:"lag"`
	Token     uint64      `json:"token"`
	Attempts  int         `json:"attempts"`
	Held      bool        `json:"held"`
	Owner     *holderJSON `json:"owner"`
}

// groupJSON is one group of 'queue describe --json'.
type groupJSON struct {
	Group       string          `json:"group"`
	Members     []holderJSON    `json:"members"`
	DeadMembers []holderJSON    `json:"dead_members"`
	Partitions  []partitionJSON `json:"partitions"`
}

// describeJSON is 'queue describe --json'.
type describeJSON struct {
	queueSpecJSON
	GroupStates []groupJSON `json:"group_states"`
}

// resetJSON is 'queue seek --json'.
type resetJSON struct {
	Queue       string          `json:"queue"`
	Group       string          `json:"group"`
	DryRun      bool            `json:"dry_run"`
	Live        bool            `json:"live"`
	Members     []holderJSON    `json:"members"`
	DeadMembers []holderJSON    `json:"dead_members"`
	Partitions  []resetPartJSON `json:"partitions"`
	Error       *string         `json:"error,omitempty"`
}

type resetPartJSON struct {
	Partition int         `json:"partition"`
	Dead      bool        `json:"dead"`
	From      uint64      `json:"from"`
	To        uint64      `json:"to"`
	Head      uint64      `json:"head"`
	Floor     uint64      `json:"floor"`
	Owner     *holderJSON `json:"owner"`
	Applied   bool        `json:"applied"`
}

func partName(p int, dead bool) string {
	if dead {
		return fmt.Sprintf("%d(dead)", p)
	}
	return strconv.Itoa(p)
}

func ownerCell(h *queue.Holder) (string, string) {
	if h == nil {
		return "-", "-"
	}
	return ownerText(h.Owner), strconv.FormatUint(h.Token, 10)
}

// newQueueListCmd is 'queue list'.
func newQueueListCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List every queue in the store: name, partitions, groups",
		Long: `List every queue in the store, sorted by name:
  NAME  PARTITIONS  GROUPS
With --json, a JSON array of {"name","partitions","groups","dedup_ms","created_at"}.
On HBase and Aerospike it scans the stored queue specs: an operator's command.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.queueStore(c.Context())
			if err != nil {
				return err
			}
			specs, err := queue.List(c.Context(), s)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]queueSpecJSON, 0, len(specs))
				for _, sp := range specs {
					out = append(out, specJSON(sp))
				}
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPARTITIONS\tGROUPS")
			for _, sp := range specs {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", sp.Name, sp.Partitions, strings.Join(sp.Groups, ","))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (see above)")
	return c
}

// newQueueDescribeCmd is 'queue describe'.
func newQueueDescribeCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "describe NAME [--group G]",
		Short: "Show a queue's groups per partition: offset, head, floor, lag, owner and token, attempts",
		Long: `Show the queue's spec, then for group G (every group if none is given) each
partition (the group's dead-letter partition last, labelled "(dead)"): its head, floor,
the group's offset (first unacked) and lag, the partition lock's holder and its fencing
token, the failed attempts of the event at the offset and whether it is held, and the
group's live member slots:
  GROUP  PARTITION  HEAD  FLOOR  OFFSET  LAG  OWNER  TOKEN  ATTEMPTS  HELD
Owners are the locks of consumers with the client id --client (give the one the
group's consumers use). With --json, one JSON object: the spec's fields and
"group_states": [{"group","members","dead_members","partitions":[{"partition","dead",
"head","floor","offset","lag","token","attempts","held","owner"}]}], owner null or
{"owner","token","expires_at","expires_in_ms"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			q, err := a.openQueue(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			var groups []string
			if f.group != "" {
				if err := checkGroup(c.Context(), q, f.group); err != nil {
					return err
				}
				groups = []string{f.group}
			}
			d, err := q.Describe(c.Context(), groups...)
			if err != nil {
				return err
			}
			if f.json {
				out := describeJSON{queueSpecJSON: specJSON(d.Spec), GroupStates: []groupJSON{}}
				for _, g := range d.Groups {
					gj := groupJSON{Group: g.Group, Members: members(g.Members), DeadMembers: members(g.DeadMembers), Partitions: []partitionJSON{}}
					for _, p := range g.Partitions {
						gj.Partitions = append(gj.Partitions, partitionJSON{Partition: p.Partition, Dead: p.Dead, Head: p.Head, Floor: p.Floor,
							Offset: p.Next, Lag: p.Lag, Token: p.Token, Attempts: p.Attempts, Held: p.Held, Owner: holder(p.Owner)})
					}
					out.GroupStates = append(out.GroupStates, gj)
				}
				return a.printJSON(out)
			}
			fmt.Fprintf(a.stdout, "queue %s: %d partitions, groups %s, dedup %v\n", d.Spec.Name, d.Spec.Partitions, strings.Join(d.Spec.Groups, ","), d.Spec.DedupWindow())
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tPARTITION\tHEAD\tFLOOR\tOFFSET\tLAG\tOWNER\tTOKEN\tATTEMPTS\tHELD")
			for _, g := range d.Groups {
				for _, p := range g.Partitions {
					owner, token := ownerCell(p.Owner)
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%v\n", g.Group, partName(p.Partition, p.Dead),
						p.Head, p.Floor, p.Next, p.Lag, owner, token, p.Attempts, p.Held)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, g := range d.Groups {
				fmt.Fprintf(a.stdout, "group %s: %d members, %d dead-letter consumers\n", g.Group, len(g.Members), len(g.DeadMembers))
			}
			return nil
		},
	}
	c.Flags().StringVar(&f.group, "group", "", "only this group")
	c.Flags().BoolVar(&f.json, "json", false, "print one JSON object (see above)")
	return c
}

// newQueueAddGroupCmd is 'queue add-group'.
func newQueueAddGroupCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "add-group NAME GROUP",
		Short: "Add a consumer group to a queue (exit 1 if it exists)",
		Long: `Add consumer group GROUP to queue NAME; its consumers start at the oldest event
still stored. It fails with exit 1 if the group exists (changing nothing), exit 2 for
a bad name or when the queue has the most groups allowed (64). With --json, the
queue's spec after the change: {"name","partitions","groups","dedup_ms","created_at"}.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if err := driver.ValidateID("group", args[1]); err != nil {
				return err
			}
			q, err := a.openQueue(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			if err := q.AddGroup(c.Context(), args[1]); err != nil {
				return err
			}
			if f.json {
				return a.printJSON(specJSON(q.Spec()))
			}
			fmt.Fprintf(a.stdout, "queue %s: groups %s\n", q.Name(), strings.Join(q.Spec().Groups, ","))
			return nil
		},
	}
	c.Flags().BoolVar(&f.json, "json", false, "print the spec as JSON (see above)")
	return c
}

// seekFlags are the flags of 'queue seek'.
type seekFlags struct {
	earliest, latest, force, dryRun bool
	seqs                            []string
	at                              string
}

// target reads the one target the flags give.
func (s *seekFlags) target() (queue.ResetTarget, error) {
	n := 0
	for _, b := range []bool{s.earliest, s.latest, len(s.seqs) > 0, s.at != ""} {
		if b {
			n++
		}
	}
	if n != 1 {
		return queue.ResetTarget{}, withCode(exitUsage, errors.New("give exactly one of --to-earliest, --to-latest, --to-seq and --to-time"))
	}
	switch {
	case s.earliest:
		return queue.ToEarliest(), nil
	case s.latest:
		return queue.ToLatest(), nil
	case s.at != "":
		t, err := time.Parse(time.RFC3339Nano, s.at)
		if err != nil {
			d, derr := time.ParseDuration(s.at)
			if derr != nil || d <= 0 {
				return queue.ResetTarget{}, withCode(exitUsage, fmt.Errorf("--to-time %q is neither an RFC 3339 time nor a positive duration ago", s.at))
			}
			t = time.Now().Add(-d)
		}
		return queue.ToTime(t), nil
	}
	seqs := map[int]uint64{}
	for _, arg := range s.seqs {
		for _, ps := range strings.Split(arg, ",") {
			pStr, sStr, ok := strings.Cut(ps, ":")
			p, perr := strconv.Atoi(pStr)
			seq, serr := strconv.ParseUint(sStr, 10, 64)
			if !ok || perr != nil || serr != nil || p < 0 {
				return queue.ResetTarget{}, withCode(exitUsage, fmt.Errorf("--to-seq %q: want PARTITION:SEQ", ps))
			}
			if _, dup := seqs[p]; dup {
				return queue.ResetTarget{}, withCode(exitUsage, fmt.Errorf("--to-seq names partition %d twice", p))
			}
			seqs[p] = seq
		}
	}
	return queue.ToSeq(seqs), nil
}

// newQueueSeekCmd is 'queue seek'.
func newQueueSeekCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	sf := &seekFlags{}
	c := &cobra.Command{
		Use:   "seek NAME --group G (--to-earliest | --to-latest | --to-seq P:S[,P:S] | --to-time T) [--force] [--dry-run]",
		Short: "Move a consumer group's offsets (refused while the group has live members)",
		Long: `Move group G's offsets, as Kafka's kafka-consumer-groups --reset-offsets does:
the events from the new offset on are delivered to the group (again), with no attempts
and no acks recorded above it.
  --to-earliest   every partition to its floor (the oldest event still stored)
  --to-latest     every partition to its head (nothing stored now is delivered)
  --to-seq P:S    partition P to seq S (kept within its floor and head); repeat or
                  separate with commas; P may be the group's dead-letter partition
  --to-time T     every partition to its first event enqueued at or after T (RFC 3339,
                  or a duration ago: 1h)
The plan is printed (PARTITION FROM TO OWNER TOKEN APPLIED). The seek is refused with
exit 3, writing nothing, while the group has live members (a member slot or a
partition lock of client --client held: give the client id the group's consumers
use). --force seeks anyway: the partition locks are broken and their holders fenced
(their later acks are refused; they deliver from the new offsets once they take the
partitions again). --dry-run prints the plan and the live members and writes nothing.
Every write is made as the partition's owner (its lock taken, the offset record
claimed with a fresh fencing token): an owner that claims a partition during the seek
wins, and the seek fails with exit 5. With --json, one JSON object: {"queue","group",
"dry_run","live","members","dead_members","partitions":[{"partition","dead","from",
"to","head","floor","owner","applied"}],"error"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			target, err := sf.target()
			if err != nil {
				return err
			}
			if f.group == "" {
				return withCode(exitUsage, errors.New("no group: pass --group"))
			}
			q, err := a.openQueue(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			if err := checkGroup(c.Context(), q, f.group); err != nil {
				return err
			}
			var opts []queue.ResetOption
			if sf.force {
				opts = append(opts, queue.Force())
			}
			if sf.dryRun {
				opts = append(opts, queue.DryRun())
			}
			res, rerr := q.Reset(c.Context(), f.group, target, opts...)
			if res.Group == "" {
				return rerr
			}
			if dcsync.CodeOf(rerr) == dcsync.InvalidArgument {
				// Refused by the store: a trim passed the target while the seek ran.
				for _, p := range res.Partitions {
					if !p.Applied {
						rerr = withCode(exitError, &said{msg: fmt.Sprintf("group %s of queue %s: partition %s: its events from seq %d on were deleted by a trim while the seek ran (every group had acked them); the partitions listed before it were moved, this one and those after it were not: run the seek again", res.Group, q.Name(), partName(p.Partition, p.Dead), p.To), err: rerr})
						break
					}
				}
			}
			if perr := a.printReset(q.Name(), res, rerr, f.json); perr != nil {
				return perr
			}
			return rerr
		},
	}
	c.Flags().StringVar(&f.group, "group", "", "the consumer group (required)")
	c.Flags().BoolVar(&sf.earliest, "to-earliest", false, "every partition to its floor")
	c.Flags().BoolVar(&sf.latest, "to-latest", false, "every partition to its head")
	c.Flags().StringArrayVar(&sf.seqs, "to-seq", nil, "partition P to seq S (P:S; repeat or separate with commas)")
	c.Flags().StringVar(&sf.at, "to-time", "", "every partition to its first event at or after T (RFC 3339, or a duration ago)")
	c.Flags().BoolVar(&sf.force, "force", false, "seek although the group has live members (their partition locks are broken)")
	c.Flags().BoolVar(&sf.dryRun, "dry-run", false, "print the plan and write nothing")
	c.Flags().BoolVar(&f.json, "json", false, "print one JSON object (see above)")
	return c
}

// printReset prints the plan and outcome of a seek.
func (a *app) printReset(name string, res queue.ResetResult, rerr error, asJSON bool) error {
	if asJSON {
		out := resetJSON{Queue: name, Group: res.Group, DryRun: res.DryRun, Live: res.Live(),
			Members: members(res.Members), DeadMembers: members(res.DeadMembers), Partitions: []resetPartJSON{}}
		for _, p := range res.Partitions {
			out.Partitions = append(out.Partitions, resetPartJSON{Partition: p.Partition, Dead: p.Dead, From: p.From, To: p.To,
				Head: p.Head, Floor: p.Floor, Owner: holder(p.Owner), Applied: p.Applied})
		}
		if rerr != nil {
			msg := errorText(rerr, a.verbose)
			out.Error = &msg
		}
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tOWNER\tTOKEN\tAPPLIED")
	for _, p := range res.Partitions {
		owner, token := ownerCell(p.Owner)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%v\n", partName(p.Partition, p.Dead), p.From, p.To, owner, token, p.Applied)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	state := "no live members"
	if res.Live() {
		state = fmt.Sprintf("live: %d member slots, %d dead-letter consumers", len(res.Members), len(res.DeadMembers))
	}
	what := "applied"
	switch {
	case res.DryRun:
		what = "dry run: nothing written"
	case rerr != nil:
		what = "not applied"
	}
	fmt.Fprintf(a.stdout, "group %s: %s; %s\n", res.Group, state, what)
	return nil
}

// queueAdminCmds are the operator commands 'queue' registers.
func queueAdminCmds(a *app) []*cobra.Command {
	return []*cobra.Command{newQueueListCmd(a), newQueueDescribeCmd(a), newQueueAddGroupCmd(a), newQueueSeekCmd(a), newQueueDeleteCmd(a)}
}

// newQueueDeleteCmd is 'queue delete'.
func newQueueDeleteCmd(a *app) *cobra.Command {
	var force, asJSON bool
	c := &cobra.Command{
		Use:   "delete NAME [--force]",
		Short: "Delete a queue and every record of it (refused while consumers hold partitions)",
		Long: `Delete queue NAME and every record the store keeps of it (events, dead letters,
offsets, remembered event ids), so that a queue created again under the name starts
empty. While a consumer of the client --client holds a partition or a member slot, it
is refused with exit 3 and deletes nothing, unless --force: the consumers' locks are
freed first (they lose their partitions at their next renewal, and a consumer of the
deleted queue never takes a partition of a new queue of the same name). A queue that
does not exist is exit 1. Stop the producers first: on HBase and Aerospike an event
appended while the delete runs may outlive it. With --json: {"name","deleted"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := driver.ValidateID("queue", args[0]); err != nil {
				return err
			}
			s, err := a.queueStore(c.Context())
			if err != nil {
				return err
			}
			opts := a.queueOptions(&queueFlags{})
			if force {
				opts = append(opts, queue.WithForce())
			}
			if err := queue.Delete(c.Context(), s, args[0], opts...); err != nil {
				if dcsync.CodeOf(err) == dcsync.LockUnavailable {
					return &said{msg: fmt.Sprintf("queue %q has live consumers (their partition locks or member slots are held): stop them, or delete with --force", args[0]), err: err}
				}
				return err
			}
			if asJSON {
				return a.printJSON(struct {
					Name    string `json:"name"`
					Deleted bool   `json:"deleted"`
				}{args[0], true})
			}
			fmt.Fprintf(a.stdout, "deleted queue %s\n", args[0])
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "free the consumers' locks and delete anyway")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"name","deleted"}`)
	return c
}
