package drivertest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

func runSpec(t *testing.T, h Harness) {
	t.Run("CreateReadAndAlreadyExists", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := driver.QueueSpec{Name: unique(t), Partitions: 3, Groups: []string{"billing", "audit#1"}, Dedup: time.Hour}
		before := time.Now()
		must(t, s.CreateQueue(ctx, spec), "CreateQueue")
		got, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if got.Name != spec.Name || got.Partitions != 3 || !slices.Equal(got.Groups, spec.Groups) || got.Dedup != time.Hour {
			t.Fatalf("ReadQueueSpec = %+v, want %+v", got, spec)
		}
		if got.Created.IsZero() || got.Created.Before(before.Add(-time.Hour)) || got.Created.After(time.Now().Add(time.Hour)) {
			t.Fatalf("Created = %v, want about %v (the store's clock)", got.Created, before)
		}
		if got.StoragePartitions() != 5 {
			t.Fatalf("StoragePartitions = %d, want 5", got.StoragePartitions())
		}
		other := driver.QueueSpec{Name: spec.Name, Partitions: 7, Groups: []string{"x"}}
		wantCode(t, s.CreateQueue(ctx, other), dcsync.AlreadyExists, "CreateQueue of an existing name")
		again, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if again.Partitions != 3 || !slices.Equal(again.Groups, spec.Groups) {
			t.Fatalf("spec after a refused CreateQueue = %+v, want the first one", again)
		}
		// Dedup 0 reads back as 0, meaning the default window.
		zero := driver.QueueSpec{Name: unique(t), Partitions: 1, Groups: []string{"g"}}
		must(t, s.CreateQueue(ctx, zero), "CreateQueue")
		if z, err := s.ReadQueueSpec(ctx, zero.Name); err != nil || z.DedupWindow() != driver.DefaultQueueDedup {
			t.Fatalf("spec with Dedup 0 = %+v, %v; want the default window", z, err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		_, err := s.ReadQueueSpec(ctx, name)
		wantCode(t, err, dcsync.NotFound, "ReadQueueSpec of a missing queue")
		_, err = s.AddQueueGroup(ctx, name, "g")
		wantCode(t, err, dcsync.NotFound, "AddQueueGroup to a missing queue")
		_, err = s.ReadQueueSpec(ctx, name)
		wantCode(t, err, dcsync.NotFound, "ReadQueueSpec after AddQueueGroup to a missing queue")
		if _, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Payload: []byte("x")}}); err == nil {
			t.Fatal("AppendQueue to a missing queue succeeded")
		}
		_, err = s.ReadQueueSpec(ctx, name)
		wantCode(t, err, dcsync.NotFound, "ReadQueueSpec after AppendQueue to a missing queue")
	})

	t.Run("AddQueueGroup", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 2, "a")
		got, err := s.AddQueueGroup(ctx, spec.Name, "b/c|d")
		must(t, err, "AddQueueGroup")
		if !slices.Equal(got.Groups, []string{"a", "b/c|d"}) || got.Partitions != 2 {
			t.Fatalf("AddQueueGroup returned %+v, want groups [a b/c|d]", got)
		}
		got, err = s.AddQueueGroup(ctx, spec.Name, "a")
		wantCode(t, err, dcsync.AlreadyExists, "AddQueueGroup of an existing group")
		if !slices.Equal(got.Groups, []string{"a", "b/c|d"}) {
			t.Fatalf("AddQueueGroup of an existing group returned spec %+v, want the current one", got)
		}
		read, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if !slices.Equal(read.Groups, []string{"a", "b/c|d"}) || read.StoragePartitions() != 4 || !read.Created.Equal(spec.Created) {
			t.Fatalf("spec after AddQueueGroup = %+v", read)
		}
	})

	t.Run("AddQueueGroupLimit", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		groups := make([]string, driver.MaxQueueGroups-1)
		for i := range groups {
			groups[i] = fmt.Sprintf("g%d", i)
		}
		spec := create(t, ctx, s, 1, groups...)
		_, err := s.AddQueueGroup(ctx, spec.Name, "last")
		must(t, err, "AddQueueGroup of group number MaxQueueGroups")
		_, err = s.AddQueueGroup(ctx, spec.Name, "one-too-many")
		wantCode(t, err, dcsync.InvalidArgument, "AddQueueGroup beyond MaxQueueGroups")
		read, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if len(read.Groups) != driver.MaxQueueGroups || read.Groups[len(read.Groups)-1] != "last" {
			t.Fatalf("spec has %d groups (last %q), want %d ending with \"last\"", len(read.Groups), read.Groups[len(read.Groups)-1], driver.MaxQueueGroups)
		}
	})

	t.Run("ConcurrentAddQueueGroup", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "base")
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.AddQueueGroup(ctx, spec.Name, fmt.Sprintf("c%d", i))
			})
		}
		wg.Wait()
		for i, err := range errs {
			must(t, err, fmt.Sprintf("concurrent AddQueueGroup c%d", i))
		}
		read, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if len(read.Groups) != n+1 || read.Groups[0] != "base" {
			t.Fatalf("after %d concurrent AddQueueGroup: groups %v, want base and all of them", n, read.Groups)
		}
		for i := range n {
			if read.GroupIndex(fmt.Sprintf("c%d", i)) < 0 {
				t.Fatalf("group c%d lost by a concurrent AddQueueGroup: %v", i, read.Groups)
			}
		}
	})
}

