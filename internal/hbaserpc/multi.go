package hbaserpc

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// Action is one operation of MultiMutate: a change to one row, optionally conditional.
type Action struct {
	// Mutation is the change: a *Put, *Delete or *Increment; its Row names the row.
	Mutation Mutation
	// Cond, when set, makes the action a check-and-mutate of the mutation's row:
	// Mutation is applied only when Cond holds (a RegionAction carrying a condition,
	// HBase 2.4+). Each conditional action is checked and applied on its own.
	Cond *Condition
	// Read, when non-nil, reads the action's row back after the mutation, in the same
	// request to the same server (a Get restricted to these columns; empty reads the
	// whole row), into ActionResult.Read: it sees the mutation and every write applied
	// to the row before it. Only for an unconditional Put or Delete (idempotent: when
	// either part fails, both are sent again).
	Read []Column
	// More, only with Cond, are further mutations of the same row (each Row empty or
	// the row), applied together with Mutation, atomically, when Cond holds (one
	// conditional RowMutations, as CheckAndMutate of several mutations).
	More []Mutation
	// Gets, only with Cond, read the action's row after the conditional mutation, in
	// the same request to the same server (each Get's Row is ignored), as
	// CheckAndMutateGets' gets do, into ActionResult.Reads. A read that fails makes
	// the action's outcome unknown (a Connection error), as a lost reply does.
	Gets []Get
}

// ActionResult is the outcome of one Action of MultiMutate.
type ActionResult struct {
	// Applied reports that the mutation was applied: for a conditional action, that
	// its condition held; for an unconditional one, that it succeeded.
	Applied bool
	// Cells are the cells the server returned (an Increment's new values).
	Cells []Cell
	// Read is the row read back after the mutation (Action.Read), when asked for.
	Read []Cell
	// Reads are what Action.Gets read, in order, when asked for.
	Reads [][]Cell
	// Resent reports that the action succeeded on an attempt after one whose outcome
	// was unknown. An Increment's Cells are then not necessarily the values it
	// produced: when the earlier attempt had been applied, HBase answers the resent
	// nonce with the counters' current values, which include any increments applied
	// since.
	Resent bool
	// Err is nil when the action completed (applied, or its condition did not hold).
	// Otherwise it is a *dcsync.Error: code Connection when the outcome is unknown
	// (the action may have been applied: see MultiMutate), any other code when the
	// action was not applied.
	Err error
}

// Limits of one MultiRequest: a server's actions beyond them go in further requests,
// sent concurrently.
const (
	maxMultiActions  = 1000
	maxMultiBytes    = 4 << 20
	maxMultiInFlight = 8 // requests in flight per MultiMutate call
)

