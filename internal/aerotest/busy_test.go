package aerotest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// TestKeyBusyUnderContention: many concurrent writes to one record make
// the server refuse some with KEY_BUSY (14) once more than
// transaction-pending-limit (20) wait behind the one executing; a refused
// write is not applied. On the real server each write increments an entry
// of a 5000-entry map so that writes take long enough to queue; aerotest
// holds each write 2 ms (SetWriteHold) instead.
func TestKeyBusyUnderContention(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "hot", "k")
		size := 5000
		if tg.srv != nil {
			size = 10
			tg.srv.SetWriteHold(2 * time.Millisecond)
		}
		items := map[any]any{}
		for i := 0; i < size; i++ {
			items[fmt.Sprintf("k%05d", i)] = 0
		}
		_, err := c.Operate(writePolicy(nil), k, as.MapPutItemsOp(as.DefaultMapPolicy(), "m", items))
		mustOK(t, "put items", err)
		const workers, perWorker = 64, 10
		var mu sync.Mutex
		ok, busy := 0, 0
		for attempt := 0; attempt < 5 && busy == 0; attempt++ {
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := writePolicy(func(p *as.WritePolicy) { p.TotalTimeout = 20 * time.Second })
					for i := 0; i < perWorker; i++ {
						_, err := c.Operate(p, k, as.MapIncrementOp(as.DefaultMapPolicy(), "m", "k00000", 1))
						mu.Lock()
						switch rc(err) {
						case types.OK:
							ok++
						case types.KEY_BUSY:
							busy++
						default:
							t.Errorf("increment: %v", err)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		if busy == 0 {
			t.Fatalf("no KEY_BUSY in 5 bursts of %d writers (%d writes applied)", workers, ok)
		}
		r, err := c.Operate(writePolicy(nil), k, as.MapGetByKeyOp("m", "k00000", as.MapReturnType.VALUE))
		mustOK(t, "get", err)
		if r.Bins["m"] != ok {
			t.Fatalf("counter %v after %d applied and %d busy writes: a refused write was applied", r.Bins["m"], ok, busy)
		}
		t.Logf("%s: %d writes applied, %d refused with KEY_BUSY", tg.name, ok, busy)
	})
}

// TestKeyBusyQueueLimit checks aerotest's hot-key model exactly, with the
// first write paused: 1 executing and 20+1 waiting are accepted (the
// server refuses a write when more than transaction-pending-limit already
// wait), every further write fails at once with KEY_BUSY and is not
// applied, and reads are not queued.
func TestKeyBusyQueueLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, accepted int
	}{{0, 22}, {2, 4}, {-1, 30}} {
		t.Run(fmt.Sprintf("limit=%d", tc.limit), func(t *testing.T) {
			srv := startServer(t, Options{TransactionPendingLimit: tc.limit})
			c := newClient(t, srv)
			k := key(t, "hot", "k")
			other := key(t, "hot", "other")
			wantRC(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"x": 0}), types.OK)
			release := srv.PauseWrites(func(cmd Command) bool { return cmd.Digest == [20]byte(k.Digest()) })
			defer release()
			const writers = 30
			results := make(chan types.ResultCode, writers)
			var wg sync.WaitGroup
			for i := 0; i < writers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := writePolicy(func(p *as.WritePolicy) { p.TotalTimeout = 30 * time.Second })
					_, err := c.Operate(p, k, as.AddOp(as.NewBin("x", 1)))
					results <- rc(err)
				}()
			}
			refused := writers - tc.accepted
			for i := 0; i < refused; i++ {
				if got := <-results; got != types.KEY_BUSY {
					t.Fatalf("write %d while the queue is full: %v", i, got)
				}
			}
			// Reads and other records are not held up.
			r, err := c.Get(nil, k)
			wantRC(t, "read while writes wait", err, types.OK)
			if r.Bins["x"] != 0 {
				t.Fatalf("x=%v before release", r.Bins["x"])
			}
			wantRC(t, "write to another record", c.Put(writePolicy(nil), other, as.BinMap{"y": 1}), types.OK)
			release()
			wg.Wait()
			close(results)
			for got := range results {
				if got != types.OK {
					t.Fatalf("queued write: %v", got)
				}
			}
			r, err = c.Get(nil, k)
			wantRC(t, "get", err, types.OK)
			if r.Bins["x"] != tc.accepted {
				t.Fatalf("x=%v, want %d", r.Bins["x"], tc.accepted)
			}
			if st := srv.Stats(); st.KeyBusy != int64(refused) {
				t.Fatalf("KeyBusy stat %d, want %d", st.KeyBusy, refused)
			}
		})
	}
}