func runQueueValidation(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, 2*time.Minute)
	badIDs := []string{"", "\xff\xfe", "a\nb", "tab\there", "nul\x00", strings.Repeat("q", dcsync.MaxIDLen+1)}
	maxP := driver.MaxQueuePartitions + driver.MaxQueueGroups
	badPs := []int{-1, maxP, maxP + 1000}

	t.Run("CreateQueue", func(t *testing.T) {
		name := unique(t)
		for _, id := range badIDs {
			err := s.CreateQueue(ctx, driver.QueueSpec{Name: id, Partitions: 1, Groups: []string{"g"}})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("CreateQueue name %q", id))
			err = s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{id}})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("CreateQueue group %q", id))
		}
		many := make([]string, driver.MaxQueueGroups+1)
		for i := range many {
			many[i] = fmt.Sprintf("g%d", i)
		}
		for i, spec := range []driver.QueueSpec{
			{Name: name, Partitions: 0, Groups: []string{"g"}},
			{Name: name, Partitions: -1, Groups: []string{"g"}},
			{Name: name, Partitions: driver.MaxQueuePartitions + 1, Groups: []string{"g"}},
			{Name: name, Partitions: 1},
			{Name: name, Partitions: 1, Groups: []string{}},
			{Name: name, Partitions: 1, Groups: many},
			{Name: name, Partitions: 1, Groups: []string{"g", "h", "g"}},
			{Name: name, Partitions: 1, Groups: []string{"g"}, Dedup: -time.Second},
		} {
			wantCode(t, s.CreateQueue(ctx, spec), dcsync.InvalidArgument, fmt.Sprintf("CreateQueue spec %d", i))
		}
		_, err := s.ReadQueueSpec(ctx, name)
		wantCode(t, err, dcsync.NotFound, "ReadQueueSpec after refused CreateQueues (nothing may be written)")
		for _, id := range badIDs {
			_, err := s.ReadQueueSpec(ctx, id)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueueSpec(%q)", id))
		}
	})

	t.Run("AddQueueGroup", func(t *testing.T) {
		spec := create(t, ctx, s, 1, "g")
		for _, id := range badIDs {
			_, err := s.AddQueueGroup(ctx, spec.Name, id)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AddQueueGroup group %q", id))
			_, err = s.AddQueueGroup(ctx, id, "g2")
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AddQueueGroup queue %q", id))
		}
		read, err := s.ReadQueueSpec(ctx, spec.Name)
		must(t, err, "ReadQueueSpec")
		if !slices.Equal(read.Groups, []string{"g"}) {
			t.Fatalf("groups after refused AddQueueGroups = %v, want [g]", read.Groups)
		}
	})

	t.Run("AppendQueue", func(t *testing.T) {
		spec := create(t, ctx, s, 2, "g")
		good := driver.QueueEvent{Partition: 0, ID: "good-" + spec.Name, Payload: []byte("ok")}
		long := strings.Repeat("k", driver.MaxQueueKeyLen+1)
		bad := []driver.QueueEvent{
			{Partition: -1},
			{Partition: maxP},
			{Partition: 0, Key: long},
			{Partition: 0, ID: long},
			{Partition: 0, Payload: make([]byte, driver.MaxQueuePayload+1)},
		}
		for i, e := range bad {
			// The bad event comes after a good one: nothing of the batch may be written.
			_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{good, e})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AppendQueue bad event %d", i))
		}
		_, err := s.AppendQueue(ctx, spec.Name, nil)
		wantCode(t, err, dcsync.InvalidArgument, "AppendQueue of no events")
		huge := make([]driver.QueueEvent, driver.MaxQueueBatch+1)
		_, err = s.AppendQueue(ctx, spec.Name, huge)
		wantCode(t, err, dcsync.InvalidArgument, "AppendQueue beyond MaxQueueBatch")
		for _, id := range badIDs {
			_, err := s.AppendQueue(ctx, id, []driver.QueueEvent{good})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AppendQueue to queue %q", id))
		}
		for p := range 2 {
			if b := bounds(t, ctx, s, spec.Name, p); b.Head != 0 {
				t.Fatalf("partition %d head %d after refused appends, want 0", p, b.Head)
			}
		}
		// The good event's id was not remembered by a refused batch.
		res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{good})
		must(t, err, "AppendQueue")
		if res[0].Duplicate || res[0].Seq != 0 {
			t.Fatalf("first accepted append = %+v, want seq 0, not a duplicate (a refused batch must not record ids)", res[0])
		}
		// The limits themselves are accepted.
		edge := driver.QueueEvent{Partition: 1, Key: long[1:], ID: "edge" + long[5:], Payload: make([]byte, driver.MaxQueuePayload)}
		_, err = s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{edge})
		must(t, err, "AppendQueue of an event at every limit")
		es, _ := readAll(t, ctx, s, spec.Name, 1, 0)
		if len(es) != 1 || es[0].Key != edge.Key || es[0].ID != edge.ID || len(es[0].Payload) != driver.MaxQueuePayload {
			t.Fatalf("event at the limits read back as %d entries", len(es))
		}
	})

	t.Run("Reads", func(t *testing.T) {
		spec := create(t, ctx, s, 1, "g")
		_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
		must(t, err, "AppendQueue")
		for _, id := range badIDs {
			_, err := s.ReadQueue(ctx, id, 0, 0, 10)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueue queue %q", id))
			_, err = s.QueueBounds(ctx, id, []int{0})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("QueueBounds queue %q", id))
			_, err = s.ReadQueueOffsets(ctx, id, "g", []int{0})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueueOffsets queue %q", id))
			_, err = s.ReadQueueOffsets(ctx, spec.Name, id, []int{0})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueueOffsets group %q", id))
		}
		for _, p := range badPs {
			_, err := s.ReadQueue(ctx, spec.Name, p, 0, 10)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueue partition %d", p))
			_, err = s.QueueBounds(ctx, spec.Name, []int{0, p})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("QueueBounds partition %d", p))
			_, err = s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0, p})
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueueOffsets partition %d", p))
		}
		for _, m := range []int{0, -1, driver.MaxQueueBatch + 1} {
			_, err := s.ReadQueue(ctx, spec.Name, 0, 0, m)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ReadQueue max %d", m))
		}
	})

	t.Run("AbortAndTrim", func(t *testing.T) {
		spec := create(t, ctx, s, 1, "g")
		_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
		must(t, err, "AppendQueue")
		for _, id := range badIDs {
			_, err := s.AbortQueueSeq(ctx, id, 0, 0)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AbortQueueSeq queue %q", id))
			wantCode(t, s.TrimQueue(ctx, id, 0, 1), dcsync.InvalidArgument, fmt.Sprintf("TrimQueue queue %q", id))
		}
		for _, p := range badPs {
			_, err := s.AbortQueueSeq(ctx, spec.Name, p, 0)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AbortQueueSeq partition %d", p))
			wantCode(t, s.TrimQueue(ctx, spec.Name, p, 0), dcsync.InvalidArgument, fmt.Sprintf("TrimQueue partition %d", p))
		}
		for _, seq := range []uint64{3, 4, 1 << 40} {
			_, err := s.AbortQueueSeq(ctx, spec.Name, 0, seq)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("AbortQueueSeq of seq %d at or beyond head 3", seq))
			wantCode(t, s.TrimQueue(ctx, spec.Name, 0, seq+1), dcsync.InvalidArgument, fmt.Sprintf("TrimQueue below %d, beyond head 3", seq+1))
		}
		es, b := readAll(t, ctx, s, spec.Name, 0, 0)
		if b.Head != 3 || b.Floor != 0 || len(es) != 3 {
			t.Fatalf("after refused aborts and trims: head %d floor %d, %d entries; want 3, 0, 3", b.Head, b.Floor, len(es))
		}
		for _, e := range es {
			if e.Aborted {
				t.Fatalf("seq %d aborted by a refused AbortQueueSeq", e.Seq)
			}
		}
		// A partition nothing was appended to has head 0: no seq can be aborted.
		_, err = s.AbortQueueSeq(ctx, spec.Name, 1, 0)
		wantCode(t, err, dcsync.InvalidArgument, "AbortQueueSeq of seq 0 of an empty partition")
		if b := bounds(t, ctx, s, spec.Name, 1); b.Head != 0 {
			t.Fatalf("empty partition head %d after a refused abort, want 0", b.Head)
		}
	})

	t.Run("Offsets", func(t *testing.T) {
		spec := create(t, ctx, s, 1, "g")
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 5)
		must(t, err, "ClaimQueuePartition")
		off := driver.QueueOffset{Token: 5, Next: 1, Held: true, Version: 1}
		for _, id := range badIDs {
			_, err := s.ClaimQueuePartition(ctx, id, "g", 0, 9)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ClaimQueuePartition queue %q", id))
			_, err = s.ClaimQueuePartition(ctx, spec.Name, id, 0, 9)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ClaimQueuePartition group %q", id))
			wantCode(t, s.CommitQueueOffset(ctx, id, "g", 0, off), dcsync.InvalidArgument, fmt.Sprintf("CommitQueueOffset queue %q", id))
			wantCode(t, s.CommitQueueOffset(ctx, spec.Name, id, 0, off), dcsync.InvalidArgument, fmt.Sprintf("CommitQueueOffset group %q", id))
		}
		for _, p := range badPs {
			_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", p, 9)
			wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("ClaimQueuePartition partition %d", p))
			wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", p, off), dcsync.InvalidArgument, fmt.Sprintf("CommitQueueOffset partition %d", p))
		}
		// Marks that are not an encoding of EncodeQueueMarks, or too long, are refused
		// before any write: also for a commit that would otherwise be LockLost.
		long := strings.Repeat("\x01\x01", driver.MaxQueueMarksLen/2+1)
		for i, bad := range []driver.QueueMarks{"\x00\x01", "\x01", "\x01\x03", "\x81\x00\x01", "\x01\x01\x00", driver.QueueMarks(long)} {
			for _, tok := range []uint64{5, 6} {
				o := off
				o.Token, o.Marks = tok, bad
				wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, o), dcsync.InvalidArgument, fmt.Sprintf("CommitQueueOffset with bad marks %d (token %d)", i, tok))
			}
		}
		o := off
		o.Attempts = -1
		wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, o), dcsync.InvalidArgument, "CommitQueueOffset with negative attempts")
		got, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if got[0] != (driver.QueueOffset{Token: 5}) {
			t.Fatalf("offset after refused claims and commits = %+v, want token 5 and nothing else (a claim writes the token only)", got[0])
		}
	})
}