// MultiMutate applies many actions to table with as few round trips as it can: it
// locates each action's row, groups the actions by region server (one MultiRequest
// per server, split when large, all sent concurrently), and returns one result per
// action, in order. Unconditional actions of one region share a non-atomic
// RegionAction; each conditional action is a RegionAction of its own, checked and
// applied atomically on its row. Actions are independent: there is no atomicity or
// ordering across them (actions on one row in one call are applied in the order
// given only when they go in one request, which is not promised).
//
// Retries: actions the server refused before applying them (region moved, not
// serving, server busy, a request that could not be sent) are retried, alone (the
// others' results are kept), after their regions are located again, with the
// client's backoff, up to Config.MaxAttempts rounds, bounded by ctx. When a request's
// outcome is unknown (its connection broke or it timed out after it was sent, or
// ctx ended while waiting for it), its idempotent actions are sent again: Puts,
// Deletes, nonce'd Increments (each Increment action has its own nonce, reused by
// every retry, so HBase applies it at most once) and conditional actions that
// CheckAndMutate would retry (nonce'd Increments leaving the condition alone).
//
// In doubt: an action's result has a Connection error, meaning the action may or
// may not have been applied, when a request carrying it had an unknown outcome and
// the action either could not be sent again (a conditional Put or Delete: a retry
// could find its own write and report the condition false) or was sent again without
// a known outcome before the attempts or ctx ran out. Every other error means the
// action was not applied. A conditional action whose condition failed has Applied
// false and no error. An action that succeeded after an unknown outcome is marked
// Resent: for an Increment, its cells may then be the counters' current values rather
// than the ones it produced.
//
// The returned error is nil when every action completed; InvalidArgument, with nil
// results, when an action is malformed (checked before any I/O); otherwise it is the
// first failed action's error, and the results give each action's outcome.
func (c *Client) MultiMutate(ctx context.Context, table string, actions []Action) ([]ActionResult, error) {
	const op = "hbase.MultiMutate"
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	m := &multiCall{c: c, op: op, table: table, actions: actions,
		protos:  make([]*pb.MutationProto, len(actions)),
		more:    make([][]*pb.MutationProto, len(actions)),
		conds:   make([]*pb.Condition, len(actions)),
		retry:   make([]bool, len(actions)),
		state:   make([]actionState, len(actions)),
		results: make([]ActionResult, len(actions)),
	}
	for i, a := range actions {
		if a.Mutation == nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: no mutation", i)
		}
		row := a.Mutation.mutationRow()
		if len(row) == 0 {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: empty row", i)
		}
		if (a.More != nil || a.Gets != nil) && a.Cond == nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: More and Gets are for a conditional action", i)
		}
		var nonce uint64
		if a.Mutation.needsNonce() || slices.ContainsFunc(a.More, func(mu Mutation) bool { return mu != nil && mu.needsNonce() }) {
			nonce = c.newNonce()
		}
		mp, err := fillRow(a.Mutation, row, nonce)
		if err != nil {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: %v", i, err)
		}
		m.protos[i] = mp
		for _, mu := range a.More {
			if mu == nil {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: nil mutation", i)
			}
			if r := mu.mutationRow(); len(r) != 0 && !bytes.Equal(r, row) {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: mutation row %q differs from row %q", i, r, row)
			}
			mp, err := fillRow(mu, row, nonce)
			if err != nil {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: %v", i, err)
			}
			m.more[i] = append(m.more[i], mp)
		}
		if a.Read != nil {
			switch a.Mutation.(type) {
			case *Put, *Delete:
			default:
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: Read is for a Put or a Delete", i)
			}
			if a.Cond != nil {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: Read is for an unconditional action", i)
			}
		}
		if a.Cond != nil {
			pc, err := a.Cond.toProto(row)
			if err != nil {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "action %d: %v", i, err)
			}
			m.conds[i] = pc
			m.retry[i] = c.retrySafe(*a.Cond, append([]Mutation{a.Mutation}, a.More...))
		} else {
			m.retry[i] = !a.Mutation.needsNonce() || nonce != 0
		}
	}
	if len(actions) == 0 {
		return m.results, nil
	}
	m.run(ctx)
	for i := range m.results {
		if err := m.results[i].Err; err != nil {
			return m.results, err
		}
	}
	return m.results, nil
}

// actionState is where an action of a multiCall stands.
type actionState struct {
	done  bool  // final: results[i] holds the outcome
	doubt bool  // a request carrying it had an unknown outcome
	last  error // the last attempt's error, while not done
}

// multiCall is one MultiMutate call.
type multiCall struct {
	c       *Client
	op      string
	table   string
	actions []Action
	protos  []*pb.MutationProto
	more    [][]*pb.MutationProto // Action.More of each action
	conds   []*pb.Condition
	retry   []bool // may be sent again after an unknown outcome

	mu      sync.Mutex // guards state and results while requests are in flight
	state   []actionState
	results []ActionResult
}

// regionBatch is the actions of one round bound for one region.
type regionBatch struct {
	region *Region
	idx    []int
}

// multiRequest is one MultiRequest of a round, and which actions it carries: its
// RegionActions in order, each with the action indexes it holds.
type multiRequest struct {
	server  string
	req     *pb.MultiRequest
	regions []*Region
	idx     [][]int
	kind    []raKind
}

// raKind is what a RegionAction of a multiRequest holds.
type raKind int

const (
	raPlain raKind = iota // unconditional mutations
	raCond                // one conditional action
	raRead                // the read-backs of earlier plain actions of its region
	raGets                // the Gets of the conditional action just before it
)

func (m *multiCall) pending() []int {
	var out []int
	for i := range m.state {
		if !m.state[i].done {
			out = append(out, i)
		}
	}
	return out
}

// finish records action i's final outcome (mu held or no request in flight).
func (m *multiCall) finish(i int, applied bool, cells []Cell, err error) {
	m.state[i].done = true
	m.results[i] = ActionResult{Applied: applied, Cells: cells, Err: err, Resent: err == nil && m.state[i].doubt}
}

