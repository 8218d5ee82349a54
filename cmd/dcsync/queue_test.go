package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/storeurl"
)

// waitAll is the idle timeout of receives that expect a known number of events and say
// so with --max: they end when the last one arrives, and the timeout only bounds a
// broken run. A short idle timeout (1 s) ended a receive early on a loaded machine,
// where a store read can take that long.
const waitAll = "1m"

// send runs 'dcsync queue send' as a process with stdin and returns stdout, stderr
// and the exit code.
func (c *cli) send(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.process(append([]string{"queue", "send"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		c.t.Fatalf("queue send: %v", err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func (c *cli) wantSend(code int, stdin string, args ...string) (string, string) {
	c.t.Helper()
	out, errs, got := c.send(stdin, args...)
	if got != code {
		c.t.Fatalf("queue send %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, got, code, out, errs)
	}
	return out, errs
}

// decode reads JSON objects, one a line.
func decode[T any](t *testing.T, out string) []T {
	t.Helper()
	var res []T
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var v T
		if err := dec.Decode(&v); err == io.EOF {
			return res
		} else if err != nil {
			t.Fatalf("decoding %q: %v", out, err)
		}
		res = append(res, v)
	}
}

// lines splits output into its lines (without the last newline).
func lines(out string) []string {
	if out == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// sorted returns s sorted: receive's order across partitions is not fixed.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestQueueSendReceiveRoundtrip(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "4", "--group", "a", "--group", "b w/ space")
	c.want(1, "queue", "create", "q", "--partitions", "8", "--group", "x") // exists
	in := "first\n\nthird é  \n tabs\there\nlast without newline"
	want := []string{"first", "", "third é  ", " tabs\there", "last without newline"}
	_, errs := c.wantSend(0, in, "q")
	if !strings.Contains(errs, "sent 5 events, 0 duplicates") {
		t.Fatalf("send summary %q", errs)
	}
	// Group a in one receive; the other group still has every event.
	out := c.want(0, "queue", "receive", "q", "--group", "a", "--max", strconv.Itoa(len(want)), "--timeout", waitAll)
	if got := lines(out); !slices.Equal(got, want) { // keyless: one batch, one partition, in order
		t.Fatalf("receive printed %q, want %q", got, want)
	}
	if out := c.want(0, "queue", "receive", "q", "--group", "a", "--timeout", "500ms"); out != "" {
		t.Fatalf("second receive (all acked) printed %q", out)
	}
	msgs := decode[messageJSON](t, c.want(0, "queue", "receive", "q", "--group", "b w/ space", "--json", "--max", "3"))
	if len(msgs) != 3 {
		t.Fatalf("receive --max 3 gave %d messages", len(msgs))
	}
	for i, m := range msgs {
		if m.Payload == nil || *m.Payload != want[i] || m.Seq != uint64(i) || m.Attempt != 1 || m.ID != "" || m.Key != "" {
			t.Fatalf("message %d: %+v, want payload %q seq %d attempt 1", i, m, want[i], i)
		}
	}
	if got := lines(c.want(0, "queue", "receive", "q", "--group", "b w/ space", "--max", strconv.Itoa(len(want[3:])), "--timeout", waitAll)); !slices.Equal(got, want[3:]) {
		t.Fatalf("rest of group b: %q, want %q", got, want[3:])
	}
}

// Sending with --id-prefix again sends nothing: every line is a duplicate of the
// first send's event, at the same partition and seq.
func TestQueueSendIdempotentWithIDPrefix(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "3", "--group", "g")
	var in strings.Builder
	var want []string
	for i := range 1234 { // more than one batch
		fmt.Fprintf(&in, "event %d\n", i)
		want = append(want, fmt.Sprintf("event %d", i))
	}
	out1, errs := c.wantSend(0, in.String(), "q", "--id-prefix", "run1", "--json")
	if !strings.Contains(errs, "sent 1234 events, 0 duplicates") {
		t.Fatalf("first send: %q", errs)
	}
	out2, errs := c.wantSend(0, in.String(), "q", "--id-prefix", "run1", "--json")
	if !strings.Contains(errs, "sent 0 events, 1234 duplicates") {
		t.Fatalf("second send: %q", errs)
	}
	first, second := decode[appendJSON](t, out1), decode[appendJSON](t, out2)
	if len(first) != 1234 || len(second) != 1234 {
		t.Fatalf("%d and %d appends printed", len(first), len(second))
	}
	for i := range first {
		f, s := first[i], second[i]
		if f.Duplicate || !s.Duplicate || f.Line != i+1 || f.ID != fmt.Sprintf("run1-%d", i+1) ||
			s.Partition != f.Partition || s.Seq != f.Seq || s.ID != f.ID {
			t.Fatalf("line %d: first %+v, second %+v", i+1, f, s)
		}
	}
	got := lines(c.want(0, "queue", "receive", "q", "--group", "g", "--max", strconv.Itoa(len(want)), "--timeout", waitAll))
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("received %d lines, want each of the %d once", len(got), len(want))
	}
}

// A receive with --no-ack leaves the events to the next receive. (Keyless events: of
// a key, only the first unacked event is handed out.)
func TestQueueReceiveNoAck(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "2", "--group", "g")
	c.wantSend(0, "a\nb\nc\n", "q")
	first := decode[messageJSON](t, c.want(0, "queue", "receive", "q", "--group", "g", "--no-ack", "--json", "--max", "3", "--timeout", waitAll))
	second := decode[messageJSON](t, c.want(0, "queue", "receive", "q", "--group", "g", "--json", "--max", "3", "--timeout", waitAll))
	payloads := func(ms []messageJSON) []string {
		var out []string
		for _, m := range ms {
			out = append(out, *m.Payload)
		}
		return out
	}
	if got := payloads(first); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("first receive: %q", got)
	}
	if got := payloads(second); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("receive after --no-ack: %q", got)
	}
	for i := range second {
		if second[i].Partition != first[i].Partition || second[i].Seq != first[i].Seq || second[i].Seq != uint64(i) {
			t.Fatalf("redelivery %d: %+v after %+v", i, second[i], first[i])
		}
	}
	if second[0].Attempt != 2 {
		t.Fatalf("redelivered head has attempt %d, want 2", second[0].Attempt)
	}
	if out := c.want(0, "queue", "receive", "q", "--group", "g", "--timeout", "500ms"); out != "" {
		t.Fatalf("third receive printed %q", out)
	}
	// Every --no-ack delivery counts: after --max-attempts the event is dead-lettered.
	c.wantSend(0, "peek\n", "q")
	for i := range 2 {
		if out := c.want(0, "queue", "receive", "q", "--group", "g", "--no-ack", "--max-attempts", "2", "--max", "1", "--timeout", waitAll); out != "peek\n" {
			t.Fatalf("--no-ack receive %d printed %q", i+1, out)
		}
	}
	// The third receive dead-letters the event instead of printing it. A receive that
	// finds no event waits out its --timeout, so it is short; on a loaded machine one
	// may end before its consumer claimed the partition, so receives are repeated
	// (nothing else changes the queue) until one reports the dead-lettering, for a
	// minute at most. None may print the event.
	for deadline := time.Now().Add(time.Minute); ; {
		out, errs, code := c.run("queue", "receive", "q", "--group", "g", "--no-ack", "--max-attempts", "2", "--timeout", "1s")
		if code != 0 || out != "" {
			t.Fatalf("third --no-ack receive: exit %d, stdout %q, stderr %q; want the event dead-lettered", code, out, errs)
		}
		if strings.Contains(errs, "dead-lettered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no receive dead-lettered the event in a minute; last stderr %q", errs)
		}
	}
	if out := c.want(0, "queue", "dead", "q", "--group", "g", "--max", "1", "--timeout", waitAll); !strings.HasSuffix(out, " peek\n") {
		t.Fatalf("dead letters: %q", out)
	}
}