func runAppend(t *testing.T, h Harness) {
	t.Run("ConsecutiveSeqsPerPartitionInOrder", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 3, "g", "h")
		// Event partitions and the dead-letter partition of group h (3+1).
		ps := []int{0, 1, 0, 2, 1, 0, 4, 0, 4}
		var events []driver.QueueEvent
		for i, p := range ps {
			events = append(events, driver.QueueEvent{Partition: p, Key: fmt.Sprintf("k%d", i%2), ID: fmt.Sprintf("id-%d", i), Payload: []byte(fmt.Sprintf("payload %d", i))})
		}
		events[3].Key, events[3].ID = "", ""
		events[5].Payload = nil
		next := map[int]uint64{}
		check := func(res []driver.QueueAppend, events []driver.QueueEvent) {
			t.Helper()
			if len(res) != len(events) {
				t.Fatalf("AppendQueue returned %d results for %d events", len(res), len(events))
			}
			for i, r := range res {
				p := events[i].Partition
				if r.Partition != p || r.Seq != next[p] || r.Duplicate {
					t.Fatalf("result %d = %+v, want partition %d seq %d", i, r, p, next[p])
				}
				next[p]++
			}
		}
		res, err := s.AppendQueue(ctx, spec.Name, events)
		must(t, err, "AppendQueue")
		check(res, events)
		// A second batch continues each partition.
		more := []driver.QueueEvent{{Partition: 2, Payload: []byte("m0")}, {Partition: 0, Payload: []byte("m1")}, {Partition: 2, Payload: []byte("m2")}}
		res, err = s.AppendQueue(ctx, spec.Name, more)
		must(t, err, "AppendQueue")
		check(res, more)
		all := append(events, more...)
		for _, p := range []int{0, 1, 2, 3, 4} {
			es, b := readAll(t, ctx, s, spec.Name, p, 0)
			var want []driver.QueueEvent
			for _, e := range all {
				if e.Partition == p {
					want = append(want, e)
				}
			}
			if b.Head != uint64(len(want)) || b.Floor != 0 || len(es) != len(want) {
				t.Fatalf("partition %d: head %d floor %d, %d entries; want %d entries", p, b.Head, b.Floor, len(es), len(want))
			}
			for i, e := range es {
				w := want[i]
				if e.Key != w.Key || e.ID != w.ID || !bytes.Equal(e.Payload, w.Payload) || e.Aborted || e.At.IsZero() {
					t.Fatalf("partition %d seq %d = {%q %q %q aborted=%v at=%v}, want {%q %q %q}", p, e.Seq, e.Key, e.ID, e.Payload, e.Aborted, e.At, w.Key, w.ID, w.Payload)
				}
			}
		}
		bs, err := s.QueueBounds(ctx, spec.Name, []int{4, 0, 3, 2, 1})
		must(t, err, "QueueBounds")
		want := []uint64{next[4], next[0], 0, next[2], next[1]}
		for i, b := range bs {
			if b.Head != want[i] || b.Floor != 0 {
				t.Fatalf("QueueBounds[%d] = %+v, want head %d floor 0 (results in the order asked)", i, b, want[i])
			}
		}
	})

	t.Run("PayloadsAreCopied", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		bin := make([]byte, 256)
		for i := range bin {
			bin[i] = byte(i)
		}
		in := slices.Clone(bin)
		_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Key: "ключ/#|_", Payload: in}})
		must(t, err, "AppendQueue")
		for i := range in {
			in[i] = 0xEE
		}
		r, err := s.ReadQueue(ctx, spec.Name, 0, 0, 1)
		must(t, err, "ReadQueue")
		if len(r.Entries) != 1 || !bytes.Equal(r.Entries[0].Payload, bin) || r.Entries[0].Key != "ключ/#|_" {
			t.Fatalf("read back %+v, want the 256 byte values as appended (the caller's slice changed after the append)", r.Entries)
		}
		r.Entries[0].Payload[0] = 0xEE
		r, err = s.ReadQueue(ctx, spec.Name, 0, 0, 1)
		must(t, err, "ReadQueue")
		if !bytes.Equal(r.Entries[0].Payload, bin) {
			t.Fatal("changing a read payload changed the stored event")
		}
	})

	t.Run("EmptyPayload", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{}, {Payload: []byte{}}, {Payload: []byte{0}}})
		must(t, err, "AppendQueue")
		es, _ := readAll(t, ctx, s, spec.Name, 0, 0)
		if len(es) != 3 || len(es[0].Payload) != 0 || len(es[1].Payload) != 0 || !bytes.Equal(es[2].Payload, []byte{0}) {
			t.Fatalf("read back %+v, want two empty payloads and one zero byte", es)
		}
	})
}