// run drives the rounds until every action is final.
func (m *multiCall) run(ctx context.Context) {
	c := m.c
	for n := 1; ; n++ {
		pend := m.pending()
		if len(pend) == 0 {
			return
		}
		if err := ctx.Err(); err != nil {
			m.giveUp(pend, func(i int) error {
				return driver.Errorf(dcsync.Connection, m.op, "%v: gave up: %w", m.state[i].last, err)
			})
			return
		}
		m.round(ctx, pend)
		pend = m.pending()
		if len(pend) == 0 {
			return
		}
		if err := ctx.Err(); err != nil {
			m.giveUp(pend, func(i int) error {
				return driver.Errorf(dcsync.Connection, m.op, "%v: gave up: %w", m.state[i].last, err)
			})
			return
		}
		if n >= c.cfg.MaxAttempts {
			m.giveUp(pend, func(i int) error {
				return driver.Errorf(dcsync.RetriesExhausted, m.op, "%d attempts: %w", n, toDcsync(m.op, m.state[i].last))
			})
			return
		}
		c.log.Debug("hbase: retrying", "op", m.op, "attempt", n, "actions", len(pend), "err", m.state[pend[0]].last)
		if err := c.sleep(ctx, n); err != nil {
			m.giveUp(pend, func(i int) error {
				return driver.Errorf(dcsync.Connection, m.op, "%v: gave up: %w", m.state[i].last, err)
			})
			return
		}
	}
}

// giveUp ends the pending actions with errOf's error, or with an "outcome unknown"
// Connection error for those that may have been applied.
func (m *multiCall) giveUp(pend []int, errOf func(i int) error) {
	for _, i := range pend {
		err := errOf(i)
		if m.state[i].doubt {
			err = driver.Errorf(dcsync.Connection, m.op, "outcome unknown (an attempt may have been applied): %w", err)
		}
		m.finish(i, false, nil, err)
	}
}

// round locates the pending actions, sends them, and records what came back.
func (m *multiCall) round(ctx context.Context, pend []int) {
	c := m.c
	// Locate in descending row order: each hbase:meta lookup prefetches the regions
	// just before the one it finds.
	sort.SliceStable(pend, func(a, b int) bool {
		return bytes.Compare(m.protos[pend[a]].Row, m.protos[pend[b]].Row) > 0
	})
	byServer := map[string]map[string]*regionBatch{}
	var servers []string
	for _, i := range pend {
		r, err := c.locate(ctx, m.table, m.protos[i].Row)
		if err != nil {
			switch classify(err) {
			case kindRetry:
				m.state[i].last = err
				continue
			case kindCancelled:
				m.state[i].last = err
				return // run ends the call
			default:
				m.finish(i, false, nil, toDcsync(m.op, err))
				continue
			}
		}
		rs := byServer[r.Server]
		if rs == nil {
			rs = map[string]*regionBatch{}
			byServer[r.Server] = rs
			servers = append(servers, r.Server)
		}
		b := rs[string(r.Name)]
		if b == nil {
			b = &regionBatch{region: r}
			rs[string(r.Name)] = b
		}
		b.idx = append(b.idx, i)
	}
	var reqs []*multiRequest
	for _, server := range servers {
		reqs = append(reqs, m.build(server, byServer[server])...)
	}
	sem := make(chan struct{}, maxMultiInFlight)
	var wg sync.WaitGroup
	for _, mr := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.send(ctx, mr)
		}()
	}
	wg.Wait()
}

