package javaclients

import (
	"fmt"
	"sort"
	"time"
)

// Kind tells who held a lock during an Interval.
type Kind string

// Kinds of holders.
const (
	KindDcsync Kind = "dcsync"
	KindJava   Kind = "java"
)

// Interval is one hold of a lock: from when the holder's acquire returned to when it
// called release, in Unix nanoseconds of one host's wall clock.
type Interval struct {
	Kind   Kind   `json:"kind"`
	Worker string `json:"worker"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	// PutTS is, for a Java hold of an HBase lock, the client-clock timestamp (Unix ms) of
	// the Put that acquired it; 0 otherwise.
	PutTS int64 `json:"putTs"`
}

// PairKind names the kinds of two overlapping holders, in a fixed order:
// "dcsync/dcsync", "dcsync/java" or "java/java".
func PairKind(a, b Kind) string {
	if a > b {
		a, b = b, a
	}
	return string(a) + "/" + string(b)
}

// OverlapReport counts the holds that overlapped: two holders at once.
type OverlapReport struct {
	// Acquisitions is the number of holds, by kind.
	Acquisitions map[Kind]int
	// Pairs is the number of overlapping pairs of holds, by PairKind.
	Pairs map[string]int
	// Holders is the number of holds that overlap at least one other hold, by the PairKind
	// of the overlap (a hold overlapping a Java and a dcsync hold counts under both).
	Holders map[string]int
	// Overlapping is the number of holds that overlap any other hold.
	Overlapping int
	// Examples describes the first few overlapping pairs.
	Examples []string
}

// Total is the number of holds.
func (r OverlapReport) Total() int {
	n := 0
	for _, v := range r.Acquisitions {
		n += v
	}
	return n
}

func (r OverlapReport) String() string {
	return fmt.Sprintf("%d acquisitions %v; %d holds overlapped another; overlapping pairs %v; holders in overlaps %v",
		r.Total(), r.Acquisitions, r.Overlapping, r.Pairs, r.Holders)
}

// Overlaps finds every pair of holds whose intervals intersect (touching ends do not).
func Overlaps(ivs []Interval) OverlapReport {
	s := append([]Interval(nil), ivs...)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	r := OverlapReport{Acquisitions: map[Kind]int{}, Pairs: map[string]int{}, Holders: map[string]int{}}
	in := make([]map[string]bool, len(s))
	for i := range s {
		r.Acquisitions[s[i].Kind]++
		for j := i + 1; j < len(s) && s[j].Start < s[i].End; j++ {
			pk := PairKind(s[i].Kind, s[j].Kind)
			r.Pairs[pk]++
			for _, k := range []int{i, j} {
				if in[k] == nil {
					in[k] = map[string]bool{}
				}
				in[k][pk] = true
			}
			if len(r.Examples) < 5 {
				r.Examples = append(r.Examples, fmt.Sprintf("%s %s held %v from %s; %s %s took it %v after that start",
					s[i].Kind, s[i].Worker, time.Duration(s[i].End-s[i].Start), time.Unix(0, s[i].Start).Format("15:04:05.000000"),
					s[j].Kind, s[j].Worker, time.Duration(s[j].Start-s[i].Start)))
			}
		}
	}
	for _, m := range in {
		if m == nil {
			continue
		}
		r.Overlapping++
		for pk := range m {
			r.Holders[pk]++
		}
	}
	return r
}