func runRead(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	spec := create(t, ctx, s, 2, "g")
	var events []driver.QueueEvent
	for i := range 10 {
		events = append(events, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}})
	}
	_, err := s.AppendQueue(ctx, spec.Name, events)
	must(t, err, "AppendQueue")
	for _, tc := range []struct {
		from       uint64
		max        int
		first, num int
	}{
		{0, 3, 0, 3}, {0, 10, 0, 10}, {0, 100, 0, 10}, {4, 1, 4, 1}, {7, 10, 7, 3}, {9, 5, 9, 1}, {10, 5, 0, 0}, {25, 5, 0, 0},
	} {
		r, err := s.ReadQueue(ctx, spec.Name, 0, tc.from, tc.max)
		must(t, err, "ReadQueue")
		if r.Head != 10 || r.Floor != 0 {
			t.Fatalf("ReadQueue(from %d, max %d) bounds %+v, want head 10 floor 0", tc.from, tc.max, r.QueueBounds)
		}
		if len(r.Entries) != tc.num {
			t.Fatalf("ReadQueue(from %d, max %d) returned %d entries, want %d", tc.from, tc.max, len(r.Entries), tc.num)
		}
		checkConsecutive(t, r, tc.from)
		for i, e := range r.Entries {
			if e.Seq != uint64(tc.first+i) || !bytes.Equal(e.Payload, []byte{byte(tc.first + i)}) {
				t.Fatalf("ReadQueue(from %d, max %d)[%d] = seq %d payload %v, want seq %d", tc.from, tc.max, i, e.Seq, e.Payload, tc.first+i)
			}
		}
	}
	// A partition nothing was appended to.
	r, err := s.ReadQueue(ctx, spec.Name, 1, 0, 10)
	must(t, err, "ReadQueue of an empty partition")
	if len(r.Entries) != 0 || r.Head != 0 || r.Floor != 0 {
		t.Fatalf("empty partition read = %+v", r)
	}
}

func runTrim(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	spec := create(t, ctx, s, 2, "g")
	var events []driver.QueueEvent
	for i := range 10 {
		events = append(events, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}}, driver.QueueEvent{Partition: 1, Payload: []byte{byte(i)}})
	}
	_, err := s.AppendQueue(ctx, spec.Name, events)
	must(t, err, "AppendQueue")
	expect := func(floor, head uint64) {
		t.Helper()
		es, b := readAll(t, ctx, s, spec.Name, 0, 0)
		if b.Floor != floor || b.Head != head {
			t.Fatalf("bounds %+v, want floor %d head %d", b, floor, head)
		}
		if uint64(len(es)) != head-floor || (len(es) > 0 && es[0].Seq != floor) {
			t.Fatalf("read from 0 returned %d entries starting at %v, want %d starting at the floor %d", len(es), es, head-floor, floor)
		}
		for _, e := range es {
			if e.Seq < 10 && !bytes.Equal(e.Payload, []byte{byte(e.Seq)}) {
				t.Fatalf("seq %d payload %v after trim", e.Seq, e.Payload)
			}
		}
		if bb := bounds(t, ctx, s, spec.Name, 0); bb != b {
			t.Fatalf("QueueBounds %+v, ReadQueue bounds %+v", bb, b)
		}
	}
	// The group acked all of partition 0, so its offset holds no trim back (see
	// runTrimHeldBack for trims the offsets stop).
	_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 1, Next: 10, Version: 1}), "CommitQueueOffset next 10")
	must(t, s.TrimQueue(ctx, spec.Name, 0, 0), "TrimQueue below 0")
	expect(0, 10)
	must(t, s.TrimQueue(ctx, spec.Name, 0, 4), "TrimQueue below 4")
	expect(4, 10)
	r, err := s.ReadQueue(ctx, spec.Name, 0, 2, 3)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 3 || r.Entries[0].Seq != 4 {
		t.Fatalf("read from 2 (below the floor 4), max 3: %d entries from %v, want 3 from seq 4", len(r.Entries), r.Entries)
	}
	must(t, s.TrimQueue(ctx, spec.Name, 0, 2), "TrimQueue below 2 (under the floor)")
	expect(4, 10)
	must(t, s.TrimQueue(ctx, spec.Name, 0, 4), "TrimQueue below 4 again")
	expect(4, 10)
	must(t, s.TrimQueue(ctx, spec.Name, 0, 10), "TrimQueue below the head")
	expect(10, 10)
	res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Partition: 0, Payload: []byte{10}}})
	must(t, err, "AppendQueue after a full trim")
	if res[0].Seq != 10 {
		t.Fatalf("append after trimming everything got seq %d, want 10 (seqs never restart)", res[0].Seq)
	}
	expect(10, 11)
	// The other partition is untouched.
	es, b := readAll(t, ctx, s, spec.Name, 1, 0)
	if len(es) != 10 || b.Floor != 0 || b.Head != 10 {
		t.Fatalf("partition 1 after trimming partition 0: %d entries, %+v", len(es), b)
	}
}