func lagOf(t *testing.T, c *cli, args ...string) []groupLagJSON {
	t.Helper()
	var out []groupLagJSON
	if err := json.Unmarshal([]byte(c.want(0, append([]string{"queue", "lag", "q", "--json"}, args...)...)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestQueueLag(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "4", "--group", "a", "--group", "b")
	c.wantSend(0, "1\n2\n3\n4\n5\n", "q", "--key", "x")
	c.wantSend(0, "6\n7\n", "q", "--key", "y")
	px, py := queue.Partition("x", 4), queue.Partition("y", 4)
	head := make([]uint64, 4)
	head[px] += 5
	head[py] += 2
	check := func(g groupLagJSON, name string, next []uint64) {
		t.Helper()
		if g.Group != name || len(g.Partitions) != 4 {
			t.Fatalf("lag of %s: %+v", name, g)
		}
		var tot lagRowJSON
		for p, r := range g.Partitions {
			if *r.Partition != p || r.Head != head[p] || r.Next != next[p] || r.Lag != head[p]-next[p] {
				t.Fatalf("group %s partition %d: %+v, want head %d next %d", name, p, r, head[p], next[p])
			}
			tot.Head, tot.Next, tot.Lag = tot.Head+r.Head, tot.Next+r.Next, tot.Lag+r.Lag
		}
		if g.Total != tot || tot.Head != 7 {
			t.Fatalf("group %s total %+v, want %+v", name, g.Total, tot)
		}
		if g.Dead.Partition == nil || *g.Dead.Partition < 4 || g.Dead.Head != 0 {
			t.Fatalf("group %s dead %+v", name, g.Dead)
		}
	}
	all := lagOf(t, c)
	if len(all) != 2 {
		t.Fatalf("lag of all groups: %+v", all)
	}
	check(all[0], "a", make([]uint64, 4))
	check(all[1], "b", make([]uint64, 4))
	// Group a acks x's first three events.
	if got := lines(c.want(0, "queue", "receive", "q", "--group", "a", "--max", "3", "--timeout", waitAll)); len(got) != 3 {
		t.Fatalf("receive --max 3: %q", got)
	}
	after := lagOf(t, c, "--group", "a")
	if len(after) != 1 {
		t.Fatalf("lag --group a: %+v", after)
	}
	next := make([]uint64, 4)
	var sum uint64
	for p, r := range after[0].Partitions {
		next[p] = r.Next
		sum += r.Next
	}
	if sum != 3 {
		t.Fatalf("group a acked %d events, want 3: %+v", sum, after[0])
	}
	check(after[0], "a", next)
	check(lagOf(t, c, "--group", "b")[0], "b", make([]uint64, 4))
	// The table: a header, 4 partitions, total and dead per group.
	tbl := lines(c.want(0, "queue", "lag", "q", "--group", "a"))
	if len(tbl) != 7 || strings.Join(strings.Fields(tbl[0]), " ") != "GROUP PARTITION HEAD NEXT LAG" ||
		strings.Join(strings.Fields(tbl[5]), " ") != "a total 7 3 4" || strings.Join(strings.Fields(tbl[6]), " ") != "a dead 0 0 0" {
		t.Fatalf("lag table:\n%s", strings.Join(tbl, "\n"))
	}
}

// An event a consumer Nacks past its attempts goes to the group's dead letters: 'queue
// dead' prints it with where it came from, and removes it only with --ack.
func TestQueueDeadLetters(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "2", "--group", "g", "--group", "other")
	out, _ := c.wantSend(0, "ok\npoison\n", "q", "--key", "k", "--json")
	appends := decode[appendJSON](t, out)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := storeurl.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := queue.Open(ctx, s, "q", queue.WithIdentity("app", "dc1"), queue.WithMaxAttempts(1),
		queue.WithLease(30*time.Second), queue.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for done := 0; done < 2; {
		msgs, err := cons.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Payload) == "poison" {
				err = cons.Nack(ctx, m)
			} else {
				err = cons.Ack(ctx, m)
			}
			if err != nil {
				t.Fatal(err)
			}
			done++
		}
	}
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}

	from := fmt.Sprintf("%d/%d", appends[1].Partition, appends[1].Seq)
	if out := c.want(0, "queue", "dead", "q", "--group", "g", "--max", "1", "--timeout", waitAll); out != from+" poison\n" {
		t.Fatalf("dead printed %q, want %q", out, from+" poison\n")
	}
	if l := lagOf(t, c, "--group", "g")[0]; l.Dead.Head != 1 || l.Dead.Lag != 1 || l.Total.Lag != 0 {
		t.Fatalf("lag after dead-lettering: %+v", l)
	}
	dead := decode[messageJSON](t, c.want(0, "queue", "dead", "q", "--group", "g", "--json", "--ack", "--max", "1", "--timeout", waitAll))
	if len(dead) != 1 || dead[0].DeadFrom != from || *dead[0].Payload != "poison" || dead[0].Key != "k" || dead[0].Partition != 2 {
		t.Fatalf("dead --json --ack: %+v", dead)
	}
	if out := c.want(0, "queue", "dead", "q", "--group", "g", "--timeout", "500ms"); out != "" {
		t.Fatalf("dead after --ack printed %q", out)
	}
	if l := lagOf(t, c, "--group", "g")[0]; l.Dead.Head != 1 || l.Dead.Lag != 0 {
		t.Fatalf("lag after dead --ack: %+v", l)
	}
	// The other group's dead letters are its own: none.
	if out := c.want(0, "queue", "dead", "q", "--group", "other", "--timeout", "500ms"); out != "" {
		t.Fatalf("other group's dead letters: %q", out)
	}
}

