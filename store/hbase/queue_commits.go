package hbase

import (
	"context"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.QueueCommitter = (*Store)(nil)

// maxCommitsAlone bounds the commits of one CommitQueueOffsets call made one at a
// time at once.
const maxCommitsAlone = 8

// CommitQueueOffsets implements driver.QueueCommitter. Every commit that is not a
// rewind and whose offset cell this store knows (it last wrote or read it, and
// CommitQueueOffset would write on it) makes its first attempt in one MultiMutate
// (one Multi RPC per region server): CommitQueueOffset's first attempt, a
// check-and-mutate conditioned on the exact bytes of the cell it replaces
// (compare-and-set), so an attempt that lands late, after later writes, changes
// nothing, with the cell read back in the same request. A refused attempt decides on
// the cell read back, as CommitQueueOffset does; a record whose attempt failed, was
// in doubt or needs another attempt, a rewind, and a commit whose cell is unknown are
// made by CommitQueueOffset's own attempts (up to maxCommitsAlone at once), carrying
// the batch's attempt (an attempt in doubt, then another token's claim, is a
// Connection error, not LockLost). Result i belongs to commits[i].
func (s *Store) CommitQueueOffsets(ctx context.Context, name, group string, commits []driver.QueueCommit) ([]error, error) {
	const op = "hbase.CommitQueueOffsets"
	if err := driver.ValidateQueueCommits(name, group, commits); err != nil {
		return nil, err
	}
	table, db, err := s.qbatchReady(ctx, op, name)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(commits))
	if len(commits) == 0 {
		return out, nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxCommitsAlone)
	// alone finishes commit i with CommitQueueOffset's attempts, from raw (cur) when
	// known.
	alone := func(i int, c *offsetCommit, raw []byte, cur driver.QueueOffset, known bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = c.finish(ctx, raw, cur, known)
		}()
	}
	cs := make([]*offsetCommit, len(commits))
	var actions []hbaserpc.Action
	var sent []int
	for i, cm := range commits {
		c := s.newOffsetCommit(db, table, name, group, cm.P, cm.Off)
		cs[i] = c
		raw, cur, known := c.guess()
		if !known || cm.Off.Next < cur.Next {
			alone(i, c, raw, cur, known)
			continue
		}
		cond := offsetCond(raw)
		actions = append(actions, hbaserpc.Action{Mutation: c.put(), Cond: &cond,
			Gets: []hbaserpc.Get{{Columns: []hbaserpc.Column{offsetColumn}}}})
		sent = append(sent, i)
	}
	if len(actions) > 0 {
		res, err := db.MultiMutate(ctx, table, actions)
		if len(res) != len(actions) {
			// No outcome per action: each is in doubt unless the call says it was
			// not sent.
			if err == nil || inDoubt(err) {
				err = driver.Errorf(dcsync.Connection, op, "outcome unknown: %d results for %d actions: %v", len(res), len(actions), err)
			}
			res = make([]hbaserpc.ActionResult, len(actions))
			for j := range res {
				res[j].Err = err
			}
		}
		for j, i := range sent {
			c, ar := cs[i], res[j]
			c.tries++
			switch {
			case ar.Err != nil && inDoubt(ar.Err):
				c.inDoubt(ar.Err)
				alone(i, c, nil, driver.QueueOffset{}, false)
			case ar.Err != nil:
				// Not applied: attempted again as at first.
				raw, cur, known := c.guess()
				alone(i, c, raw, cur, known)
			case ar.Applied:
				s.queue().sawOffset(c.row, c.nv)
			case len(ar.Reads) != 1:
				// Refused without the cell read back: read it.
				alone(i, c, nil, driver.QueueOffset{}, false)
			default:
				raw, cur, done, err := c.readBack(ar.Reads[0])
				if done {
					out[i] = err
					continue
				}
				alone(i, c, raw, cur, true)
			}
		}
	}
	wg.Wait()
	return out, nil
}
