package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The queue model: what producers and consumers of a queue did, and the checks of
// docs/reliability.md ("The queue model") on it.
//
// A queue history has one QueueRecord per call and one per return, as the lock and
// latch histories do; a Receive's return has one QueueKindDeliver record per message
// handed out. The checker judges it by fencing tokens (Message.Token) and by the order
// of the records (taken on one host), never by leases, visibility timeouts or other
// durations: a check fails only on a history that no correct queue could produce,
// whatever the timing.

// Kinds of queue operation.
const (
	QueueKindEnqueue = "enqueue" // one event of an Enqueue call: ID, Key; returns Partition, Seq, Duplicate
	QueueKindReceive = "receive" // a Receive call; its messages are QueueKindDeliver records
	QueueKindDeliver = "deliver" // one message a Receive returned (Phase is PhaseReturn)
	QueueKindAck     = "ack"     // one message of an Ack call: Partition, Seq, Token, Attempt of the message
	QueueKindNack    = "nack"    // a Nack of one message
	QueueKindFault   = "fault"   // a fault a worker injected itself (Key names it); not an operation
)

// QueueRecord is one line of a queue history.
type QueueRecord struct {
	Client    int    `json:"c"`            // worker id, unique across goroutines and processes
	Op        int    `json:"s"`            // operation number within the worker
	Phase     string `json:"p"`            // PhaseCall or PhaseReturn
	Kind      string `json:"k"`            // QueueKindEnqueue, ...
	Group     string `json:"g,omitempty"`  // consumer group (receive, deliver, ack, nack)
	Dead      bool   `json:"dl,omitempty"` // the consumer reads the group's dead-letter partition
	ID        string `json:"i,omitempty"`  // event id (a dead letter's: the original event's)
	Key       string `json:"y,omitempty"`  // partition key (fault: the fault's name)
	Partition int    `json:"pt"`           // storage partition
	Seq       uint64 `json:"q,omitempty"`  // sequence number in Partition
	Token     uint64 `json:"t,omitempty"`  // fencing token of the delivery
	Attempt   int    `json:"a,omitempty"`  // delivery attempt
	Index     int    `json:"x,omitempty"`  // position of a delivery in its Receive's result
	From      string `json:"f,omitempty"`  // a dead letter's origin, "partition/seq"
	Duplicate bool   `json:"d,omitempty"`  // an enqueue that found its id stored
	Outcome   string `json:"o,omitempty"`  // on PhaseReturn: OK, Failed or Unknown
	At        int64  `json:"at"`           // wall clock, ns since the epoch (one host)
}

// QueueSink receives a queue worker's records.
type QueueSink func(QueueRecord)

// QueueLog collects queue records from goroutines, and from processes through Collect.
type QueueLog struct {
	mu      sync.Mutex
	records []QueueRecord
	// counted records were counted into enqueued (see enqueuedCount).
	counted, enqueued int
}

// Add appends r.
func (l *QueueLog) Add(r QueueRecord) {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
}

// Records returns a copy of everything recorded.
func (l *QueueLog) Records() []QueueRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]QueueRecord(nil), l.records...)
}

// Len returns the number of records.
func (l *QueueLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// Collect adds the JSON lines a child process wrote, until EOF. A torn line (the
// process was killed mid-write) is dropped.
func (l *QueueLog) Collect(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec QueueRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue
		}
		l.Add(rec)
	}
	return sc.Err()
}

// QueueJSONLines returns a QueueSink that writes each record as one line to w.
func QueueJSONLines(w io.Writer) QueueSink {
	var mu sync.Mutex
	enc := json.NewEncoder(w) // unbuffered: a killed process loses at most one line
	return func(r QueueRecord) {
		mu.Lock()
		_ = enc.Encode(r)
		mu.Unlock()
	}
}

