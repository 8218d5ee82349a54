package driver_test

import (
	"slices"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

func TestQueueMarksRoundTrip(t *testing.T) {
	in := []driver.QueueMark{{Seq: 11, Acked: true}, {Seq: 12, Attempts: 3}, {Seq: 13}, {Seq: 400, Acked: true}}
	enc, err := driver.EncodeQueueMarks(10, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := enc.Decode(10)
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.QueueMark{{Seq: 11, Acked: true}, {Seq: 12, Attempts: 3}, {Seq: 400, Acked: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	for name, bad := range map[string][]driver.QueueMark{
		"at next":        {{Seq: 10, Acked: true}},
		"unsorted":       {{Seq: 12, Acked: true}, {Seq: 11, Acked: true}},
		"negative":       {{Seq: 12, Attempts: -1}},
		"duplicate seqs": {{Seq: 12, Acked: true}, {Seq: 12, Acked: true}},
	} {
		if _, err := driver.EncodeQueueMarks(10, bad); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	many := make([]driver.QueueMark, driver.MaxQueueMarks+1)
	for i := range many {
		many[i] = driver.QueueMark{Seq: uint64(i + 1), Acked: true}
	}
	if _, err := driver.EncodeQueueMarks(0, many); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("%d marks: %v, want InvalidArgument", len(many), err)
	}
	enc, err = driver.EncodeQueueMarks(0, many[:driver.MaxQueueMarks])
	if err != nil || len(enc) > driver.MaxQueueMarksLen {
		t.Fatalf("%d marks: %d bytes, %v", driver.MaxQueueMarks, len(enc), err)
	}
}

func FuzzQueueMarks(f *testing.F) {
	enc, _ := driver.EncodeQueueMarks(5, []driver.QueueMark{{Seq: 6, Acked: true}, {Seq: 9, Attempts: 2}})
	f.Add(uint64(5), []byte(enc))
	f.Add(uint64(0), []byte{1, 1, 0x80})
	f.Fuzz(func(t *testing.T, next uint64, b []byte) {
		marks, err := driver.QueueMarks(b).Decode(next)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes and decodes to the same marks.
		again, err := driver.EncodeQueueMarks(next, marks)
		if err != nil {
			t.Fatalf("decoded marks %+v do not encode: %v", marks, err)
		}
		if string(again) != string(b) {
			t.Fatalf("re-encoding %x gave %x", b, string(again))
		}
	})
}
