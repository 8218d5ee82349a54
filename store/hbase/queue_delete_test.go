package hbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// queueRows counts the rows of queue name in the queue table, by kind, with a scan of
// the whole table that parses every row key (salt | len(name) | name | ...), so that
// it finds rows wherever they are, not where DeleteQueue looks.
func queueRows(t *testing.T, s *Store, name string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := map[string]int{}
	err := s.client.ScanFunc(ctx, s.QueueTable(), hbaserpc.Scan{Caching: 1000, Columns: []hbaserpc.Column{{Family: famQueue}}}, func(r hbaserpc.Row) error {
		k := r.Key
		if len(k) < 2+len(name)+3 || int(k[1]) != len(name) || !bytes.Equal(k[2:2+len(name)], []byte(name)) {
			return nil
		}
		rest := k[2+len(name):]
		switch p := binary.BigEndian.Uint16(rest); {
		case p == 0xFFFF && rest[2] == 's':
			n["spec"]++
		case p == 0xFFFE && rest[2] == 'd':
			n["dedup"]++
		case rest[2] == kindHead:
			n["head"]++
		case rest[2] == kindEntry:
			n["entry"]++
		case rest[2] == kindOffset:
			n["offset"]++
		default:
			n[fmt.Sprintf("row %q", k)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeleteQueueLeavesNoRow counts the table's rows of a queue holding every kind of
// record before and after DeleteQueue.
func TestDeleteQueueLeavesNoRow(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	name, otherName := "del-"+randHex(6), "del-"+randHex(6)
	drivertest.PopulateQueue(t, ctx, s, name)
	drivertest.PopulateQueue(t, ctx, s, otherName)
	defer s.DeleteQueue(context.Background(), otherName)
	before, other := queueRows(t, s, name), queueRows(t, s, otherName)
	for _, k := range []string{"spec", "dedup", "head", "entry", "offset"} {
		if before[k] == 0 {
			t.Fatalf("PopulateQueue wrote no %s row: %v", k, before)
		}
	}
	must(t, s.DeleteQueue(ctx, name), "DeleteQueue")
	if after := queueRows(t, s, name); len(after) != 0 {
		t.Fatalf("rows left after DeleteQueue: %v (before: %v)", after, before)
	}
	if got := queueRows(t, s, otherName); fmt.Sprint(got) != fmt.Sprint(other) {
		t.Fatalf("another queue's rows changed: %v, want %v", got, other)
	}
}
