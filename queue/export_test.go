package queue

import "time"

// WithTrimPeriod sets how often at most a consumer trims (default 5 s), so that tests
// of retention see trims without waiting for the default.
func WithTrimPeriod(d time.Duration) Option {
	return func(o *options) { o.retentionCheckPeriod = d }
}
