package chaos

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// --- Hand-written histories -------------------------------------------------------------

// qhist builds a queue history; every record is 10 ns after the previous one.
type qhist struct {
	recs []QueueRecord
	at   int64
	ops  map[int]int
}

func (h *qhist) add(r QueueRecord) {
	h.at += 10
	r.At = h.at
	h.recs = append(h.recs, r)
}

func (h *qhist) op(client int) int {
	if h.ops == nil {
		h.ops = map[int]int{}
	}
	h.ops[client]++
	return h.ops[client]
}

func (h *qhist) enqueue(client int, id, key string, p int, seq uint64) {
	op := h.op(client)
	h.add(QueueRecord{Client: client, Op: op, Phase: PhaseCall, Kind: QueueKindEnqueue, ID: id, Key: key})
	h.add(QueueRecord{Client: client, Op: op, Phase: PhaseReturn, Kind: QueueKindEnqueue, ID: id, Key: key, Partition: p, Seq: seq, Outcome: OK})
}

// msg is a message as a consumer received it.
func msg(id, key string, p int, seq, token uint64, attempt int) QueueRecord {
	return QueueRecord{ID: id, Key: key, Partition: p, Seq: seq, Token: token, Attempt: attempt}
}

func dead(from string, id string, p int, seq, token uint64) QueueRecord {
	r := msg(id, "", p, seq, token, 1)
	r.From = from
	return r
}

func (h *qhist) receive(client int, group string, msgs ...QueueRecord) {
	op := h.op(client)
	isDead := len(msgs) > 0 && msgs[0].From != ""
	h.add(QueueRecord{Client: client, Op: op, Phase: PhaseCall, Kind: QueueKindReceive, Group: group, Dead: isDead})
	for i, m := range msgs {
		m.Client, m.Op, m.Phase, m.Kind, m.Group, m.Index, m.Dead = client, op, PhaseReturn, QueueKindDeliver, group, i, isDead
		h.add(m)
	}
	h.add(QueueRecord{Client: client, Op: op, Phase: PhaseReturn, Kind: QueueKindReceive, Group: group, Outcome: OK})
}

// ack records one Ack call of msgs with outcome ("" : the call never returned).
func (h *qhist) ack(client int, group, kind, outcome string, msgs ...QueueRecord) {
	op := h.op(client)
	for _, m := range msgs {
		m.Client, m.Op, m.Phase, m.Kind, m.Group = client, op, PhaseCall, kind, group
		h.add(m)
	}
	if outcome == "" {
		return
	}
	for _, m := range msgs {
		m.Client, m.Op, m.Phase, m.Kind, m.Group, m.Outcome = client, op, PhaseReturn, kind, group, outcome
		h.add(m)
	}
}

func (h *qhist) clone() *qhist {
	c := &qhist{recs: append([]QueueRecord(nil), h.recs...), at: h.at, ops: map[int]int{}}
	for k, v := range h.ops {
		c.ops[k] = v
	}
	return c
}

// base is a correct history of a queue of 2 partitions and one group g: a and b of key
// k in partition 0, c without a key in partition 1, all received and acked.
func base() (h *qhist, a, b, c QueueRecord) {
	h = &qhist{}
	h.enqueue(1, "a", "k", 0, 0)
	h.enqueue(1, "b", "k", 0, 1)
	h.enqueue(1, "c", "", 1, 0)
	a, b, c = msg("a", "k", 0, 0, 1, 1), msg("b", "k", 0, 1, 1, 1), msg("c", "", 1, 0, 1, 1)
	h.receive(10, "g", a, b)
	h.ack(10, "g", QueueKindAck, OK, a, b)
	h.receive(11, "g", c)
	h.ack(11, "g", QueueKindAck, OK, c)
	return h, a, b, c
}

func checkH(h *qhist) QueueResult { return CheckQueue(h.recs, 2, []string{"g"}) }

// wantOnly asserts that r found violations of kind and of no other kind.
func wantOnly(t *testing.T, r QueueResult, kind string) {
	t.Helper()
	if r.Violations[kind] == 0 {
		t.Fatalf("no %s violation found: %v", kind, r)
	}
	for k, n := range r.Violations {
		if k != kind && n > 0 {
			t.Fatalf("a %s violation found besides %s: %v", k, kind, r)
		}
	}
}

func wantOK(t *testing.T, r QueueResult) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("a correct history was rejected: %v", r)
	}
}