func runAbort(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	spec := create(t, ctx, s, 1, "g")
	_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("a")}, {Payload: []byte("b")}})
	must(t, err, "AppendQueue")
	for seq := range uint64(2) {
		aborted, err := s.AbortQueueSeq(ctx, spec.Name, 0, seq)
		must(t, err, "AbortQueueSeq of a written seq")
		if aborted {
			t.Fatalf("AbortQueueSeq of written seq %d reported aborted", seq)
		}
	}
	es, b := readAll(t, ctx, s, spec.Name, 0, 0)
	if len(es) != 2 || b.Head != 2 || es[0].Aborted || es[1].Aborted || string(es[0].Payload) != "a" || string(es[1].Payload) != "b" {
		t.Fatalf("after aborting written seqs: %+v, %+v; want both events intact", es, b)
	}
	_, err = s.AbortQueueSeq(ctx, spec.Name, 0, 2)
	wantCode(t, err, dcsync.InvalidArgument, "AbortQueueSeq at the head")
	if h.Holes {
		// A hole needs a producer that reserved a seq and never wrote it: the store's
		// own tests make one; here only the API is checked.
		t.Log("store has holes: tombstones of unwritten seqs are left to the store's own tests")
	}
	res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("c")}})
	must(t, err, "AppendQueue after aborts")
	if res[0].Seq != 2 {
		t.Fatalf("append after aborts of written seqs got seq %d, want 2", res[0].Seq)
	}
}

func runDedup(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	spec := create(t, ctx, s, 3, "g")
	res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{
		{Partition: 0, ID: "a", Payload: []byte("a1")},
		{Partition: 1, ID: "b", Payload: []byte("b1")},
		{Partition: 1, ID: "a", Payload: []byte("a2")}, // same batch, other partition
		{Partition: 0, Payload: []byte("n1")},
		{Partition: 0, Payload: []byte("n2")}, // no id: never deduplicated
	})
	must(t, err, "AppendQueue")
	want := []driver.QueueAppend{{Partition: 0, Seq: 0}, {Partition: 1, Seq: 0}, {Partition: 0, Seq: 0, Duplicate: true}, {Partition: 0, Seq: 1}, {Partition: 0, Seq: 2}}
	if !slices.Equal(res, want) {
		t.Fatalf("AppendQueue results %+v, want %+v", res, want)
	}
	res, err = s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{
		{Partition: 2, ID: "b", Payload: []byte("b2")},
		{Partition: 2, ID: "c", Payload: []byte("c1")},
		{Partition: 0, ID: "a", Payload: []byte("a3")},
		{Partition: 0, Payload: []byte("n3")},
	})
	must(t, err, "AppendQueue")
	want = []driver.QueueAppend{{Partition: 1, Seq: 0, Duplicate: true}, {Partition: 2, Seq: 0}, {Partition: 0, Seq: 0, Duplicate: true}, {Partition: 0, Seq: 3}}
	if !slices.Equal(res, want) {
		t.Fatalf("second AppendQueue results %+v, want %+v", res, want)
	}
	wantPayloads := map[int][]string{0: {"a1", "n1", "n2", "n3"}, 1: {"b1"}, 2: {"c1"}}
	for p, w := range wantPayloads {
		es, _ := readAll(t, ctx, s, spec.Name, p, 0)
		var got []string
		for _, e := range es {
			got = append(got, string(e.Payload))
		}
		if !slices.Equal(got, w) {
			t.Fatalf("partition %d holds %q, want %q", p, got, w)
		}
	}
	// Ids are per queue: another queue takes the same id.
	other := create(t, ctx, s, 1, "g")
	res, err = s.AppendQueue(ctx, other.Name, []driver.QueueEvent{{ID: "a"}})
	must(t, err, "AppendQueue to another queue")
	if res[0].Duplicate {
		t.Fatalf("id of queue %s reported a duplicate in queue %s", spec.Name, other.Name)
	}
	// Trimming the first event does not forget its id within the window.
	must(t, s.TrimQueue(ctx, spec.Name, 0, 1), "TrimQueue")
	res, err = s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Partition: 2, ID: "a"}})
	must(t, err, "AppendQueue")
	if res[0] != (driver.QueueAppend{Partition: 0, Seq: 0, Duplicate: true}) {
		t.Fatalf("append of a trimmed event's id = %+v, want a duplicate of partition 0 seq 0", res[0])
	}
}

