package dcsync.testenv.javaclients;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import com.aerospike.client.AerospikeClient;
import com.aerospike.client.AerospikeException;
import com.aerospike.client.IAerospikeClient;
import com.aerospike.client.Key;
import com.aerospike.client.Record;
import com.aerospike.client.policy.ClientPolicy;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * Interop witness for dcsync: performs exactly the operations of the public Java lock library
 * (PhonePe DLM) and latch library (PhonePe DistributedLatch) on the real HBase and Aerospike
 * Java clients. Every library operation lives in a class that cites the library source line it
 * mirrors: {@link DlmHBaseStore}, {@link DlmAerospikeStore}, {@link Dlm} (LockBase),
 * {@link LatchHBaseStorage}, {@link LatchAerospikeStorage}, {@link OneByteSimpleHash}.
 *
 * <p>Modes:
 *
 * <pre>
 *   serve                      one JSON request per stdin line, one JSON reply per stdout line
 *                              (requests run concurrently; replies carry the request's "id")
 *   call JSON                  one request, its reply on stdout; exit 0 ok, 3 LOCK_UNAVAILABLE,
 *                              1 any other failure
 *   selftest-prefix TSV_FILE   checks OneByteSimpleHash against the golden vectors (offline)
 * </pre>
 *
 * <p>Environment: DCSYNC_HBASE_ZK (host:port of ZooKeeper; znode parent
 * DCSYNC_HBASE_ZNODE_PARENT, default /hbase), DCSYNC_AEROSPIKE (host:port of a seed node),
 * DCSYNC_AEROSPIKE_NAMESPACE (default "test", overridden by a request's "ns"). Connections are
 * opened on first use.
 *
 * <p>A reply is {"id":..,"ok":true,"result":..} or {"id":..,"ok":false,"code":C,"message":..,
 * "causes":[{"class":..,"message":..,"resultCode":..,"inDoubt":..}]} where C is the library's
 * ErrorCode (LOCK_UNAVAILABLE, CONNECTION_ERROR, INTERNAL_ERROR, RETRIES_EXHAUSTED,
 * TABLE_CREATION_ERROR) or, for an exception the library does not catch, the exception's simple
 * class name (e.g. NullPointerException from HBaseLatchStorage.getCount on a missing latch).
 * The operations are listed in {@link #dispatch}.
 */
public final class Main {
  private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().create();

  private final Object hbaseLock = new Object();
  private Connection hbase;
  private final Object aeroLock = new Object();
  private IAerospikeClient aerospike;

  private Main() {}

  // ---- connections ----

  private Connection hbase() throws java.io.IOException {
    synchronized (hbaseLock) {
      if (hbase == null) {
        String zk = env("DCSYNC_HBASE_ZK", "");
        if (zk.isEmpty()) {
          throw new IllegalStateException("DCSYNC_HBASE_ZK is not set");
        }
        int i = zk.lastIndexOf(':');
        Configuration conf = HBaseConfiguration.create();
        conf.set("hbase.zookeeper.quorum", i >= 0 ? zk.substring(0, i) : zk);
        conf.set("hbase.zookeeper.property.clientPort", i >= 0 ? zk.substring(i + 1) : "2181");
        conf.set("zookeeper.znode.parent", env("DCSYNC_HBASE_ZNODE_PARENT", "/hbase"));
        conf.setInt("zookeeper.recovery.retry", 3);
        hbase = ConnectionFactory.createConnection(conf);
      }
      return hbase;
    }
  }

  private IAerospikeClient aerospike() {
    synchronized (aeroLock) {
      if (aerospike == null) {
        String addr = env("DCSYNC_AEROSPIKE", "");
        if (addr.isEmpty()) {
          throw new IllegalStateException("DCSYNC_AEROSPIKE is not set");
        }
        int i = addr.lastIndexOf(':');
        String host = i >= 0 ? addr.substring(0, i) : addr;
        int port = i >= 0 ? Integer.parseInt(addr.substring(i + 1)) : 3000;
        // The libraries take an already-built IAerospikeClient; a default ClientPolicy is what
        // their docs show. Its default write and read policies are the ones they copy.
        aerospike = new AerospikeClient(new ClientPolicy(), host, port);
      }
      return aerospike;
    }
  }

  private static String env(String name, String def) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? def : v;
  }

  // ---- request fields ----

  private static String str(JsonObject r, String name) {
    JsonElement e = r.get(name);
    if (e == null || e.isJsonNull()) {
      throw new IllegalArgumentException("missing field \"" + name + "\"");
    }
    return e.getAsString();
  }

  private static String str(JsonObject r, String name, String def) {
    JsonElement e = r.get(name);
    return e == null || e.isJsonNull() ? def : e.getAsString();
  }

  private static long num(JsonObject r, String name) {
    return Long.parseLong(str(r, name));
  }

  private static long num(JsonObject r, String name, long def) {
    JsonElement e = r.get(name);
    return e == null || e.isJsonNull() ? def : e.getAsLong();
  }

  /** "dc"/"DC" -> "DC", "xdc"/"XDC" -> "XDC" (the LockLevel / LatchLevel value). */
  private static String level(JsonObject r) {
    String l = str(r, "level").toUpperCase(Locale.ROOT);
    if (!l.equals("DC") && !l.equals("XDC")) {
      throw new IllegalArgumentException("level must be DC or XDC, got " + l);
    }
    return l;
  }

  private String ns(JsonObject r) {
    return str(r, "ns", env("DCSYNC_AEROSPIKE_NAMESPACE", "test"));
  }

  private DlmHBaseStore hbaseLockStore(JsonObject r) throws java.io.IOException {
    return new DlmHBaseStore(hbase(), str(r, "table"));
  }

  private DlmAerospikeStore aeroLockStore(JsonObject r) {
    return new DlmAerospikeStore(aerospike(), ns(r), str(r, "setSuffix"));
  }

  private Dlm.Lock lockOf(JsonObject r) {
    return Dlm.lockInstance(str(r, "client"), str(r, "farm"), str(r, "lock"), level(r));
  }

  // ---- operations ----

  /**
   * Runs one request. Library operations ("hbase.*", "as.*"; see the classes they call):
   *
   * <pre>
   *   hbase.lock.init        table                                      HBaseStore.initialize
   *   hbase.lock.tryAcquire  table level farm client lock ttl            LockBase.tryAcquireLock
   *   hbase.lock.acquire     ... ttl timeout sleepMs                     LockBase.acquireLock
   *   hbase.lock.release     table level farm client lock                HBaseStore.remove
   *   hbase.lock.contend     ... ttl threads durationMs holdMs pauseMs sleepMs timeout worker
   *   hbase.lock.handover    ... ttl mode holdMs sleepMs   A acquires, releases; B takes it next
   *                          (see Handover); replies B's Put ts, A's marker ts, visible, raw
   *   hbase.latch.create     suffix client latch farm count ttl          HBaseLatchStorage.initialize
   *   hbase.latch.countDown / hbase.latch.countUp  suffix client latch farm
   *   hbase.latch.count      suffix client latch farm level              HBaseLatchStorage.getCount
   *   as.lock.tryAcquire / acquire / release / contend   as hbase.lock.*, with ns setSuffix
   *   as.latch.create        ns setSuffix client latch farm count ttl    AerospikeLatchStorage.initialize
   *   as.latch.getOrCreate   ns setSuffix client latch farm ttl          DistributedLatchFactory.getOrCreate..
   *   as.latch.countDown / as.latch.countUp  ns setSuffix client latch farm ttl
   *   as.latch.count         ns setSuffix client latch farm level        AerospikeLatchStorage.getCount
   *   hbase.bench / as.bench what n warmup and the fields of the lock or latch op: n timed
   *                          iterations of the library's operation in the JVM ({@link Bench})
   * </pre>
   *
   * Inspection, NOT library operations: raw.hbase.row (table, key | rowHex: every cell, all
   * versions, with timestamps; "raw": true also returns delete markers and the cells they
   * hide, with their types), raw.hbase.rowkey (key), raw.as.record (ns set key: bins,
   * generation, ttl), ping.
   */
  private Object dispatch(JsonObject r) throws Exception {
    String op = str(r, "op");
    switch (op) {
      case "ping":
        return "pong";
      case "hbase.lock.init":
        hbaseLockStore(r).initialize();
        return null;
      case "hbase.lock.tryAcquire":
        new Dlm(hbaseLockStore(r)).tryAcquireLock(lockOf(r), Duration.ofSeconds(num(r, "ttl")));
        return null;
      case "hbase.lock.acquire":
        acquire(new Dlm(hbaseLockStore(r)), r);
        return null;
      case "hbase.lock.release":
        // LockBase.releaseLock (LockBase.java:136-144) calls remove when the Lock instance
        // acquired it; the tool keeps no instances between requests, so the caller says when.
        hbaseLockStore(r).remove(lockOf(r).lockId, level(r), str(r, "farm"));
        return null;
      case "hbase.lock.contend":
        return contend(new Dlm(hbaseLockStore(r)), r);
      case "hbase.lock.handover":
        return Handover.run(new Dlm(hbaseLockStore(r)), hbase(), str(r, "table"), lockOf(r),
            lockOf(r), Duration.ofSeconds(num(r, "ttl")), str(r, "mode"), num(r, "holdMs", 2),
            num(r, "sleepMs", 1000));
      case "hbase.latch.create":
        latchHBase(r).initialize(str(r, "client"), str(r, "farm"), str(r, "latch"),
            num(r, "count"), (int) num(r, "ttl"));
        return null;
      case "hbase.latch.countDown":
        latchHBase(r).decrementCount(str(r, "client"), str(r, "farm"), str(r, "latch"));
        return null;
      case "hbase.latch.countUp":
        latchHBase(r).incrementCount(str(r, "client"), str(r, "farm"), str(r, "latch"));
        return null;
      case "hbase.latch.count":
        return latchHBase(r).getCount(str(r, "client"), level(r), str(r, "farm"),
            str(r, "latch"));
      case "as.lock.tryAcquire":
        new Dlm(aeroLockStore(r)).tryAcquireLock(lockOf(r), Duration.ofSeconds(num(r, "ttl")));
        return null;
      case "as.lock.acquire":
        acquire(new Dlm(aeroLockStore(r)), r);
        return null;
      case "as.lock.release":
        aeroLockStore(r).remove(lockOf(r).lockId, level(r), str(r, "farm"));
        return null;
      case "as.lock.contend":
        return contend(new Dlm(aeroLockStore(r)), r);
      case "as.latch.create":
        latchAero(r).initialize(str(r, "client"), str(r, "farm"), str(r, "latch"),
            num(r, "count"), (int) num(r, "ttl"));
        return null;
      case "as.latch.getOrCreate":
        latchAero(r).getOrCreate(str(r, "client"), str(r, "farm"), str(r, "latch"),
            (int) num(r, "ttl"));
        return null;
      case "as.latch.countDown":
        latchAero(r).decrementCount(str(r, "client"), str(r, "farm"), str(r, "latch"),
            (int) num(r, "ttl"));
        return null;
      case "as.latch.countUp":
        latchAero(r).incrementCount(str(r, "client"), str(r, "farm"), str(r, "latch"),
            (int) num(r, "ttl"));
        return null;
      case "as.latch.count":
        return latchAero(r).getCount(str(r, "client"), level(r), str(r, "farm"),
            str(r, "latch"));
      case "hbase.bench":
        return hbaseBench(r);
      case "as.bench":
        return aeroBench(r);
      case "raw.hbase.rowkey":
        return Bytes.toHex(OneByteSimpleHash.distributedKey(str(r, "key")));
      case "raw.hbase.row":
        return rawRow(r);
      case "raw.as.record":
        return rawRecord(r);
      default:
        throw new IllegalArgumentException("unknown op " + op);
    }
  }

  private static int benchN(JsonObject r, String name, long def) {
    long n = num(r, name, def);
    if (n < 0 || n > 1_000_000) {
      throw new IllegalArgumentException(name + " must be in [0, 1000000], got " + n);
    }
    return (int) n;
  }

  /** hbase.bench: what = lock (table level farm client lock ttl), countdown, count. */
  private Object hbaseBench(JsonObject r) throws Exception {
    int n = benchN(r, "n", 500);
    int warmup = benchN(r, "warmup", 0);
    switch (str(r, "what")) {
      case "lock":
        return Bench.run(Bench.lock(new Dlm(hbaseLockStore(r)), str(r, "client"), str(r, "farm"),
            str(r, "lock"), level(r), Duration.ofSeconds(num(r, "ttl"))), n, warmup);
      case "countdown": {
        LatchHBaseStorage l = latchHBase(r);
        String c = str(r, "client"), f = str(r, "farm"), id = str(r, "latch");
        return Bench.run(() -> l.decrementCount(c, f, id), n, warmup);
      }
      case "count": {
        LatchHBaseStorage l = latchHBase(r);
        String c = str(r, "client"), lv = level(r), f = str(r, "farm"), id = str(r, "latch");
        return Bench.run(() -> l.getCount(c, lv, f, id), n, warmup);
      }
      default:
        throw new IllegalArgumentException("hbase.bench: unknown what " + str(r, "what"));
    }
  }

  /** as.bench: what = lock (ns setSuffix level farm client lock ttl), countdown, count. */
  private Object aeroBench(JsonObject r) throws Exception {
    int n = benchN(r, "n", 500);
    int warmup = benchN(r, "warmup", 0);
    switch (str(r, "what")) {
      case "lock":
        return Bench.run(Bench.lock(new Dlm(aeroLockStore(r)), str(r, "client"), str(r, "farm"),
            str(r, "lock"), level(r), Duration.ofSeconds(num(r, "ttl"))), n, warmup);
      case "countdown": {
        LatchAerospikeStorage l = latchAero(r);
        String c = str(r, "client"), f = str(r, "farm"), id = str(r, "latch");
        int ttl = (int) num(r, "ttl");
        return Bench.run(() -> l.decrementCount(c, f, id, ttl), n, warmup);
      }
      case "count": {
        LatchAerospikeStorage l = latchAero(r);
        String c = str(r, "client"), lv = level(r), f = str(r, "farm"), id = str(r, "latch");
        return Bench.run(() -> l.getCount(c, lv, f, id), n, warmup);
      }
      default:
        throw new IllegalArgumentException("as.bench: unknown what " + str(r, "what"));
    }
  }

  private LatchHBaseStorage latchHBase(JsonObject r) throws java.io.IOException {
    return new LatchHBaseStorage(hbase(), str(r, "suffix"));
  }

  private LatchAerospikeStorage latchAero(JsonObject r) {
    return new LatchAerospikeStorage(aerospike(), ns(r), str(r, "setSuffix"));
  }

  private static void acquire(Dlm dlm, JsonObject r) {
    dlm.acquireLock(Dlm.lockInstance(str(r, "client"), str(r, "farm"), str(r, "lock"), level(r)),
        Duration.ofSeconds(num(r, "ttl")), Duration.ofSeconds(num(r, "timeout", 90)),
        Duration.ofMillis(num(r, "sleepMs", 1000)));
  }

  private static long nowNanos() {
    Instant t = Instant.now(); // the wall clock (CLOCK_REALTIME), microseconds on Linux
    return t.getEpochSecond() * 1_000_000_000L + t.getNano();
  }

  /**
   * Contention workers: "threads" threads, each with its own Lock instance (as separate
   * services would have), loop until "durationMs" has passed: LockBase.acquireLock (wait
   * "timeout" s, "sleepMs" between tries), note the wall-clock start, sleep "holdMs", note the
   * end, LockBase.releaseLock, then sleep "pauseMs" (other work) before the next acquire.
   * Returns every hold interval (epoch ns, this host's clock) and, on HBase, the client-clock
   * timestamp (ms) of the Put that acquired it.
   */
  private static JsonObject contend(Dlm dlm, JsonObject r) throws InterruptedException {
    final int threads = (int) num(r, "threads", 2);
    final long deadline = System.currentTimeMillis() + num(r, "durationMs");
    final long holdMs = num(r, "holdMs", 5);
    final long pauseMs = num(r, "pauseMs", 0);
    final String prefix = str(r, "worker", "java");
    final JsonArray intervals = new JsonArray();
    final AtomicLong waitTimeouts = new AtomicLong();
    final AtomicLong errors = new AtomicLong();
    final List<String> firstErrors = new ArrayList<>();
    List<Thread> ts = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      final String worker = prefix + i;
      Thread t = new Thread(() -> {
        while (System.currentTimeMillis() < deadline) {
          Dlm.Lock lock = Dlm.lockInstance(str(r, "client"), str(r, "farm"), str(r, "lock"),
              level(r));
          try {
            dlm.acquireLock(lock, Duration.ofSeconds(num(r, "ttl")),
                Duration.ofSeconds(num(r, "timeout", 5)), Duration.ofMillis(num(r, "sleepMs", 5)));
          } catch (LibException e) {
            if ("LOCK_UNAVAILABLE".equals(e.code)) {
              waitTimeouts.incrementAndGet();
            } else {
              noteError(errors, firstErrors, worker + " acquire", e);
            }
            continue;
          }
          long start = nowNanos();
          long putTs = DlmHBaseStore.LAST_PUT_TS.get(); // 0 on Aerospike
          try {
            Thread.sleep(holdMs);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          long end = nowNanos();
          JsonObject iv = new JsonObject();
          iv.addProperty("worker", worker);
          iv.addProperty("start", start);
          iv.addProperty("end", end);
          if (putTs != 0) {
            iv.addProperty("putTs", putTs);
          }
          synchronized (intervals) {
            intervals.add(iv);
          }
          try {
            dlm.releaseLock(lock);
          } catch (RuntimeException e) {
            noteError(errors, firstErrors, worker + " release", e);
          }
          if (pauseMs > 0) {
            try {
              Thread.sleep(pauseMs);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        }
      }, worker);
      t.start();
      ts.add(t);
    }
    for (Thread t : ts) {
      t.join();
    }
    JsonObject out = new JsonObject();
    out.add("intervals", intervals);
    out.addProperty("waitTimeouts", waitTimeouts.get());
    out.addProperty("errors", errors.get());
    synchronized (firstErrors) {
      out.add("firstErrors", GSON.toJsonTree(firstErrors));
    }
    return out;
  }

  private static void noteError(AtomicLong n, List<String> first, String what, Exception e) {
    n.incrementAndGet();
    synchronized (first) {
      if (first.size() < 5) {
        first.add(what + ": " + describe(e));
      }
    }
  }

  private static String describe(Throwable e) {
    StringBuilder sb = new StringBuilder();
    for (Throwable c = e; c != null; c = c.getCause()) {
      if (sb.length() > 0) {
        sb.append(" <- ");
      }
      sb.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
      if (c.getCause() == c) {
        break;
      }
    }
    return sb.toString();
  }

  private JsonObject rawRow(JsonObject r) throws java.io.IOException {
    byte[] row = r.has("rowHex") ? Bytes.fromHex(str(r, "rowHex"))
        : OneByteSimpleHash.distributedKey(str(r, "key"));
    try (Table t = hbase().getTable(TableName.valueOf(str(r, "table")))) {
      if (r.has("raw") && r.get("raw").getAsBoolean()) {
        JsonObject out = new JsonObject();
        out.addProperty("rowHex", Bytes.toHex(row));
        out.add("cells", Handover.rawRow(t, row));
        return out;
      }
      Result res = t.get(new Get(row).readAllVersions());
      JsonArray cells = new JsonArray();
      for (Cell c : res.rawCells()) {
        JsonObject o = new JsonObject();
        o.addProperty("family", Bytes.toString(CellUtil.cloneFamily(c)));
        o.addProperty("qualifier", Bytes.toString(CellUtil.cloneQualifier(c)));
        o.addProperty("valueHex", Bytes.toHex(CellUtil.cloneValue(c)));
        o.addProperty("ts", c.getTimestamp());
        cells.add(o);
      }
      JsonObject out = new JsonObject();
      out.addProperty("rowHex", Bytes.toHex(row));
      out.add("cells", cells);
      return out;
    }
  }

  private JsonObject rawRecord(JsonObject r) {
    Record rec = aerospike().get(null, new Key(ns(r), str(r, "set"), str(r, "key")));
    JsonObject out = new JsonObject();
    out.addProperty("found", rec != null);
    if (rec != null) {
      out.add("bins", GSON.toJsonTree(rec.bins));
      out.addProperty("generation", rec.generation);
      out.addProperty("ttl", rec.getTimeToLive());
    }
    return out;
  }

  // ---- replies ----

  private static JsonObject reply(JsonElement id, Object result) {
    JsonObject o = new JsonObject();
    o.add("id", id);
    o.addProperty("ok", true);
    o.add("result", GSON.toJsonTree(result));
    return o;
  }

  private static JsonObject failure(JsonElement id, Throwable e) {
    JsonObject o = new JsonObject();
    o.add("id", id);
    o.addProperty("ok", false);
    o.addProperty("code", e instanceof LibException le ? le.code : e.getClass().getSimpleName());
    o.addProperty("message", String.valueOf(e.getMessage()));
    JsonArray causes = new JsonArray();
    int depth = 0;
    for (Throwable c = e; c != null && depth < 8; c = c.getCause(), depth++) {
      JsonObject co = new JsonObject();
      co.addProperty("class", c.getClass().getName());
      co.addProperty("message", String.valueOf(c.getMessage()));
      if (c instanceof AerospikeException ae) {
        co.addProperty("resultCode", ae.getResultCode());
        co.addProperty("inDoubt", ae.getInDoubt());
      }
      causes.add(co);
      if (c.getCause() == c) {
        break;
      }
    }
    o.add("causes", causes);
    return o;
  }

  private JsonObject handle(String line) {
    JsonElement id = null;
    try {
      JsonObject req = JsonParser.parseString(line).getAsJsonObject();
      id = req.get("id");
      return reply(id, dispatch(req));
    } catch (Throwable e) {
      return failure(id, e);
    }
  }

  private void close() {
    try {
      synchronized (hbaseLock) {
        if (hbase != null) {
          hbase.close();
        }
      }
      synchronized (aeroLock) {
        if (aerospike != null) {
          aerospike.close();
        }
      }
    } catch (Exception e) {
      System.err.println("javaclients: close: " + e);
    }
  }

  private void serve(PrintStream out) throws Exception {
    ExecutorService pool = Executors.newCachedThreadPool(rn -> {
      Thread t = new Thread(rn, "request");
      t.setDaemon(true);
      return t;
    });
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    out.println("{\"ready\":true}");
    out.flush();
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      final String l = line;
      pool.execute(() -> {
        String reply = GSON.toJson(handle(l));
        synchronized (out) {
          out.println(reply);
          out.flush();
        }
      });
    }
    // stdin closed: finish what is running, then leave.
    pool.shutdown();
    pool.awaitTermination(5, TimeUnit.MINUTES);
    close();
  }

  public static void main(String[] args) {
    // The protocol owns the real stdout; anything else printing to System.out goes to stderr.
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false,
        StandardCharsets.UTF_8);
    System.setOut(System.err);
    int code = 0;
    Main m = new Main();
    try {
      String mode = args.length == 0 ? "serve" : args[0];
      switch (mode) {
        case "serve":
          m.serve(out);
          break;
        case "call": {
          if (args.length != 2) {
            throw new IllegalArgumentException("usage: call JSON");
          }
          JsonObject reply = m.handle(args[1]);
          out.println(GSON.toJson(reply));
          if (!reply.get("ok").getAsBoolean()) {
            code = "LOCK_UNAVAILABLE".equals(reply.get("code").getAsString()) ? 3 : 1;
          }
          m.close();
          break;
        }
        case "selftest-prefix":
          if (args.length != 2) {
            throw new IllegalArgumentException("usage: selftest-prefix TSV_FILE");
          }
          out.println(OneByteSimpleHash.selftest(Paths.get(args[1])));
          break;
        default:
          throw new IllegalArgumentException("unknown mode " + mode
              + " (serve | call JSON | selftest-prefix TSV_FILE)");
      }
    } catch (Throwable e) {
      out.println("error: " + describe(e));
      code = e instanceof IllegalArgumentException ? 2 : 1;
    }
    out.flush();
    // HBase, ZooKeeper and Aerospike client threads may linger: exit explicitly.
    Runtime.getRuntime().halt(code);
  }
}
