package dcsync.testenv.javaclients;

import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;

import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * One hand-over of a DLM lock from one Java holder to the next, with the library's own
 * operations, and what the row shows afterwards (op "hbase.lock.handover").
 *
 * <p>Holder A takes the lock ({@code LockBase.tryAcquireLock}, LockBase.java:99-102), holds it
 * "holdMs", and releases it ({@code LockBase.releaseLock}, LockBase.java:136-144: the row Delete of
 * HBaseStore.java:101-107, stamped by the server). Holder B, another Lock instance (as another
 * service has), takes it next:
 *
 * <ul>
 *   <li>mode "waiter": B waits in {@code LockBase.acquireLock} (LockBase.java:114-134), started
 *       before A releases, trying every "sleepMs" (the library's sleepBetweenRetries, 1 s by
 *       default, LockConfiguration.java:97);
 *   <li>mode "backToBack": B calls {@code tryAcquireLock} right after A's release returns, in
 *       the same thread (a service that releases a lock and takes it again, or hands it to its
 *       next job).
 * </ul>
 *
 * <p>B's acquire is the checkAndMutate "D:L absent" with a Put stamped with the client clock
 * (HBaseStore.java:78-82). When that timestamp is at or before A's delete marker, B's Put is
 * hidden as soon as it is written: B holds a lock nobody can read. The reply says so ("visible":
 * whether a normal Get of D:L finds B's marker), with B's Put timestamp and A's delete marker
 * timestamp (read with a raw Scan: inspection, not a library operation). B is left holding; the
 * caller releases it with hbase.lock.release.
 */
final class Handover {
  private Handover() {}

  static JsonObject run(Dlm dlm, Connection conn, String table, Dlm.Lock a, Dlm.Lock b,
      Duration ttl, String mode, long holdMs, long sleepMs) throws Exception {
    final byte[] row = DlmHBaseStore.rowKey(a.lockId, a.level, a.farmId);
    dlm.tryAcquireLock(a, ttl); // LOCK_UNAVAILABLE propagates: the row must start free
    final long aPut = DlmHBaseStore.LAST_PUT_TS.get();
    final AtomicLong bPut = new AtomicLong();
    final AtomicReference<RuntimeException> bErr = new AtomicReference<>();
    final AtomicLong bTries = new AtomicLong();
    Thread waiter = null;
    if ("waiter".equals(mode)) {
      waiter = new Thread(() -> {
        try {
          // LockBase.acquireLock, counting its tries through the store.
          Dlm counting = new Dlm(new Dlm.Store() {
            @Override
            public void initialize() {
              dlm.store().initialize();
            }

            @Override
            public void write(String lockId, String level, String farmId, Duration t) {
              bTries.incrementAndGet();
              dlm.store().write(lockId, level, farmId, t);
            }

            @Override
            public void remove(String lockId, String level, String farmId) {
              dlm.store().remove(lockId, level, farmId);
            }
          });
          counting.acquireLock(b, ttl, Duration.ofSeconds(30), Duration.ofMillis(sleepMs));
          bPut.set(DlmHBaseStore.LAST_PUT_TS.get());
        } catch (RuntimeException e) {
          bErr.set(e);
        }
      }, "handover-waiter");
      waiter.start();
    } else if (!"backToBack".equals(mode)) {
      throw new IllegalArgumentException("mode must be waiter or backToBack, got " + mode);
    }
    Thread.sleep(holdMs);
    dlm.releaseLock(a);
    if (waiter != null) {
      waiter.join();
      if (bErr.get() != null) {
        throw bErr.get();
      }
    } else {
      bTries.incrementAndGet();
      dlm.tryAcquireLock(b, ttl);
      bPut.set(DlmHBaseStore.LAST_PUT_TS.get());
    }
    JsonObject out = new JsonObject();
    out.addProperty("aPutTs", aPut);
    out.addProperty("bPutTs", bPut.get());
    out.addProperty("bTries", bTries.get());
    try (Table t = conn.getTable(TableName.valueOf(table))) {
      Result res = t.get(new Get(row).addColumn(DlmHBaseStore.COLUMN_FAMILY,
          DlmHBaseStore.COLUMN_NAME));
      out.addProperty("visible", !res.isEmpty());
      out.add("raw", rawRow(t, row));
    }
    long marker = 0;
    for (var e : out.getAsJsonArray("raw")) {
      JsonObject c = e.getAsJsonObject();
      if ("DeleteFamily".equals(c.get("type").getAsString())) {
        marker = Math.max(marker, c.get("ts").getAsLong());
      }
    }
    out.addProperty("markerTs", marker);
    return out;
  }

  /** Every cell of the row as stored (a raw Scan, all versions): type, column, value, ts. */
  static JsonArray rawRow(Table t, byte[] row) throws IOException {
    JsonArray cells = new JsonArray();
    Scan s = new Scan().withStartRow(row, true).withStopRow(row, true).setRaw(true)
        .readAllVersions();
    try (ResultScanner sc = t.getScanner(s)) {
      for (Result r : sc) {
        for (Cell c : r.rawCells()) {
          JsonObject o = new JsonObject();
          o.addProperty("type", c.getType().toString());
          o.addProperty("family", Bytes.toString(CellUtil.cloneFamily(c)));
          o.addProperty("qualifier", Bytes.toString(CellUtil.cloneQualifier(c)));
          o.addProperty("valueHex", Bytes.toHex(CellUtil.cloneValue(c)));
          o.addProperty("ts", c.getTimestamp());
          cells.add(o);
        }
      }
    }
    return cells;
  }
}
