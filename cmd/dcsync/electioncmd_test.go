//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/storeurl"
)

// needRegisters skips a test whose store keeps no registers (a SQLite store before the
// registers were merged).
func needRegisters(t *testing.T, c *cli) {
	t.Helper()
	s, err := storeurl.Open(context.Background(), c.store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := driver.Registers(s, "test"); err != nil {
		t.Skip(err)
	}
}

// electionProc is a dcsync process whose stdout is read line by line.
type electionProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stdin  io.WriteCloser
	stderr *bytes.Buffer
}

func (c *cli) startElection(args ...string) *electionProc {
	c.t.Helper()
	cmd := c.process(append([]string{"election"}, args...)...)
	p := &electionProc{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// line returns the process's next line of output (a minute's bound for a process that
// never writes, not a timing assertion).
func (p *electionProc) line(t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			_ = p.cmd.Wait()
			t.Fatalf("%s: output ended; stderr: %s", what, p.stderr)
		}
		return l
	case <-time.After(time.Minute):
		t.Fatalf("%s: no line within a minute; stderr: %s", what, p.stderr)
	}
	return ""
}

// done ends the command's read of a line.
func (p *electionProc) done() {
	_, _ = io.WriteString(p.stdin, "\n")
	p.stdin.Close()
}

func (p *electionProc) exit(t *testing.T) int {
	t.Helper()
	for range p.lines {
	}
	err := p.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestElectionCommands(t *testing.T) {
	c := newCLI(t)
	needRegisters(t, c)
	c.want(2, "election", "campaign", "e", "--", "true")           // --value missing
	c.want(2, "election", "campaign", "e", "--value", "a", "true") // no --
	c.want(2, "election", "leader", "")
	c.want(127, "election", "campaign", "e", "--value", "a", "--", "no-such-command-dcsync")
	if out := c.want(0, "election", "leader", "e"); out != "none\n" {
		t.Fatalf("leader of a new election printed %q", out)
	}

	obs := c.startElection("observe", "e", "--poll", "50ms", "--count", "3")
	a := c.startElection("campaign", "e", "--value", "host a", "--ttl", "1m", "--", "sh", "-c", `echo token=$DCSYNC_ELECTION_TOKEN; read x`)
	if l := a.line(t, "leader a"); l != "token=1" {
		t.Fatalf("a's command printed %q, want token=1", l)
	}
	if out := c.want(0, "election", "leader", "e"); out != "token=1 value=\"host a\"\n" {
		t.Fatalf("leader printed %q", out)
	}
	var j leaderJSON
	if err := json.Unmarshal([]byte(c.want(0, "election", "leader", "e", "--json")), &j); err != nil || !j.Leader || j.Token != 1 || j.Value != "host a" || j.Level != "DC" {
		t.Fatalf("leader --json = %+v, %v", j, err)
	}
	b := c.startElection("campaign", "e", "--value", "b", "--ttl", "1m", "--", "sh", "-c", `echo token=$DCSYNC_ELECTION_TOKEN; read x`)
	if l := obs.line(t, "observe a"); l != `token=1 value="host a"` {
		t.Fatalf("observe printed %q", l)
	}
	a.done() // a's command exits: a resigns, b leads
	if code := a.exit(t); code != 0 {
		t.Fatalf("a exited %d: %s", code, a.stderr)
	}
	if l := b.line(t, "leader b"); l != "token=2" {
		t.Fatalf("b's command printed %q, want token=2", l)
	}
	// b leads until the observer has seen it: a leader shorter than a poll may be missed.
	if l := obs.line(t, "observe b"); l != "token=2 value=b" {
		t.Fatalf("observe printed %q", l)
	}
	b.done()
	if code := b.exit(t); code != 0 {
		t.Fatalf("b exited %d: %s", code, b.stderr)
	}
	if out := c.want(0, "election", "leader", "e"); out != "none\n" {
		t.Fatalf("leader after both resigned printed %q", out)
	}
	// XDC is another election; its leader is seen from every farm.
	x := c.startElection("campaign", "e", "--level", "xdc", "--value", "x", "--", "sh", "-c", `echo token=$DCSYNC_ELECTION_TOKEN; read x`)
	if l := x.line(t, "xdc leader"); l != "token=1" {
		t.Fatalf("xdc command printed %q, want token=1", l)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--store", c.store, "--client", "app", "--farm", "dc2", "election", "leader", "e", "--level", "xdc"}, &out, &errb); code != 0 || out.String() != "token=1 value=x\n" {
		t.Fatalf("xdc leader from dc2: %d %q %s", code, out.String(), errb.String())
	}
	x.done()
	if code := x.exit(t); code != 0 {
		t.Fatalf("x exited %d: %s", code, x.stderr)
	}
	// A command's exit code is campaign's. It leads until the observer has seen it.
	cp := c.startElection("campaign", "e", "--value", "c", "--", "sh", "-c", "read x; exit 3")
	if l := obs.line(t, "observe c"); l != "token=3 value=c" {
		t.Fatalf("observe printed %q", l)
	}
	cp.done()
	if code := cp.exit(t); code != 3 {
		t.Fatalf("campaign of a command that exits 3 exited %d: %s", code, cp.stderr)
	}
	if code := obs.exit(t); code != 0 {
		t.Fatalf("observe --count 3 exited %d: %s", code, obs.stderr)
	}

	// Leadership lost (its lock broken behind its back): the command is stopped, exit 5.
	lost := c.startElection("campaign", "e", "--value", "d", "--ttl", "3s", "--kill-after", "0", "--", "sh", "-c", `echo token=$DCSYNC_ELECTION_TOKEN; sleep 300`)
	if l := lost.line(t, "leader d"); l != "token=4" {
		t.Fatalf("d's command printed %q, want token=4", l)
	}
	c.want(0, "lock", "release", "election:1:e", "--force")
	if code := lost.exit(t); code != 5 {
		t.Fatalf("campaign whose leadership was lost exited %d, want 5: %s", code, lost.stderr)
	}
	if !strings.Contains(lost.stderr.String(), `leadership of election "e" lost`) {
		t.Fatalf("stderr %q does not say the leadership was lost", lost.stderr)
	}
}
