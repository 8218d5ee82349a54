package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lineServer answers every line it reads with "ok <line>" and records the lines in the
// order it read them, over all its connections.
type lineServer struct {
	ln    net.Listener
	mu    sync.Mutex
	seen  []string
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startLineServer(t *testing.T) *lineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimSpace(line)
					s.mu.Lock()
					s.seen = append(s.seen, line)
					s.mu.Unlock()
					if _, err := io.WriteString(c, "ok "+line+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *lineServer) Addr() string { return s.ln.Addr().String() }

func (s *lineServer) Seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// waitSeen waits until the server has read n lines (a minute at most).
func (s *lineServer) waitSeen(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(s.Seen()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the server read %q, want %d lines", s.Seen(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s.Seen()
}

// client is one connection through the proxy.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func connect(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// call sends line and waits up to timeout for its answer.
func (c *client) call(line string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(timeout))
	s, err := c.r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func mustCall(t *testing.T, c *client, line string) {
	t.Helper()
	got, err := c.call(line, time.Minute)
	if err != nil || got != "ok "+line {
		t.Fatalf("call %q: %q, %v", line, got, err)
	}
}

func TestForwards(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	c := connect(t, p)
	mustCall(t, c, "a")
	mustCall(t, c, "b")
	if got := s.Seen(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("server read %q", got)
	}
	if got := p.Counts(); got != (Counts{}) {
		t.Fatalf("counts %v without a fault", got)
	}
}

// TestHoldDeliversAfterLaterRequest is the reordering behind a late-landing retry: the
// first attempt is held, its client gives up and closes the connection, the retry goes
// up on a new connection and is answered, and only then does the first attempt reach
// the server, which reads them in that order.
func TestHoldDeliversAfterLaterRequest(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	p.SetMaxHold(time.Hour) // only the close and the later request release it
	warm := connect(t, p)
	mustCall(t, warm, "before")

	p.Hold(1)
	first := connect(t, p)
	if got, err := first.call("attempt-1", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("held request answered: %q, %v", got, err)
	}
	first.c.Close() // the client gives up on that connection
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The proxy has seen the close: a proxy that delivered at the close would have
	// delivered by now.
	if err := p.WaitAbandoned(ctx, 1); err != nil {
		t.Fatal(err)
	}
	retry := connect(t, p)
	mustCall(t, retry, "attempt-2")
	if err := p.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	got := s.waitSeen(t, 3)
	if want := []string{"before", "attempt-2", "attempt-1"}; !slices.Equal(got, want) {
		t.Fatalf("server read %q, want %q", got, want)
	}
	if c := p.Counts(); c.Held != 1 || c.HeldLate != 1 || c.HeldLost != 0 {
		t.Fatalf("counts %v", c)
	}
	// The proxy goes on serving.
	mustCall(t, retry, "after")
}

// TestHoldUntilMaxHold: a client that keeps waiting gets its answer once the hold ends.
func TestHoldUntilMaxHold(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	p.SetMaxHold(300 * time.Millisecond)
	p.Hold(1)
	c := connect(t, p)
	mustCall(t, c, "slow")
	mustCall(t, c, "next")
	if c := p.Counts(); c.Held != 1 || c.HeldEarly != 1 {
		t.Fatalf("counts %v", c)
	}
}

// sendHeld sends the request "held" on a new connection for the proxy to hold (with
// no end of its own: until ReleaseHeld), and returns the connection once it is held.
func sendHeld(t *testing.T, p *Proxy) *client {
	t.Helper()
	p.SetMaxHold(time.Hour)
	p.Hold(1)
	c := connect(t, p)
	if _, err := io.WriteString(c.c, "held\n"); err != nil {
		t.Fatal(err)
	}
	for p.Counts().Held == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

func TestReleaseHeld(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	c := sendHeld(t, p)
	p.ReleaseHeld()
	got, err := c.call("then", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The two answers arrive in order on the one connection.
	if got != "ok held" {
		t.Fatalf("first answer %q", got)
	}
}

// TestDropReplies: the server reads the request and answers; the client hears nothing.
func TestDropReplies(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	p.DropReplies(1)
	c := connect(t, p)
	if got, err := c.call("write", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("dropped reply arrived: %q, %v", got, err)
	}
	if got := s.waitSeen(t, 1); got[0] != "write" {
		t.Fatalf("server read %q", got)
	}
	c.c.Close()
	mustCall(t, connect(t, p), "again")
	if c := p.Counts(); c.DroppedReplies != 1 {
		t.Fatalf("counts %v", c)
	}
}

func TestResetConnections(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	c := connect(t, p)
	mustCall(t, c, "a")
	if err := p.ResetConnections(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.call("b", time.Minute); err == nil || isTimeout(err) {
		t.Fatalf("a reset connection still answered: %v", err)
	}
	mustCall(t, connect(t, p), "c")
	if c := p.Counts(); c.Resets != 1 {
		t.Fatalf("counts %v", c)
	}
}

// TestResetLosesHeld: a held request whose connection is reset never reaches the server.
func TestResetLosesHeld(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	sendHeld(t, p)
	if err := p.ResetConnections(); err != nil {
		t.Fatal(err)
	}
	p.ReleaseHeld()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	mustCall(t, connect(t, p), "after")
	if got := s.Seen(); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("server read %q", got)
	}
	if c := p.Counts(); c.HeldLost != 1 {
		t.Fatalf("counts %v", c)
	}
}

// TestDelay: a delayed answer takes at least the latency (a lower bound holds on any
// machine, however loaded).
func TestDelay(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	c := connect(t, p)
	mustCall(t, c, "warm")
	if err := p.Delay(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustCall(t, c, "slow")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("a call through 100 ms each way took %v", d)
	}
	if err := p.Delay(0, 0); err != nil {
		t.Fatal(err)
	}
	mustCall(t, c, "fast")
	if c := p.Counts(); c.Delays != 1 {
		t.Fatalf("counts %v", c)
	}
}

func TestRedirect(t *testing.T) {
	s := startLineServer(t)
	other := startLineServer(t)
	p := Start(t, s.Addr())
	dial := p.Redirect(nil)
	for _, tc := range []struct {
		addr string
		via  bool
	}{{s.Addr(), true}, {other.Addr(), false}} {
		nc, err := dial(context.Background(), "tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		via := nc.RemoteAddr().String() == p.Addr()
		nc.Close()
		if via != tc.via {
			t.Fatalf("dial %s went through the proxy: %v, want %v", tc.addr, via, tc.via)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestInjectHasEveryKind: four Injects inject the four kinds; with traffic, each shows in
// the counts.
func TestInjectHasEveryKind(t *testing.T) {
	s := startLineServer(t)
	p := Start(t, s.Addr())
	p.SetMaxHold(100 * time.Millisecond)
	r := rand.New(rand.NewPCG(1, 2))
	kinds := map[string]bool{}
	for i := 0; i < 4; i++ {
		kinds[p.Inject(r)] = true
		// Traffic on a new connection, for a drop or a hold to act on.
		c := connect(t, p)
		_, _ = c.call("x", 500*time.Millisecond)
		c.c.Close()
	}
	if len(kinds) != 4 {
		t.Fatalf("four Injects gave %v", kinds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if c := p.Counts(); c.Delays != 1 || c.Resets != 1 || c.DroppedReplies != 1 || c.Held != 1 {
		t.Fatalf("counts %v", c)
	}
}

// TestServerGoneWhileClientWrites: the server drops its connections while a client keeps
// writing; closing the proxy leaves no goroutine behind (TestMain checks).
func TestServerGoneWhileClientWrites(t *testing.T) {
	s := startLineServer(t)
	p, err := New(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, p)
	mustCall(t, c, "a")
	s.mu.Lock()
	for sc := range s.conns {
		sc.Close()
	}
	s.mu.Unlock()
	for i := 0; i < 200; i++ {
		_ = c.c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := io.WriteString(c.c, "more\n"); err != nil {
			break
		}
	}
	p.Close()
}
