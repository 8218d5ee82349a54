package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// Defaults of the queue commands.
const (
	// queueSendBatch is how many lines 'queue send' enqueues in one call at most.
	queueSendBatch = 500
	// queueSendPause is how long 'queue send' waits for more lines before it sends the
	// lines it has (stdin paused).
	queueSendPause = 200 * time.Millisecond
	// queueIdle is how long 'queue receive' (without --follow) and 'queue dead' wait
	// for a message before they end.
	queueIdle = 2 * time.Second
	// queueCLILease is the lease of the CLI consumer's locks: shorter than the
	// library's, so that the partitions of a receive that was killed move on sooner.
	queueCLILease = 15 * time.Second
	// queueCLIVisibility is how long a message handed to the CLI stays invisible.
	queueCLIVisibility = time.Minute
	// queueCloseTimeout bounds a consumer's Close (it commits acks and releases locks).
	queueCloseTimeout = 15 * time.Second
)

// messageJSON is one message of 'queue receive --json' and 'queue dead --json'. The
// payload is "payload" when it is valid UTF-8, else "payload_base64".
type messageJSON struct {
	Partition     int     `json:"partition"`
	Seq           uint64  `json:"seq"`
	Key           string  `json:"key"`
	ID            string  `json:"id"`
	Attempt       int     `json:"attempt"`
	DeadFrom      string  `json:"dead_from,omitempty"`
	EnqueuedAt    string  `json:"enqueued_at,omitempty"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

// appendJSON is one event of 'queue send --json'.
type appendJSON struct {
	Line      int    `json:"line"`
	ID        string `json:"id,omitempty"`
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// lagRowJSON is one partition's position in 'queue lag --json' (the total has no
// partition).
type lagRowJSON struct {
	Partition *int   `json:"partition,omitempty"`
	Head      uint64 `json:"head"`
	Next      uint64 `json:"next"`
	Lag       uint64 `json:"lag"`
}

// groupLagJSON is one group of 'queue lag --json'.
type groupLagJSON struct {
	Group      string       `json:"group"`
	Partitions []lagRowJSON `json:"partitions"`
	Total      lagRowJSON   `json:"total"`
	Dead       lagRowJSON   `json:"dead"`
}

type queueFlags struct {
	partitions int
	groups     []string
	dedup      time.Duration

	key      string
	idPrefix string

	group       string
	max         int
	follow      bool
	noAck       bool
	ack         bool
	timeout     time.Duration
	lease       time.Duration
	visibility  time.Duration
	maxAttempts int

	json bool
}

// queueStore opens the store for a queue command: it needs the client id (the
// consumers' locks are the client's) and a store that has queues.
func (a *app) queueStore(ctx context.Context) (driver.Store, error) {
	if a.client == "" {
		return nil, withCode(exitUsage, errors.New("no client id: pass --client or set DCSYNC_CLIENT"))
	}
	if err := driver.ValidateID("client", a.client); err != nil {
		return nil, err
	}
	if err := driver.ValidateID("farm", a.farm); err != nil {
		return nil, err
	}
	s, err := a.open(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// queueOptions are the queue options of the CLI: the client's identity, the consumer
// flags, and a logger that shows what the queue tells (dead-lettering, holes waited
// out) and warnings.
func (a *app) queueOptions(f *queueFlags) []queue.Option {
	opts := []queue.Option{
		queue.WithIdentity(a.client, a.farm),
		queue.WithLogger(a.cliLogger()),
	}
	if f.lease > 0 {
		opts = append(opts, queue.WithLease(f.lease))
	}
	if f.visibility > 0 {
		opts = append(opts, queue.WithVisibility(f.visibility))
	}
	if f.maxAttempts > 0 {
		opts = append(opts, queue.WithMaxAttempts(f.maxAttempts))
	}
	return opts
}

// openQueue opens queue name for a command.
func (a *app) openQueue(ctx context.Context, name string, f *queueFlags) (*queue.Queue, error) {
	if err := driver.ValidateID("queue", name); err != nil {
		return nil, err
	}
	s, err := a.queueStore(ctx)
	if err != nil {
		return nil, err
	}
	return queue.Open(ctx, s, name, a.queueOptions(f)...)
}

// checkGroup refuses a group the queue does not have with exit 2, naming its groups.
func checkGroup(ctx context.Context, q *queue.Queue, group string) error {
	if err := driver.ValidateID("group", group); err != nil {
		return err
	}
	if q.Spec().GroupIndex(group) >= 0 {
		return nil
	}
	// Another process may have added it since the queue was opened: Lag re-reads.
	if _, err := q.Lag(ctx, group); err == nil {
		return nil
	} else if !errors.Is(err, dcsync.ErrNotFound) {
		return err
	}
	return withCode(exitUsage, fmt.Errorf("queue %q has no group %q (its groups: %s)", q.Name(), group, strings.Join(q.Spec().Groups, ", ")))
}

func newQueueCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Create partitioned queues, send and receive events, show consumer lag and dead letters",
		Long: `A queue has a fixed number of partitions and one or more consumer groups; every
group receives every event, each event reaching one consumer of the group. Events with
a key keep their order within a group. See 'go doc github.com/dcsync/dcsync/queue'.

The consumers of 'queue receive' and 'queue dead' take the group's partition locks as
the client --client: give the client id the application's consumers use
(queue.WithIdentity; the library's default is "dcsync"), or they do not exclude each
other.`,
	}
	cmd.AddCommand(newQueueCreateCmd(a), newQueueSendCmd(a), newQueueReceiveCmd(a),
		newQueueLagCmd(a), newQueueDeadCmd(a))
	cmd.AddCommand(queueAdminCmds(a)...)
	return cmd
}

// newQueueCreateCmd is 'queue create'.
func newQueueCreateCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "create NAME --partitions N --group G [--group G2 ...] [--dedup D]",
		Short: "Create a queue with N partitions and its consumer groups (exit 1 if it exists)",
		Long: `Create a queue with N partitions (1 to 4096, fixed for ever) and its consumer
groups (at least one; --group once per group). Event ids are remembered for --dedup
(default 24h) to drop duplicates. It fails with exit 1 if the queue exists, changing
nothing; bad input (no group, N out of range, a group named twice) exits 2 and creates
nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			spec := queue.Spec{Name: args[0], Partitions: f.partitions, Groups: f.groups, Dedup: f.dedup}
			if err := driver.ValidateQueueSpec(spec); err != nil {
				return err
			}
			s, err := a.queueStore(c.Context())
			if err != nil {
				return err
			}
			_, err = queue.Create(c.Context(), s, spec, a.queueOptions(f)...)
			return err
		},
	}
	c.Flags().IntVar(&f.partitions, "partitions", 0, "number of partitions, 1 to 4096 (fixed once created)")
	_ = c.MarkFlagRequired("partitions")
	c.Flags().StringArrayVar(&f.groups, "group", nil, "a consumer group (repeat for more)")
	c.Flags().DurationVar(&f.dedup, "dedup", 0, "how long event ids are remembered (0: 24h)")
	return c
}

