package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

func TestLockListAndStatusJSON(t *testing.T) {
	c := newCLI(t)
	if out := c.want(0, "lock", "list"); out != "" {
		t.Fatalf("list with no locks printed %q", out)
	}
	if out := c.want(0, "lock", "list", "--json"); out != "[]\n" {
		t.Fatalf("list --json with no locks printed %q", out)
	}
	a := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "a", "--ttl", "1m"))
	b := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "b", "--level", "xdc", "--ttl", "2m"))
	if a == nil || b == nil {
		t.Fatal("acquire printed no owner")
	}
	out := c.want(0, "lock", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "a DC dc1 owner="+a[1]+" token=1 expires_in=") ||
		!strings.HasPrefix(lines[1], "b XDC - owner="+b[1]+" token=1 expires_in=") {
		t.Fatalf("lock list printed\n%s", out)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0]["name"] != "a" || list[0]["level"] != "DC" || list[0]["farm"] != "dc1" ||
		list[0]["owner"] != a[1] || list[0]["token"] != 1.0 || list[0]["held"] != true ||
		list[1]["name"] != "b" || list[1]["level"] != "XDC" || list[1]["farm"] != "" {
		t.Fatalf("lock list --json = %v", list)
	}
	if ms, _ := list[1]["expires_in_ms"].(float64); ms <= 60000 || ms > 120000 {
		t.Fatalf("expires_in_ms of a 2m lease = %v", list[1]["expires_in_ms"])
	}
	if _, err := time.Parse(time.RFC3339Nano, list[0]["expires_at"].(string)); err != nil {
		t.Fatalf("expires_at: %v", err)
	}

	var st map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "status", "a", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st["held"] != true || st["owner"] != a[1] || st["token"] != 1.0 || st["name"] != "a" {
		t.Fatalf("status --json = %v", st)
	}
	out = c.want(0, "lock", "status", "free-one", "--json")
	if out != `{"name":"free-one","level":"DC","farm":"dc1","held":false,"expires_at":null,"expires_in_ms":null}`+"\n" {
		t.Fatalf("status --json of a free lock = %s", out)
	}
	// Another client's locks are not listed.
	var o, e bytes.Buffer
	if code := run([]string{"--store", c.store, "--client", "other", "lock", "list"}, &o, &e); code != 0 || o.Len() != 0 {
		t.Fatalf("other client's list: exit %d, %q %q", code, o.String(), e.String())
	}
}

func TestLockRefresh(t *testing.T) {
	c := newCLI(t)
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "job", "--ttl", "10s"))
	if m == nil {
		t.Fatal("no owner")
	}
	c.want(5, "lock", "refresh", "job", "--owner", "someone-else", "--ttl", "1h")
	c.want(5, "lock", "refresh", "nothing", "--owner", m[1])
	c.want(2, "lock", "refresh", "job") // --owner is required
	c.want(2, "lock", "refresh", "job", "--owner", m[1], "--ttl", "1ns")
	out := c.want(0, "lock", "refresh", "job", "--owner", m[1], "--ttl", "1h")
	if !strings.HasPrefix(out, "owner="+m[1]+" token=1 expires_in=59m") {
		t.Fatalf("refresh printed %q", out)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "status", "job", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if ms := st["expires_in_ms"].(float64); ms < 3500000 {
		t.Fatalf("after refresh --ttl 1h the lease has %vms left", ms)
	}
	c.want(0, "lock", "release", "job", "--owner", m[1])
	c.want(5, "lock", "refresh", "job", "--owner", m[1])
}

