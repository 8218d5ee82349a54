package chaos

import (
	"context"
	"math/rand/v2"
	"time"
)

// injectFault injects a fault that is possible at this turn of injectFaults and returns
// the name it is counted under ("" when it turned out not to be possible after all:
// nothing is counted).
type injectFault func(r *rand.Rand) string

// injectFaults injects faults until ctx ends. Every every/2 to 3·every/2 (at random) it
// asks options for the faults possible now, adds the store's fault (store, when not nil:
// it injects one and returns its name), picks one of them at random, injects it and
// counts it. seed tells the runs' random sources apart.
func injectFaults(ctx context.Context, seed uint64, every time.Duration, store func(r *rand.Rand) string,
	options func() []injectFault, count func(name string)) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed))
	for sleep(ctx, every/2+time.Duration(r.Int64N(int64(every)))) {
		opts := options()
		if store != nil {
			opts = append(opts, store)
		}
		if len(opts) == 0 {
			continue
		}
		if name := opts[r.IntN(len(opts))](r); name != "" {
			count(name)
		}
	}
}

// pauseLength is how long a pause or a freeze lasts: past base (the lease, or the
// locks' TTL) by 0.3 to 1 s, so that others take over meanwhile.
func pauseLength(r *rand.Rand, base time.Duration) time.Duration {
	return base + time.Duration(300+r.IntN(700))*time.Millisecond
}