func TestQueueCheckerPassesACorrectHistory(t *testing.T) {
	h, a, _, _ := base()
	r := checkH(h)
	wantOK(t, r)
	if r.Events != 3 || r.Acks != 3 || r.Deliveries != 3 {
		t.Fatalf("counted wrong: %v", r)
	}
	// A zombie (token 1) delivering an event that its successor (token 2) acked is
	// allowed: a zombie may deliver; only its acks must fail.
	z := &qhist{}
	z.enqueue(1, "a", "k", 0, 0)
	z.receive(10, "g", a)
	a2 := a
	a2.Token, a2.Attempt = 2, 2
	z.receive(12, "g", a2)
	z.ack(12, "g", QueueKindAck, OK, a2)
	z.receive(10, "g", a)
	z.ack(10, "g", QueueKindAck, Failed, a)
	wantOK(t, CheckQueue(z.recs, 2, []string{"g"}))
	// An ack cut off by SIGKILL is not an ack: a later owner may deliver it again.
	k := &qhist{}
	k.enqueue(1, "a", "k", 0, 0)
	k.receive(10, "g", a)
	k.ack(10, "g", QueueKindAck, "", a)
	k.receive(12, "g", a2)
	k.ack(12, "g", QueueKindAck, OK, a2)
	wantOK(t, CheckQueue(k.recs, 2, []string{"g"}))
	// An ack in doubt (an error that may hide a write, or cut off by SIGKILL) may have
	// been recorded: the event is not reported as never acked.
	for _, outcome := range []string{Unknown, ""} {
		u := &qhist{}
		u.enqueue(1, "a", "k", 0, 0)
		u.receive(10, "g", a)
		u.ack(10, "g", QueueKindAck, outcome, a)
		wantOK(t, CheckQueue(u.recs, 2, []string{"g"}))
	}
	// An enqueue retried with the same id finds it where it is.
	d := h.clone()
	d.enqueue(2, "a", "k", 0, 0)
	wantOK(t, checkH(d))
}

func TestQueueCheckerFindsAnEventNotAcked(t *testing.T) {
	h := &qhist{}
	h.enqueue(1, "a", "k", 0, 0)
	a := msg("a", "k", 0, 0, 1, 1)
	h.receive(10, "g", a)
	h.ack(10, "g", QueueKindAck, Failed, a)
	wantOnly(t, checkH(h), ViolationNotAcked)
	// Acked by one group only.
	g2, _, _, _ := base()
	wantOnly(t, CheckQueue(g2.recs, 2, []string{"g", "h"}), ViolationNotAcked)
	// A dead letter nobody acked.
	d := &qhist{}
	d.enqueue(1, "a", "k", 0, 0)
	d.receive(20, "g", dead("0/0", "a", 2, 0, 1))
	wantOnly(t, checkH(d), ViolationNotAcked)
	// Acked from the dead-letter partition: done.
	d.ack(20, "g", QueueKindAck, OK, dead("0/0", "a", 2, 0, 1))
	wantOK(t, checkH(d))
}

// Defect 1 of issue 14: the offset moved back; the next owner delivers acked events.
func TestQueueCheckerFindsRedeliveryAfterAck(t *testing.T) {
	h, a, b, _ := base()
	bad := h.clone()
	a2, b2 := a, b
	a2.Token, b2.Token = 2, 2
	bad.receive(12, "g", a2, b2)
	bad.ack(12, "g", QueueKindAck, OK, a2, b2)
	wantOnly(t, checkH(bad), ViolationRedelivered)
	// The same owner again, after its ack returned.
	same := h.clone()
	same.receive(10, "g", a)
	same.ack(10, "g", QueueKindAck, OK, a)
	wantOnly(t, checkH(same), ViolationRedelivered)
}

// Defect 2 of issue 14: a Nack pending, a later event acked, then a rebalance.
func TestQueueCheckerFindsTheRebalanceWithANackPending(t *testing.T) {
	h := &qhist{}
	h.enqueue(1, "a", "", 0, 0)
	h.enqueue(1, "b", "", 0, 1)
	a, b := msg("a", "", 0, 0, 1, 1), msg("b", "", 0, 1, 1, 1)
	h.receive(10, "g", a, b)
	h.ack(10, "g", QueueKindNack, OK, a)
	h.ack(10, "g", QueueKindAck, OK, b)
	// Consumer 10 drains and releases partition 0; 11 takes it with token 2.
	a2, b2 := msg("a", "", 0, 0, 2, 1), msg("b", "", 0, 1, 2, 1)
	good := h.clone()
	good.receive(11, "g", a2)
	good.ack(11, "g", QueueKindAck, OK, a2)
	wantOK(t, checkH(good))
	h.receive(11, "g", a2, b2)
	h.ack(11, "g", QueueKindAck, OK, a2, b2)
	wantOnly(t, checkH(h), ViolationRedelivered)
}