// Bad input exits 2 and creates nothing; a queue that does not exist exits 1.
func TestQueueBadInput(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"queue", "create", "q", "--partitions", "0", "--group", "g"},
		{"queue", "create", "q", "--partitions", "4097", "--group", "g"},
		{"queue", "create", "q", "--partitions", "4"},
		{"queue", "create", "q", "--group", "g"},
		{"queue", "create", "q", "--partitions", "4", "--group", "g", "--group", "g"},
		{"queue", "create", "q", "--partitions", "4", "--group", "bad\ngroup"},
		{"queue", "create", "q", "--partitions", "4", "--group", "g", "--dedup", "-1s"},
		{"queue", "create", "bad\x01name", "--partitions", "4", "--group", "g"},
	} {
		c.want(2, args...)
	}
	c.want(1, "queue", "lag", "q") // nothing was created
	c.want(1, "queue", "receive", "q", "--group", "g", "--timeout", "100ms")
	c.wantSend(1, "x\n", "q")

	c.want(0, "queue", "create", "q", "--partitions", "2", "--group", "g")
	for _, args := range [][]string{
		{"queue", "receive", "q"},
		{"queue", "receive", "q", "--group", "nope"},
		{"queue", "receive", "q", "--group", "g", "--max", "-1"},
		{"queue", "receive", "q", "--group", "g", "--lease", "10ms"},
		{"queue", "receive", "q", "--group", "g", "--timeout", "0"},
		{"queue", "receive", "q", "--group", "g", "--max-attempts", "0"},
		{"queue", "dead", "q", "--group", "nope"},
		{"queue", "lag", "q", "--group", "nope"},
	} {
		c.want(2, args...)
	}
	c.wantSend(2, "x\n", "q", "--key", strings.Repeat("k", 257))
	if l := lagOf(t, c); len(l) != 1 || l[0].Total.Head != 0 {
		t.Fatalf("bad sends wrote: %+v", l)
	}
	// A line longer than an event's limit ends the send; the lines before it are sent.
	long := strings.Repeat("z", driver.MaxQueuePayload+1)
	_, errs := c.wantSend(2, "before\n"+long+"\nafter\n", "q")
	if !strings.Contains(errs, "line 2") || !strings.Contains(errs, "sent 1 events") {
		t.Fatalf("long line: stderr %q", errs)
	}
	if out := c.want(0, "queue", "receive", "q", "--group", "g", "--max", "1", "--timeout", waitAll); out != "before\n" {
		t.Fatalf("after the long line: received %q", out)
	}
}

