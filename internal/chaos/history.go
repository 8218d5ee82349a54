// Package chaos records what many concurrent clients of dcsync did — goroutines and OS
// processes, while faults are injected — and checks the history for linearizability with
// porcupine (github.com/anishathalye/porcupine):
//
//   - Locks: every claim a holder makes ("I hold token t now") must fit one sequential
//     lock: never two holders at once (judged by the claims' own timestamps, taken on one
//     host), and tokens strictly increasing in acquisition order.
//   - Latches: a counter in which every acknowledged update is applied exactly once and
//     every update whose outcome is unknown (a dropped reply, a killed process) at most
//     once, and every read returns the count at some instant within its call.
//   - Election, semaphore, read-write lock (Scenario.Primitives; CheckPrimitives):
//     from their holders' claims, never two leaders, never more than N permits, no
//     writer beside any other holder, and tokens strictly increasing; and every Leader
//     read returns a {token, value} the election's register held within the read's call
//     (a porcupine model of the register).
//
// A worker writes one Record at an operation's call and one at its return, so an
// operation cut off by SIGKILL still appears (as a call without a return, whose effect is
// unknown). A lock holder writes a claim each time it checks, against its own monotonic
// deadline, that its lease still holds; its hold ends at its last claim.
//
// Why it exists: the conformance suite checks each rule on interleavings it chooses; the
// chaos runs look for any history, under faults no test chose, that no correct lock, latch
// or queue could have produced (results in docs/reliability.md). It is internal because
// it is test machinery of this repository's stores, not an API: its worker protocol,
// models and fault plans change with the tests that use it. Only tests and the other
// test harnesses may import it (internal/archtest enforces that).
package chaos

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Kinds of operation.
const (
	KindEnter = "enter" // a lock acquisition: Token is the fencing token on success
	KindClaim = "claim" // a holder's check that it still holds Token
	KindExit  = "exit"  // a holder stops claiming Token
	KindAdd   = "add"   // a latch update of Delta
	KindRead  = "read"  // a latch read returning Value
)

// Outcomes of an operation's return.
const (
	OK      = "ok"      // applied (add), acquired (enter), read Value (read)
	Failed  = "failed"  // certainly not applied (lock held by another, not found, invalid)
	Unknown = "unknown" // may or may not have been applied (the store's outcome is unknown)
)

// Phases of a record.
const (
	PhaseCall   = "call"
	PhaseReturn = "ret"
)

// Record is one line of a history.
type Record struct {
	Client  int    `json:"c"`            // worker id, unique across goroutines and processes
	Seq     int    `json:"s"`            // operation number within the worker
	Phase   string `json:"p"`            // PhaseCall or PhaseReturn
	Kind    string `json:"k"`            // KindEnter, ...
	Lock    int    `json:"lk,omitempty"` // which lock of the run (an index): locks are judged apart
	Token   uint64 `json:"t,omitempty"`  // lock token
	Delta   int64  `json:"d,omitempty"`  // latch update
	Value   int64  `json:"v,omitempty"`  // latch read
	Outcome string `json:"o,omitempty"`  // on PhaseReturn
	At      int64  `json:"at"`           // wall clock, ns since the epoch (one host)
}

// Log collects records from goroutines, and from processes through Collect.
type Log struct {
	mu      sync.Mutex
	records []Record
	holds   int // successful lock acquisitions recorded
	// claimed records which primitives' holders claimed: a leader, a permit, a
	// read-write hold.
	claimed [3]bool
}

// Add appends r.
func (l *Log) Add(r Record) {
	l.mu.Lock()
	l.records = append(l.records, r)
	if r.Kind == KindEnter && r.Phase == PhaseReturn && r.Outcome == OK {
		l.holds++
	}
	switch r.Kind {
	case KindLead:
		l.claimed[0] = true
	case KindPermit:
		l.claimed[1] = true
	case KindReadHold, KindWriteHold:
		l.claimed[2] = true
	}
	l.mu.Unlock()
}

// Holds returns the number of successful lock acquisitions recorded so far.
func (l *Log) Holds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// primitivesHeld reports whether a leader, a permit holder and a read-write holder
// have each claimed at least once.
func (l *Log) primitivesHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claimed == [3]bool{true, true, true}
}

// Records returns a copy of everything recorded.
func (l *Log) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Record(nil), l.records...)
}

// Collect adds the JSON lines a child process wrote, until EOF. A torn last line (the
// process was killed mid-write) is dropped.
func (l *Log) Collect(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue
		}
		l.Add(rec)
	}
	return sc.Err()
}

// Sink receives a worker's records: a Log's Add in process, a JSON-lines writer in a
// child process.
type Sink func(Record)

// JSONLines returns a Sink that writes each record as one line to w, flushed at once so
// that a killed process loses at most the line it was writing.
func JSONLines(w io.Writer) Sink {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(r Record) {
		mu.Lock()
		_ = enc.Encode(r)
		mu.Unlock()
	}
}

func now() int64 { return time.Now().UnixNano() }
