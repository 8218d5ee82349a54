package hbase

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// TestOpen opens the store the way an application outside the module does (Options, no
// internal client) and takes a lock and counts a latch on the real cluster; Close
// closes the connection Open made.
func TestOpen(t *testing.T) {
	shared(t) // this run's tables
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{
		Quorum:           strings.Split(zkQuorum(t), ","),
		LockTable:        fixture.lockTable,
		LatchTableSuffix: fixture.latchSuffix,
		RPCTimeout:       20 * time.Second,
		Logger:           testLogger(),
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if s.LockTable() != fixture.lockTable || s.LatchTable() != "D_LTCH_"+fixture.latchSuffix {
		t.Fatalf("tables %s, %s; want %s, D_LTCH_%s", s.LockTable(), s.LatchTable(), fixture.lockTable, fixture.latchSuffix)
	}
	k := dcsync.Key{Level: dcsync.DC, Farm: "dc1", Client: "open-" + randHex(4), Name: "job"}
	st, err := s.AcquireLock(ctx, k, "owner-1", 30*time.Second)
	if err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	if st.Token == 0 {
		t.Fatalf("token 0 after acquire: %+v", st)
	}
	if err := s.ReleaseLock(ctx, k, "owner-1"); err != nil {
		t.Fatalf("ReleaseLock: %v", err)
	}
	if err := s.CreateLatch(ctx, k, 2, time.Minute); err != nil {
		t.Fatalf("CreateLatch: %v", err)
	}
	n, err := s.AddLatch(ctx, k, -1)
	if err != nil || n != 1 {
		t.Fatalf("AddLatch = %d, %v; want 1, nil", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.ReadLatches(ctx, []dcsync.Key{k}); !errors.Is(err, dcsync.ErrConnection) {
		t.Fatalf("ReadLatches after Close = %v; want a Connection error", err)
	}
}

// TestOpenRefusesBadQuorum: a missing quorum, or a comma-joined entry, is InvalidArgument
// before any I/O.
func TestOpenRefusesBadQuorum(t *testing.T) {
	ctx := context.Background()
	for _, q := range [][]string{nil, {" ", ""}, {"zk1:2181,zk2:2181"}} {
		s, err := Open(ctx, Options{Quorum: q})
		if !errors.Is(err, dcsync.ErrInvalidArgument) || s != nil {
			t.Errorf("Open(Quorum %q) = %v, %v; want InvalidArgument", q, s, err)
		}
	}
}

// Names HBase would refuse, and ports out of range, are InvalidArgument before any I/O,
// naming the setting (the URL parameter or the Options field).
func TestOpenRefusesBadNames(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		url, want string
	}{
		{"hbase://127.0.0.1:70000", `ZooKeeper server "127.0.0.1:70000"`},
		{"hbase://127.0.0.1:0", `ZooKeeper server "127.0.0.1:0"`},
		{"hbase://127.0.0.1:1?lock_table=bad%20name", `lock_table "bad name"`},
		{"hbase://127.0.0.1:1?queue_table=ns:-q", `queue_table "ns:-q"`},
		{"hbase://127.0.0.1:1?queue_table=n-s:q", `queue_table "n-s:q"`},
		{"hbase://127.0.0.1:1?lock_table=.x", `lock_table ".x"`},
		{"hbase://127.0.0.1:1?latch_table_suffix=a/b", `latch_table_suffix "a/b"`},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenURL(ctx, u)
		if !errors.Is(err, dcsync.ErrInvalidArgument) || s != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenURL(%s) = %v, %v; want InvalidArgument naming %s", tc.url, s, err, tc.want)
		}
	}
	s, err := Open(ctx, Options{Quorum: []string{"127.0.0.1:1"}, LockTable: "a b"})
	if !errors.Is(err, dcsync.ErrInvalidArgument) || s != nil || !strings.Contains(err.Error(), "Options.LockTable") {
		t.Errorf("Open(LockTable %q) = %v, %v; want InvalidArgument naming Options.LockTable", "a b", s, err)
	}
	for _, name := range []string{"dlm_locks", "ns:t-1.x", "default:T_2"} {
		if err := checkTableName(name); err != nil {
			t.Errorf("checkTableName(%q) = %v; HBase accepts it", name, err)
		}
	}
}

// An unreachable cluster fails the open within OpenTimeout (open_timeout), as a
// Connection error that says what was tried: each ZooKeeper server and what it
// answered, and, when ZooKeeper answers, that no HBase was found under the root znode.
func TestOpenUnreachableSaysWhatWasTried(t *testing.T) {
	ctx := context.Background()
	u, _ := url.Parse("hbase://127.0.0.1:1?open_timeout=1s")
	_, err := OpenURL(ctx, u)
	if dcsync.CodeOf(err) != dcsync.Connection || !strings.Contains(err.Error(), "within 1s") || !strings.Contains(err.Error(), "ZooKeeper 127.0.0.1:1: ") {
		t.Errorf("OpenURL of a closed port = %v; want Connection naming the server and the 1s bound", err)
	}
	_, err = Open(ctx, Options{Quorum: []string{"127.0.0.1:1"}, OpenTimeout: time.Second})
	if dcsync.CodeOf(err) != dcsync.Connection || !strings.Contains(err.Error(), "within 1s") {
		t.Errorf("Open of a closed port = %v; want Connection within 1s", err)
	}
	zk := zkQuorum(t)
	u, _ = url.Parse("hbase://" + zk + "?zk_root=/no_hbase_here&open_timeout=1s")
	_, err = OpenURL(ctx, u)
	if dcsync.CodeOf(err) != dcsync.Connection || !strings.Contains(err.Error(), "accepts connections") || !strings.Contains(err.Error(), "/no_hbase_here") {
		t.Errorf("OpenURL with a wrong zk_root = %v; want Connection saying ZooKeeper answers and no HBase is under the znode", err)
	}
}
