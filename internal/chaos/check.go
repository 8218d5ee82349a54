package chaos

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is what a check found.
type Result struct {
	Operations int    // operations given to the checker
	Unknown    int    // of which had an unknown outcome
	OK         bool   // the history is linearizable
	Timeout    bool   // the checker gave up (counts as not OK)
	Detail     string // a description of the first problem, when not OK
}

func (r Result) String() string {
	verdict := "linearizable"
	switch {
	case r.Timeout:
		verdict = "checker timed out"
	case !r.OK:
		verdict = "NOT linearizable: " + r.Detail
	}
	return fmt.Sprintf("%d operations (%d unknown): %s", r.Operations, r.Unknown, verdict)
}

type opKey struct{ client, seq int }

// pair matches each call record with its return. A call without a return has Return
// math.MaxInt64 and a nil return record.
type paired struct {
	call, ret *Record
}

func pairUp(records []Record, kinds ...string) []paired {
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	calls := map[opKey]*paired{}
	var order []opKey
	for i := range records {
		r := &records[i]
		if !want[r.Kind] {
			continue
		}
		k := opKey{r.Client, r.Seq}
		p := calls[k]
		if p == nil {
			p = &paired{}
			calls[k] = p
			order = append(order, k)
		}
		if r.Phase == PhaseCall {
			p.call = r
		} else {
			p.ret = r
		}
	}
	out := make([]paired, 0, len(order))
	for _, k := range order {
		if p := calls[k]; p.call != nil {
			out = append(out, *p)
		}
	}
	return out
}

// Lock model: state is the holder's token (0: free) and the greatest token entered. Each
// lock of a run is a model of its own (its tokens are its own): CheckLock checks each
// lock's operations apart.

type lockState struct{ holder, max uint64 }

type lockInput struct {
	lock  int
	enter bool
	token uint64
}

var lockModel = porcupine.Model{
	Init: func() interface{} { return lockState{} },
	Step: func(state, input, _ interface{}) (bool, interface{}) {
		s, in := state.(lockState), input.(lockInput)
		if in.enter {
			if s.holder != 0 || in.token <= s.max {
				return false, s
			}
			return true, lockState{holder: in.token, max: in.token}
		}
		if s.holder != in.token {
			return false, s
		}
		return true, lockState{max: s.max}
	},
	DescribeOperation: func(input, _ interface{}) string {
		in := input.(lockInput)
		if in.enter {
			return fmt.Sprintf("lock %d: enter(%d)", in.lock, in.token)
		}
		return fmt.Sprintf("lock %d: exit(%d)", in.lock, in.token)
	},
	DescribeState: func(state interface{}) string {
		s := state.(lockState)
		return fmt.Sprintf("holder=%d max=%d", s.holder, s.max)
	},
}

// hold names one hold in a history: a worker, a lock, a token.
type hold struct {
	client, lock int
	token        uint64
}

// LockOperations turns a history into the lock model's operations. A successful
// acquisition is an enter over its call; the hold ends with an exit whose interval runs
// from the holder's last claim (its last moment of certainty; the acquisition's call
// when it made none: an acquisition that returns after its lease is over claims nothing)
// to the exit record's return, or to the end of time when the holder was killed. Failed and unknown acquisitions make no claim and are left out: a holder
// that does not know it holds protects nothing. It also returns the number of claims.
func LockOperations(records []Record) (ops []porcupine.Operation, claims int) {
	lastClaim := map[hold]int64{}
	for _, r := range records {
		if r.Kind == KindClaim {
			claims++
			h := hold{r.Client, r.Lock, r.Token}
			if r.At > lastClaim[h] {
				lastClaim[h] = r.At
			}
		}
	}
	exited := map[hold]*paired{}
	for _, p := range pairUp(records, KindExit) {
		p := p
		exited[hold{p.call.Client, p.call.Lock, p.call.Token}] = &p
	}
	for _, p := range pairUp(records, KindEnter) {
		if p.ret == nil || p.ret.Outcome != OK {
			continue
		}
		h := hold{p.call.Client, p.call.Lock, p.ret.Token}
		ops = append(ops, porcupine.Operation{ClientId: h.client, Input: lockInput{lock: h.lock, enter: true, token: h.token}, Call: p.call.At, Return: p.ret.At})
		// Without a claim the holder never believed it held the lock (its lease was
		// over when the acquisition returned): its exit may be anywhere after the enter.
		start := p.call.At
		if t, ok := lastClaim[h]; ok && t > start {
			start = t
		}
		end := int64(math.MaxInt64)
		if e := exited[h]; e != nil && e.ret != nil {
			end = e.ret.At
		}
		if end < start {
			end = start
		}
		ops = append(ops, porcupine.Operation{ClientId: h.client, Input: lockInput{lock: h.lock, token: h.token}, Call: start, Return: end})
	}
	return ops, claims
}

