package drivertest

import (
	"strings"
	"testing"

	"github.com/dcsync/dcsync/queue"
)

// msgs makes the messages of producer 0's events idx (event("", 0, i)), delivered by
// the owner of partition 1 with token and attempt, at seq 40+i.
func msgs(token uint64, attempt int, idx ...int) []*queue.Message {
	var out []*queue.Message
	for _, i := range idx {
		e := event("", 0, i)
		out = append(out, &queue.Message{Partition: 1, Seq: uint64(40 + i), Key: e.Key, ID: e.ID, Payload: e.Payload, Token: token, Attempt: attempt})
	}
	return out
}

// violations returns what the tally found: delivery-order errors and ack-order errors.
func (tl *tally) violations(group string) []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append(append([]string(nil), tl.errs...), tl.ackOrder(group)...)
}

// TestTallyOrder checks the checker: what the queue guarantees passes whatever the
// timing, and each way of breaking per-key order is caught. Key "w0-k3" holds events
// 3, 8, 13 and 18.
func TestTallyOrder(t *testing.T) {
	cases := []struct {
		name string
		run  func(tl *tally)
		want string // a substring of the violation; "" for none
	}{
		{"RedeliveryAfterALapse", func(tl *tally) {
			// Token 2 delivered a batch, its lease lapsed, its Ack was refused; token 3
			// delivers the same events again from the first un-acked one. (The suite
			// used to compare receipts across owners and failed here on a loaded
			// machine: "event 3 received after event 18".)
			tl.received("g", msgs(2, 1, 3, 8, 13, 18))
			tl.received("g", msgs(3, 2, 3))
			tl.received("g", msgs(3, 1, 8, 13, 18))
			tl.record("g", msgs(3, 2, 3))
			tl.record("g", msgs(3, 1, 8, 13, 18))
		}, ""},
		{"AcksAcrossOwners", func(tl *tally) {
			tl.received("g", msgs(2, 1, 3, 8))
			tl.record("g", msgs(2, 1, 3, 8))
			tl.received("g", msgs(3, 1, 13, 18))
			tl.record("g", msgs(3, 1, 13, 18))
		}, ""},
		{"RedeliveryWithinAnOwner", func(tl *tally) {
			// A visibility timeout: the same events again, with the next attempt.
			tl.received("g", msgs(4, 1, 3, 8))
			tl.received("g", msgs(4, 2, 3, 8))
			tl.record("g", msgs(4, 2, 3, 8))
		}, ""},
		{"RecordedOutOfTimeOrder", func(tl *tally) {
			// The successor's ack is recorded before the predecessor's (its goroutine was
			// slow to note it): the tokens still order them.
			tl.record("g", msgs(3, 1, 13))
			tl.record("g", msgs(2, 1, 3, 8))
		}, ""},
		{"FirstDeliveryOutOfOrder", func(tl *tally) {
			tl.received("g", msgs(5, 1, 8))
			tl.received("g", msgs(5, 1, 3))
		}, "event 3 first delivered by token 5 after event 8"},
		{"SuccessorAcksBelowPredecessor", func(tl *tally) {
			// The predecessor acked 8; the successor (greater token) acks 3 after it:
			// 3's ack would have to precede 8's.
			tl.record("g", msgs(2, 1, 8))
			tl.record("g", msgs(3, 1, 3))
		}, "event 3 acked after event 8, in fencing-token order"},
		{"AckOutOfOrderWithinAnOwner", func(tl *tally) {
			tl.record("g", msgs(2, 1, 13))
			tl.record("g", msgs(2, 1, 8))
		}, "event 8 acked after event 13"},
		{"ZombieAckAfterSuccessor", func(tl *tally) {
			// An older token's ack accepted after the successor's: it sorts first and
			// shows the same event acked twice, out of order.
			tl.record("g", msgs(3, 2, 3, 8))
			tl.record("g", msgs(2, 1, 8))
		}, "event 3 acked after event 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally()
			c.run(tl)
			v := tl.violations("g")
			switch {
			case c.want == "" && len(v) > 0:
				t.Fatalf("violations %q, want none", v)
			case c.want != "" && !strings.Contains(strings.Join(v, "\n"), c.want):
				t.Fatalf("violations %q, want one containing %q", v, c.want)
			}
		})
	}
}
