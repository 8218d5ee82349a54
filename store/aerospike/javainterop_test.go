package aerospike_test

// Interop with the real Java libraries' operations: testenv/javaclients performs exactly
// what PhonePe DLM (AerospikeStore) and PhonePe DistributedLatch (AerospikeLatchStorage)
// do, on the real Aerospike Java client, against the same real Aerospike server as
// dcsync ($DCSYNC_AEROSPIKE, namespace $DCSYNC_AEROSPIKE_NAMESPACE or "test").

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/javaclients"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// jcEnv is a Java tool and a dcsync store on sets of their own.
type jcEnv struct {
	tool                *javaclients.Tool
	s                   *aerospike.Store
	ns                  string
	latchSuffix, lockSf string
}

func jcHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// jcStart returns a Java tool and a dcsync store on the real server named by
// $DCSYNC_AEROSPIKE.
// It skips the test when that is unset, or fails it when CI=true.
func jcStart(t *testing.T) jcEnv {
	t.Helper()
	addr := os.Getenv("DCSYNC_AEROSPIKE")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_AEROSPIKE is not set but CI=true: the Java interop tests must run against a real Aerospike server")
		}
		t.Skip("DCSYNC_AEROSPIKE is not set: skipping the Java interop tests (start testenv/aerospike/up and export its last line)")
	}
	ns := os.Getenv("DCSYNC_AEROSPIKE_NAMESPACE")
	if ns == "" {
		ns = "test"
	}
	tool := javaclients.Require(t, javaclients.Config{Aerospike: addr, AerospikeNamespace: ns})
	run := jcHex(4)
	e := jcEnv{tool: tool, ns: ns, latchSuffix: "jil" + run, lockSf: "jik" + run}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := &url.URL{Scheme: "aerospike", Host: addr, Path: "/" + ns,
		RawQuery: url.Values{"latch_set_suffix": {e.latchSuffix}, "lock_set_suffix": {e.lockSf}}.Encode()}
	s, err := aerospike.OpenURL(ctx, u)
	if err != nil {
		t.Fatalf("OpenURL %s: %v", u, err)
	}
	t.Cleanup(func() { s.Close() })
	e.s = s
	return e
}

func jcCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func jcMust(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func jcCode(t *testing.T, err error, code dcsync.Code, what string) {
	t.Helper()
	if dcsync.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
	}
}

func (e jcEnv) latch(client, name, farm string, ttl time.Duration) javaclients.AerospikeLatch {
	return javaclients.AerospikeLatch{NS: e.ns, SetSuffix: e.latchSuffix, Client: client, Latch: name, Farm: farm, TTL: int(ttl / time.Second)}
}

