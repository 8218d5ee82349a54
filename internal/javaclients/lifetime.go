package javaclients

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Sample is what each side read at one moment of a latch's life.
type Sample struct {
	At        time.Duration // since the latch's creation
	Dcsync    driver.LatchCount
	Java      int64
	JavaFound bool
}

// Watch reads latch k from both sides every 200ms until until (since created): dcsync
// through s, Java through readJava, which returns a *Error whose Missing reports a
// latch the Java library cannot find. It returns the samples.
func Watch(t testing.TB, ctx context.Context, s driver.LatchStore, k dcsync.Key, created time.Time, until time.Duration,
	readJava func() (int64, error)) []Sample {
	t.Helper()
	var out []Sample
	for time.Since(created) < until {
		s0 := Sample{At: time.Since(created).Round(10 * time.Millisecond)}
		got, err := s.ReadLatches(ctx, []dcsync.Key{k})
		if err != nil {
			t.Fatalf("dcsync read: %v", err)
		}
		s0.Dcsync = got[0]
		n, err := readJava()
		if err != nil {
			if je := AsError(t, err, "Java getCount"); !je.Missing() {
				t.Fatalf("Java getCount: %v", je)
			}
		} else {
			s0.Java, s0.JavaFound = n, true
		}
		out = append(out, s0)
		time.Sleep(200 * time.Millisecond)
	}
	return out
}

// CheckEnd watches latch k (Watch) until 1.5s past endBy, checks what was read
// (CheckLifetime: the exact count want or NotFound, ended by endBy), and that dcsync
// reads it ended at the end (Gone).
func CheckEnd(t testing.TB, ctx context.Context, s driver.LatchStore, k dcsync.Key, readJava func() (int64, error),
	created time.Time, want int64, ttl, endBy time.Duration) {
	t.Helper()
	CheckLifetime(t, Watch(t, ctx, s, k, created, endBy+1500*time.Millisecond, readJava), want, ttl, endBy)
	Gone(t, ctx, s, k, created, endBy)
}

// Gone asserts that dcsync reads k as ended; it is called after endBy (since created).
func Gone(t testing.TB, ctx context.Context, s driver.LatchStore, k dcsync.Key, created time.Time, endBy time.Duration) {
	t.Helper()
	if time.Since(created) <= endBy {
		t.Fatalf("Gone called at +%v, before +%v", time.Since(created), endBy)
	}
	got, err := s.ReadLatches(ctx, []dcsync.Key{k})
	if err != nil {
		t.Fatalf("final ReadLatches: %v", err)
	}
	if got[0].Found {
		t.Errorf("dcsync reads %d after +%v; the latch must have ended by +%v", got[0].Count, time.Since(created).Round(10*time.Millisecond), endBy)
	}
}

// Steps times the steps of a latch lifetime scenario against the premise they need:
// every step lands while the latch lives. A step that returned by the start
// (StartSteps, just before the create call, so the latch lives at least until the start
// + TTL) + budget landed in time; a later one may have met an ended latch (a JVM call
// can take seconds on a loaded machine), and the scenario is run again at a larger
// time scale (Scaled).
type Steps struct {
	t      testing.TB
	before time.Time
	budget time.Duration
	late   string
}

// StartSteps starts timing the steps of a scenario; call it just before the latch's
// create call.
func StartSteps(t testing.TB, budget time.Duration) *Steps {
	return &Steps{t: t, before: time.Now(), budget: budget}
}

// InTime reports whether step returned in time, failing the test when it failed in
// time; a late step's outcome (error or not) is not judged.
func (s *Steps) InTime(step string, err error) bool {
	s.t.Helper()
	if el := time.Since(s.before); el > s.budget {
		s.late = fmt.Sprintf("%s returned at +%v, past +%v", step, el.Round(10*time.Millisecond), s.budget)
		return false
	}
	if err != nil {
		s.t.Fatalf("%s: %v", step, err)
	}
	return true
}

