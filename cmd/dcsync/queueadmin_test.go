package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The operator commands' contract (exit codes, text and JSON) on each store.

func TestQueueAdminSQLite(t *testing.T) {
	queueAdminFlow(t, newCLI(t), "adm-"+randSuffix())
}

func TestQueueAdminHBase(t *testing.T) {
	zk := os.Getenv("DCSYNC_HBASE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_HBASE_ZK is not set (CI=true: HBase must run; see scripts/test)")
		}
		t.Skip("DCSYNC_HBASE_ZK is not set: start HBase with testenv/hbase/up")
	}
	queueAdminFlow(t, &cli{t: t, store: "hbase://" + zk}, "cli-adm-"+randSuffix())
}

func TestQueueAdminAerospike(t *testing.T) {
	addr, ns := aerospikeServer(t)
	queueAdminFlow(t, &cli{t: t, store: "aerospike://" + addr + "/" + ns}, "cli-adm-"+randSuffix())
}

// wantJSON runs a command that must exit with code and decodes its stdout into v.
func (c *cli) wantJSON(code int, v any, args ...string) {
	c.t.Helper()
	out := c.want(code, args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("dcsync %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}

// lockName is the lock of a member slot ("m") or partition ("p") of group g's
// consumers of queue name (queue/describe.go, adminLockName).
func queueLockName(name, g, kind string, n int) string {
	return fmt.Sprintf("queue:%d:%s%d:%s%s/%d", len(name), name, len(g), g, kind, n)
}

func queueAdminFlow(t *testing.T, c *cli, name string) {
	c.want(0, "queue", "create", name, "--partitions", "2", "--group", "g")
	if _, _, code := c.send("a\nb\nc\n", name, "--key", "k"); code != 0 {
		t.Fatalf("send: exit %d", code)
	}

	// list
	var specs []queueSpecJSON
	c.wantJSON(0, &specs, "queue", "list", "--json")
	found := false
	for _, s := range specs {
		if s.Name == name {
			found = s.Partitions == 2 && strings.Join(s.Groups, ",") == "g" && s.CreatedAt != nil && s.DedupMS == 86400000
			if !found {
				t.Fatalf("queue list --json lists %+v", s)
			}
		}
	}
	if !found {
		t.Fatalf("queue list --json does not list %q", name)
	}
	if out := c.want(0, "queue", "list"); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+2\s+g$`).MatchString(out) {
		t.Fatalf("queue list printed %q", out)
	}

	// add-group
	c.want(0, "queue", "add-group", name, "h")
	c.want(1, "queue", "add-group", name, "h")
	c.want(2, "queue", "add-group", name, "")
	c.want(1, "queue", "add-group", name+"-missing", "h")
	var spec queueSpecJSON
	c.wantJSON(0, &spec, "queue", "add-group", name, "i", "--json")
	if strings.Join(spec.Groups, ",") != "g,h,i" {
		t.Fatalf("add-group --json printed %+v", spec)
	}

	// describe: 3 events in one partition, unread by every group.
	var d describeJSON
	c.wantJSON(0, &d, "queue", "describe", name, "--json")
	if len(d.GroupStates) != 3 || d.Partitions != 2 {
		t.Fatalf("describe --json: %+v", d)
	}
	var hot int
	for _, g := range d.GroupStates {
		if len(g.Partitions) != 3 || !g.Partitions[2].Dead || g.Partitions[0].Dead || g.Partitions[1].Dead {
			t.Fatalf("describe --json group %s: %+v (want 2 event partitions, then the dead-letter one)", g.Group, g.Partitions)
		}
		lag := uint64(0)
		for _, p := range g.Partitions[:2] {
			lag += p.Lag
			if p.Lag > 0 {
				hot = p.Partition
			}
			if p.Owner != nil {
				t.Fatalf("describe: partition %d owned by %+v with no consumer", p.Partition, p.Owner)
			}
		}
		if lag != 3 {
			t.Fatalf("describe --json group %s: lag %d, want 3", g.Group, lag)
		}
	}
	out := c.want(0, "queue", "describe", name, "--group", "g")
	if !strings.Contains(out, "GROUP  PARTITION  HEAD  FLOOR  OFFSET  LAG  OWNER  TOKEN  ATTEMPTS  HELD") ||
		!regexp.MustCompile(`(?m)^g\s+2\(dead\)\s+0\s+0\s+0\s+0\s+-\s+-\s+0\s+false$`).MatchString(out) {
		t.Fatalf("describe printed %q", out)
	}
	c.want(2, "queue", "describe", name, "--group", "nope")
	if out := c.want(0, "queue", "lag", name, "--group", "g"); !regexp.MustCompile(`(?m)^g\s+dead\s+0\s+0\s+0$`).MatchString(out) {
		t.Fatalf("lag does not label the dead-letter partition: %q", out)
	}

	// Consume group g, then seek back.
	c.want(0, "queue", "receive", name, "--group", "g", "--max", "3", "--timeout", waitAll)
	var res resetJSON
	c.wantJSON(0, &res, "queue", "seek", name, "--group", "g", "--to-earliest", "--dry-run", "--json")
	if !res.DryRun || res.Live || len(res.Partitions) != 2 || res.Partitions[hot].From != 3 || res.Partitions[hot].Applied {
		t.Fatalf("seek --dry-run --json: %+v", res)
	}
	to := res.Partitions[hot].To
	c.wantJSON(0, &d, "queue", "describe", name, "--group", "g", "--json")
	if p := d.GroupStates[0].Partitions[hot]; p.Offset != 3 || p.Lag != 0 {
		t.Fatalf("after receive and a dry run: %+v", p)
	}

	// A live member: a member slot held refuses the seek (exit 3), --force seeks.
	slot := c.want(0, "lock", "acquire", queueLockName(name, "g", "m", 0), "--level", "xdc", "--ttl", "1m")
	_, errs, code := c.run("queue", "seek", name, "--group", "g", "--to-earliest")
	if code != 3 || !strings.Contains(errs, `group "g" of queue "`+name+`" has live members`) {
		t.Fatalf("seek with a live member: exit %d, stderr %q; want 3", code, errs)
	}
	c.wantJSON(3, &res, "queue", "seek", name, "--group", "g", "--to-earliest", "--json")
	if !res.Live || res.Error == nil || len(res.Members) != 1 || res.Partitions[hot].Applied {
		t.Fatalf("seek --json with a live member: %+v", res)
	}
	c.wantJSON(0, &d, "queue", "describe", name, "--group", "g", "--json")
	if p := d.GroupStates[0].Partitions[hot]; p.Offset != 3 {
		t.Fatalf("a refused seek moved the offset: %+v", p)
	}
	m := ownerRE.FindStringSubmatch(slot)
	c.want(0, "lock", "release", queueLockName(name, "g", "m", 0), "--level", "xdc", "--owner", m[1])

	// A partition lock held: describe shows its owner and token; --force breaks it
	// and installs a greater token.
	held := c.want(0, "lock", "acquire", queueLockName(name, "g", "p", hot), "--level", "xdc", "--ttl", "1m")
	hm := ownerRE.FindStringSubmatch(held)
	c.wantJSON(0, &d, "queue", "describe", name, "--group", "g", "--json")
	if p := d.GroupStates[0].Partitions[hot]; p.Owner == nil || p.Owner.Owner != hm[1] || fmt.Sprint(p.Owner.Token) != hm[2] {
		t.Fatalf("describe with partition %d's lock held by %s (token %s): %+v", hot, hm[1], hm[2], p.Owner)
	}
	c.want(3, "queue", "seek", name, "--group", "g", "--to-earliest")
	out = c.want(0, "queue", "seek", name, "--group", "g", "--to-earliest", "--force")
	if !strings.Contains(out, "PARTITION  FROM  TO  OWNER") || !strings.Contains(out, "applied") {
		t.Fatalf("seek --force printed %q", out)
	}
	c.wantJSON(0, &d, "queue", "describe", name, "--group", "g", "--json")
	if p := d.GroupStates[0].Partitions[hot]; p.Offset != to || p.Lag != 3-to || p.Owner != nil || p.Token <= parseU(t, hm[2]) {
		t.Fatalf("after seek --force: %+v, want offset %d, no owner, a token above %s", p, to, hm[2])
	}
	c.want(5, "lock", "release", queueLockName(name, "g", "p", hot), "--level", "xdc", "--owner", hm[1])

	// --to-seq and --to-time.
	c.wantJSON(0, &res, "queue", "seek", name, "--group", "g", "--to-seq", fmt.Sprintf("%d:2", hot), "--json")
	if len(res.Partitions) != 1 || res.Partitions[0].To != 2 || !res.Partitions[0].Applied {
		t.Fatalf("seek --to-seq --json: %+v", res)
	}
	c.wantJSON(0, &res, "queue", "seek", name, "--group", "g", "--to-seq", fmt.Sprintf("%d:99", hot), "--json")
	if res.Partitions[0].To != 3 {
		t.Fatalf("seek --to-seq beyond the head: %+v, want the head (3)", res)
	}
	c.wantJSON(0, &res, "queue", "seek", name, "--group", "g", "--to-time", "1h", "--json")
	if res.Partitions[hot].To != to {
		t.Fatalf("seek --to-time 1h: %+v, want partition %d at %d", res, hot, to)
	}
	// g's dead-letter partition is 2 (partitions + its index 0); 4 is i's.
	c.wantJSON(0, &res, "queue", "seek", name, "--group", "g", "--to-seq", "2:0", "--json")
	if len(res.Partitions) != 1 || !res.Partitions[0].Dead || !res.Partitions[0].Applied {
		t.Fatalf("seek of the dead-letter partition: %+v", res)
	}
	c.want(2, "queue", "seek", name, "--group", "g", "--to-seq", "4:0")
	// Usage errors: exit 2, nothing written.
	for _, args := range [][]string{
		{"--group", "g"},
		{"--group", "g", "--to-earliest", "--to-latest"},
		{"--to-earliest"},
		{"--group", "nope", "--to-earliest"},
		{"--group", "g", "--to-seq", "x"},
		{"--group", "g", "--to-seq", "0:1,0:2"},
		{"--group", "g", "--to-time", "yesterday"},
	} {
		c.want(2, append([]string{"queue", "seek", name}, args...)...)
	}
	c.want(1, "queue", "seek", name+"-missing", "--group", "g", "--to-earliest")

	// delete: refused while a consumer holds a lock (exit 3, nothing deleted), --force
	// deletes; then the queue is gone from list and describe, and a queue created again
	// under the name starts empty.
	if ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", queueLockName(name, "g", "m", 0), "--level", "xdc", "--ttl", "1m")) == nil {
		t.Fatal("member slot not taken")
	}
	_, errs, code = c.run("queue", "delete", name)
	if code != exitHeld || !strings.Contains(errs, "live consumers") {
		t.Fatalf("delete with a member slot held: exit %d, %q; want 3 saying so", code, errs)
	}
	c.want(0, "queue", "describe", name)
	var del struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}
	c.wantJSON(0, &del, "queue", "delete", name, "--force", "--json")
	if del.Name != name || !del.Deleted {
		t.Fatalf("delete --json printed %+v", del)
	}
	c.want(1, "queue", "describe", name)
	c.want(1, "queue", "delete", name)
	var specs2 []queueSpecJSON
	c.wantJSON(0, &specs2, "queue", "list", "--json")
	for _, s := range specs2 {
		if s.Name == name {
			t.Fatalf("queue list still has %s after delete", name)
		}
	}
	c.want(0, "queue", "create", name, "--partitions", "2", "--group", "g")
	var lag []map[string]any
	c.wantJSON(0, &lag, "queue", "lag", name, "--json")
	if len(lag) != 1 {
		t.Fatalf("queue lag --json of the queue created again = %v", lag)
	}
	if total, _ := lag[0]["total"].(map[string]any); total == nil || total["head"] != 0.0 {
		t.Fatalf("the queue created again has %v; want every head 0 (the deleted one had 3 events)", lag)
	}
	c.want(0, "queue", "delete", name)
}

func parseU(t *testing.T, s string) uint64 {
	t.Helper()
	var u uint64
	if _, err := fmt.Sscan(s, &u); err != nil {
		t.Fatal(err)
	}
	return u
}
