package main

import (
	"strings"
	"testing"
)

// Completion offers dc and xdc for --level and the client's existing locks and latches
// for a command's NAME, and files for none of them.
func TestCompletion(t *testing.T) {
	c := newCLI(t)
	c.want(0, "lock", "acquire", "nightly", "--ttl", "1m")
	c.want(0, "lock", "acquire", "noon", "--ttl", "1m")
	c.want(0, "latch", "create", "batch", "--count", "2")
	c.want(0, "queue", "create", "orders", "--partitions", "1", "--group", "g")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "status", "ni"}, "nightly"},
		{[]string{"lock", "release", ""}, "nightly,noon"},
		{[]string{"latch", "countdown", ""}, "batch"},
		{[]string{"queue", "describe", "or"}, "orders"},
		{[]string{"queue", "delete", ""}, "orders"},
		{[]string{"lock", "acquire", "x", "--level", ""}, "dc,xdc"},
		{[]string{"latch", "await", "x", "--level", "x"}, "xdc"},
		{[]string{"lock", "status", "nightly", ""}, ""}, // one NAME only
	} {
		out := c.want(0, append([]string{"__complete"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		directive := lines[len(lines)-1]
		var got []string
		for _, l := range lines[:len(lines)-1] {
			name, _, _ := strings.Cut(l, "\t")
			got = append(got, name)
		}
		if strings.Join(got, ",") != tc.want || directive != ":4" {
			t.Errorf("completion of %q = %q (directive %s), want %q and :4 (no files)", tc.args, got, directive, tc.want)
		}
	}
}
