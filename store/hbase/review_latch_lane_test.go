package hbase

// Adversarial review (issue 15): HBase latch op lanes and the Java XDC sum.

import (
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/javaclients"
)

// FAILS ON MAIN (defect, Java interop): a Java latch that dcsync counted down reads, to
// a Java XDC getCount, as existing with count 0 once it expired, where a Java latch
// dcsync never touched reads as missing (the library's NullPointerException). The op
// lane dcsync writes into the latch's row (latch_op.go) lives opLaneTTL (10 min) after
// its update when the cell has no lifetime marker (a Java-created latch), so it
// outlives the latch's count cells; the Java XDC read sums Bytes.toLong over every cell
// of family C and finds the lane alone: 0. A Java service waiting for the XDC count to
// reach 0 is released by a latch that merely expired. dcsync's own reads skip lanes
// (not found), so the two libraries disagree on the same row.
func TestReviewExpiredJavaLatchIsMissingToJavaXDC(t *testing.T) {
	e := jcStart(t)
	ctx := jcCtx(t, 4*time.Minute)
	const client = "MY_SERVICE"
	const ttl = 15 * time.Second
	touched, control := "rvl_"+randHex(3), "rvc_"+randHex(3)
	jt := javaclients.HBaseLatch{Suffix: e.latchSuffix, Client: client, Latch: touched, Farm: "dc1"}
	jc := jt
	jc.Latch = control
	must(t, e.tool.HBaseLatchCreate(ctx, jt, 3, ttl), "Java create")
	must(t, e.tool.HBaseLatchCreate(ctx, jc, 3, ttl), "Java create (control)")
	k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: touched}
	if n, err := e.s.AddLatch(ctx, k, -1); err != nil || n != 2 {
		t.Fatalf("dcsync count-down of the Java latch = %d, %v; want 2", n, err)
	}
	// Wait (bounded by ctx) until both latches have expired for dcsync and the
	// untouched one is missing to Java: no assumption on when HBase drops the cells.
	for {
		got, err := e.s.ReadLatches(ctx, []dcsync.Key{k})
		must(t, err, "ReadLatches")
		_, cerr := e.tool.HBaseLatchCount(ctx, jc, "XDC")
		var je *javaclients.Error
		if !got[0].Found && errors.As(cerr, &je) && je.Missing() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the latches did not expire: dcsync reads %+v, Java XDC of the control %v", got[0], cerr)
		}
		time.Sleep(time.Second)
	}
	n, err := e.tool.HBaseLatchCount(ctx, jt, "XDC")
	var je *javaclients.Error
	if !errors.As(err, &je) || !je.Missing() {
		t.Fatalf("Java XDC getCount of an expired Java latch dcsync counted down = %d, %v; want missing (NullPointerException), as for the expired latch dcsync did not touch", n, err)
	}
}
