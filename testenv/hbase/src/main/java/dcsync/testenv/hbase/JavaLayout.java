package dcsync.testenv.hbase;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.RawCell;
import org.apache.hadoop.hbase.ServerName;
import org.apache.hadoop.hbase.Tag;
import org.apache.hadoop.hbase.TagType;
import org.apache.hadoop.hbase.TableExistsException;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Delete;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Increment;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.io.compress.Compression;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * Interop tool: writes and reads exactly the HBase layout of the public Java lock (HBaseStore)
 * and latch (HBaseLatchStorage) libraries, with the real HBase Java client.
 *
 * Connects to ZooKeeper at $DCSYNC_HBASE_ZK (host:port, default 127.0.0.1:21818), znode parent
 * $DCSYNC_HBASE_ZNODE_PARENT (default /hbase). Prints one result line to stdout; exit 0 on
 * success, 1 on error, 2 on usage error, 3 when a lock is unavailable.
 */
public final class JavaLayout {
  static final byte[] LATCH_CF = Bytes.toBytes("C");
  static final byte[] LOCK_CF = Bytes.toBytes("D");
  static final byte[] LOCK_Q = Bytes.toBytes("L");
  static final byte[] LOCK_VALUE = Bytes.toBytes("M");

  static final int EXIT_ERROR = 1;
  static final int EXIT_USAGE = 2;
  static final int EXIT_UNAVAILABLE = 3;

  static final class Exit extends RuntimeException {
    final int code;

    Exit(int code, String msg) {
      super(msg);
      this.code = code;
    }
  }

  private JavaLayout() {}

  // ---- row keys (RowKeyDistributorByHashPrefix + OneByteSimpleHash(256), HBaseWD) ----

  /** OneByteSimpleHash(256).getHashPrefix: abs(Arrays.hashCode(key)) % 256, as one byte. */
  static byte prefixOf(byte[] logical) {
    long hash = Math.abs(Arrays.hashCode(logical)); // Math.abs(int): MIN_VALUE stays negative
    return (byte) (hash % 256);
  }

  static byte[] distributedKey(String logical) {
    byte[] k = logical.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[k.length + 1];
    out[0] = prefixOf(k);
    System.arraycopy(k, 0, out, 1, k.length);
    return out;
  }

  /** All 256 one-byte prefixes 0x00..0xFF (as the vectors file documents). */
  static byte[][] splitKeys() {
    byte[][] keys = new byte[256][];
    for (int i = 0; i < 256; i++) {
      keys[i] = new byte[] {(byte) i};
    }
    return keys;
  }

  static String latchTable(String suffix) {
    return "D_LTCH_" + suffix;
  }

  static byte[] latchRow(String client, String latch) {
    return distributedKey(client + "_" + latch);
  }

  static byte[] latchQualifier(String farm) {
    return Bytes.toBytes("count_" + farm);
  }

  static String lockLogicalKey(String level, String farm, String client, String lock) {
    String lockId = client + "#" + lock;
    switch (level) {
      case "dc":
        return "DC#" + farm + "#" + lockId;
      case "xdc":
        return "XDC#" + lockId;
      default:
        throw new Exit(EXIT_USAGE, "level must be dc or xdc, got " + level);
    }
  }

  // ---- connection / schema ----

  static Configuration clientConf() {
    String zk = System.getenv("DCSYNC_HBASE_ZK");
    if (zk == null || zk.isEmpty()) {
      zk = "127.0.0.1:21818";
    }
    String host = zk;
    String port = "2181";
    int i = zk.lastIndexOf(':');
    if (i >= 0) {
      host = zk.substring(0, i);
      port = zk.substring(i + 1);
    }
    String parent = System.getenv("DCSYNC_HBASE_ZNODE_PARENT");
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", host);
    conf.set("hbase.zookeeper.property.clientPort", port);
    conf.set("zookeeper.znode.parent", parent == null || parent.isEmpty() ? "/hbase" : parent);
    conf.setInt("hbase.client.operation.timeout", 120_000);
    conf.setInt("hbase.rpc.timeout", 60_000);
    conf.setInt("zookeeper.recovery.retry", 3);
    SecureCheck.clientSecurity(conf);
    return conf;
  }