// Scaled runs scenario at time scale 1 (offsets and TTLs as written), then 2, 4, 8
// while the machine was too slow for its premise (scenario returns the steps' verdict:
// nil when every step landed in time and the scenario was judged). Each run uses a
// fresh latch.
func Scaled(t testing.TB, scenario func(f time.Duration) *Steps) {
	t.Helper()
	for f := time.Duration(1); f <= 8; f *= 2 {
		st := scenario(f)
		if st == nil || st.late == "" {
			return
		}
		t.Logf("time scale %d: %s; run again at scale %d", f, st.late, 2*f)
	}
	t.Fatalf("the machine was too slow for the scenario at every time scale up to 8")
}

// CheckLifetime asserts that every dcsync read is the exact count (want) or NotFound
// (never a stale count from an older cell version, never an XDC sum without the
// creator's cell), that dcsync saw the latch end by endBy (since creation) and that it
// stayed gone; it logs when each side saw the latch end and what Java read.
func CheckLifetime(t testing.TB, samples []Sample, want int64, ttl, endBy time.Duration) {
	t.Helper()
	var dcsyncEnd, javaEnd time.Duration
	gone := false
	for _, s := range samples {
		switch {
		case s.Dcsync.Found && gone:
			t.Errorf("at +%v dcsync reads %d after the latch had ended: it came back", s.At, s.Dcsync.Count)
		case s.Dcsync.Found && s.Dcsync.Count != want:
			t.Errorf("at +%v dcsync reads %d, want %d or NotFound", s.At, s.Dcsync.Count, want)
		case s.Dcsync.Found && s.At > endBy:
			t.Errorf("at +%v dcsync still reads the latch; it must have ended by +%v", s.At, endBy)
		case !s.Dcsync.Found && !gone:
			gone, dcsyncEnd = true, s.At
		}
		if !s.JavaFound && javaEnd == 0 {
			javaEnd = s.At
		}
	}
	t.Logf("created with TTL %v: dcsync saw it end at +%v (must by +%v), Java at +%v (0: still there at +%v); Java read%s",
		ttl, dcsyncEnd, endBy.Round(10*time.Millisecond), javaEnd, samples[len(samples)-1].At, trace(samples))
}

// trace renders the Java side's reads where they changed: " +0s=3 +2.5s=missing".
func trace(samples []Sample) string {
	var b []byte
	last := ""
	for _, s := range samples {
		v := "missing"
		if s.JavaFound {
			v = strconv.FormatInt(s.Java, 10)
		}
		if v != last {
			b = append(b, (" +" + s.At.String() + "=" + v)...)
			last = v
		}
	}
	return string(b)
}

// AsError returns err as a Java library failure, failing the test when it is not one.
func AsError(t testing.TB, err error, what string) *Error {
	t.Helper()
	var je *Error
	if !errors.As(err, &je) {
		t.Fatalf("%s: got %v, want a Java library failure", what, err)
	}
	return je
}

// JavaLatch is the Java library's latch of one name in one farm, as a Java service
// with its configured latch TTL uses it (see Lifetime.Java).
type JavaLatch struct {
	Create    func(ctx context.Context, count int64) error
	CountDown func(ctx context.Context) error
	Count     func(ctx context.Context, level string) (int64, error)
}

// Lifetime is what the latch lifetime scenarios need of a store and the Java library
// on the same server: a latch of Client read and updated by both sides.
type Lifetime struct {
	Store  driver.LatchStore
	Client string
	// Java returns the Java side of the latch name in farm for a Java service whose
	// configured latch TTL is ttl.
	Java func(name, farm string, ttl time.Duration) JavaLatch
}

// key is the dcsync side of the latch name in dc1, at level.
func (l Lifetime) key(level dcsync.Level, name string) dcsync.Key {
	return dcsync.Key{Level: level, Client: l.Client, Farm: "dc1", Name: name}
}

// scaled runs scenario (Scaled) with the TTL of scale f (3s·f) and a fresh latch name
// at each scale.
func (l Lifetime) scaled(t testing.TB, scenario func(ttl time.Duration, name string) *Steps) {
	Scaled(t, func(f time.Duration) *Steps { return scenario(3*time.Second*f, "life_"+randHex(3)) })
}

