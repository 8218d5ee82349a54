package chaos

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// span is one hold as its claims show it: from its first claim to its last.
type span struct {
	kind         string
	client, lock int
	token        uint64
	first, last  int64
	claims       int
}

func (s span) String() string {
	return fmt.Sprintf("%s client %d slot %d token %d claims [%d, %d] ns", s.kind, s.client, s.lock, s.token, s.first, s.last)
}

// spans gathers the holds the claims of kinds show, in order of their first claim.
func spans(records []Record, kinds ...string) []span {
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	type key struct {
		kind         string
		client, lock int
		token        uint64
	}
	by := map[key]*span{}
	var order []key
	for _, r := range records {
		if !want[r.Kind] {
			continue
		}
		k := key{r.Kind, r.Client, r.Lock, r.Token}
		s := by[k]
		if s == nil {
			s = &span{kind: r.Kind, client: r.Client, lock: r.Lock, token: r.Token, first: r.At, last: r.At}
			by[k] = s
			order = append(order, k)
		}
		s.first, s.last = min(s.first, r.At), max(s.last, r.At)
		s.claims++
	}
	out := make([]span, 0, len(order))
	for _, k := range order {
		out = append(out, *by[k])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}

// exclusive checks that holds never overlap and that their tokens strictly increase in
// the order of their first claims: the rule of one lock (a leadership, a permit slot,
// a read-write lock's W). A hold that began after another ended and has a lower token
// was granted while the other held (its token was issued before the other's), so it
// too is two holders at once.
func exclusive(holds []span) string {
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.first <= a.last {
			return fmt.Sprintf("two holders at once: %v and %v", a, b)
		}
		if b.token <= a.token {
			return fmt.Sprintf("tokens not increasing: %v, then %v", a, b)
		}
	}
	return ""
}

// maxOverlap returns the greatest number of holds overlapping at one instant, and one
// instant where it is reached.
func maxOverlap(holds []span) (n int, at int64) {
	type ev struct {
		at    int64
		delta int
	}
	evs := make([]ev, 0, 2*len(holds))
	for _, h := range holds {
		evs = append(evs, ev{h.first, 1}, ev{h.last, -1})
	}
	// At one instant, starts come before ends: holds that touch overlap.
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta > evs[j].delta
	})
	cur := 0
	for _, e := range evs {
		cur += e.delta
		if cur > n {
			n, at = cur, e.at
		}
	}
	return n, at
}

// PrimitiveResult is what a check of one primitive found.
type PrimitiveResult struct {
	Holds  int    // holds that made at least one claim
	By     int    // distinct workers (goroutines and processes) among the holders
	Claims int    // claims
	Ops    int    // acquisitions, campaigns, proclaims and reads called
	OK     bool   // no violation
	Detail string // the first violation, when not OK
}

func (r PrimitiveResult) String() string {
	v := "ok"
	if !r.OK {
		v = "VIOLATION: " + r.Detail
	}
	return fmt.Sprintf("%d ops, %d holds by %d workers, %d claims: %s", r.Ops, r.Holds, r.By, r.Claims, v)
}

func countCalls(records []Record, kinds ...string) int {
	n := 0
	for _, r := range records {
		for _, k := range kinds {
			if r.Kind == k && r.Phase == PhaseCall {
				n++
			}
		}
	}
	return n
}

// summary returns a result for holds, with no violation yet.
func summary(holds []span, ops int) PrimitiveResult {
	res := PrimitiveResult{Holds: len(holds), Ops: ops, OK: true}
	by := map[int]bool{}
	for _, h := range holds {
		res.Claims += h.claims
		by[h.client] = true
	}
	res.By = len(by)
	return res
}

// CheckElectionClaims checks the leaders' claims: never two leaders at once, and
// leaders' tokens strictly increasing in the order they led.
func CheckElectionClaims(records []Record) PrimitiveResult {
	holds := spans(records, KindLead)
	res := summary(holds, countCalls(records, KindCampaign, KindProclaim, KindLeader))
	if d := exclusive(holds); d != "" {
		res.OK, res.Detail = false, "election: "+d
	}
	return res
}

// CheckSemaphore checks the permit holders' claims of a semaphore of permits permits:
// at no instant more than permits holds, every slot below permits, and per slot never
// two holders at once and tokens strictly increasing.
func CheckSemaphore(records []Record, permits int) PrimitiveResult {
	holds := spans(records, KindPermit)
	res := summary(holds, countCalls(records, KindSemAcquire))
	bySlot := map[int][]span{}
	for _, h := range holds {
		if h.lock < 0 || h.lock >= permits {
			res.OK, res.Detail = false, fmt.Sprintf("semaphore: a permit of slot %d of %d: %v", h.lock, permits, h)
			return res
		}
		bySlot[h.lock] = append(bySlot[h.lock], h)
	}
	for slot := 0; slot < permits; slot++ {
		if d := exclusive(bySlot[slot]); d != "" {
			res.OK, res.Detail = false, fmt.Sprintf("semaphore slot %d: %s", slot, d)
			return res
		}
	}
	if n, at := maxOverlap(holds); n > permits {
		res.OK, res.Detail = false, fmt.Sprintf("semaphore: %d permits held at once at %d ns, of %d", n, at, permits)
	}
	return res
}