// build splits the actions of one server into MultiRequests within the limits.
func (m *multiCall) build(server string, rs map[string]*regionBatch) []*multiRequest {
	// Regions in key order, actions in call order within a region.
	batches := make([]*regionBatch, 0, len(rs))
	for _, b := range rs {
		sort.Ints(b.idx)
		batches = append(batches, b)
	}
	sort.Slice(batches, func(a, b int) bool { return bytes.Compare(batches[a].region.StartKey, batches[b].region.StartKey) < 0 })

	var out []*multiRequest
	var cur *multiRequest
	var curActions, curBytes int
	var plain *pb.RegionAction // the current request's non-atomic RegionAction of the current region
	var plainK int             // its position in cur
	var plainRegion *Region
	var reads *pb.RegionAction // its read-backs, sent after it
	var readIdx []int
	flushReads := func() {
		if reads != nil {
			cur.req.RegionAction = append(cur.req.RegionAction, reads)
			cur.regions = append(cur.regions, plainRegion)
			cur.idx = append(cur.idx, readIdx)
			cur.kind = append(cur.kind, raRead)
		}
		reads, readIdx = nil, nil
	}
	start := func() {
		if cur != nil {
			flushReads()
		}
		cur = &multiRequest{server: server, req: &pb.MultiRequest{NonceGroup: proto.Uint64(m.c.nonceGroup)}}
		out = append(out, cur)
		curActions, curBytes, plain = 0, 0, nil
	}
	start()
	for _, b := range batches {
		flushReads()
		plain, plainRegion = nil, b.region
		for _, i := range b.idx {
			size := proto.Size(m.protos[i]) + 16
			for _, mp := range m.more[i] {
				size += proto.Size(mp) + 16
			}
			if m.conds[i] != nil {
				size += proto.Size(m.conds[i]) + 64 + 64*len(m.actions[i].Gets)
			}
			if curActions > 0 && (curActions >= maxMultiActions || curBytes+size > maxMultiBytes) {
				start()
			}
			curActions++
			curBytes += size
			action := &pb.Action{Index: proto.Uint32(uint32(i)), Mutation: m.protos[i]}
			if m.conds[i] != nil {
				ra := &pb.RegionAction{
					Region: regionSpec(b.region), Atomic: proto.Bool(true), Condition: m.conds[i],
					Action: []*pb.Action{action},
				}
				for k, mp := range m.more[i] {
					ra.Action = append(ra.Action, &pb.Action{Index: proto.Uint32(uint32(1 + k)), Mutation: mp})
				}
				if len(m.more[i]) > 0 {
					action.Index = proto.Uint32(0)
				}
				cur.req.RegionAction = append(cur.req.RegionAction, ra)
				cur.regions = append(cur.regions, b.region)
				cur.idx = append(cur.idx, []int{i})
				cur.kind = append(cur.kind, raCond)
				if gets := m.actions[i].Gets; len(gets) > 0 {
					// The server runs the region actions of a request in order: the
					// reads see the conditional mutation.
					rd := &pb.RegionAction{Region: regionSpec(b.region)}
					for k, g := range gets {
						g.Row = m.protos[i].Row
						rd.Action = append(rd.Action, &pb.Action{Index: proto.Uint32(uint32(k)), Get: g.proto()})
					}
					cur.req.RegionAction = append(cur.req.RegionAction, rd)
					cur.regions = append(cur.regions, b.region)
					cur.idx = append(cur.idx, []int{i})
					cur.kind = append(cur.kind, raGets)
				}
				continue
			}
			if plain == nil {
				plain = &pb.RegionAction{Region: regionSpec(plainRegion)}
				cur.req.RegionAction = append(cur.req.RegionAction, plain)
				cur.regions = append(cur.regions, plainRegion)
				cur.idx = append(cur.idx, nil)
				cur.kind = append(cur.kind, raPlain)
				plainK = len(cur.idx) - 1
			}
			plain.Action = append(plain.Action, action)
			cur.idx[plainK] = append(cur.idx[plainK], i)
			if rd := m.actions[i].Read; rd != nil {
				if reads == nil {
					reads = &pb.RegionAction{Region: regionSpec(plainRegion)}
				}
				reads.Action = append(reads.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Get: toGetProto(m.protos[i].Row, rd)})
				readIdx = append(readIdx, i)
			}
		}
	}
	flushReads()
	return out
}

