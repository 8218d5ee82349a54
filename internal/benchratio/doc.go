// Package benchratio runs the interleaved ratio benchmarks of the repository's tests
// (the BenchmarkRatio pattern): a dcsync operation and the raw store operation it is
// measured against alternate in one loop, so that the noise of a shared machine falls
// on both alike, and the benchmark reports each side's median, the ratio of their
// medians and of their means, and, with a call counter, each side's store calls per
// operation (exact: counted, so noise cannot change them).
//
// It is test support: only tests import it (docs/ARCHITECTURE.md, internal/archtest).
package benchratio