// countDown is the step that counts k down by one through the store: it reports whether
// the step returned in time (InTime), and fails the test when the count it returned is
// not want.
func (l Lifetime) countDown(ctx context.Context, st *Steps, k dcsync.Key, want int64, step string) bool {
	st.t.Helper()
	n, err := l.Store.AddLatch(ctx, k, -1)
	if !st.InTime(step, err) {
		return false
	}
	if n != want {
		st.t.Fatalf("%s = %d; want %d", step, n, want)
	}
	return true
}

// check watches k with the Java side j until past endBy and checks that the latch
// (count 1 by then) ended by endBy and stays gone (CheckEnd).
func (l Lifetime) check(t testing.TB, ctx context.Context, k dcsync.Key, j JavaLatch, created time.Time, ttl, endBy time.Duration) {
	t.Helper()
	CheckEnd(t, ctx, l.Store, k, func() (int64, error) { return j.Count(ctx, k.Level.String()) }, created, 1, ttl, endBy)
}

// DcsyncCreates is a latch lifetime scenario: dcsync creates a latch of 3 at Level in
// dc1 with TTL ttl; at +TTL/6 a Java service in JavaFarm whose latch TTL is
// JavaTTL(ttl) counts it down, then dcsync from DcsyncFarm at +DcsyncAt(ttl) (at once
// when that has passed). The latch must end by EndBy(ttl, when the Java count-down
// returned).
type DcsyncCreates struct {
	Level                dcsync.Level
	JavaFarm, DcsyncFarm string
	JavaTTL, DcsyncAt    func(ttl time.Duration) time.Duration
	EndBy                func(ttl, lastJava time.Duration) time.Duration
}

// DcsyncCreates runs sc, at larger time scales while the machine is too slow (Scaled).
func (l Lifetime) DcsyncCreates(t testing.TB, ctx context.Context, sc DcsyncCreates) {
	l.scaled(t, func(ttl time.Duration, name string) *Steps {
		k := l.key(sc.Level, name)
		j := l.Java(name, sc.JavaFarm, sc.JavaTTL(ttl))
		st := StartSteps(t, ttl*5/6)
		if err := l.Store.CreateLatch(ctx, k, 3, ttl); err != nil {
			t.Fatalf("dcsync create: %v", err)
		}
		created := time.Now()
		time.Sleep(ttl/6 - time.Since(created))
		if !st.InTime("Java count-down from "+sc.JavaFarm+" at +TTL/6", j.CountDown(ctx)) {
			return st
		}
		lastJava := time.Since(created)
		at := sc.DcsyncAt(ttl)
		time.Sleep(at - time.Since(created))
		kd := k
		kd.Farm = sc.DcsyncFarm
		if !l.countDown(ctx, st, kd, 1, fmt.Sprintf("dcsync count-down from %s at +%v (TTL %v)", sc.DcsyncFarm, at, ttl)) {
			return st
		}
		l.check(t, ctx, k, j, created, ttl, sc.EndBy(ttl, lastJava))
		return nil
	})
}

// JavaCreatesDcsyncAndJavaCountDown: a Java service whose latch TTL is ttl creates a
// DC latch of 3; dcsync counts it down at +TTL/6, Java at +TTL/3. The latch must end by
// endBy(ttl, when the Java count-down returned). The scenario runs at larger time
// scales while the machine is too slow (Scaled).
func (l Lifetime) JavaCreatesDcsyncAndJavaCountDown(t testing.TB, ctx context.Context, endBy func(ttl, lastJava time.Duration) time.Duration) {
	l.scaled(t, func(ttl time.Duration, name string) *Steps {
		k := l.key(dcsync.DC, name)
		j := l.Java(name, "dc1", ttl)
		st := StartSteps(t, ttl*5/6)
		if !st.InTime("Java create", j.Create(ctx, 3)) {
			return st
		}
		created := time.Now()
		time.Sleep(ttl/6 - time.Since(created))
		if !l.countDown(ctx, st, k, 2, "dcsync count-down at +TTL/6") {
			return st
		}
		time.Sleep(ttl/3 - time.Since(created))
		if !st.InTime("Java count-down at +TTL/3", j.CountDown(ctx)) {
			return st
		}
		l.check(t, ctx, k, j, created, ttl, endBy(ttl, time.Since(created)))
		return nil
	})
}

// randHex returns 2n random hex digits, for unique names.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