// newQueueSendCmd is 'queue send'.
func newQueueSendCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "send NAME [--key K] [--id-prefix P]",
		Short: "Enqueue the lines of stdin, one event per line",
		Long: `Enqueue the lines of stdin, one event per line: its payload is the line without
its newline (an empty line is an empty event; at most 256 KiB). Lines are sent in
batches of up to 500, and whatever has been read is sent when stdin pauses, so
'tail -f log | dcsync queue send q' streams.

With --key K every event has partition key K: they all go to one partition, in order.
Without it, each batch goes to one partition, round robin.
With --id-prefix P the event of line N has id P-N: re-running the same send (after a
failure, say) enqueues nothing twice within the queue's dedup window.

A summary (events sent, duplicates) goes to stderr; with --json each event's outcome is
printed as one JSON object a line: {"line","id","partition","seq","duplicate"}.
A line that is too long ends the send with exit 2 after the lines before it are sent.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(f.key) > driver.MaxQueueKeyLen {
				return withCode(exitUsage, fmt.Errorf("--key is %d bytes, more than %d", len(f.key), driver.MaxQueueKeyLen))
			}
			if f.idPrefix != "" {
				if strings.HasPrefix(f.idPrefix, "\x00") {
					return withCode(exitUsage, errors.New("--id-prefix must not start with a NUL byte"))
				}
				if len(f.idPrefix)+21 > driver.MaxQueueKeyLen {
					return withCode(exitUsage, fmt.Errorf("--id-prefix is %d bytes, more than %d", len(f.idPrefix), driver.MaxQueueKeyLen-21))
				}
			}
			q, err := a.openQueue(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			return a.send(c.Context(), q, c.InOrStdin(), f)
		},
	}
	c.Flags().StringVar(&f.key, "key", "", "partition key of every event (keeps their order)")
	c.Flags().StringVar(&f.idPrefix, "id-prefix", "", "give the event of line N the id P-N, so that sending again is idempotent")
	c.Flags().BoolVar(&f.json, "json", false, `print one JSON object a line per event: {"line","id","partition","seq","duplicate"}`)
	return c
}

type sendLine struct {
	text string
	size int // the line's length (text is cut short past MaxQueuePayload)
	err  error
}

// send reads lines from in and enqueues them in batches.
func (a *app) send(ctx context.Context, q *queue.Queue, in io.Reader, f *queueFlags) error {
	lines := make(chan sendLine)
	stop := make(chan struct{})
	defer close(stop)
	go readLines(in, lines, stop)

	var batch []queue.Event
	first := 1 // line number of batch[0]
	next := 1  // line number of the next line read
	sent, dups := 0, 0
	w := bufio.NewWriter(a.stdout)
	jw := &app{stdout: w}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		// Once read, a batch is sent even if a signal ends the command now.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		res, err := q.Enqueue(ectx, batch...)
		cancel()
		if err != nil {
			return fmt.Errorf("send lines %d-%d: %w", first, first+len(batch)-1, err)
		}
		for i, r := range res {
			if r.Duplicate {
				dups++
			} else {
				sent++
			}
			if f.json {
				j := appendJSON{Line: first + i, ID: batch[i].ID, Partition: r.Partition, Seq: r.Seq, Duplicate: r.Duplicate}
				if err := jw.printJSON(j); err != nil {
					return err
				}
			}
		}
		batch, first = batch[:0], next
		return w.Flush()
	}
	summary := func() {
		fmt.Fprintf(a.stderr, "sent %d events, %d duplicates\n", sent, dups)
	}
	pause := time.NewTimer(time.Hour)
	pause.Stop()
	for {
		select {
		case <-ctx.Done():
			err := flush()
			summary()
			return errors.Join(err, context.Cause(ctx))
		case <-pause.C:
			if err := flush(); err != nil {
				summary()
				return err
			}
		case l, ok := <-lines:
			if !ok {
				err := flush()
				summary()
				return err
			}
			if l.err != nil {
				err := flush()
				summary()
				return errors.Join(err, l.err)
			}
			if l.size > driver.MaxQueuePayload {
				err := flush()
				summary()
				return errors.Join(err, withCode(exitUsage, fmt.Errorf("line %d is %d bytes, more than %d: not sent, nor anything after it", next, l.size, driver.MaxQueuePayload)))
			}
			e := queue.Event{Key: f.key, Payload: []byte(l.text)}
			if f.idPrefix != "" {
				e.ID = f.idPrefix + "-" + strconv.Itoa(next)
			}
			batch = append(batch, e)
			next++
			if len(batch) >= queueSendBatch {
				if err := flush(); err != nil {
					summary()
					return err
				}
				continue
			}
			pause.Reset(queueSendPause)
		}
	}
}

// readLines sends the lines of in (without their "\n") on out and closes it at EOF; a
// read error is sent as the last item. It stops when stop is closed.
func readLines(in io.Reader, out chan<- sendLine, stop <-chan struct{}) {
	defer close(out)
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		var buf []byte
		size := 0
		var err error
		for {
			var chunk []byte
			chunk, err = r.ReadSlice('\n')
			size += len(chunk)
			if len(buf) <= driver.MaxQueuePayload { // past that, only its length counts
				buf = append(buf, chunk...)
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err == nil {
			buf, size = buf[:len(buf)-1], size-1
		} else if err == io.EOF {
			err = nil
			if size == 0 {
				return
			}
		}
		if size > 0 || err == nil {
			select {
			case out <- sendLine{text: string(buf), size: size}:
			case <-stop:
				return
			}
		}
		if err != nil {
			select {
			case out <- sendLine{err: fmt.Errorf("read stdin: %w", err)}:
			case <-stop:
			}
			return
		}
	}
}

// newQueueReceiveCmd is 'queue receive'.
func newQueueReceiveCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "receive NAME --group G [--max N] [--follow] [--no-ack] [--timeout D]",
		Short: "Receive events as a consumer of group G, print them and ack them",
		Long: `Join group G as one consumer, receive events from the partitions it is given,