// CheckRWLock checks the read-write lock's claims: no write hold overlaps any other
// hold (read or write), writers' tokens strictly increase in the order they held, and
// per reader slot never two readers at once and tokens strictly increasing.
func CheckRWLock(records []Record) PrimitiveResult {
	holds := spans(records, KindReadHold, KindWriteHold)
	res := summary(holds, countCalls(records, KindRWAcquire))
	var writes []span
	bySlot := map[int][]span{}
	for _, h := range holds {
		if h.kind == KindWriteHold {
			writes = append(writes, h)
		} else {
			bySlot[h.lock] = append(bySlot[h.lock], h)
		}
	}
	if d := exclusive(writes); d != "" {
		res.OK, res.Detail = false, "rwlock writers: "+d
		return res
	}
	for _, w := range writes {
		for _, h := range holds {
			if h.kind == KindReadHold && h.first <= w.last && w.first <= h.last {
				res.OK, res.Detail = false, fmt.Sprintf("rwlock: a reader during a write: %v and %v", w, h)
				return res
			}
		}
	}
	slots := make([]int, 0, len(bySlot))
	for s := range bySlot {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	for _, s := range slots {
		if d := exclusive(bySlot[s]); d != "" {
			res.OK, res.Detail = false, fmt.Sprintf("rwlock reader slot %d: %s", s, d)
			return res
		}
	}
	return res
}

// Election register model: the register holds {token, value}. A Campaign that returned
// publishes its {token, value}; one whose outcome is unknown may have published its
// value under a token the history does not know (resolved by the first read that sees
// it); a Proclaim publishes {its leader's token, value} (may have, when unknown). A
// Leader read that named a leader with a value reads the register. Reads that named no
// leader (NotFound, Pending) are left out; every write that did not
// return OK is of unknown outcome.

type regState struct {
	token    uint64
	value    int64
	anyToken bool // written by a Campaign of unknown outcome: token not known yet
}

type regInput struct {
	write  bool
	token  uint64 // 0 with a write: unknown
	value  int64
	unsure bool // a write of unknown outcome
}

// ElectionModel is the porcupine model of an election's register.
func ElectionModel() porcupine.Model {
	nd := &porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{regState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			s, in := state.(regState), input.(regInput)
			if in.write {
				w := regState{token: in.token, value: in.value, anyToken: in.token == 0}
				if in.unsure {
					return []interface{}{s, w}
				}
				return []interface{}{w}
			}
			if s.value == in.value && (s.token == in.token || s.anyToken) {
				return []interface{}{regState{token: in.token, value: in.value}}
			}
			return nil
		},
		Equal: func(a, b interface{}) bool { return a.(regState) == b.(regState) },
		DescribeOperation: func(input, _ interface{}) string {
			in := input.(regInput)
			switch {
			case in.write && in.unsure:
				return fmt.Sprintf("publish(%d, %d)?", in.token, in.value)
			case in.write:
				return fmt.Sprintf("publish(%d, %d)", in.token, in.value)
			}
			return fmt.Sprintf("leader() -> (%d, %d)", in.token, in.value)
		},
	}
	return nd.ToModel()
}

// ElectionOperations turns a history into the register model's operations.
func ElectionOperations(records []Record) (ops []porcupine.Operation, unknown int) {
	for _, p := range pairUp(records, KindCampaign, KindProclaim, KindLeader) {
		op := porcupine.Operation{ClientId: p.call.Client, Call: p.call.At, Return: math.MaxInt64}
		if p.ret != nil {
			op.Return = p.ret.At
		}
		switch {
		case p.call.Kind == KindLeader:
			if p.ret == nil || p.ret.Outcome != OK {
				continue
			}
			op.Input = regInput{token: p.ret.Token, value: p.ret.Value}
		case p.ret == nil || p.ret.Outcome != OK:
			// Unknown, also when the call failed: a Campaign or Proclaim whose try
			// was in doubt (a lost reply) and whose leadership then ended returns
			// LockLost though that try may have landed. A Campaign's token is known
			// only when it returned; a Proclaim's is its leader's.
			op.Input = regInput{write: true, token: p.call.Token, value: p.call.Value, unsure: true}
			unknown++
		default:
			op.Input = regInput{write: true, token: p.ret.Token, value: p.call.Value}
		}
		ops = append(ops, op)
	}
	return ops, unknown
}

// CheckElectionRegister checks that every Leader read returned a {token, value} the
// register held at some instant within the read's call.
func CheckElectionRegister(records []Record, timeout time.Duration) Result {
	ops, unknown := ElectionOperations(records)
	return check(ElectionModel(), ops, unknown, timeout)
}

// PrimitivesReport is what the checks of a run's primitives found.
type PrimitivesReport struct {
	Election  PrimitiveResult // the leaders' claims
	Register  Result          // the election's register (Leader reads)
	Semaphore PrimitiveResult
	RWLock    PrimitiveResult
}

// CheckPrimitives runs every check of the primitives on a history.
func CheckPrimitives(records []Record, timeout time.Duration) PrimitivesReport {
	return PrimitivesReport{
		Election:  CheckElectionClaims(records),
		Register:  CheckElectionRegister(records, timeout),
		Semaphore: CheckSemaphore(records, SemaphorePermits),
		RWLock:    CheckRWLock(records),
	}
}

// Violations is the number of checks that failed (0 to 4).
func (r PrimitivesReport) Violations() int {
	n := 0
	for _, ok := range []bool{r.Election.OK, r.Register.OK, r.Semaphore.OK, r.RWLock.OK} {
		if !ok {
			n++
		}
	}
	return n
}

func (r PrimitivesReport) String() string {
	return fmt.Sprintf("  election: %s\n  election register: %s\n  semaphore: %s\n  rwlock: %s", r.Election, r.Register, r.Semaphore, r.RWLock)
}