func TestQueueCheckerFindsAZombieAck(t *testing.T) {
	h := &qhist{}
	h.enqueue(1, "a", "", 0, 0)
	h.enqueue(1, "b", "", 0, 1)
	a, b := msg("a", "", 0, 0, 1, 1), msg("b", "", 0, 1, 1, 1)
	h.receive(10, "g", a, b)
	h.ack(10, "g", QueueKindAck, OK, a)
	// 10 is paused; 11 takes the partition (token 2) and delivers b.
	b2 := msg("b", "", 0, 1, 2, 2)
	h.receive(11, "g", b2)
	good := h.clone()
	good.ack(10, "g", QueueKindAck, Failed, b)
	good.ack(11, "g", QueueKindAck, OK, b2)
	wantOK(t, checkH(good))
	// The zombie's ack of b returns nil (and 11's too, as it may).
	h.ack(10, "g", QueueKindAck, OK, b)
	h.ack(11, "g", QueueKindAck, OK, b2)
	wantOnly(t, checkH(h), ViolationZombieAck)
}

func TestQueueCheckerFindsKeyOrderBroken(t *testing.T) {
	h := &qhist{}
	h.enqueue(1, "a", "k", 0, 0)
	h.enqueue(1, "b", "k", 0, 1)
	a, b := msg("a", "k", 0, 0, 1, 1), msg("b", "k", 0, 1, 1, 1)
	// b received and acked before a was received.
	h.receive(10, "g", b)
	h.ack(10, "g", QueueKindAck, OK, b)
	h.receive(10, "g", a)
	h.ack(10, "g", QueueKindAck, OK, a)
	wantOnly(t, checkH(h), ViolationKeyOrder)
	// In one batch, out of order.
	o := &qhist{}
	o.enqueue(1, "a", "k", 0, 0)
	o.enqueue(1, "b", "k", 0, 1)
	o.receive(10, "g", b, a)
	o.ack(10, "g", QueueKindAck, OK, b, a)
	wantOnly(t, checkH(o), ViolationKeyOrder)
	// Different keys may go in any order; a's nack and retry keep b behind it.
	ok := &qhist{}
	ok.enqueue(1, "a", "k", 0, 0)
	ok.enqueue(1, "b", "k", 0, 1)
	ok.enqueue(1, "c", "j", 0, 2)
	c := msg("c", "j", 0, 2, 1, 1)
	ok.receive(10, "g", c, a, b)
	ok.ack(10, "g", QueueKindNack, OK, a)
	ok.ack(10, "g", QueueKindAck, OK, c)
	a2, b2 := a, b
	a2.Attempt, b2.Attempt = 2, 1
	ok.receive(10, "g", a2, b2)
	ok.ack(10, "g", QueueKindAck, OK, a2, b2)
	wantOK(t, checkH(ok))
}

// Defect 3 of issue 14: an event dead-lettered, then delivered again and processed.
func TestQueueCheckerFindsAnEventDeadLetteredAndAcked(t *testing.T) {
	h := &qhist{}
	h.enqueue(1, "a", "k", 0, 0)
	a := msg("a", "k", 0, 0, 1, 3)
	h.receive(10, "g", a)
	h.ack(10, "g", QueueKindNack, OK, a) // the third attempt: dead-lettered
	dl := dead("0/0", "a", 2, 0, 1)
	h.receive(20, "g", dl)
	h.ack(20, "g", QueueKindAck, OK, dl)
	wantOK(t, checkH(h))
	// The successor saw fewer attempts and delivered it again; it was processed.
	a2 := msg("a", "k", 0, 0, 2, 1)
	h.receive(11, "g", a2)
	h.ack(11, "g", QueueKindAck, OK, a2)
	wantOnly(t, checkH(h), ViolationDeadAndAcked)
}

func TestQueueCheckerFindsAnIDStoredTwice(t *testing.T) {
	h, _, _, _ := base()
	// An enqueue of id a reports a second place.
	two := h.clone()
	two.enqueue(2, "a", "k", 0, 2)
	r := checkH(two)
	if r.Violations[ViolationDuplicateID] == 0 {
		t.Fatalf("an id at two places passed: %v", r)
	}
	// A delivery of id a at another seq (the retried enqueue's return was lost).
	del := h.clone()
	a3 := msg("a", "k", 0, 2, 1, 1)
	del.receive(10, "g", a3)
	del.ack(10, "g", QueueKindAck, OK, a3)
	wantOnly(t, checkH(del), ViolationDuplicateID)
	// One event dead-lettered twice.
	d := &qhist{}
	d.enqueue(1, "a", "", 0, 0)
	d1, d2 := dead("0/0", "a", 2, 0, 1), dead("0/0", "a", 2, 1, 1)
	d.receive(20, "g", d1, d2)
	d.ack(20, "g", QueueKindAck, OK, d1, d2)
	wantOnly(t, checkH(d), ViolationDuplicateID)
}

