package main

import (
	"strings"
	"testing"
)

// The demo's queue check fails on what it claims never happens: an event acked twice
// or never, a key's events acked out of order, a partition's token going back.
func TestDemoQueueCheck(t *testing.T) {
	ok := []ackedEvent{
		{pid: 1, id: "e0", key: "k0", partition: 3, seq: 0, token: 5, at: 10},
		{pid: 1, id: "e1", key: "k1", partition: 3, seq: 1, token: 5, at: 10},
		{pid: 2, id: "e2", key: "k0", partition: 3, seq: 2, token: 7, at: 20},
	}
	if n, err := checkAcked(append([]ackedEvent(nil), ok...), 3); err != nil || n != 2 {
		t.Fatalf("good report: %d processes, %v", n, err)
	}
	cases := map[string]struct {
		es   []ackedEvent
		want string
	}{
		"twice":    {append(append([]ackedEvent(nil), ok...), ackedEvent{pid: 2, id: "e1", key: "k1", partition: 3, seq: 1, token: 7, at: 30}), "acked twice"},
		"missing":  {ok[:2], "never acked"},
		"order":    {[]ackedEvent{ok[0], ok[1], {pid: 2, id: "e2", key: "k0", partition: 3, seq: 2, token: 7, at: 5}}, "acked after seq"},
		"token":    {[]ackedEvent{ok[0], ok[1], {pid: 2, id: "e2", key: "k0", partition: 3, seq: 2, token: 4, at: 20}}, "token 4 acked after token 5"},
		"parsable": {nil, "never acked"},
	}
	for name, c := range cases {
		if _, err := checkAcked(c.es, 3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	e, ok2 := parseAcked("event pid=12 id=e7 key=k3 partition=5 seq=9 token=4 acked=123")
	if !ok2 || e != (ackedEvent{pid: 12, id: "e7", key: "k3", partition: 5, seq: 9, token: 4, at: 123}) {
		t.Fatalf("parseAcked: %+v %v", e, ok2)
	}
}