  static void ensureTable(Admin admin, TableDescriptor desc) throws IOException {
    if (admin.tableExists(desc.getTableName())) {
      return;
    }
    try {
      admin.createTable(desc, splitKeys());
    } catch (TableExistsException e) {
      // created concurrently
    }
  }

  static TableDescriptor latchDescriptor(String tableName) {
    return TableDescriptorBuilder.newBuilder(TableName.valueOf(tableName))
        .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(LATCH_CF)
            .setCompressionType(Compression.Algorithm.GZ)
            .build())
        .build();
  }

  static TableDescriptor lockDescriptor(String tableName) {
    return TableDescriptorBuilder.newBuilder(TableName.valueOf(tableName))
        .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(LOCK_CF)
            .setCompressionType(Compression.Algorithm.GZ)
            .setMaxVersions(1)
            .build())
        .build();
  }

  // ---- subcommands ----

  static void need(String[] a, int n, String usage) {
    if (a.length != n + 1) {
      throw new Exit(EXIT_USAGE, "usage: " + a[0] + " " + usage);
    }
  }

  static long parseTtlMillis(String s) {
    return Long.parseLong(s) * 1000L;
  }

  static String run(String[] a) throws Exception {
    String cmd = a[0];
    switch (cmd) {
      case "selftest-prefix":
        need(a, 1, "TSV_FILE");
        return selftestPrefix(a[1]);
      case "rowkey":
        need(a, 1, "LOGICAL_KEY");
        return Bytes.toHex(distributedKey(a[1]));
      default:
        break;
    }
    try (Connection conn = ConnectionFactory.createConnection(clientConf())) {
      switch (cmd) {
        case "latch-create": {
          need(a, 6, "SUFFIX CLIENT LATCH FARM COUNT TTL_SECONDS");
          String table = latchTable(a[1]);
          try (Admin admin = conn.getAdmin()) {
            ensureTable(admin, latchDescriptor(table));
          }
          return Long.toString(increment(conn, table, a[2], a[3], a[4], Long.parseLong(a[5]),
              parseTtlMillis(a[6])));
        }
        case "latch-countdown":
        case "latch-countup": {
          need(a, 5, "SUFFIX CLIENT LATCH FARM TTL_SECONDS");
          long delta = cmd.equals("latch-countdown") ? -1 : 1;
          return Long.toString(increment(conn, latchTable(a[1]), a[2], a[3], a[4], delta,
              parseTtlMillis(a[5])));
        }
        case "latch-count": {
          need(a, 5, "SUFFIX CLIENT LATCH FARM dc|xdc");
          return latchCount(conn, latchTable(a[1]), a[2], a[3], a[4], a[5]);
        }
        case "lock-acquire": {
          need(a, 6, "TABLE dc|xdc FARM CLIENT LOCK TTL_SECONDS");
          byte[] row = distributedKey(lockLogicalKey(a[2], a[3], a[4], a[5]));
          try (Admin admin = conn.getAdmin()) {
            ensureTable(admin, lockDescriptor(a[1]));
          }
          Put put = new Put(row, System.currentTimeMillis());
          put.setTTL(parseTtlMillis(a[6]));
          put.addColumn(LOCK_CF, LOCK_Q, LOCK_VALUE);
          boolean ok;
          try (Table t = conn.getTable(TableName.valueOf(a[1]))) {
            @SuppressWarnings("deprecation")
            boolean r = t.checkAndMutate(row, LOCK_CF).qualifier(LOCK_Q).ifNotExists().thenPut(put);
            ok = r;
          }
          if (!ok) {
            throw new Exit(EXIT_UNAVAILABLE, "unavailable");
          }
          return "acquired";
        }
        case "lock-release": {
          need(a, 5, "TABLE dc|xdc FARM CLIENT LOCK");
          byte[] row = distributedKey(lockLogicalKey(a[2], a[3], a[4], a[5]));
          try (Table t = conn.getTable(TableName.valueOf(a[1]))) {
            t.delete(new Delete(row));
          }
          return "released";
        }
        case "lock-held": {
          need(a, 5, "TABLE dc|xdc FARM CLIENT LOCK");
          byte[] row = distributedKey(lockLogicalKey(a[2], a[3], a[4], a[5]));
          try (Table t = conn.getTable(TableName.valueOf(a[1]))) {
            Result r = t.get(new Get(row).addColumn(LOCK_CF, LOCK_Q));
            return r.isEmpty() ? "free" : "held";
          }
        }
        case "dump-row": {
          need(a, 2, "TABLE ROW_HEX");
          return dumpRow(conn, a[1], Bytes.fromHex(a[2]));
        }
        case "describe": {
          need(a, 1, "TABLE");
          try (Admin admin = conn.getAdmin()) {
            TableName tn = TableName.valueOf(a[1]);
            if (!admin.tableExists(tn)) {
              return "absent";
            }
            return admin.getDescriptor(tn) + " regions=" + admin.getRegions(tn).size();
          }
        }
        case "health": {
          if (a.length > 2) {
            throw new Exit(EXIT_USAGE, "usage: health [WAIT_SECONDS]");
          }
          return health(a.length == 2 ? Integer.parseInt(a[1]) : 0);
        }
        default:
          throw new Exit(EXIT_USAGE, "unknown subcommand " + cmd);
      }
    }
  }

  static long increment(Connection conn, String table, String client, String latch, String farm,
      long amount, long ttlMillis) throws IOException {
    Increment inc = new Increment(latchRow(client, latch));
    inc.addColumn(LATCH_CF, latchQualifier(farm), amount);
    if (ttlMillis > 0) {
      inc.setTTL(ttlMillis);
    }
    try (Table t = conn.getTable(TableName.valueOf(table))) {
      Result r = t.increment(inc);
      return Bytes.toLong(r.getValue(LATCH_CF, latchQualifier(farm)));
    }
  }

  static String latchCount(Connection conn, String table, String client, String latch,
      String farm, String level) throws IOException {
    Get get = new Get(latchRow(client, latch));
    switch (level) {
      case "dc":
        get.addColumn(LATCH_CF, latchQualifier(farm));
        break;
      case "xdc":
        get.addFamily(LATCH_CF);
        break;
      default:
        throw new Exit(EXIT_USAGE, "level must be dc or xdc, got " + level);
    }
    try (Table t = conn.getTable(TableName.valueOf(table))) {
      Result r = t.get(get);
      if (r.isEmpty()) {
        return "absent";
      }
      long sum = 0;
      for (Cell c : r.rawCells()) {
        sum += Bytes.toLong(CellUtil.cloneValue(c));
      }
      return Long.toString(sum);
    }
  }

  static String dumpRow(Connection conn, String table, byte[] row) throws IOException {
    try (Table t = conn.getTable(TableName.valueOf(table))) {
      Result r = t.get(new Get(row).readAllVersions());
      if (r.isEmpty()) {
        return "row " + Bytes.toHex(row) + ": no cells";
      }
      StringBuilder sb = new StringBuilder();
      for (Cell c : r.rawCells()) {
        if (sb.length() > 0) {
          sb.append('\n');
        }
        sb.append(Bytes.toString(CellUtil.cloneFamily(c))).append(':')
            .append(Bytes.toStringBinary(CellUtil.cloneQualifier(c)))
            .append(" value=").append(Bytes.toHex(CellUtil.cloneValue(c)))
            .append(" ts=").append(c.getTimestamp())
            .append(" type=").append(c.getType());
        if (c instanceof RawCell) {
          Optional<Tag> ttl = ((RawCell) c).getTag(TagType.TTL_TAG_TYPE);
          if (ttl.isPresent()) {
            sb.append(" ttl_ms=").append(Bytes.toLong(Tag.cloneValue(ttl.get())));
          } else {
            sb.append(" ttl=not-visible");
          }
        }
      }
      return sb.toString();
    }
  }

  static String health(int waitSeconds) throws InterruptedException {
    long deadline = System.nanoTime() + waitSeconds * 1_000_000_000L;
    Exception last = null;
    do {
      Configuration conf = clientConf();
      conf.setInt("hbase.client.retries.number", 5);
      conf.setInt("hbase.client.operation.timeout", 30_000);
      try (Connection conn = ConnectionFactory.createConnection(conf);
          Admin admin = conn.getAdmin()) {
        TableName tn = TableName.valueOf("dcsync_health_" + ProcessHandle.current().pid() + "_"
            + System.currentTimeMillis());
        admin.createTable(TableDescriptorBuilder.newBuilder(tn)
            .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(LOCK_CF)
                .setCompressionType(Compression.Algorithm.GZ).build())
            .build());
        try (Table t = conn.getTable(tn)) {
          t.put(new Put(Bytes.toBytes("r")).addColumn(LOCK_CF, LOCK_Q, LOCK_VALUE));
          Result r = t.get(new Get(Bytes.toBytes("r")));
          if (!Arrays.equals(LOCK_VALUE, r.getValue(LOCK_CF, LOCK_Q))) {
            throw new IOException("health: read back mismatch");
          }
        }
        admin.disableTable(tn);
        admin.deleteTable(tn);
        ServerName master = admin.getMaster();
        List<String> rs = new ArrayList<>();
        for (ServerName sn : admin.getRegionServers()) {
          rs.add(sn.toString());
        }
        return "ok master=" + master + " regionservers=" + String.join(",", rs);
      } catch (Exception e) {
        last = e;
        if (waitSeconds > 0) {
          System.err.println("health: not ready yet: " + e);
          Thread.sleep(2000);
        }
      }
    } while (System.nanoTime() < deadline);
    throw new Exit(EXIT_ERROR, "health failed: " + last);
  }

  static String selftestPrefix(String file) throws IOException {
    int n = 0;
    List<String> failures = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(file), StandardCharsets.UTF_8)) {
      if (line.startsWith("#") || line.isEmpty()) {
        continue;
      }
      String[] f = line.split("\t", -1);
      if (f.length != 3) {
        throw new IOException("bad vector line: " + line);
      }
      byte[] key = f[0].getBytes(StandardCharsets.UTF_8);
      int hash = Arrays.hashCode(key);
      int prefix = prefixOf(key) & 0xff;
      n++;
      if (hash != Integer.parseInt(f[1]) || prefix != Integer.parseInt(f[2])) {
        failures.add("'" + f[0] + "': got hash=" + hash + " prefix=" + prefix + ", want "
            + f[1] + " " + f[2]);
      }
    }
    if (n == 0) {
      throw new Exit(EXIT_ERROR, "no vectors in " + file);
    }
    if (!failures.isEmpty()) {
      throw new Exit(EXIT_ERROR, "FAIL " + failures.size() + "/" + n + ": " + failures);
    }
    return "ok " + n + " vectors";
  }

  public static void main(String[] args) {
    int code = 0;
    if (args.length == 0) {
      System.out.println("usage: java-layout SUBCOMMAND ARGS... (see testenv/hbase/README)");
      System.exit(EXIT_USAGE);
    }
    try {
      System.out.println(run(args));
    } catch (Exit e) {
      System.out.println(e.getMessage());
      code = e.code;
    } catch (Throwable e) {
      System.out.println("error: " + e);
      e.printStackTrace(System.err);
      code = EXIT_ERROR;
    }
    System.out.flush();
    // HBase/ZooKeeper client threads may linger; exit explicitly.
    Runtime.getRuntime().halt(code);
  }
}
