package javaclients

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// Sample is what each side read at one moment of a latch's life.
type Sample struct {
	At        time.Duration // since the latch's creation
	Dcsync    driver.LatchCount
	Java      int64
	JavaFound bool
}

// Watch reads a latch from both sides every 200ms until until (since created) and
// returns the samples. readDcsync and readJava are one read each; readJava returns a
// *Error whose Missing reports a latch the Java library cannot find.
func Watch(t testing.TB, created time.Time, until time.Duration,
	readDcsync func() (driver.LatchCount, error), readJava func() (int64, error)) []Sample {
	t.Helper()
	var out []Sample
	for time.Since(created) < until {
		s := Sample{At: time.Since(created).Round(10 * time.Millisecond)}
		var err error
		if s.Dcsync, err = readDcsync(); err != nil {
			t.Fatalf("dcsync read: %v", err)
		}
		n, err := readJava()
		if err != nil {
			if je := AsError(t, err, "Java getCount"); !je.Missing() {
				t.Fatalf("Java getCount: %v", je)
			}
		} else {
			s.Java, s.JavaFound = n, true
		}
		out = append(out, s)
		time.Sleep(200 * time.Millisecond)
	}
	return out
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