// send makes one MultiRequest and records the outcome of each action it carries.
func (m *multiCall) send(ctx context.Context, mr *multiRequest) {
	c := m.c
	resp := &pb.MultiResponse{}
	err := c.rpc(ctx, mr.server, serviceClient, "Multi", mr.req, resp)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		for _, r := range mr.regions {
			c.noteFailure(r, err)
		}
		for _, idx := range mr.idx {
			for _, i := range idx {
				m.failed(i, err)
			}
		}
		return
	}
	rars := resp.GetRegionActionResult()
	if len(rars) != len(mr.idx) {
		// Not the protocol: whatever the server did is unknown.
		bad := &connError{sent: true, err: fmt.Errorf("multi: %d region results for %d region actions", len(rars), len(mr.idx))}
		for _, idx := range mr.idx {
			for _, i := range idx {
				m.failed(i, bad)
			}
		}
		return
	}
	// A plain action with a read-back completes with its read; either failing fails it.
	applied := map[int][]Cell{}
	failedNow := map[int]bool{}
	conds := map[int]condOutcome{} // conditional actions with Gets, until their reads
	for k, rar := range rars {
		idx := mr.idx[k]
		if ex := rar.GetException(); ex != nil {
			e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
			c.noteFailure(mr.regions[k], e)
			for _, i := range idx {
				if !failedNow[i] {
					failedNow[i] = true
					if mr.kind[k] == raGets {
						// The conditional mutation before the reads ran: its outcome
						// without them is unknown to the caller.
						m.failed(i, &connError{sent: true, err: fmt.Errorf("multi: reads of conditional action %d: %w", i, e)})
						continue
					}
					m.failed(i, e)
				}
			}
			continue
		}
		if mr.kind[k] == raCond {
			i := idx[0]
			if len(m.actions[i].Gets) == 0 {
				// One conditional action: the server indexes its result 0.
				m.condResult(mr.regions[k], i, rar)
				continue
			}
			// Completed with its reads, by the raGets region action after it.
			for _, roe := range rar.GetResultOrException() {
				if ex := roe.GetException(); ex != nil {
					e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
					c.noteFailure(mr.regions[k], e)
					failedNow[i] = true
					m.failed(i, e)
					break
				}
			}
			if !failedNow[i] {
				var cells []Cell
				for _, roe := range rar.GetResultOrException() {
					cells = append(cells, cellsFromResult(roe.GetResult())...)
				}
				conds[i] = condOutcome{applied: rar.GetProcessed(), cells: cells}
			}
			continue
		}
		if mr.kind[k] == raGets {
			i := idx[0]
			if failedNow[i] {
				continue
			}
			co, ok := conds[i]
			reads := make([][]Cell, len(m.actions[i].Gets))
			got := 0
			for _, roe := range rar.GetResultOrException() {
				n := int(roe.GetIndex())
				if roe.GetException() != nil || n < 0 || n >= len(reads) {
					continue
				}
				reads[n] = cellsFromResult(roe.GetResult())
				got++
			}
			if !ok || got != len(reads) {
				// The mutation's outcome, or its reads, are missing: unknown.
				failedNow[i] = true
				m.failed(i, &connError{sent: true, err: fmt.Errorf("multi: conditional action %d without its result or its reads", i)})
				continue
			}
			m.finish(i, co.applied, co.cells, nil)
			m.results[i].Reads = reads
			continue
		}
		got := make(map[int]bool, len(idx))
		want := make(map[int]bool, len(idx))
		for _, i := range idx {
			want[i] = true
		}
		for _, roe := range rar.GetResultOrException() {
			i := int(roe.GetIndex())
			if !want[i] || got[i] {
				continue // not ours, or a duplicate: ignore
			}
			got[i] = true
			if ex := roe.GetException(); ex != nil {
				e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
				c.noteFailure(mr.regions[k], e)
				if !failedNow[i] {
					failedNow[i] = true
					m.failed(i, e)
				}
				continue
			}
			cells := cellsFromResult(roe.GetResult())
			switch {
			case failedNow[i]:
			case mr.kind[k] == raRead:
				mcells, ok := applied[i]
				if !ok {
					failedNow[i] = true
					m.failed(i, &connError{sent: true, err: fmt.Errorf("multi: read-back of action %d without its mutation's result", i)})
					continue
				}
				m.finish(i, true, mcells, nil)
				m.results[i].Read = cells
			case m.actions[i].Read != nil:
				applied[i] = cells
			default:
				m.finish(i, true, cells, nil)
			}
		}
		for _, i := range idx {
			if !got[i] && !failedNow[i] {
				failedNow[i] = true
				m.failed(i, &connError{sent: true, err: fmt.Errorf("multi: no result for action %d", i)})
			}
		}
	}
}

// condOutcome is a conditional action's outcome, kept until its reads come.
type condOutcome struct {
	applied bool
	cells   []Cell
}

// condResult records the outcome of conditional action i from its region result.
func (m *multiCall) condResult(r *Region, i int, rar *pb.RegionActionResult) {
	var cells []Cell
	for _, roe := range rar.GetResultOrException() {
		if ex := roe.GetException(); ex != nil {
			e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
			m.c.noteFailure(r, e)
			m.failed(i, e)
			return
		}
		cells = append(cells, cellsFromResult(roe.GetResult())...)
	}
	m.finish(i, rar.GetProcessed(), cells, nil)
}

// failed records an attempt's failure of action i: final, or to retry.
func (m *multiCall) failed(i int, err error) {
	st := &m.state[i]
	st.last = err
	switch classify(err) {
	case kindRetry:
		// Refused before it was applied (or never sent): retry.
	case kindInDoubt, kindCancelled:
		st.doubt = true
		if !m.retry[i] {
			m.finish(i, false, nil, driver.Errorf(dcsync.Connection, m.op, "outcome unknown: %w", err))
		}
		// Otherwise retried (a cancelled ctx ends the call in run).
	default:
		m.finish(i, false, nil, toDcsync(m.op, err))
	}
}