func TestLatchListDeleteAndCountJSON(t *testing.T) {
	c := newCLI(t)
	dc2 := func(code int, args ...string) string {
		t.Helper()
		var o, e bytes.Buffer
		if got := run(append([]string{"--store", c.store, "--client", "app", "--farm", "dc2"}, args...), &o, &e); got != code {
			t.Fatalf("dc2 %v: exit %d, want %d: %s", args, got, code, e.String())
		}
		return o.String()
	}
	c.want(0, "latch", "create", "l1", "--count", "3")
	dc2(0, "latch", "create", "l1", "--count", "2")
	c.want(0, "latch", "create", "l2", "--count", "1", "--ttl", "1m")
	out := c.want(0, "latch", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "l1 DC dc1 count=3 expires_in=") ||
		!strings.HasPrefix(lines[1], "l1 DC dc2 count=2 expires_in=") || !strings.HasPrefix(lines[2], "l2 DC dc1 count=1 expires_in=") {
		t.Fatalf("latch list printed\n%s", out)
	}
	if out := c.want(0, "latch", "list", "--level", "xdc"); !strings.HasPrefix(out, "l1 XDC dc1,dc2 count=5 expires_in=") {
		t.Fatalf("latch list --level xdc printed\n%s", out)
	}
	var cells []map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "latch", "list", "--json")), &cells); err != nil {
		t.Fatal(err)
	}
	if len(cells) != 3 || cells[1]["name"] != "l1" || cells[1]["farm"] != "dc2" || cells[1]["count"] != 2.0 || cells[1]["level"] != "DC" {
		t.Fatalf("latch list --json = %v", cells)
	}
	if ms, _ := cells[2]["expires_in_ms"].(float64); ms <= 0 || ms > 60000 {
		t.Fatalf("l2 (1m) expires_in_ms = %v", cells[2]["expires_in_ms"])
	}
	var xdc []map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "latch", "list", "--json", "--level", "xdc")), &xdc); err != nil {
		t.Fatal(err)
	}
	if len(xdc) != 2 || xdc[0]["count"] != 5.0 || len(xdc[0]["farms"].([]any)) != 2 {
		t.Fatalf("latch list --json --level xdc = %v", xdc)
	}
	if out := c.want(0, "latch", "count", "l1", "--json", "--level", "xdc"); out != `{"name":"l1","level":"XDC","farm":"dc1","count":5}`+"\n" {
		t.Fatalf("count --json = %s", out)
	}
	if out := c.want(0, "latch", "count", "l1", "--json"); out != `{"name":"l1","level":"DC","farm":"dc1","count":3}`+"\n" {
		t.Fatalf("count --json = %s", out)
	}

	// delete: DC deletes this farm's cell; a missing latch is refused (exit 1, not found).
	c.want(0, "latch", "delete", "l1")
	_, errs, code := c.run("latch", "delete", "l1")
	if code != 1 || !strings.Contains(errs, "not found") {
		t.Fatalf("second delete: exit %d, %q; want 1 not found", code, errs)
	}
	if out := dc2(0, "latch", "count", "l1"); out != "2\n" {
		t.Fatalf("dc2's cell after dc1's delete: %q", out)
	}
	c.want(0, "latch", "delete", "l1", "--level", "xdc")
	c.want(1, "latch", "delete", "l1", "--level", "xdc")
	c.want(1, "latch", "delete", "never-created")
	c.want(2, "latch", "delete", "x", "--level", "nope")
	if out := c.want(0, "latch", "list"); !strings.HasPrefix(out, "l2 DC dc1 count=1") || strings.Count(out, "\n") != 1 {
		t.Fatalf("list after deletes:\n%s", out)
	}
}

// plainStore is a store with none of the optional listing interfaces.
type plainStore struct{ driver.Store }

func TestListNotSupported(t *testing.T) {
	for _, args := range [][]string{{"lock", "list"}, {"latch", "list"}, {"latch", "delete", "x"}} {
		var o, e bytes.Buffer
		a := &app{stdout: &o, stderr: &e, store: plainStore{memory.New()}}
		root := newRoot(a)
		root.SetArgs(append([]string{"--client", "app"}, args...))
		root.SetOut(&o)
		root.SetErr(&e)
		err := root.ExecuteContext(context.Background())
		a.close()
		if dcsync.CodeOf(err) != dcsync.NotImplemented || exitCode(err) != 1 || !strings.Contains(err.Error(), "not supported by this store") {
			t.Errorf("%v on a store without listing: %v (exit %d)", args, err, exitCode(err))
		}
	}
}

// TestAcquireWaitShowsHolder: lock acquire --wait shows who holds the lock, on one line
// rewritten in place, when stderr is a terminal, and nothing when it is not.
func TestAcquireWaitShowsHolder(t *testing.T) {
	c := newCLI(t)
	m := ownerRE.FindStringSubmatch(c.want(0, "lock", "acquire", "job", "--ttl", "1m"))
	_, errs, code := c.run("lock", "acquire", "job", "--wait", "1200ms")
	if code != 4 {
		t.Fatalf("exit %d, want 4", code)
	}
	want := "waiting for job: held by owner=" + m[1] + " token=1 expires_in="
	if strings.Contains(errs, "waiting") || strings.Contains(errs, "\r") {
		t.Fatalf("stderr %q: want no live display when it is not a terminal", errs)
	}

	isTerminal = func(any) bool { return true }
	defer func() { isTerminal = defaultIsTerminal }()
	_, errs, code = c.run("lock", "acquire", "job", "--wait", "1200ms")
	if code != 4 || strings.Count(errs, "\r"+want) < 2 {
		t.Fatalf("terminal stderr %q (exit %d): want the line rewritten in place", errs, code)
	}
	// A free lock is taken at once and nothing is shown.
	c.want(0, "lock", "release", "job", "--owner", m[1])
	_, errs, code = c.run("lock", "acquire", "job", "--wait", "1s")
	if code != 0 || strings.Contains(errs, "waiting") {
		t.Fatalf("acquire of a free lock: exit %d, stderr %q", code, errs)
	}
}