func runOffsets(t *testing.T, h Harness) {
	t.Run("ClaimAndCommit", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 3, "g", "h")
		read := func(group string, ps ...int) []driver.QueueOffset {
			t.Helper()
			offs, err := s.ReadQueueOffsets(ctx, spec.Name, group, ps)
			must(t, err, "ReadQueueOffsets")
			if len(offs) != len(ps) {
				t.Fatalf("ReadQueueOffsets of %d partitions returned %d", len(ps), len(offs))
			}
			return offs
		}
		expect := func(group string, p int, want driver.QueueOffset) {
			t.Helper()
			if got := read(group, p)[0]; got != want {
				t.Fatalf("group %s partition %d offset %+v, want %+v", group, p, got, want)
			}
		}
		for _, o := range read("g", 0, 1, 2, 3, 4) {
			if o != (driver.QueueOffset{}) {
				t.Fatalf("fresh offset %+v, want zero", o)
			}
		}
		// A commit without a claim has no owner to match.
		wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 1, Next: 1, Held: true, Version: 1}), dcsync.LockLost, "CommitQueueOffset before any claim")
		expect("g", 0, driver.QueueOffset{})

		off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 5)
		must(t, err, "ClaimQueuePartition 5")
		if off != (driver.QueueOffset{Token: 5}) {
			t.Fatalf("first claim returned %+v, want token 5, next 0, not held before", off)
		}
		expect("g", 0, driver.QueueOffset{Token: 5}) // the token only: Held stays as stored
		must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 5, Next: 3, Attempts: 1, Held: true, Version: 1}), "CommitQueueOffset 5")
		held := driver.QueueOffset{Token: 5, Next: 3, Attempts: 1, Held: true, Version: 1}
		expect("g", 0, held)

		off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 4)
		wantCode(t, err, dcsync.LockLost, "ClaimQueuePartition with a lower token")
		if off != held {
			t.Fatalf("refused claim returned %+v, want the stored offset %+v", off, held)
		}
		expect("g", 0, held)

		off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 5)
		must(t, err, "ClaimQueuePartition with the same token (a retried claim)")
		if off != held {
			t.Fatalf("retried claim returned %+v, want the stored offset %+v", off, held)
		}
		expect("g", 0, held)
		off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 7)
		must(t, err, "ClaimQueuePartition 7")
		if off != (driver.QueueOffset{Token: 7, Next: 3, Attempts: 1, Held: true, Version: 1}) {
			t.Fatalf("takeover claim returned %+v, want token 7, next 3, attempts 1, version 1, held before (owner never released)", off)
		}
		wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 5, Next: 9, Held: true, Version: 2}), dcsync.LockLost, "CommitQueueOffset by the old owner")
		wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 8, Next: 9, Held: true, Version: 2}), dcsync.LockLost, "CommitQueueOffset with a token above the owner's")
		expect("g", 0, driver.QueueOffset{Token: 7, Next: 3, Attempts: 1, Held: true, Version: 1})

		// The owner releases: the next claim sees Held false.
		must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 7, Next: 4, Version: 2}), "CommitQueueOffset release")
		expect("g", 0, driver.QueueOffset{Token: 7, Next: 4, Version: 2})
		off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 8)
		must(t, err, "ClaimQueuePartition 8")
		if off != (driver.QueueOffset{Token: 8, Next: 4, Version: 2}) {
			t.Fatalf("claim after a release returned %+v, want token 8, next 4, version 2, not held", off)
		}

		// Other partitions and groups are independent.
		off, err = s.ClaimQueuePartition(ctx, spec.Name, "h", 0, 1)
		must(t, err, "ClaimQueuePartition group h")
		if off != (driver.QueueOffset{Token: 1}) {
			t.Fatalf("group h claim returned %+v, want token 1 (groups have their own offsets)", off)
		}
		_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 2, 2)
		must(t, err, "ClaimQueuePartition partition 2")
		must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 2, driver.QueueOffset{Token: 2, Next: 11, Attempts: 2, Held: true, Version: 1}), "CommitQueueOffset partition 2")
		_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 4, 3) // a dead-letter partition
		must(t, err, "ClaimQueuePartition dead-letter partition")
		got := read("g", 4, 2, 1, 0)
		want := []driver.QueueOffset{{Token: 3}, {Token: 2, Next: 11, Attempts: 2, Held: true, Version: 1}, {}, {Token: 8, Next: 4, Version: 2}}
		if !slices.Equal(got, want) {
			t.Fatalf("ReadQueueOffsets(4, 2, 1, 0) = %+v, want %+v (in the order asked)", got, want)
		}
		if got := read("h", 0, 2); !slices.Equal(got, []driver.QueueOffset{{Token: 1}, {}}) {
			t.Fatalf("group h offsets %+v", got)
		}
	})

	t.Run("VersionOrdering", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		expect := func(want driver.QueueOffset, after string) {
			t.Helper()
			offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
			must(t, err, "ReadQueueOffsets")
			if offs[0] != want {
				t.Fatalf("after %s: offset %+v, want %+v", after, offs[0], want)
			}
		}
		commit := func(off driver.QueueOffset) error {
			return s.CommitQueueOffset(ctx, spec.Name, "g", 0, off)
		}
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
		must(t, err, "ClaimQueuePartition")
		// Version 0 is not above the stored 0: refused, nothing written.
		wantCode(t, commit(driver.QueueOffset{Token: 3, Next: 2, Held: true}), dcsync.LockLost, "commit of version 0 over version 0")
		expect(driver.QueueOffset{Token: 3}, "a refused commit of version 0")
		v1 := driver.QueueOffset{Token: 3, Next: 2, Held: true, Version: 1}
		must(t, commit(v1), "commit version 1")
		expect(v1, "commit version 1")
		// The same commit again (a retried call whose first attempt landed): nil.
		must(t, commit(v1), "the same commit of version 1 again")
		expect(v1, "the same commit again")
		// Another value at the stored version, or below it: LockLost, nothing written.
		for _, bad := range []driver.QueueOffset{
			{Token: 3, Next: 5, Held: true, Version: 1},
			{Token: 3, Next: 2, Held: false, Version: 1},
			{Token: 3, Next: 2, Held: true, Attempts: 1, Version: 1},
			{Token: 3, Next: 9, Held: true, Version: 0},
		} {
			wantCode(t, commit(bad), dcsync.LockLost, fmt.Sprintf("commit %+v over version 1", bad))
			expect(v1, fmt.Sprintf("a refused commit %+v", bad))
		}
		// Versions may skip: any version above the stored one applies.
		v9 := driver.QueueOffset{Token: 3, Next: 4, Held: true, Version: 9}
		must(t, commit(v9), "commit version 9 over version 1")
		expect(v9, "commit version 9")
		wantCode(t, commit(driver.QueueOffset{Token: 3, Next: 6, Held: true, Version: 8}), dcsync.LockLost, "commit of version 8 after version 9")
		expect(v9, "a refused commit of version 8")
		// The largest version a store keeps applies too.
		top := driver.QueueOffset{Token: 3, Next: 5, Held: true, Version: 1<<63 - 1}
		must(t, commit(top), "commit of version 2^63-1")
		expect(top, "commit of version 2^63-1")
		must(t, commit(top), "the same commit of version 2^63-1 again")
	})

	t.Run("LateFirstAttempt", func(t *testing.T) {
		// A commit whose first attempt lands after the owner's next commit (defect 1 of
		// issue 14): the late attempt, sent again here as a call, changes nothing.
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		commit := func(off driver.QueueOffset) error {
			return s.CommitQueueOffset(ctx, spec.Name, "g", 0, off)
		}
		stored := func() driver.QueueOffset {
			t.Helper()
			offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
			must(t, err, "ReadQueueOffsets")
			return offs[0]
		}
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 4)
		must(t, err, "ClaimQueuePartition")
		v1 := driver.QueueOffset{Token: 4, Next: 5, Held: true, Version: 1}
		v2 := driver.QueueOffset{Token: 4, Next: 9, Held: true, Version: 2}
		must(t, commit(v1), "commit v1")
		must(t, commit(v2), "commit v2")
		wantCode(t, commit(v1), dcsync.LockLost, "v1 again, after v2")
		if got := stored(); got != v2 {
			t.Fatalf("after v1, v2, v1: offset %+v, want v2 %+v (Next must never go back)", got, v2)
		}
		// The owner's release is late too, after a new owner claimed: refused.
		_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 6)
		must(t, err, "ClaimQueuePartition 6")
		wantCode(t, commit(driver.QueueOffset{Token: 4, Next: 12, Version: 3}), dcsync.LockLost, "the old owner's late release")
		wantCode(t, commit(v2), dcsync.LockLost, "the old owner's v2 again, after a claim")
		if got := stored(); got != (driver.QueueOffset{Token: 6, Next: 9, Held: true, Version: 2}) {
			t.Fatalf("after a claim and the old owner's late commits: offset %+v", got)
		}
		// A claim that lands late, after a higher one: refused, nothing written.
		off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 5)
		wantCode(t, err, dcsync.LockLost, "a late claim of token 5 after token 6")
		if off.Token != 6 {
			t.Fatalf("refused claim returned %+v, want the stored token 6", off)
		}
		if got := stored(); got != (driver.QueueOffset{Token: 6, Next: 9, Held: true, Version: 2}) {
			t.Fatalf("after a late claim: offset %+v", got)
		}
	})

	t.Run("ConcurrentVersions", func(t *testing.T) {
		// One owner's commits of versions 1..n race (as attempts of successive commits
		// landing in any order would): whatever the order, the highest is stored.
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 2)
		must(t, err, "ClaimQueuePartition")
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		for v := uint64(n); v >= 1; v-- {
			wg.Go(func() {
				errs[v] = s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 2, Next: 10 * v, Held: true, Version: v})
			})
		}
		wg.Wait()
		for v, err := range errs[1:] {
			if err != nil && dcsync.CodeOf(err) != dcsync.LockLost {
				t.Fatalf("commit of version %d: %v, want success or LockLost", v+1, err)
			}
		}
		must(t, errs[n], "the commit of the highest version")
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if offs[0] != (driver.QueueOffset{Token: 2, Next: 10 * n, Held: true, Version: n}) {
			t.Fatalf("after racing commits of versions 1..%d: %+v, want version %d's", n, offs[0], n)
		}
	})

	t.Run("Marks", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 2, "g")
		stored := func(p int) driver.QueueOffset {
			t.Helper()
			offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{p})
			must(t, err, "ReadQueueOffsets")
			return offs[0]
		}
		small, err := driver.EncodeQueueMarks(7, []driver.QueueMark{{Seq: 8, Acked: true}, {Seq: 10, Attempts: 3}, {Seq: 300, Acked: true}})
		must(t, err, "EncodeQueueMarks")
		// The longest marks: MaxQueueMarks entries, each with a large seq gap and the
		// most attempts (13 bytes each).
		many := make([]driver.QueueMark, driver.MaxQueueMarks)
		for i := range many {
			many[i] = driver.QueueMark{Seq: uint64(i+1) * (1<<54 - 1), Attempts: 1<<31 - 1}
		}
		big, err := driver.EncodeQueueMarks(0, many)
		must(t, err, "EncodeQueueMarks")
		if len(big) < driver.MaxQueueMarksLen*3/4 {
			t.Fatalf("test marks of %d bytes, want close to %d", len(big), driver.MaxQueueMarksLen)
		}
		// Bytes of every value, 0x00 and 0xFF included, through a store's encoding.
		var every []driver.QueueMark
		for i := uint64(1); i <= 200; i++ {
			every = append(every, driver.QueueMark{Seq: 7 + i*i*i, Attempts: int(i * 0x01010101 % (1<<31 - 1))})
		}
		wide, err := driver.EncodeQueueMarks(7, every)
		must(t, err, "EncodeQueueMarks")
		_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1)
		must(t, err, "ClaimQueuePartition")
		v := uint64(0)
		for _, c := range []struct {
			next  uint64
			marks driver.QueueMarks
		}{{7, small}, {0, big}, {7, wide}, {7, ""}, {0, big}} {
			v++
			off := driver.QueueOffset{Token: 1, Next: c.next, Attempts: 2, Held: true, Version: v, Marks: c.marks}
			must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, off), fmt.Sprintf("commit of %d bytes of marks", len(c.marks)))
			got := stored(0)
			if got != off {
				t.Fatalf("marks of %d bytes read back as %d bytes (%+v), want them verbatim", len(c.marks), len(got.Marks), got.Marks)
			}
			if _, err := got.Marks.Decode(got.Next); err != nil {
				t.Fatalf("stored marks do not decode: %v", err)
			}
			must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, off), "the same commit with marks again")
		}
		// A claim keeps the marks (and the rest), verbatim.
		off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 2)
		must(t, err, "ClaimQueuePartition 2")
		want := driver.QueueOffset{Token: 2, Next: 0, Attempts: 2, Held: true, Version: v, Marks: big}
		if off != want || stored(0) != want {
			t.Fatalf("claim over marks returned %d bytes of marks, stored %d, want %d (the claim writes the token only)", len(off.Marks), len(stored(0).Marks), len(big))
		}
		// The other partition has none.
		if got := stored(1); got != (driver.QueueOffset{}) {
			t.Fatalf("partition 1: %+v, want none", got)
		}
	})

	t.Run("ClaimWritesTheTokenOnly", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		marks, err := driver.EncodeQueueMarks(4, []driver.QueueMark{{Seq: 5, Acked: true}, {Seq: 6, Attempts: 2}})
		must(t, err, "EncodeQueueMarks")
		stored := func() driver.QueueOffset {
			t.Helper()
			offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
			must(t, err, "ReadQueueOffsets")
			return offs[0]
		}
		tok := uint64(10)
		for _, held := range []bool{true, false} {
			_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, tok)
			must(t, err, "ClaimQueuePartition")
			base := driver.QueueOffset{Token: tok, Next: 4, Attempts: 3, Held: held, Version: tok * 100, Marks: marks}
			must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, base), "CommitQueueOffset")
			// A higher token: the token changes, nothing else.
			tok++
			off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, tok)
			must(t, err, "ClaimQueuePartition of a higher token")
			want := base
			want.Token = tok
			if off != want {
				t.Fatalf("claim returned %+v, want %+v", off, want)
			}
			if got := stored(); got != want {
				t.Fatalf("after a claim (held %v): stored %+v, want %+v (Next, Attempts, Held, Version and Marks as stored)", held, got, want)
			}
			// The same token again, and a lower one: nothing written.
			off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, tok)
			must(t, err, "ClaimQueuePartition of the same token")
			if off != want || stored() != want {
				t.Fatalf("a claim of the stored token returned %+v, stored %+v, want %+v", off, stored(), want)
			}
			off, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, tok-1)
			wantCode(t, err, dcsync.LockLost, "ClaimQueuePartition of a lower token")
			if off != want || stored() != want {
				t.Fatalf("a refused claim returned %+v, stored %+v, want %+v", off, stored(), want)
			}
			// The new owner writes above the version it read; at or below it: refused.
			stale := want
			stale.Next = 99
			wantCode(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, stale), dcsync.LockLost, "the new owner's commit at the stored version")
			next := want
			next.Version++
			next.Next = 5
			next.Marks = ""
			must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, next), "the new owner's commit above the stored version")
			if got := stored(); got != next {
				t.Fatalf("after the new owner's commit: %+v, want %+v", got, next)
			}
			tok += 10
		}
	})

	t.Run("ConcurrentClaims", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 1, "g")
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		for tok := uint64(1); tok <= n; tok++ {
			wg.Go(func() {
				_, errs[tok] = s.ClaimQueuePartition(ctx, spec.Name, "g", 0, tok)
			})
		}
		wg.Wait()
		for tok, err := range errs[1:] {
			if err != nil && dcsync.CodeOf(err) != dcsync.LockLost {
				t.Fatalf("claim %d: %v, want success or LockLost", tok+1, err)
			}
		}
		if errs[n] != nil {
			t.Fatalf("claim with the highest token failed: %v", errs[n])
		}
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if offs[0] != (driver.QueueOffset{Token: n}) {
			t.Fatalf("after concurrent claims the offset is %+v, want token %d (the highest) and nothing else", offs[0], n)
		}
		var commits sync.WaitGroup
		ok := make([]bool, n+1)
		for tok := uint64(1); tok <= n; tok++ {
			commits.Go(func() {
				ok[tok] = s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: tok, Next: tok, Held: true, Version: 1}) == nil
			})
		}
		commits.Wait()
		for tok := 1; tok <= n; tok++ {
			if ok[tok] != (tok == n) {
				t.Fatalf("commit with token %d succeeded=%v; only the owner's (token %d) may", tok, ok[tok], n)
			}
		}
		offs, err = s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if offs[0] != (driver.QueueOffset{Token: n, Next: n, Held: true, Version: 1}) {
			t.Fatalf("offset %+v, want the owner's commit", offs[0])
		}
	})
}