// queueProc starts dcsync as a process with its stdin and stdout as pipes.
func (c *cli) queueProc(args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner, *bytes.Buffer) {
	c.t.Helper()
	cmd := c.process(args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdin, bufio.NewScanner(stdout), &stderr
}

// send sends what it has read when stdin pauses, without waiting for EOF or a full
// batch; receive --follow prints events as they come and exits 130 on SIGINT, its
// acks recorded.
func TestQueueSendStreamsAndReceiveFollows(t *testing.T) {
	c := newCLI(t)
	c.want(0, "queue", "create", "q", "--partitions", "3", "--group", "g")
	recv, _, sc, recvErr := c.queueProc("queue", "receive", "q", "--group", "g", "--follow")
	send, stdin, _, sendErr := c.queueProc("queue", "send", "q", "--key", "k")
	got := make(chan string)
	go func() {
		for sc.Scan() {
			got <- sc.Text()
		}
		close(got)
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatalf("receive --follow ended: %s", recvErr)
			}
			return l
		case <-time.After(time.Minute):
			t.Fatalf("nothing received within a minute (send: %s; receive: %s)", sendErr, recvErr)
		}
		return ""
	}
	for i := range 3 {
		// stdin stays open: the lines arrive only if send flushes on a pause.
		fmt.Fprintf(stdin, "line %d\nmore %d\n", i, i)
		if a, b := next(), next(); a != fmt.Sprintf("line %d", i) || b != fmt.Sprintf("more %d", i) {
			t.Fatalf("received %q, %q", a, b)
		}
	}
	stdin.Close()
	if err := send.Wait(); err != nil || !strings.Contains(sendErr.String(), "sent 6 events") {
		t.Fatalf("send: %v, stderr %q", err, sendErr)
	}
	if err := recv.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range got {
	}
	_ = recv.Wait()
	if code := recv.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("receive --follow after SIGINT: exit %d, want 130 (%s)", code, recvErr)
	}
	l := lagOf(t, c, "--group", "g")[0]
	if l.Total.Head != 6 || l.Total.Lag != 0 {
		t.Fatalf("lag after the follow ended: %+v", l)
	}
	// Released cleanly: another receive takes the partitions at once (not after the
	// 15s lease) and gets only what is new.
	c.wantSend(0, "after\n", "q", "--key", "k")
	if out := c.want(0, "queue", "receive", "q", "--group", "g", "--max", "1", "--timeout", waitAll); out != "after\n" {
		t.Fatalf("receive after the follow printed %q", out)
	}
}