// TestFairFlag: --fair is accepted by lock acquire and lock run and the lock behaves
// as a lock (the fairness itself is lock.Fair's, tested in package lock): a fair
// waiter takes the lock when its holder, a lock run, ends.
func TestFairFlag(t *testing.T) {
	c := newCLI(t)
	// The holder holds for 3 s: long enough for the poll below to see it held on a loaded
	// machine (what follows does not depend on how long).
	holder := c.process("lock", "run", "job", "--fair", "--", "sleep", "3")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	deadline := time.Now().Add(time.Minute) // a bound for a loaded machine, not a timing
	for {
		if out, _, _ := c.run("lock", "status", "job"); strings.HasPrefix(out, "held") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lock run --fair never took the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, errs, code := c.run("lock", "acquire", "job", "--fair", "--wait", "1m")
	if code != 0 || ownerRE.FindString(out) == "" {
		t.Fatalf("acquire --fair --wait: exit %d, %q %q", code, out, errs)
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("lock run --fair: %v", err)
	}
	c.want(3, "lock", "acquire", "job", "--fair")
}

func TestVersion(t *testing.T) {
	c := newCLI(t)
	v := c.want(0, "version")
	if !strings.HasPrefix(v, "dcsync ") || !strings.Contains(v, " revision ") {
		t.Fatalf("version printed %q", v)
	}
	if got := c.want(0, "--version"); got != v {
		t.Fatalf("--version printed %q, version %q", got, v)
	}
}

// TestVersionOfABuiltBinary builds dcsync from this checkout and checks that version
// prints the commit it was built from.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "dcsync")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	rev := strings.TrimSpace(string(head))
	// The version is "(devel)", or with Go 1.24+ a pseudo-version made from the commit.
	if !strings.HasPrefix(string(out), "dcsync ") || !strings.Contains(string(out), " revision "+rev) {
		t.Fatalf("--version printed %q, want revision %s", out, rev)
	}
}

// lock acquire and latch countdown/countup print their result as JSON with --json, in
// the objects 'lock status --json' and 'latch count --json' print.
func TestAcquireAndCountDownJSON(t *testing.T) {
	c := newCLI(t)
	var acq map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "acquire", "j", "--ttl", "1m", "--json")), &acq); err != nil {
		t.Fatal(err)
	}
	if acq["name"] != "j" || acq["level"] != "DC" || acq["farm"] != "dc1" || acq["held"] != true || acq["token"] != 1.0 {
		t.Fatalf("lock acquire --json = %v", acq)
	}
	owner, _ := acq["owner"].(string)
	if ms, _ := acq["expires_in_ms"].(float64); ms <= 0 || ms > 60000 {
		t.Fatalf("expires_in_ms of a 1m lease = %v", acq["expires_in_ms"])
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "status", "j", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if owner == "" || st["owner"] != owner || st["token"] != acq["token"] {
		t.Fatalf("status --json = %v after acquire --json = %v", st, acq)
	}
	c.want(0, "lock", "release", "j", "--owner", owner)

	c.want(0, "latch", "create", "n", "--count", "2")
	for _, tc := range []struct {
		cmd  string
		want float64
	}{{"countdown", 1}, {"countup", 2}} {
		var l map[string]any
		if err := json.Unmarshal([]byte(c.want(0, "latch", tc.cmd, "n", "--json")), &l); err != nil {
			t.Fatal(err)
		}
		if l["name"] != "n" || l["level"] != "DC" || l["farm"] != "dc1" || l["count"] != tc.want {
			t.Fatalf("latch %s --json = %v, want count %v", tc.cmd, l, tc.want)
		}
	}
}

// Every JSON time has one precision, milliseconds in UTC, on every store (the memory
// store's clock has nanoseconds, SQLite's milliseconds).
func TestJSONTimesHaveOnePrecision(t *testing.T) {
	re := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for _, tm := range []time.Time{time.Date(2026, 11, 26, 5, 0, 0, 123456789, time.FixedZone("x", 3600)), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} {
		if s := jsonTime(tm); !re.MatchString(s) {
			t.Errorf("jsonTime(%v) = %q, want milliseconds in UTC", tm, s)
		}
	}
	c := newCLI(t)
	c.want(0, "lock", "acquire", "j", "--ttl", "1m")
	var st map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "lock", "status", "j", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if s, _ := st["expires_at"].(string); !re.MatchString(s) {
		t.Errorf("lock status --json expires_at = %q, want milliseconds in UTC", s)
	}
}

// version --json prints what version prints, as JSON.
func TestVersionJSON(t *testing.T) {
	c := newCLI(t)
	var v map[string]string
	c.wantJSON(0, &v, "version", "--json")
	if text := c.want(0, "version"); text != fmt.Sprintf("dcsync %s revision %s (%s) %s\n", v["version"], v["revision"], v["time"], v["go"]) {
		t.Fatalf("version printed %q; --json %v", text, v)
	}
}