// runNames checks that queue and group names with separator-like characters never share
// storage.
func runNames(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	base := unique(t)
	names := []string{base, base + "#1", base + "_1", base + "/1", base + "|1", base + "1", base + "#"}
	for i, n := range names {
		must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: n, Partitions: 2, Groups: []string{"g", "g#1", "1#g"}}), "CreateQueue "+n)
		// Queue i holds i+1 events in partition 1.
		for range i + 1 {
			_, err := s.AppendQueue(ctx, n, []driver.QueueEvent{{Partition: 1, Payload: []byte(n)}})
			must(t, err, "AppendQueue "+n)
		}
		res, err := s.AppendQueue(ctx, n, []driver.QueueEvent{{Partition: 0, ID: "shared", Payload: []byte(n)}})
		must(t, err, "AppendQueue "+n)
		if res[0].Duplicate {
			t.Fatalf("queue %q: id \"shared\" seen as a duplicate of another queue's", n)
		}
		for k, g := range []string{"g", "g#1", "1#g"} {
			tok := uint64(100*i + k + 1)
			_, err := s.ClaimQueuePartition(ctx, n, g, 1, tok)
			must(t, err, "ClaimQueuePartition")
			must(t, s.CommitQueueOffset(ctx, n, g, 1, driver.QueueOffset{Token: tok, Next: tok, Held: true, Version: 1}), "CommitQueueOffset")
		}
	}
	for i, n := range names {
		es, b := readAll(t, ctx, s, n, 1, 0)
		if b.Head != uint64(i+1) || len(es) != i+1 {
			t.Fatalf("queue %q partition 1: head %d, %d entries; want %d (names must not share storage)", n, b.Head, len(es), i+1)
		}
		for _, e := range es {
			if string(e.Payload) != n {
				t.Fatalf("queue %q holds an event of queue %q", n, e.Payload)
			}
		}
		for k, g := range []string{"g", "g#1", "1#g"} {
			tok := uint64(100*i + k + 1)
			offs, err := s.ReadQueueOffsets(ctx, n, g, []int{1})
			must(t, err, "ReadQueueOffsets")
			if offs[0] != (driver.QueueOffset{Token: tok, Next: tok, Held: true, Version: 1}) {
				t.Fatalf("queue %q group %q offset %+v, want token and next %d", n, g, offs[0], tok)
			}
		}
	}
	// Queue "a#b" with group "c" and queue "a" with group "b#c" have different offsets.
	for i, sep := range []string{"#", "_", "|", "/", ":"} {
		q1, g1 := base+sep+"a"+sep+"b", "c"
		q2, g2 := base+sep+"a", "b"+sep+"c"
		must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: q1, Partitions: 1, Groups: []string{g1}}), "CreateQueue "+q1)
		must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: q2, Partitions: 1, Groups: []string{g2}}), "CreateQueue "+q2)
		_, err := s.ClaimQueuePartition(ctx, q1, g1, 0, uint64(10+i))
		must(t, err, "ClaimQueuePartition")
		off, err := s.ClaimQueuePartition(ctx, q2, g2, 0, 1)
		must(t, err, fmt.Sprintf("ClaimQueuePartition of queue %q group %q after one of queue %q group %q", q2, g2, q1, g1))
		if off != (driver.QueueOffset{Token: 1}) {
			t.Fatalf("queue %q group %q: claim returned %+v, want a fresh offset (it shares storage with queue %q group %q)", q2, g2, off, q1, g1)
		}
	}
}