// TestJavaClientsLatch: latches created on one side are counted on the other, at DC and
// XDC, with ids from the Java docs (CLIENT_ID, MY_SERVICE); counts agree exactly, and
// the bins dcsync adds never enter the Java XDC sum (bins whose name contains "count#").
func TestJavaClientsLatch(t *testing.T) {
	e := jcStart(t)
	ctx := jcCtx(t, 3*time.Minute)
	for _, client := range []string{"CLIENT_ID", "MY_SERVICE", "svc-a"} {
		t.Run(client, func(t *testing.T) {
			t.Run("JavaCreatesDcsyncCounts", func(t *testing.T) {
				name := "jl_" + jcHex(3)
				j1 := e.latch(client, name, "dc1", time.Minute)
				j2 := e.latch(client, name, "dc2", time.Minute)
				// One record per (client, latch): the second farm's Java create is a
				// CREATE_ONLY put on an existing record, which the library's
				// getOrCreate tolerates; its createCountDownLatch would fail.
				jcMust(t, e.tool.AerospikeLatchCreate(ctx, j1, 5), "Java create dc1")
				err := e.tool.AerospikeLatchCreate(ctx, j2, 3)
				if rc, _ := javaclients.AsError(t, err, "Java create dc2 on the same record").ResultCode(); rc != 5 {
					t.Fatalf("Java create of a second farm's latch: %v, want KEY_EXISTS_ERROR (5) after the library's retries", err)
				}
				jcMust(t, e.tool.AerospikeLatchGetOrCreate(ctx, j2), "Java getOrCreate dc2 (tolerates KEY_EXISTS)")
				dc1 := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: name}
				x2 := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: "dc2", Name: name}
				got, err := e.s.ReadLatches(ctx, []dcsync.Key{dc1, x2})
				jcMust(t, err, "ReadLatches")
				if got[0] != (driver.LatchCount{Found: true, Count: 5}) || got[1] != (driver.LatchCount{Found: true, Count: 5}) {
					t.Fatalf("dcsync reads the Java latch as %+v, want DC 5 and XDC 5 (dc2's getOrCreate wrote nothing)", got)
				}
				jcCode(t, e.s.CreateLatch(ctx, dc1, 9, time.Minute), dcsync.AlreadyExists, "dcsync create over a Java latch")
				m, err := latch.New(e.s, client, "dc1")
				jcMust(t, err, "latch.New")
				cd, err := m.GetCountDown(name)
				jcMust(t, err, "GetCountDown")
				if n, err := cd.CountDown(ctx); err != nil || n != 4 {
					t.Fatalf("dcsync CountDown (DC) of the Java latch = %d, %v; want 4", n, err)
				}
				if n, err := e.s.AddLatch(ctx, x2, -1); err != nil || n != 3 {
					t.Fatalf("dcsync XDC count-down from dc2 = %d, %v; want 3", n, err)
				}
				for _, c := range []struct {
					l     javaclients.AerospikeLatch
					level string
					want  int64
				}{{j1, "DC", 4}, {j2, "DC", -1}, {j1, "XDC", 3}, {j2, "XDC", 3}} {
					if n, err := e.tool.AerospikeLatchCount(ctx, c.l, c.level); err != nil || n != c.want {
						t.Fatalf("Java getCount %s farm %s = %d, %v; want %d", c.level, c.l.Farm, n, err, c.want)
					}
				}
				jcMust(t, e.tool.AerospikeLatchCountDown(ctx, j1), "Java count-down")
				jcMust(t, e.tool.AerospikeLatchCountUp(ctx, j2), "Java count-up")
				got, err = e.s.ReadLatches(ctx, []dcsync.Key{dc1, x2})
				jcMust(t, err, "ReadLatches")
				if got[0].Count != 3 || got[1].Count != 3 {
					t.Fatalf("after Java updates dcsync reads %+v, want DC 3 and XDC 3", got)
				}
			})
			t.Run("DcsyncCreatesJavaCounts", func(t *testing.T) {
				name := "gl_" + jcHex(3)
				dc1 := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: name}
				jcMust(t, e.s.CreateLatch(ctx, dc1, 7, time.Minute), "dcsync create DC")
				x2 := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: "dc2", Name: name}
				if n, err := e.s.AddLatch(ctx, x2, -2); err != nil || n != 5 {
					t.Fatalf("dcsync XDC count-down from dc2 = %d, %v; want 5", n, err)
				}
				j1 := e.latch(client, name, "dc1", time.Minute)
				j2 := e.latch(client, name, "dc2", time.Minute)
				for _, c := range []struct {
					l     javaclients.AerospikeLatch
					level string
					want  int64
				}{{j1, "DC", 7}, {j2, "DC", -2}, {j1, "XDC", 5}} {
					if n, err := e.tool.AerospikeLatchCount(ctx, c.l, c.level); err != nil || n != c.want {
						t.Fatalf("Java getCount %s farm %s = %d, %v; want %d (dcsync's own bins must not enter the Java sum)", c.level, c.l.Farm, n, err, c.want)
					}
				}
				jcMust(t, e.tool.AerospikeLatchCountDown(ctx, j1), "Java count-down of a dcsync latch")
				got, err := e.s.ReadLatches(ctx, []dcsync.Key{dc1, x2})
				jcMust(t, err, "ReadLatches")
				if got[0] != (driver.LatchCount{Found: true, Count: 6}) || got[1] != (driver.LatchCount{Found: true, Count: 4}) {
					t.Fatalf("after a Java count-down dcsync reads %+v, want DC 6 and XDC 4", got)
				}
				// A Java create of an existing dcsync latch fails (CREATE_ONLY); its
				// getOrCreate leaves the count alone.
				if _, ok := javaclients.AsError(t, e.tool.AerospikeLatchCreate(ctx, j1, 9), "Java create over a dcsync latch").ResultCode(); !ok {
					t.Fatal("Java create over a dcsync latch failed without an Aerospike result code")
				}
				jcMust(t, e.tool.AerospikeLatchGetOrCreate(ctx, j1), "Java getOrCreate of a dcsync latch")
				if n, err := e.tool.AerospikeLatchCount(ctx, j1, "DC"); err != nil || n != 6 {
					t.Fatalf("Java count after its create/getOrCreate of a dcsync latch = %d, %v; want 6", n, err)
				}
			})
		})
	}
	t.Run("MissingLatch", func(t *testing.T) {
		name := "none_" + jcHex(3)
		j := e.latch("CLIENT_ID", name, "dc1", time.Minute)
		for _, lv := range []string{"DC", "XDC"} {
			_, err := e.tool.AerospikeLatchCount(ctx, j, lv)
			if je := javaclients.AsError(t, err, "Java getCount of a missing latch"); !je.Missing() {
				t.Fatalf("Java getCount %s of a missing latch: %v, want the library's NullPointerException", lv, je)
			}
		}
		if je := javaclients.AsError(t, e.tool.AerospikeLatchCountDown(ctx, j), "Java count-down of a missing latch"); je.Code != "INTERNAL_ERROR" {
			t.Fatalf("Java count-down of a missing latch: %v", je)
		}
		for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
			k := dcsync.Key{Level: lv, Client: "CLIENT_ID", Farm: "dc1", Name: name}
			_, err := e.s.AddLatch(ctx, k, -1)
			jcCode(t, err, dcsync.NotFound, "dcsync count-down of a missing latch ("+lv.String()+")")
		}
	})
}

