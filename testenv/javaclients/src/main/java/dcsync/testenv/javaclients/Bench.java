package dcsync.testenv.javaclients;

import java.time.Duration;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;

/**
 * Timing of the Java libraries' own operations, in the JVM, for the benchmarks that compare
 * dcsync with them in one run (store/aerospike and store/hbase BenchmarkJavaRatio). Each
 * iteration is exactly the library's operation, as the other requests run it, and is timed with
 * System.nanoTime around the call alone: what a Java service calling the library would see,
 * without the request pipe. "warmup" untimed iterations run first (the JIT compiles the client's
 * paths after some thousands of calls).
 *
 * <pre>
 *   what      one iteration                                           the library's calls
 *   lock      LockBase.tryAcquireLock + LockBase.releaseLock          write (put / checkAndMutate
 *             of a fresh Lock instance                                + Put) + remove (delete)
 *   countdown the latch storage's decrementCount                      operate add / Increment
 *   count     the latch storage's getCount at "level"                 get / Get
 * </pre>
 *
 * The reply: {"ns": [per-iteration nanoseconds], "total": ns of the timed loop}.
 */
final class Bench {
  /** One iteration of the operation under test. */
  interface Op {
    void run() throws Exception;
  }

  private Bench() {}

  /** Runs warmup untimed iterations, then n timed ones. */
  static JsonObject run(Op op, int n, int warmup) throws Exception {
    for (int i = 0; i < warmup; i++) {
      op.run();
    }
    long[] ns = new long[n];
    long t0 = System.nanoTime();
    for (int i = 0; i < n; i++) {
      long s = System.nanoTime();
      op.run();
      ns[i] = System.nanoTime() - s;
    }
    long total = System.nanoTime() - t0;
    JsonArray a = new JsonArray(n);
    for (long v : ns) {
      a.add(v);
    }
    JsonObject out = new JsonObject();
    out.add("ns", a);
    out.addProperty("total", total);
    return out;
  }

  /** The lock iteration: acquire (tryAcquireLock) and release a fresh Lock instance. */
  static Op lock(Dlm dlm, String client, String farm, String name, String level, Duration ttl) {
    return () -> {
      Dlm.Lock l = Dlm.lockInstance(client, farm, name, level);
      dlm.tryAcquireLock(l, ttl);
      if (!dlm.releaseLock(l)) {
        throw new IllegalStateException("releaseLock returned false");
      }
    };
  }
}