// Kinds of queue violation, as QueueResult.Violations counts them.
const (
	// ViolationNotAcked: after the drain, an event that some group neither acked nor
	// dead-lettered and acked from its dead-letter partition (also a dead letter that
	// the dead-letter consumer never acked). An Ack whose outcome is unknown (an error
	// that may hide an applied write; a process killed before it returned) counts as
	// acked here, as an update of unknown outcome may have been applied in the latch
	// model; it counts as nothing in the other checks.
	ViolationNotAcked = "not-acked"
	// ViolationRedelivered (counted once per event and group): a delivery of an event after an Ack of it returned nil, to
	// the acking owner (same token, its Receive called after the Ack returned) or to a
	// later owner (greater token, its Receive not over before the Ack was called).
	ViolationRedelivered = "redelivered-after-ack"
	// ViolationZombieAck: an Ack returned nil although, before it was called, a later
	// owner of the partition (greater token) had returned a delivery from it.
	ViolationZombieAck = "zombie-ack"
	// ViolationKeyOrder: within a group, two acked events of one key whose acked
	// deliveries were received out of seq order.
	ViolationKeyOrder = "key-order"
	// ViolationDeadAndAcked: an event both dead-lettered and acked by the same group.
	ViolationDeadAndAcked = "dead-lettered-and-acked"
	// ViolationDuplicateID: one producer id stored at two places (two enqueue results,
	// or two deliveries, naming different partitions or seqs), or one event
	// dead-lettered twice in one group.
	ViolationDuplicateID = "id-stored-twice"
)

// QueueViolationKinds lists the kinds of violation, in report order.
var QueueViolationKinds = []string{ViolationNotAcked, ViolationRedelivered, ViolationZombieAck,
	ViolationKeyOrder, ViolationDeadAndAcked, ViolationDuplicateID}

// QueueResult is what the queue checker found.
type QueueResult struct {
	Events       int // distinct events enqueued (ids) whose place is known
	Unresolved   int // ids enqueued whose outcome stayed unknown and that were never delivered
	Operations   int // enqueues, receives, acks and nacks checked (calls)
	Deliveries   int // messages handed out (dead letters included)
	Acks         int // acks that returned nil
	Nacks        int // nacks
	DeadLettered int // events delivered from a dead-letter partition
	Faults       map[string]int
	Violations   map[string]int // by kind; 0 everywhere means the history passed
	Details      []string       // the first few violations of each kind, described
}

// OK reports whether the history had no violation.
func (r QueueResult) OK() bool { return r.Total() == 0 }

// Total is the number of violations of every kind.
func (r QueueResult) Total() int {
	n := 0
	for _, v := range r.Violations {
		n += v
	}
	return n
}

func (r QueueResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events=%d operations=%d deliveries=%d acks=%d nacks=%d dead_lettered=%d unresolved=%d violations=%d",
		r.Events, r.Operations, r.Deliveries, r.Acks, r.Nacks, r.DeadLettered, r.Unresolved, r.Total())
	for _, k := range QueueViolationKinds {
		if r.Violations[k] > 0 {
			fmt.Fprintf(&b, " %s=%d", k, r.Violations[k])
		}
	}
	for _, d := range r.Details {
		b.WriteString("\n    ")
		b.WriteString(d)
	}
	return b.String()
}

// maxDetails bounds QueueResult.Details, per kind of violation.
const maxDetails = 4

// qplace is an event's place in a partition.
type qplace struct {
	p   int
	seq uint64
}

func (p qplace) String() string { return strconv.Itoa(p.p) + "/" + strconv.FormatUint(p.seq, 10) }

// qdelivery is one message handed out.
type qdelivery struct {
	client, op, index int
	call, ret         int64 // its Receive's call and return
	token             uint64
	attempt           int
	id, key, from     string
}

// qack is one message of an Ack or Nack call.
type qack struct {
	client, op int
	token      uint64
	attempt    int
	call, ret  int64 // ret is 1<<63-1 when the call never returned
	outcome    string
}

// qstream is what one group did on one storage partition (an event partition, or the
// group's dead-letter partition).
type qstream struct {
	deliveries map[uint64][]qdelivery
	acks       map[uint64][]qack // acks that returned nil
	// doubtful are acks whose outcome is unknown (an error that may hide an applied
	// write, or a process killed before the Ack returned): they may have been recorded.
	doubtful map[uint64]bool
	// firstByToken is, per token, the earliest return of a Receive that delivered from
	// the partition with it.
	firstByToken map[uint64]int64
}