print each event's payload on a line, and ack them once printed. With --no-ack they
are left unacked and delivered again (to the next receive, or after --visibility);
as events of one key are handed out one at a time, in order, only the first unacked
event of each key is printed then. Every delivery counts, --no-ack ones too: an event
delivered --max-attempts times is moved to the group's dead letters (see 'queue dead')
instead of being printed again, and a line on stderr says so.

An event counts as printed once written to stdout: to take N events into a pipe, use
--max N rather than '| head -N' (what head leaves unread is acked too).

Without --follow it ends (exit 0) after --max events, or when none arrives for
--timeout. With --follow it runs until --max events or until SIGINT or SIGTERM (exit
130 or 143), then leaves the group cleanly: acks recorded, partitions released.

With --json each message is one JSON object a line:
  {"partition","seq","key","id","attempt","enqueued_at","payload"}
("payload_base64" instead of "payload" when the payload is not UTF-8).

The consumer holds its partitions with --lease: if it is killed, they move to other
consumers after about that long. A group that does not exist exits 2; a queue that
does not exist exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.consume(c.Context(), args[0], f, false)
		},
	}
	addConsumerFlags(c, f)
	c.Flags().BoolVar(&f.follow, "follow", false, "keep receiving until SIGINT/SIGTERM (or --max)")
	c.Flags().BoolVar(&f.noAck, "no-ack", false, "do not ack: the events are delivered again later (each delivery counts as an attempt)")
	c.Flags().IntVar(&f.maxAttempts, "max-attempts", queue.DefaultMaxAttempts, "deliveries before an event is moved to the dead letters")
	c.Flags().BoolVar(&f.json, "json", false, `print one JSON object a line per message: {"partition","seq","key","id","attempt","enqueued_at","payload"}`)
	return c
}