// TestJavaClientsLock: a Java-held lock excludes dcsync and vice versa; dcsync's release
// never removes a Java holder's lock; Java's release (an unconditional delete) removes a
// dcsync holder's lock, and dcsync reports that as LockLost.
func TestJavaClientsLock(t *testing.T) {
	e := jcStart(t)
	ctx := jcCtx(t, 3*time.Minute)
	for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		for _, client := range []string{"CLIENT_ID", "MY_SERVICE"} {
			t.Run(lv.String()+"/"+client, func(t *testing.T) {
				name := "l_" + jcHex(3)
				j := javaclients.AerospikeLock{NS: e.ns, SetSuffix: e.lockSf, Level: lv.String(), Farm: "dc1", Client: client, Lock: name}
				m, err := lock.New(e.s, client, "dc1", lock.WithLevel(lv), lock.WithTTL(time.Minute))
				jcMust(t, err, "lock.New")

				set := "XDC#" + e.lockSf
				if lv == dcsync.DC {
					set = "DC#dc1#" + e.lockSf
				}
				javaclients.LockExclusion(t, ctx, m, name, javaclients.JavaLock{
					TryAcquire: func(ctx context.Context, ttl time.Duration) error { return e.tool.AerospikeLockTryAcquire(ctx, j, ttl) },
					Acquire: func(ctx context.Context, ttl, timeout, sleep time.Duration) error {
						return e.tool.AerospikeLockAcquire(ctx, j, ttl, timeout, sleep)
					},
					Release: func(ctx context.Context) error { return e.tool.AerospikeLockRelease(ctx, j) },
				}, func() {
					rec, err := e.tool.AerospikeGet(ctx, e.ns, set, client+"#"+name)
					jcMust(t, err, "raw get")
					if !rec.Found || rec.Bins["dc1##data"] != float64(1) || rec.Bins["dc1##uat"] == nil {
						t.Fatalf("Java lock record %+v, want bins dc1##data = 1 and dc1##uat", rec)
					}
				}, nil)
			})
		}
	}
}