// --- Broken stores through the real harness ---------------------------------------------

func memoryQueue() func(context.Context) (driver.Store, error) {
	s := memory.New()
	return func(context.Context) (driver.Store, error) { return keepQueueStore{s}, nil }
}

// keepQueueStore hides the store's Close: the harness closes what Open returned.
type keepQueueStore struct{ driver.Store }

func runQueue(t *testing.T, sc QueueScenario) QueueReport {
	t.Helper()
	sc.Name = unique(t)
	sc.Logf = t.Logf
	rep, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", rep)
	return rep
}

// passQueue runs sc and fails t unless the queue drained with no violation.
func passQueue(t *testing.T, sc QueueScenario) QueueReport {
	t.Helper()
	rep := runQueue(t, sc)
	if !rep.OK() || !rep.Drained {
		t.Fatalf("violations, or not drained:\n%v", rep)
	}
	return rep
}

// findQueue runs sc and fails t unless the checker found a violation of kind v: sc's
// store is broken, as broken says.
func findQueue(t *testing.T, sc QueueScenario, v, broken string) {
	t.Helper()
	if rep := runQueue(t, sc); rep.Violations[v] == 0 {
		t.Fatalf("the checker passed %s:\n%v", broken, rep)
	}
}

type offKey struct {
	group string
	p     int
}

// rewindStore breaks defect 1's guarantee: just before a new owner claims a partition,
// it lands an earlier commit of the previous owner, late, as a store whose commit is
// conditioned on the token only would when that commit's first attempt arrives after
// the owner's later commits. The new owner then starts below offsets whose acks
// returned nil.
type rewindStore struct {
	driver.Store
	mu      sync.Mutex
	commits map[offKey][]driver.QueueOffset // the current owner's commits, oldest first
	rewinds int
}

func (s *rewindStore) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	err := s.Store.CommitQueueOffset(ctx, name, group, p, off)
	if err == nil {
		k := offKey{group, p}
		s.mu.Lock()
		hist := s.commits[k]
		if len(hist) > 0 && hist[0].Token != off.Token {
			hist = nil
		}
		s.commits[k] = append(hist, off)
		s.mu.Unlock()
	}
	return err
}

func (s *rewindStore) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	k := offKey{group, p}
	s.mu.Lock()
	hist := s.commits[k]
	s.mu.Unlock()
	if len(hist) > 1 {
		cur, err := s.Store.ReadQueueOffsets(ctx, name, group, []int{p})
		if old := hist[0]; err == nil && cur[0].Token == old.Token && old.Next < cur[0].Next {
			old.Version = cur[0].Version + 1
			if s.Store.CommitQueueOffset(ctx, name, group, p, old) == nil {
				s.mu.Lock()
				s.rewinds++
				s.mu.Unlock()
			}
		}
	}
	return s.Store.ClaimQueuePartition(ctx, name, group, p, token)
}

// churnScenario has no nack (so the consumer never acks out of order, and dead-letters
// nothing): consumers that leave and join, and freezes past the lease.
func churnScenario(open func(context.Context) (driver.Store, error)) QueueScenario {
	return QueueScenario{
		Open:      open,
		Producers: 1, Consumers: 2, Groups: 1, Partitions: 4,
		Events: 3000, Churn: 4, NackPercent: -1, PoisonEvery: -1, Freeze: true, FaultEvery: time.Second,
		Drain: 30 * time.Second,
	}
}

// TestQueueHarnessPassesACorrectStore: the scenario of the broken stores below, on the
// memory store as it is, passes.
func TestQueueHarnessPassesACorrectStore(t *testing.T) {
	if rep := passQueue(t, churnScenario(memoryQueue())); rep.Events < 3000 {
		t.Fatalf("%d events, want at least 3000:\n%v", rep.Events, rep)
	}
}

// TestQueueHarnessFindsARewindingStore: defect 1 (the offset moves backwards) through the
// real harness: memory store, goroutine consumers that leave and join, and freezes.
func TestQueueHarnessFindsARewindingStore(t *testing.T) {
	rs := &rewindStore{Store: keepQueueStore{memory.New()}, commits: map[offKey][]driver.QueueOffset{}}
	sc := churnScenario(func(context.Context) (driver.Store, error) { return rs.Store, nil })
	sc.Wrap = func(driver.Store) driver.Store { return rs }
	defer func() { t.Logf("offsets rewound: %d", rs.rewinds) }()
	findQueue(t, sc, ViolationRedelivered, "a store whose offsets move backwards")
}