// newQueueDeadCmd is 'queue dead'.
func newQueueDeadCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "dead NAME --group G [--max N] [--ack]",
		Short: "Print group G's dead letters and where they came from; remove them with --ack",
		Long: `Print the dead letters of group G: the events a consumer of G failed --max-attempts
times. Each is a line
  PARTITION/SEQ PAYLOAD
where PARTITION/SEQ is where the event was in the queue. They stay in the group's
dead-letter partition unless --ack is given, which removes the printed ones.
It ends after --max letters or when none arrives for --timeout.

With --json each letter is one JSON object a line:
  {"partition","seq","key","id","attempt","dead_from","enqueued_at","payload"}
(partition and seq: in the dead-letter partition; dead_from: where it came from).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			f.noAck = !f.ack
			return a.consume(c.Context(), args[0], f, true)
		},
	}
	addConsumerFlags(c, f)
	c.Flags().BoolVar(&f.ack, "ack", false, "ack the printed dead letters (removes them)")
	c.Flags().BoolVar(&f.json, "json", false, `print one JSON object a line per letter (see above)`)
	return c
}

func addConsumerFlags(c *cobra.Command, f *queueFlags) {
	c.Flags().StringVar(&f.group, "group", "", "consumer group")
	_ = c.MarkFlagRequired("group")
	c.Flags().IntVar(&f.max, "max", 0, "stop after this many messages (0: no limit)")
	c.Flags().DurationVar(&f.timeout, "timeout", queueIdle, "without --follow: end when no message arrives for this long")
	c.Flags().DurationVar(&f.lease, "lease", queueCLILease, "lease of the consumer's partition locks")
	c.Flags().DurationVar(&f.visibility, "visibility", queueCLIVisibility, "how long a received, unacked message stays invisible to other receives")
}

// consume runs a consumer of f.group (a dead-letter consumer if dead) and prints what it
// receives.
func (a *app) consume(ctx context.Context, name string, f *queueFlags, dead bool) (err error) {
	if f.max < 0 {
		return withCode(exitUsage, fmt.Errorf("--max %d is negative", f.max))
	}
	if f.timeout <= 0 && !f.follow {
		return withCode(exitUsage, fmt.Errorf("--timeout %v must be positive", f.timeout))
	}
	if f.lease < dcsync.MinTTL || f.lease > dcsync.MaxTTL {
		return withCode(exitUsage, fmt.Errorf("--lease %v is outside [%v, %v]", f.lease, dcsync.MinTTL, dcsync.MaxTTL))
	}
	if f.visibility <= 0 {
		return withCode(exitUsage, fmt.Errorf("--visibility %v must be positive", f.visibility))
	}
	if !dead && f.maxAttempts < 1 {
		return withCode(exitUsage, fmt.Errorf("--max-attempts %d must be at least 1", f.maxAttempts))
	}
	q, err := a.openQueue(ctx, name, f)
	if err != nil {
		return err
	}
	if err := checkGroup(ctx, q, f.group); err != nil {
		return err
	}
	var copts []queue.CallOption
	if dead {
		copts = append(copts, queue.DeadLetters())
	}
	cons, err := q.Consumer(ctx, f.group, copts...)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueCloseTimeout)
		defer cancel()
		err = errors.Join(err, cons.Close(cctx))
	}()
	w := bufio.NewWriter(a.stdout)
	n := 0
	// Idle: no message, and no change in the partitions owned (the consumer may still
	// be taking them), for f.timeout. Receive waits in steps to watch the latter.
	step := min(f.timeout, 250*time.Millisecond)
	active, owned := time.Now(), slices.Clone(cons.Partitions())
	for f.max == 0 || n < f.max {
		want := queueSendBatch
		if f.max > 0 {
			want = min(want, f.max-n)
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if !f.follow {
			rctx, cancel = context.WithTimeout(ctx, min(step, f.timeout-time.Since(active)))
		}
		msgs, err := cons.Receive(rctx, want)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				if now := cons.Partitions(); !slices.Equal(now, owned) {
					active, owned = time.Now(), now
				}
				if time.Since(active) >= f.timeout {
					return nil
				}
				continue
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		for _, m := range msgs {
			if err := a.printMessage(w, m, f.json); err != nil {
				return err
			}
		}
		if err := w.Flush(); err != nil {
			return err // not acked: delivered again
		}
		n += len(msgs)
		if !f.noAck {
			// Printed: acked even if a signal ends the command now.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			err := cons.Ack(actx, msgs...)
			cancel()
			if err != nil {
				return err
			}
		}
		active = time.Now()
	}
	return nil
}

func (a *app) printMessage(w *bufio.Writer, m *queue.Message, asJSON bool) error {
	if !asJSON {
		if m.DeadFrom != "" {
			w.WriteString(m.DeadFrom)
			w.WriteByte(' ')
		}
		w.Write(m.Payload)
		return w.WriteByte('\n')
	}
	j := messageJSON{Partition: m.Partition, Seq: m.Seq, Key: m.Key, ID: m.ID, Attempt: m.Attempt, DeadFrom: m.DeadFrom}
	if !m.At.IsZero() {
		j.EnqueuedAt = jsonTime(m.At)
	}
	if utf8.Valid(m.Payload) {
		s := string(m.Payload)
		j.Payload = &s
	} else {
		j.PayloadBase64 = m.Payload
	}
	return (&app{stdout: w}).printJSON(j)
}

// newQueueLagCmd is 'queue lag'.
func newQueueLagCmd(a *app) *cobra.Command {
	f := &queueFlags{}
	c := &cobra.Command{
		Use:   "lag NAME [--group G]",
		Short: "Show each group's lag per partition: head, next unacked, lag, and its dead letters",
		Long: `Show, for group G (every group if none is given), each partition's head (the next