// TestJavaClientsContention: Java and dcsync workers contend for ONE lock; every hold is
// timed on this host's wall clock and overlapping holds are counted by pair type.
// Asserted: no two dcsync holders overlap unless one was told (LockLost: a Java release,
// an unconditional delete, removed its lock), and fencing tokens increase from one
// dcsync hold to the next. Logged: overlaps involving a Java holder. On Aerospike the
// Java acquire is a generation-0 put and its release a delete, so Java holders overlap
// only when a Java delete lands on someone else's lock: a delete retried after an
// in-doubt attempt (the library's retryer retries any AerospikeException, timeouts
// included).
func TestJavaClientsContention(t *testing.T) {
	e := jcStart(t)
	d := javaclients.ContentionTime(t)
	ctx := jcCtx(t, d+3*time.Minute)
	name := "contended_" + jcHex(3)
	const client, farm = "MY_SERVICE", "dc1"
	ttl := time.Minute
	hold := 5 * time.Millisecond
	res, err := javaclients.RunMixed(ctx, javaclients.Mixed{
		Store: e.s, Client: client, Farm: farm, Level: dcsync.DC, Name: name,
		DcsyncWorkers: 3, Duration: d, Hold: hold, TTL: ttl,
		RunJava: func(ctx context.Context) (javaclients.ContentionResult, error) {
			return e.tool.AerospikeLockContend(ctx,
				javaclients.AerospikeLock{NS: e.ns, SetSuffix: e.lockSf, Level: "DC", Farm: farm, Client: client, Lock: name},
				javaclients.Contention{Threads: 3, Duration: d, Hold: hold,
					SleepBetweenRetries: 5 * time.Millisecond, Timeout: 2 * time.Second, TTL: ttl, Worker: "java"})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	javaclients.CheckMixed(t, res, fmt.Sprintf("Aerospike, 3 Java threads and 3 dcsync workers for %v", d))
	r := res.Report
	if n := r.Pairs["dcsync/java"] + r.Pairs["java/java"]; n > 0 {
		t.Logf("overlapping pairs with a Java holder: dcsync/java %d, java/java %d (the Java library's unconditional, blindly retried delete)",
			r.Pairs["dcsync/java"], r.Pairs["java/java"])
	}
}

// TestJavaClientsLatchLifetime: what Java updates do to a dcsync latch's lifetime and vice
// versa. The rule dcsync keeps: a latch ends TTL after its creation and dcsync's updates
// never move that end. The Java library's updates are UPDATE_ONLY operates whose
// expiration is the updating service's configured TTL: every Java update resets the
// WHOLE record's TTL (every farm's latch of that name) to that TTL from the update,
// lengthening or shortening it. Asserted: dcsync reads only the exact count or NotFound,
// sees the latch end by the latest of creation + TTL and the last Java update + the Java
// TTL (plus 1s for TTLs kept in whole seconds), each end judged from when the call that
// set it returned, and a latch it saw end does not come back. Logged: when each side saw
// the latch end. Scenarios whose steps a loaded machine made too slow to land while the
// latch lived run again with offsets and TTLs doubled (javaclients.Scaled).
func TestJavaClientsLatchLifetime(t *testing.T) {
	e := jcStart(t)
	ctx := jcCtx(t, 8*time.Minute)
	const slack = time.Second
	const client = "MY_SERVICE"
	l := javaclients.Lifetime{Store: e.s, Client: client, Java: func(name, farm string, ttl time.Duration) javaclients.JavaLatch {
		j := e.latch(client, name, farm, ttl)
		return javaclients.JavaLatch{
			Create:    func(ctx context.Context, count int64) error { return e.tool.AerospikeLatchCreate(ctx, j, count) },
			CountDown: func(ctx context.Context) error { return e.tool.AerospikeLatchCountDown(ctx, j) },
			Count: func(ctx context.Context, level string) (int64, error) {
				return e.tool.AerospikeLatchCount(ctx, j, level)
			},
		}
	}}
	// A Java update resets the record's TTL to the Java TTL from the update.
	javaEnd := func(ttl, lastJava time.Duration) time.Duration { return max(ttl, lastJava+ttl) + slack }
	same := func(ttl time.Duration) time.Duration { return ttl }
	now := func(time.Duration) time.Duration { return 0 }

	t.Run("DcsyncCreatesJavaAndDcsyncCountDown", func(t *testing.T) {
		// The Java service's TTL is 4/3 TTL: its count-down at +TTL/6 lengthens the latch.
		l.DcsyncCreates(t, ctx, javaclients.DcsyncCreates{Level: dcsync.DC, JavaFarm: "dc1", DcsyncFarm: "dc1",
			JavaTTL:  func(ttl time.Duration) time.Duration { return ttl * 4 / 3 },
			DcsyncAt: func(ttl time.Duration) time.Duration { return ttl / 3 },
			EndBy:    func(ttl, lastJava time.Duration) time.Duration { return max(ttl, lastJava+ttl*4/3) + slack }})
	})

	t.Run("JavaCreatesDcsyncAndJavaCountDown", func(t *testing.T) {
		l.JavaCreatesDcsyncAndJavaCountDown(t, ctx, javaEnd)
	})

	t.Run("JavaUpdateInAnotherFarmResetsTheRecord", func(t *testing.T) {
		// DC latches of one name in every farm share one Java record. A Java service in
		// dc2 with a 2s TTL that counts down its own DC latch resets the record's TTL to
		// 2s: dcsync's 30s latch in dc1 ends with it. dcsync cannot prevent a Java
		// write; it must only never read a wrong count. Logged: when it ended.
		name := "life_" + jcHex(3)
		k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: name}
		jTTL := 2 * time.Second
		j2 := e.latch(client, name, "dc2", jTTL)
		jcMust(t, e.s.CreateLatch(ctx, k, 3, 30*time.Second), "dcsync create dc1 (30s)")
		created := time.Now()
		jcMust(t, e.tool.AerospikeLatchGetOrCreate(ctx, j2), "Java getOrCreate dc2")
		jcMust(t, e.tool.AerospikeLatchCountUp(ctx, j2), "Java count-up dc2 (record TTL reset to 2s)")
		j1 := e.latch(client, name, "dc1", jTTL)
		samples := javaclients.Watch(t, ctx, e.s, k, created, 4*time.Second, func() (int64, error) { return e.tool.AerospikeLatchCount(ctx, j1, "DC") })
		javaclients.CheckLifetime(t, samples, 3, 30*time.Second, 30*time.Second)
		if last := samples[len(samples)-1]; !last.Dcsync.Found {
			t.Logf("the Java dc2 update (record TTL %v) ended dcsync's 30s dc1 latch: the Java layout's one record per name", jTTL)
		}
	})

	t.Run("XDCDcsyncCreatesJavaCountsDownFromAnotherFarm", func(t *testing.T) {
		l.DcsyncCreates(t, ctx, javaclients.DcsyncCreates{Level: dcsync.XDC, JavaFarm: "dc2", DcsyncFarm: "dc3",
			JavaTTL: same, DcsyncAt: now, EndBy: javaEnd})
	})
}