// queueRoundtrip is the CLI flow on a real server's store: create, send twice with
// --id-prefix (the second all duplicates), receive every line once, lag, nothing left.
func queueRoundtrip(t *testing.T, c *cli, name string) {
	t.Helper()
	c.want(0, "queue", "create", name, "--partitions", "4", "--group", "g")
	c.want(1, "queue", "create", name, "--partitions", "4", "--group", "g")
	var in strings.Builder
	var want []string
	for i := range 700 {
		fmt.Fprintf(&in, "event %d é\n", i)
		want = append(want, fmt.Sprintf("event %d é", i))
	}
	if _, errs := c.wantSend(0, in.String(), name, "--id-prefix", "p"); !strings.Contains(errs, "sent 700 events, 0 duplicates") {
		t.Fatalf("send: %q", errs)
	}
	if _, errs := c.wantSend(0, in.String(), name, "--id-prefix", "p"); !strings.Contains(errs, "sent 0 events, 700 duplicates") {
		t.Fatalf("second send: %q", errs)
	}
	c.wantSend(0, "keyed 1\nkeyed 2\n", name, "--key", "k")
	want = append(want, "keyed 1", "keyed 2")
	var l []groupLagJSON
	if err := json.Unmarshal([]byte(c.want(0, "queue", "lag", name, "--json")), &l); err != nil || len(l) != 1 || l[0].Total.Head != 702 || l[0].Total.Lag != 702 {
		t.Fatalf("lag before receive: %+v (%v)", l, err)
	}
	got := lines(c.want(0, "queue", "receive", name, "--group", "g", "--max", strconv.Itoa(len(want)), "--timeout", waitAll))
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("received %d lines, want each of the %d once", len(got), len(want))
	}
	if i, j := slices.Index(got, "keyed 1"), slices.Index(got, "keyed 2"); i > j {
		t.Fatalf("keyed events out of order: %d, %d", i, j)
	}
	if err := json.Unmarshal([]byte(c.want(0, "queue", "lag", name, "--json")), &l); err != nil || l[0].Total.Next != 702 || l[0].Total.Lag != 0 {
		t.Fatalf("lag after receive: %+v (%v)", l, err)
	}
	if out := c.want(0, "queue", "receive", name, "--group", "g", "--timeout", "2s"); out != "" {
		t.Fatalf("second receive printed %q", out)
	}
}

// TestQueueHBase runs the queue commands on the real HBase: the default queue table
// (one table, created once and reused: pre-split tables are costly on the test
// cluster), a queue and lock names unique to the run.
func TestQueueHBase(t *testing.T) {
	zk := os.Getenv("DCSYNC_HBASE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_HBASE_ZK is not set (CI=true: HBase must run; see scripts/test)")
		}
		t.Skip("DCSYNC_HBASE_ZK is not set: start HBase with testenv/hbase/up")
	}
	c := &cli{t: t, store: "hbase://" + zk}
	queueRoundtrip(t, c, "cli-q-"+randSuffix())
}

func randSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestQueueAerospike runs the queue commands on the real Aerospike server: the store's
// queue and lock sets, a queue name unique to the run.
func TestQueueAerospike(t *testing.T) {
	addr, ns := aerospikeServer(t)
	c := &cli{t: t, store: "aerospike://" + addr + "/" + ns}
	queueRoundtrip(t, c, "cli-q-"+randSuffix())
}
