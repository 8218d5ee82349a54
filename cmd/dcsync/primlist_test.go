package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/storeurl"
)

// primState holds, on c's SQLite store and for client app in farm dc1: elections sched
// (DC, value "host a:1"), glob (XDC, value "g") and pend (its lock taken, no value
// published), semaphore pool (3 permits, 2 held), read-write locks rd (2 readers, a
// writer waiting: W taken by hand) and wr (a writer holding), of 4 reader slots each,
// and the plain locks plain and "election:3:abcd" (a name no election has: LEN is 3).
// Every lease is an hour; nothing is kept alive. It returns the slots of pool's
// permits and of rd's readers, each in order (the semaphore and the read-write lock pick
// them).
func primState(t *testing.T, c *cli) (poolSlots, rdSlots [2]int) {
	t.Helper()
	ctx := context.Background()
	s, err := storeurl.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		em, err := election.New(s, "app", "dc1", election.WithTTL(time.Hour), election.WithLevel(lv))
		if err != nil {
			t.Fatal(err)
		}
		name, value := "sched", "host a:1"
		if lv == dcsync.XDC {
			name, value = "glob", "g"
		}
		ld, err := em.Campaign(ctx, name, value)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ld.Resign(context.Background()) })
	}
	lm, err := lock.New(s, "app", "dc1", lock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{election.LockName("pend"), "plain", "election:3:abcd"} {
		if _, err := lm.TryAcquire(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	sm, err := semaphore.New(s, "app", "dc1", semaphore.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sem, err := sm.Open(ctx, "pool", 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range p.Permits() {
		poolSlots[i] = q.Slot
	}
	if poolSlots[0] > poolSlots[1] {
		poolSlots[0], poolSlots[1] = poolSlots[1], poolSlots[0]
	}
	rm, err := rwlock.New(s, "app", "dc1", rwlock.WithTTL(time.Hour), rwlock.WithReaders(4))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rdSlots {
		r, err := rm.AcquireRead(ctx, "rd")
		if err != nil {
			t.Fatal(err)
		}
		rdSlots[i] = r.Slot()
	}
	if rdSlots[0] > rdSlots[1] {
		rdSlots[0], rdSlots[1] = rdSlots[1], rdSlots[0]
	}
	// A writer that waits for rd's readers holds rd's W: taken here by hand, as
	// rwlock's AcquireWrite would block.
	if _, err := s.AcquireLock(ctx, dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "rwlock:2:rd/w"}, "waiting-writer", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := rm.AcquireWrite(ctx, "wr"); err != nil {
		t.Fatal(err)
	}
	return poolSlots, rdSlots
}

var holderRE = regexp.MustCompile(`owner=[0-9a-z-]+ token=1 expires_in=59m[0-9.]+s`)

// wantLines checks out's lines against want, where "HOLDER" stands for owner=ID
// token=1 expires_in=59m...s.
func wantLines(t *testing.T, what, out string, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(holderRE.ReplaceAllString(out, "HOLDER"), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s printed\n%s\nwant (HOLDER: a holder of token 1 with 59m left)\n%s", what, out, strings.Join(want, "\n"))
	}
}

func TestPrimitiveListCommands(t *testing.T) {
	c := newCLI(t)
	for _, kind := range []string{"election", "semaphore", "rwlock"} {
		if out := c.want(0, kind, "list"); out != "" {
			t.Fatalf("%s list with nothing held printed %q", kind, out)
		}
		if out := c.want(0, kind, "list", "--json"); out != "[]\n" {
			t.Fatalf("%s list --json with nothing held printed %q", kind, out)
		}
	}
	ps, rs := primState(t, c)

	wantLines(t, "election list", c.want(0, "election", "list"),
		`pend DC dc1 HOLDER value=(pending)`,
		`sched DC dc1 HOLDER value="host a:1"`,
		`glob XDC - HOLDER value="g"`)
	wantLines(t, "semaphore list", c.want(0, "semaphore", "list"),
		`pool DC dc1 permits=3 held=2`,
		fmt.Sprintf(`  slot=%d HOLDER`, ps[0]),
		fmt.Sprintf(`  slot=%d HOLDER`, ps[1]))
	wantLines(t, "rwlock list", c.want(0, "rwlock", "list"),
		`rd DC dc1 writer=waiting readers=2 slots=4`,
		`  writer HOLDER`,
		fmt.Sprintf(`  reader slot=%d HOLDER`, rs[0]),
		fmt.Sprintf(`  reader slot=%d HOLDER`, rs[1]),
		`wr DC dc1 writer=holding readers=0 slots=4`,
		`  writer HOLDER`)

	// lock list keeps their locks, marked with their kind; plain locks are not marked.
	wantLines(t, "lock list", c.want(0, "lock", "list"),
		`election:3:abcd DC dc1 HOLDER`,
		`election:4:pend DC dc1 HOLDER kind=election`,
		`election:5:sched DC dc1 HOLDER kind=election`,
		`plain DC dc1 HOLDER`,
		fmt.Sprintf(`rwlock:2:rd/r%d DC dc1 HOLDER kind=rwlock`, rs[0]),
		fmt.Sprintf(`rwlock:2:rd/r%d DC dc1 HOLDER kind=rwlock`, rs[1]),
		`rwlock:2:rd/w DC dc1 HOLDER kind=rwlock`,
		`rwlock:2:wr/w DC dc1 HOLDER kind=rwlock`,
		fmt.Sprintf(`semaphore:4:pool/%d DC dc1 HOLDER kind=semaphore`, ps[0]),
		fmt.Sprintf(`semaphore:4:pool/%d DC dc1 HOLDER kind=semaphore`, ps[1]),
		`election:4:glob XDC - HOLDER kind=election`)
	var locks []lockJSON
	if err := json.Unmarshal([]byte(c.want(0, "lock", "list", "--json")), &locks); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, l := range locks {
		kinds[l.Name] = l.Kind
	}
	if kinds["plain"] != "" || kinds["election:3:abcd"] != "" || kinds["election:5:sched"] != "election" ||
		kinds[fmt.Sprintf("semaphore:4:pool/%d", ps[1])] != "semaphore" || kinds["rwlock:2:rd/w"] != "rwlock" || len(kinds) != 11 {
		t.Fatalf("lock list --json kinds: %v", kinds)
	}

	var els []electionListJSON
	if err := json.Unmarshal([]byte(c.want(0, "election", "list", "--json")), &els); err != nil {
		t.Fatal(err)
	}
	if len(els) != 3 || els[0].Name != "pend" || els[0].Published || els[0].Value != nil || els[0].Token != 1 ||
		els[1].Name != "sched" || !els[1].Published || *els[1].Value != "host a:1" || els[1].Farm != "dc1" ||
		els[2].Name != "glob" || els[2].Level != "XDC" || els[2].Farm != "" || *els[2].Value != "g" || els[2].Error != "" {
		t.Fatalf("election list --json = %+v", els)
	}
	if ms := *els[1].ExpiresInMS; ms <= 59*60000 || ms > 3600000 {
		t.Fatalf("election list --json: expires_in_ms %d of an hour's lease", ms)
	}
	var sems []semaphoreListJSON
	if err := json.Unmarshal([]byte(c.want(0, "semaphore", "list", "--json")), &sems); err != nil {
		t.Fatal(err)
	}
	if len(sems) != 1 || sems[0].Name != "pool" || sems[0].Permits != 3 || sems[0].Max != 3 || sems[0].Held != 2 ||
		len(sems[0].Holders) != 2 || *sems[0].Holders[0].Slot != ps[0] || *sems[0].Holders[1].Slot != ps[1] || sems[0].Holders[1].Token != 1 {
		t.Fatalf("semaphore list --json = %+v", sems)
	}
	var rws []rwlockListJSON
	if err := json.Unmarshal([]byte(c.want(0, "rwlock", "list", "--json")), &rws); err != nil {
		t.Fatal(err)
	}
	if len(rws) != 2 || rws[0].Name != "rd" || rws[0].Slots != 4 || !rws[0].WriterWaiting || rws[0].ReadersHeld != 2 ||
		rws[0].Writer == nil || rws[0].Writer.Owner != "waiting-writer" || *rws[0].Readers[0].Slot != rs[0] || *rws[0].Readers[1].Slot != rs[1] ||
		rws[1].Name != "wr" || rws[1].WriterWaiting || rws[1].Writer == nil || rws[1].ReadersHeld != 0 || len(rws[1].Readers) != 0 {
		t.Fatalf("rwlock list --json = %+v", rws)
	}
}

// A store that cannot list locks: the list commands exit 1, not supported.
func TestPrimitiveListNotSupported(t *testing.T) {
	for _, kind := range []string{"election", "semaphore", "rwlock"} {
		var o, e bytes.Buffer
		a := &app{stdout: &o, stderr: &e, store: plainStore{memory.New()}}
		root := newRoot(a)
		root.SetArgs([]string{"--client", "app", kind, "list"})
		root.SetOut(&o)
		root.SetErr(&e)
		err := root.ExecuteContext(context.Background())
		a.close()
		if dcsync.CodeOf(err) != dcsync.NotImplemented || exitCode(err) != 1 || !strings.Contains(err.Error(), "not supported by this store") {
			t.Errorf("%s list on a store without listing: %v (exit %d)", kind, err, exitCode(err))
		}
	}
}