sequence number to be written), the group's next unacked sequence number and the lag
between them, the totals over the partitions, and the group's dead-letter partition
(dead letters not yet acked by 'queue dead --ack'):
  GROUP  PARTITION  HEAD  NEXT  LAG
With --json, a JSON array of {"group","partitions":[{"partition","head","next","lag"}],
"total":{"head","next","lag"},"dead":{"partition","head","next","lag"}}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			q, err := a.openQueue(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			groups := q.Spec().Groups
			if f.group != "" {
				if err := checkGroup(c.Context(), q, f.group); err != nil {
					return err
				}
				groups = []string{f.group}
			}
			out := make([]groupLagJSON, 0, len(groups))
			for _, g := range groups {
				lags, err := q.Lag(c.Context(), g)
				if err != nil {
					return err
				}
				out = append(out, groupLag(g, q.Spec().Partitions, lags))
			}
			if f.json {
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tPARTITION\tHEAD\tNEXT\tLAG")
			for _, g := range out {
				for _, r := range g.Partitions {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", g.Group, *r.Partition, r.Head, r.Next, r.Lag)
				}
				fmt.Fprintf(tw, "%s\ttotal\t%d\t%d\t%d\n", g.Group, g.Total.Head, g.Total.Next, g.Total.Lag)
				fmt.Fprintf(tw, "%s\tdead\t%d\t%d\t%d\n", g.Group, g.Dead.Head, g.Dead.Next, g.Dead.Lag)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&f.group, "group", "", "only this group")
	c.Flags().BoolVar(&f.json, "json", false, "print a JSON array (see above)")
	return c
}

// groupLag renders a group's Lag: its event partitions, their totals, and the
// dead-letter partition (Lag lists it last).
func groupLag(group string, partitions int, lags []queue.PartitionLag) groupLagJSON {
	g := groupLagJSON{Group: group, Partitions: []lagRowJSON{}}
	for _, l := range lags {
		p := l.Partition
		row := lagRowJSON{Partition: &p, Head: l.Head, Next: l.Next, Lag: l.Lag}
		if l.Partition >= partitions {
			g.Dead = row
			continue
		}
		g.Partitions = append(g.Partitions, row)
		g.Total.Head += l.Head
		g.Total.Next += l.Next
		g.Total.Lag += l.Lag
	}
	slices.SortFunc(g.Partitions, func(x, y lagRowJSON) int { return *x.Partition - *y.Partition })
	return g
}
