package hbase

import (
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.QueueClaimer = (*Store)(nil)

// ClaimQueuePartitions implements driver.QueueClaimer: it reads the offset cells of
// every claimed partition in one MultiGet and writes those whose token is below the
// claim's in one MultiMutate (one Multi RPC per region server each), each write
// ClaimQueuePartition's: the same offset with the claim's token, by a check-and-mutate
// conditioned on the exact bytes read (compare-and-set), so a write that lands late,
// after later writes, changes nothing. A claim whose token is below the stored one is
// LockLost with the stored offset; one equal to it writes nothing and returns the
// stored offset. A partition named a second time in the batch, and a claim whose read
// or write failed, was refused (a commit or another claim got in) or has an unknown
// outcome, is then made by ClaimQueuePartition, alone, in the order of the claims (it
// reads again: its own token there means the write landed). Result i belongs to
// claims[i].
func (s *Store) ClaimQueuePartitions(ctx context.Context, name, group string, claims []driver.QueueClaim) ([]driver.QueueClaimResult, error) {
	const op = "hbase.ClaimQueuePartitions"
	if err := driver.ValidateQueueClaims(name, group, claims); err != nil {
		return nil, err
	}
	table, db, err := s.qbatchReady(ctx, op, name)
	if err != nil {
		return nil, err
	}
	out := make([]driver.QueueClaimResult, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	q := s.queue()
	alone := make([]bool, len(claims))
	seen := make(map[int]bool, len(claims))
	var idx []int
	var gets []hbaserpc.Get
	for i, c := range claims {
		if seen[c.P] {
			alone[i] = true
			continue
		}
		seen[c.P] = true
		idx = append(idx, i)
		gets = append(gets, hbaserpc.Get{Row: offsetRow(name, group, c.P), Columns: []hbaserpc.Column{offsetColumn}})
	}
	cells, err := db.MultiGet(ctx, table, gets)
	if err != nil || len(cells) != len(gets) {
		for _, i := range idx {
			alone[i] = true
		}
		idx = nil
	}
	var actions []hbaserpc.Action
	var writing []int
	var written []driver.QueueOffset
	for j, i := range idx {
		c := claims[i]
		row := gets[j].Row
		cur, raw, err := offsetOf("hbase.ClaimQueuePartition", cells[j])
		if err != nil {
			out[i].Err = err
			continue
		}
		q.sawOffset(row, raw)
		switch {
		case c.Token < cur.Token:
			out[i].Offset, out[i].Err = cur, driver.Errorf(dcsync.LockLost, "hbase.ClaimQueuePartition",
				"queue %q group %q partition %d is owned by token %d, above %d", name, group, c.P, cur.Token, c.Token)
			continue
		case c.Token == cur.Token:
			out[i].Offset = cur // a retried claim, or ours whose reply was lost
			continue
		}
		nv := cur
		nv.Token = c.Token
		cond := offsetCond(raw)
		actions = append(actions, hbaserpc.Action{Mutation: &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{
			{Family: famQueue, Qualifier: qualOffTok, Value: be64(c.Token)},
			{Family: famQueue, Qualifier: qualOffset, Value: encodeOffset(nv)},
		}}, Cond: &cond})
		writing, written = append(writing, i), append(written, nv)
	}
	if len(actions) > 0 {
		res, _ := db.MultiMutate(ctx, table, actions)
		if res == nil {
			for _, i := range writing {
				alone[i] = true
			}
		}
		for j, ar := range res {
			i := writing[j]
			if ar.Err != nil || !ar.Applied {
				alone[i] = true
				continue
			}
			q.sawOffset(actions[j].Mutation.(*hbaserpc.Put).Row, encodeOffset(written[j]))
			out[i].Offset = written[j]
		}
	}
	for i, c := range claims {
		if alone[i] {
			out[i].Offset, out[i].Err = s.ClaimQueuePartition(ctx, name, group, c.P, c.Token)
		}
	}
	return out, nil
}

// qbatchReady starts a batched queue call (ClaimQueuePartitions, CommitQueueOffsets)
// after its validation: the queue table ready, the context live (nothing sent yet),
// and the queue known (NotFound for the batch as a whole).
func (s *Store) qbatchReady(ctx context.Context, op, name string) (string, queueOps, error) {
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return "", nil, err
	}
	if err := ctx.Err(); err != nil {
		return "", nil, driver.Wrap(err, dcsync.Connection, op)
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return "", nil, err
	}
	return table, db, nil
}