func newStream() *qstream {
	return &qstream{deliveries: map[uint64][]qdelivery{}, acks: map[uint64][]qack{}, doubtful: map[uint64]bool{},
		firstByToken: map[uint64]int64{}}
}

type qstreamKey struct {
	group string
	p     int
}

// CheckQueue checks a queue history of a queue of partitions event partitions and the
// given groups (in the spec's order: group i's dead-letter partition is
// partitions+i). The checks are those of docs/reliability.md:
//
//   - every event is acked by every group: by a consumer of the group (an Ack that
//     returned nil, or whose outcome is unknown), or dead-lettered in the group and
//     acked by its dead-letter consumer; every dead letter is acked;
//   - no redelivery after an Ack returned nil: for a nil Ack A of an event with token
//     t, no delivery of the event in the group with t from a Receive called after A
//     returned, nor with a greater token from a Receive that had not returned when A
//     was called (one that had is a zombie ack, below);
//   - no zombie ack: no Ack with token t returns nil when, before it was called, a
//     Receive had returned a message of the same partition and group with a token
//     greater than t (that owner had claimed the partition, so t's write must fail);
//   - per-key order: within a group, for two acked events e1 < e2 of one key, the
//     delivery that e2's Ack acked was not received before the one e1's Ack acked
//     (an earlier Receive, or earlier in the same Receive's result);
//   - nothing both dead-lettered and acked in one group;
//   - one place per producer id: all enqueue results and deliveries of an id name
//     one (partition, seq); one dead letter per event and group.
func CheckQueue(records []QueueRecord, partitions int, groups []string) QueueResult {
	res := QueueResult{Faults: map[string]int{}, Violations: map[string]int{}}
	violate := func(kind, format string, args ...any) {
		res.Violations[kind]++
		if res.Violations[kind] <= maxDetails {
			res.Details = append(res.Details, kind+": "+fmt.Sprintf(format, args...))
		}
	}
	groupIndex := map[string]int{}
	for i, g := range groups {
		groupIndex[g] = i
	}

	// Pair calls with returns.
	type opKey struct{ client, op int }
	calls := map[opKey][]*QueueRecord{}
	rets := map[opKey][]*QueueRecord{}
	receives := map[opKey][2]int64{}
	for i := range records {
		r := &records[i]
		k := opKey{r.Client, r.Op}
		switch {
		case r.Kind == QueueKindFault:
			res.Faults[r.Key]++
		case r.Kind == QueueKindReceive && r.Phase == PhaseCall:
			v := receives[k]
			v[0] = r.At
			receives[k] = v
			res.Operations++
		case r.Kind == QueueKindReceive:
			v := receives[k]
			v[1] = r.At
			receives[k] = v
		case r.Kind == QueueKindDeliver:
		case r.Phase == PhaseCall:
			calls[k] = append(calls[k], r)
			res.Operations++
		default:
			rets[k] = append(rets[k], r)
		}
	}

	// Producer ids: the places enqueue results and deliveries name.
	places := map[string]map[qplace]bool{}
	keyOf := map[string]string{}
	enqueued := map[string]bool{}
	addPlace := func(id string, pl qplace) {
		if places[id] == nil {
			places[id] = map[qplace]bool{}
		}
		places[id][pl] = true
	}
	streams := map[qstreamKey]*qstream{}
	stream := func(g string, p int) *qstream {
		k := qstreamKey{g, p}
		s := streams[k]
		if s == nil {
			s = newStream()
			streams[k] = s
		}
		return s
	}
	const never = int64(1<<63 - 1)
	for k, cs := range calls {
		rs := rets[k]
		for i, c := range cs {
			var ret *QueueRecord
			if i < len(rs) {
				ret = rs[i]
			}
			switch c.Kind {
			case QueueKindEnqueue:
				enqueued[c.ID] = true
				keyOf[c.ID] = c.Key
				if ret != nil && ret.Outcome == OK {
					addPlace(c.ID, qplace{ret.Partition, ret.Seq})
				}
			case QueueKindAck:
				a := qack{client: c.Client, op: c.Op, token: c.Token, attempt: c.Attempt, call: c.At, ret: never, outcome: Unknown}
				if ret != nil {
					a.ret, a.outcome = ret.At, ret.Outcome
				}
				switch a.outcome {
				case OK:
					res.Acks++
					s := stream(c.Group, c.Partition)
					s.acks[c.Seq] = append(s.acks[c.Seq], a)
				case Unknown:
					stream(c.Group, c.Partition).doubtful[c.Seq] = true
				}
			case QueueKindNack:
				res.Nacks++
			}
		}
	}
	for i := range records {
		r := &records[i]
		if r.Kind != QueueKindDeliver {
			continue
		}
		res.Deliveries++
		rc := receives[opKey{r.Client, r.Op}]
		d := qdelivery{client: r.Client, op: r.Op, index: r.Index, call: rc[0], ret: r.At, token: r.Token,
			attempt: r.Attempt, id: r.ID, key: r.Key, from: r.From}
		if rc[1] != 0 {
			d.ret = rc[1]
		}
		s := stream(r.Group, r.Partition)
		s.deliveries[r.Seq] = append(s.deliveries[r.Seq], d)
		if t, ok := s.firstByToken[r.Token]; !ok || d.ret < t {
			s.firstByToken[r.Token] = d.ret
		}
		if r.Partition < partitions && r.ID != "" {
			addPlace(r.ID, qplace{r.Partition, r.Seq})
			if _, ok := keyOf[r.ID]; !ok {
				keyOf[r.ID] = r.Key
			}
		}
	}

	// One place per id.
	event := map[string]qplace{}
	ids := make([]string, 0, len(places))
	for id := range enqueued {
		ids = append(ids, id)
	}
	for id := range places {
		if !enqueued[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		ps := places[id]
		if len(ps) == 0 {
			res.Unresolved++
			continue
		}
		list := make([]qplace, 0, len(ps))
		for pl := range ps {
			list = append(list, pl)
		}
		sort.Slice(list, func(i, j int) bool {
			return list[i].p < list[j].p || list[i].p == list[j].p && list[i].seq < list[j].seq
		})
		if len(list) > 1 {
			violate(ViolationDuplicateID, "id %q is stored at %v", id, list)
		}
		event[id] = list[0]
	}
	res.Events = len(event)

	// Dead letters, per group: origin -> dead-letter seqs.
	deadOf := make([]map[qplace][]uint64, len(groups))
	for gi, g := range groups {
		deadOf[gi] = map[qplace][]uint64{}
		s := streams[qstreamKey{g, partitions + gi}]
		if s == nil {
			continue
		}
		for dseq, ds := range s.deliveries {
			from := ds[0].from
			p, seq, ok := parsePlace(from)
			if !ok {
				violate(ViolationDuplicateID, "group %s: dead letter %d/%d has no origin (%q)", g, partitions+gi, dseq, from)
				continue
			}
			pl := qplace{p, seq}
			deadOf[gi][pl] = append(deadOf[gi][pl], dseq)
		}
		res.DeadLettered += len(s.deliveries)
		for pl, dseqs := range deadOf[gi] {
			if len(dseqs) > 1 {
				sort.Slice(dseqs, func(i, j int) bool { return dseqs[i] < dseqs[j] })
				violate(ViolationDuplicateID, "group %s: event %v dead-lettered %d times (dead-letter seqs %v)", g, pl, len(dseqs), dseqs)
			}
		}
	}

	// Redelivery after a nil Ack, and zombie acks, on every stream.
	skeys := make([]qstreamKey, 0, len(streams))
	for k := range streams {
		skeys = append(skeys, k)
	}
	sort.Slice(skeys, func(i, j int) bool {
		return skeys[i].group < skeys[j].group || skeys[i].group == skeys[j].group && skeys[i].p < skeys[j].p
	})
	for _, k := range skeys {
		s := streams[k]
		for seq, acks := range s.acks {
			redelivered := false // one violation per event
			for _, a := range acks {
				for _, d := range s.deliveries[seq] {
					if redelivered {
						break
					}
					// A greater token whose Receive returned before the Ack was called
					// is the zombie check's (below); one that overlaps the Ack is a
					// redelivery too: its owner claimed the partition either before the
					// Ack's write (which must then fail) or after it (and must then
					// start above the acked event).
					if d.token > a.token && d.ret >= a.call || d.token == a.token && d.call > a.ret {
						violate(ViolationRedelivered, "group %s: %d/%d acked by client %d with token %d (ack returned at %d), delivered again to client %d with token %d attempt %d (receive called at %d)",
							k.group, k.p, seq, a.client, a.token, a.ret, d.client, d.token, d.attempt, d.call)
						redelivered = true
					}
				}
				for t, first := range s.firstByToken {
					if t > a.token && first < a.call {
						violate(ViolationZombieAck, "group %s: ack of %d/%d with token %d by client %d returned nil, called at %d after token %d had delivered from the partition at %d",
							k.group, k.p, seq, a.token, a.client, a.call, t, first)
						break
					}
				}
			}
		}
	}

	// Per-key order, within each group over its event partitions. A dead-lettered event
	// leaves its key's order (later events go on without it); one both dead-lettered
	// and acked is reported as such, not again here.
	for gi, g := range groups {
		byKey := map[string][]uint64{}
		keyPart := map[string]int{}
		for p := 0; p < partitions; p++ {
			s := streams[qstreamKey{g, p}]
			if s == nil {
				continue
			}
			for seq, acks := range s.acks {
				ds := s.deliveries[seq]
				if len(ds) == 0 || len(acks) == 0 || ds[0].key == "" || len(deadOf[gi][qplace{p, seq}]) > 0 {
					continue
				}
				key := ds[0].key
				byKey[key] = append(byKey[key], seq)
				keyPart[key] = p
			}
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			seqs := byKey[key]
			sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
			s := streams[qstreamKey{g, keyPart[key]}]
			var prev *qdelivery
			var prevSeq uint64
			for _, seq := range seqs {
				d := ackedDelivery(s, seq)
				if d == nil {
					continue
				}
				if prev != nil && (d.ret < prev.call || d.client == prev.client && d.op == prev.op && d.index < prev.index) {
					violate(ViolationKeyOrder, "group %s key %q: %d/%d (acked delivery received by client %d op %d) before %d/%d (client %d op %d)",
						g, key, keyPart[key], seq, d.client, d.op, keyPart[key], prevSeq, prev.client, prev.op)
				}
				prev, prevSeq = d, seq
			}
		}
	}

	// Every event acked by every group, and nothing both dead-lettered and acked.
	for gi, g := range groups {
		for _, id := range ids {
			pl, ok := event[id]
			if !ok {
				continue
			}
			acked, doubtful := false, false
			if s := streams[qstreamKey{g, pl.p}]; s != nil {
				acked, doubtful = len(s.acks[pl.seq]) > 0, s.doubtful[pl.seq]
			}
			dead := deadOf[gi][pl]
			if acked && len(dead) > 0 {
				violate(ViolationDeadAndAcked, "group %s: %v (id %q) was acked and dead-lettered (dead-letter seq %v)", g, pl, id, dead)
			}
			if !acked && !doubtful && len(dead) == 0 {
				violate(ViolationNotAcked, "group %s: %v (id %q) was never acked", g, pl, id)
			}
		}
		if s := streams[qstreamKey{g, partitions + gi}]; s != nil {
			for dseq := range s.deliveries {
				if len(s.acks[dseq]) == 0 && !s.doubtful[dseq] {
					violate(ViolationNotAcked, "group %s: dead letter %d/%d was never acked", g, partitions+gi, dseq)
				}
			}
		}
		// Dead letters of an event the history never enqueued still count: their acks
		// are checked above through the dead-letter stream.
	}
	return res
}

// ackedDelivery returns the delivery of seq that its first nil Ack acked: the one with
// the ack's token and attempt, from the latest Receive called before the Ack.
func ackedDelivery(s *qstream, seq uint64) *qdelivery {
	acks := s.acks[seq]
	if len(acks) == 0 {
		return nil
	}
	first := acks[0]
	for _, a := range acks[1:] {
		if a.call < first.call {
			first = a
		}
	}
	var best *qdelivery
	ds := s.deliveries[seq]
	for i := range ds {
		d := &ds[i]
		if d.token != first.token || d.attempt != first.attempt || d.call > first.call {
			continue
		}
		if best == nil || d.call > best.call {
			best = d
		}
	}
	return best
}

// parsePlace parses "partition/seq".
func parsePlace(s string) (int, uint64, bool) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, false
	}
	p, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	seq, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return p, seq, true
}