// Latch model: a counter. An acknowledged add moves it by its delta; an add of unknown
// outcome may or may not have; a read sees it.

type latchInput struct {
	add   bool
	delta int64
}

type latchOutput struct {
	unknown bool  // add: outcome unknown
	value   int64 // read: the count read
}

// LatchModel returns the counter model for a latch created with count initial.
func LatchModel(initial int64) porcupine.Model {
	nd := &porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{initial} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(int64), input.(latchInput), output.(latchOutput)
			switch {
			case in.add && out.unknown:
				return []interface{}{s, s + in.delta}
			case in.add:
				return []interface{}{s + in.delta}
			case out.value == s:
				return []interface{}{s}
			}
			return nil
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(latchInput), output.(latchOutput)
			switch {
			case in.add && out.unknown:
				return fmt.Sprintf("add(%d)?", in.delta)
			case in.add:
				return fmt.Sprintf("add(%d)", in.delta)
			}
			return fmt.Sprintf("read() -> %d", out.value)
		},
	}
	return nd.ToModel()
}

// LatchOperations turns a history into the counter model's operations: acknowledged and
// unknown adds (an add cut off by SIGKILL is unknown, to the end of time), and successful
// reads. Failed operations changed nothing and are left out.
func LatchOperations(records []Record) (ops []porcupine.Operation, unknown int) {
	for _, p := range pairUp(records, KindAdd, KindRead) {
		op := porcupine.Operation{ClientId: p.call.Client, Call: p.call.At, Return: math.MaxInt64}
		if p.ret != nil {
			op.Return = p.ret.At
		}
		switch {
		case p.call.Kind == KindAdd && (p.ret == nil || p.ret.Outcome == Unknown):
			op.Input, op.Output = latchInput{add: true, delta: p.call.Delta}, latchOutput{unknown: true}
			unknown++
		case p.ret == nil || p.ret.Outcome != OK:
			// A read cut off, or an operation that certainly changed nothing.
			continue
		case p.call.Kind == KindAdd:
			op.Input, op.Output = latchInput{add: true, delta: p.call.Delta}, latchOutput{}
		default:
			op.Input, op.Output = latchInput{}, latchOutput{value: p.ret.Value}
		}
		ops = append(ops, op)
	}
	return ops, unknown
}

// LockResult is what CheckLock found.
type LockResult struct {
	Result
	Locks  int // locks the history used
	Holds  int // successful acquisitions (each an enter and an exit operation)
	Claims int // claims, which bound the holds' exits
	Failed int // the lock whose history is not linearizable, -1 if none
}

func (r LockResult) String() string {
	return fmt.Sprintf("%s [%d holds of %d locks, %d claims]", r.Result, r.Holds, r.Locks, r.Claims)
}

// CheckLock checks the lock history, each lock apart, all within timeout.
func CheckLock(records []Record, timeout time.Duration) LockResult {
	ops, claims := LockOperations(records)
	byLock := map[int][]porcupine.Operation{}
	var order []int
	for _, op := range ops {
		l := op.Input.(lockInput).lock
		if byLock[l] == nil {
			order = append(order, l)
		}
		byLock[l] = append(byLock[l], op)
	}
	res := LockResult{Result: Result{Operations: len(ops), OK: true}, Locks: len(order), Holds: len(ops) / 2, Claims: claims, Failed: -1}
	end := time.Now().Add(timeout)
	for _, l := range order {
		left := time.Until(end)
		if left <= 0 {
			res.OK, res.Timeout, res.Detail = false, true, "timed out"
			break
		}
		r := check(lockModel, byLock[l], 0, left)
		if !r.OK {
			res.OK, res.Timeout, res.Detail, res.Failed = false, r.Timeout, fmt.Sprintf("lock %d: %s", l, r.Detail), l
			break
		}
	}
	return res
}

// CheckLatch checks the latch history of a latch created with count initial.
func CheckLatch(records []Record, initial int64, timeout time.Duration) Result {
	ops, unknown := LatchOperations(records)
	return check(LatchModel(initial), ops, unknown, timeout)
}

func check(m porcupine.Model, ops []porcupine.Operation, unknown int, timeout time.Duration) Result {
	res := Result{Operations: len(ops), Unknown: unknown}
	out, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	switch out {
	case porcupine.Ok:
		res.OK = true
	case porcupine.Unknown:
		res.Timeout = true
		res.Detail = "timed out"
	default:
		res.Detail = describeFailure(m, info)
	}
	return res
}

// describeFailure names the longest linearizable prefix the checker found and the
// operations it could not place after it.
func describeFailure(m porcupine.Model, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizationsOperations()
	best := []porcupine.Operation{}
	for _, part := range parts {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	if len(best) == 0 {
		return "no operation could be linearized"
	}
	last := best[len(best)-1]
	return fmt.Sprintf("longest linearizable prefix has %d operations, ending with %s (client %d)",
		len(best), m.DescribeOperation(last.Input, last.Output), last.ClientId)
}