// lostMarksStore breaks defect 2's guarantee on a consumer that persists acks out of
// order as marks: it drops them, so a successor delivers again what was acked above a
// pending (nacked) event.
type lostMarksStore struct{ driver.Store }

func (s lostMarksStore) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	off.Marks = ""
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

// rebalanceScenario is defect 2's scenario: no fault, consumers that leave and join
// (each join and leave moves partitions) while nacked events wait out a long backoff.
func rebalanceScenario(open func(context.Context) (driver.Store, error)) QueueScenario {
	return QueueScenario{
		Open:      open,
		Producers: 1, Consumers: 2, Groups: 1, Partitions: 4,
		Events: 2000, Churn: 3, NackPercent: 20, PoisonEvery: -1, MaxAttempts: 10,
		MinBackoff: 300 * time.Millisecond, MaxBackoff: time.Second,
		Drain: 30 * time.Second,
	}
}

func TestQueueHarnessFindsLostMarks(t *testing.T) {
	sc := rebalanceScenario(memoryQueue())
	sc.Wrap = func(s driver.Store) driver.Store { return lostMarksStore{s} }
	findQueue(t, sc, ViolationRedelivered, "a rebalance that loses acks above a pending nack")
}

// TestQueueRebalanceWithANackPending is defect 2 on the real consumer and the memory
// store, no fault: it fails on a consumer that releases a partition with a nacked
// event pending and commits only the acked prefix (main at 55e0164).
func TestQueueRebalanceWithANackPending(t *testing.T) {
	passQueue(t, rebalanceScenario(memoryQueue()))
}

// ghostDeadLetters breaks defect 3's guarantee: now and then, when a consumer reads an
// event partition, it lands a dead letter of one of the events read, as an unfenced
// dead-letter append of a paused owner would land after its successor took over.
type ghostDeadLetters struct {
	driver.Store
	partitions int
	group      string
	mu         sync.Mutex
	n          int
}

func (s *ghostDeadLetters) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	r, err := s.Store.ReadQueue(ctx, name, p, from, max)
	if err != nil || p >= s.partitions || len(r.Entries) == 0 {
		return r, err
	}
	s.mu.Lock()
	s.n++
	fire := s.n%10 == 0
	s.mu.Unlock()
	if !fire {
		return r, nil
	}
	e := r.Entries[len(r.Entries)-1]
	if e.Aborted {
		return r, nil
	}
	from2 := strconv.Itoa(p) + "/" + strconv.FormatUint(e.Seq, 10)
	// The consumer's dead-letter id: origin, group and the event's own id.
	id := "\x00dead\x00" + from2 + "\x00" + strconv.Itoa(len(s.group)) + ":" + s.group + "\x00" + e.ID
	_, _ = s.Store.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: s.partitions, Key: e.Key, ID: id, Payload: e.Payload}})
	return r, nil
}

func deadLetterScenario(open func(context.Context) (driver.Store, error)) QueueScenario {
	return QueueScenario{
		Open:      open,
		Producers: 1, Consumers: 2, Groups: 1, Partitions: 4,
		Events: 2000, NackPercent: 30, MaxAttempts: 2, Freeze: true, Churn: 5, FaultEvery: time.Second,
		Drain: 30 * time.Second,
	}
}

// TestQueueHarnessFindsGhostDeadLetters: defect 3 (an event dead-lettered and
// processed) through the real harness. With no nack and no pause the consumer itself
// dead-letters nothing, so what the checker finds is the store's doing, on any
// consumer.
func TestQueueHarnessFindsGhostDeadLetters(t *testing.T) {
	sc := churnScenario(memoryQueue())
	sc.Freeze = false
	sc.Wrap = func(s driver.Store) driver.Store { return &ghostDeadLetters{Store: s, partitions: 4, group: "g1"} }
	findQueue(t, sc, ViolationDeadAndAcked, "events both dead-lettered and acked")
}

// TestQueueDeadLettersUnderPauses is defect 3's scenario on the real consumer and the
// memory store: many dead letters (30% nacked, 2 attempts) while owners are frozen past
// their lease and consumers leave and join.
func TestQueueDeadLettersUnderPauses(t *testing.T) {
	passQueue(t, deadLetterScenario(memoryQueue()))
}