// queueProgress follows a growing history cheaply (each record is read once) to tell
// a run how many (group, event) pairs and dead letters still wait for an ack: what
// its drain waits for. The verdict is CheckQueue's, on the whole history.
type queueProgress struct {
	partitions int
	groups     []string
	read       int               // records read
	ids        map[string]bool   // ids enqueued (called)
	place      map[string]qplace // ids whose enqueue returned
	acked      map[qstreamKey]map[uint64]bool
	calls      map[qstreamKey]map[uint64]int // ack calls not (yet) returned
	dead       []map[qplace]uint64           // per group: origin -> dead-letter seq
	deadSeqs   []map[uint64]bool             // per group: dead-letter seqs delivered
}

func newQueueProgress(partitions int, groups []string) *queueProgress {
	p := &queueProgress{partitions: partitions, groups: groups, ids: map[string]bool{}, place: map[string]qplace{},
		acked: map[qstreamKey]map[uint64]bool{}, calls: map[qstreamKey]map[uint64]int{}}
	for range groups {
		p.dead = append(p.dead, map[qplace]uint64{})
		p.deadSeqs = append(p.deadSeqs, map[uint64]bool{})
	}
	return p
}

// pending reads the records added to l since the last call and returns what waits.
// final says that the workers that could still return an Ack have stopped: an Ack
// call that never returned is then in doubt, as CheckQueue counts it.
func (p *queueProgress) pending(l *QueueLog, final bool) int {
	l.mu.Lock()
	fresh := l.records[p.read:len(l.records):len(l.records)]
	p.read = len(l.records)
	l.mu.Unlock()
	gi := func(g string) int {
		for i, n := range p.groups {
			if n == g {
				return i
			}
		}
		return -1
	}
	for _, r := range fresh {
		switch {
		case r.Kind == QueueKindEnqueue && r.Phase == PhaseCall:
			p.ids[r.ID] = true
		case r.Kind == QueueKindEnqueue && r.Outcome == OK:
			p.place[r.ID] = qplace{r.Partition, r.Seq}
		case r.Kind == QueueKindAck && r.Phase == PhaseCall:
			k := qstreamKey{r.Group, r.Partition}
			if p.calls[k] == nil {
				p.calls[k] = map[uint64]int{}
			}
			p.calls[k][r.Seq]++
		case r.Kind == QueueKindAck:
			k := qstreamKey{r.Group, r.Partition}
			p.calls[k][r.Seq]--
			if r.Outcome != Failed {
				if p.acked[k] == nil {
					p.acked[k] = map[uint64]bool{}
				}
				p.acked[k][r.Seq] = true
			}
		case r.Kind == QueueKindDeliver && r.Partition >= p.partitions:
			i := gi(r.Group)
			if pt, seq, ok := parsePlace(r.From); ok && i >= 0 {
				p.dead[i][qplace{pt, seq}] = r.Seq
				p.deadSeqs[i][r.Seq] = true
			}
		}
	}
	isAcked := func(k qstreamKey, seq uint64) bool {
		return p.acked[k][seq] || final && p.calls[k][seq] > 0
	}
	n := 0
	for id := range p.ids {
		pl, ok := p.place[id]
		if !ok {
			n++
			continue
		}
		for i, g := range p.groups {
			if isAcked(qstreamKey{g, pl.p}, pl.seq) {
				continue
			}
			if d, ok := p.dead[i][pl]; ok && isAcked(qstreamKey{g, p.partitions + i}, d) {
				continue
			}
			n++
		}
	}
	for i, g := range p.groups {
		for d := range p.deadSeqs[i] {
			if !isAcked(qstreamKey{g, p.partitions + i}, d) {
				n++
			}
		}
	}
	return n
}
