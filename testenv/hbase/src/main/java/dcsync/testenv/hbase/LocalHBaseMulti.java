package dcsync.testenv.hbase;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.TimerTask;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.ClusterMetrics;
import org.apache.hadoop.hbase.HRegionLocation;
import org.apache.hadoop.hbase.ServerName;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.AsyncAdmin;
import org.apache.hadoop.hbase.client.AsyncConnection;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.RegionLocator;
import org.apache.hadoop.hbase.master.HMaster;
import org.apache.hadoop.hbase.regionserver.HRegionServer;
import org.apache.hadoop.hbase.util.JVMClusterUtil.RegionServerThread;
import org.apache.hadoop.hbase.zookeeper.MiniZooKeeperCluster;
import org.apache.hadoop.metrics2.lib.DefaultMetricsSystem;

/**
 * Starts an HBase of one HMaster, N region servers and ZooKeeper, all in this JVM, on the
 * local filesystem, bound to 127.0.0.1 (the configuration of {@link LocalHBase}), and
 * listens on a control port for the commands of the cluster tests: move regions between
 * the region servers, stop, abort (crash) and start a region server.
 *
 * <p>Environment: DCSYNC_HBASE_RUN_DIR (required), DCSYNC_HBASE_ZK_PORT,
 * DCSYNC_HBASE_MASTER_PORT, DCSYNC_HBASE_RS_PORT (region server i, from 0, listens on
 * RS_PORT+i), DCSYNC_HBASE_REGION_SERVERS (2), DCSYNC_HBASE_CTL_PORT (required).
 *
 * <p>Control protocol (testenv/hbase/cluster-ctl): one command a line, one reply line,
 * "ok ..." or "error ...":
 *
 * <pre>
 *   status              ok servers=I:HOST:PORT:live|down,... rit=N (regions in transition)
 *   regions TABLE       ok I:HOST:PORT=COUNT,... (the table's regions per server)
 *   move TABLE [N [K]]  move N regions of TABLE (0 or none: all) from the K-th in key
 *                       order (0), each to another live server, 16 at a time:
 *                       ok moved=M failed=0 ms=T
 *   stop I              stop region server I cleanly (its regions closed and reassigned)
 *   abort I             abort region server I (a crash: the master splits its WAL)
 *   start I             start region server I again on its port: ok ms=T
 *   wait                until every started region server is live and nothing is in
 *                       transition: ok ms=T
 * </pre>
 *
 * The master's readiness is written to RUN/ready once it is initialized and every region
 * server is live.
 */
public final class LocalHBaseMulti {
  private final Configuration conf;
  private final org.apache.hadoop.hbase.LocalHBaseCluster cluster;
  private final RegionServerThread[] servers;
  private final int rsPort;
  private Connection conn;
  private AsyncConnection asyncConn;

  /** Replaces the region server's abort-timeout task (which exits the JVM): it logs. */
  public static final class AbortTimeoutLogged extends TimerTask {
    @Override
    public void run() {
      System.err.println("LocalHBaseMulti: a region server's abort timed out (the process stays up)");
    }
  }

  private LocalHBaseMulti(Configuration conf, int n, int rsPort) throws Exception {
    this.conf = conf;
    this.rsPort = rsPort;
    this.cluster = new org.apache.hadoop.hbase.LocalHBaseCluster(conf, 1, 0, HMaster.class, HRegionServer.class);
    this.servers = new RegionServerThread[n];
    for (int i = 0; i < n; i++) {
      servers[i] = cluster.addRegionServer(serverConf(i), i);
    }
  }

  private Configuration serverConf(int i) {
    Configuration c = new Configuration(conf);
    c.setInt("hbase.regionserver.port", rsPort + i);
    return c;
  }

  private static String name(ServerName sn) {
    return sn.getHostname() + ":" + sn.getPort();
  }

  private synchronized Admin admin() throws Exception {
    if (conn == null || conn.isClosed()) {
      conn = ConnectionFactory.createConnection(conf);
    }
    return conn.getAdmin();
  }

  private Set<ServerName> live(Admin admin) throws Exception {
    return admin.getClusterMetrics(EnumSet.of(ClusterMetrics.Option.LIVE_SERVERS)).getLiveServerMetrics().keySet();
  }

  private int inTransition(Admin admin) throws Exception {
    return admin.getClusterMetrics(EnumSet.of(ClusterMetrics.Option.REGIONS_IN_TRANSITION))
        .getRegionStatesInTransition().size();
  }

  private int index(int i) {
    if (i < 0 || i >= servers.length) {
      throw new IllegalArgumentException("no region server " + i + " (0 to " + (servers.length - 1) + ")");
    }
    return i;
  }

  private String status() throws Exception {
    try (Admin admin = admin()) {
      Set<ServerName> live = live(admin);
      List<String> out = new ArrayList<>();
      for (int i = 0; i < servers.length; i++) {
        boolean up = servers[i].isAlive() && live.contains(servers[i].getRegionServer().getServerName());
        out.add(i + ":127.0.0.1:" + (rsPort + i) + ":" + (up ? "live" : "down"));
      }
      return "ok servers=" + String.join(",", out) + " rit=" + inTransition(admin);
    }
  }

  private String regions(String table) throws Exception {
    TreeMap<String, Integer> count = new TreeMap<>();
    try (RegionLocator loc = admin().getConnection().getRegionLocator(TableName.valueOf(table))) {
      for (HRegionLocation l : loc.getAllRegionLocations()) {
        String k = l.getServerName() == null ? "unassigned" : name(l.getServerName());
        count.merge(k, 1, Integer::sum);
      }
    }
    List<String> out = new ArrayList<>();
    count.forEach((k, v) -> out.add(k + "=" + v));
    return "ok " + String.join(",", out);
  }

  private synchronized AsyncConnection async() throws Exception {
    if (asyncConn == null || asyncConn.isClosed()) {
      asyncConn = ConnectionFactory.createAsyncConnection(conf).get();
    }
    return asyncConn;
  }

  /** Moves at most this many regions at once (the master runs them in parallel). */
  private static final int MOVE_PARALLEL = 16;

  /**
   * Moves n regions of table (all when n is 0), from the from-th in key order, each to
   * another live region server, MOVE_PARALLEL at a time, and waits until every move is
   * done.
   */
  private String move(String table, int n, int from) throws Exception {
    long t0 = System.currentTimeMillis();
    List<CompletableFuture<Void>> moves = new ArrayList<>();
    int failed = 0;
    String first = "";
    try (Admin admin = admin();
        RegionLocator loc = admin.getConnection().getRegionLocator(TableName.valueOf(table))) {
      List<ServerName> live = new ArrayList<>(live(admin));
      if (live.size() < 2) {
        return "error fewer than 2 live region servers: " + live;
      }
      loc.clearRegionLocationCache();
      List<HRegionLocation> all = loc.getAllRegionLocations();
      int end = n > 0 ? Math.min(all.size(), from + n) : all.size();
      AsyncAdmin aa = async().getAdmin();
      for (int i = from; i < end; i++) {
        HRegionLocation l = all.get(i);
        ServerName to = null;
        for (ServerName s : live) {
          if (!s.equals(l.getServerName())) {
            to = s;
            break;
          }
        }
        moves.add(aa.move(l.getRegion().getEncodedNameAsBytes(), to));
        if (moves.size() % MOVE_PARALLEL == 0 || i == end - 1) {
          for (CompletableFuture<Void> f : moves.subList(moves.size() - ((moves.size() - 1) % MOVE_PARALLEL + 1), moves.size())) {
            try {
              f.get();
            } catch (Exception e) {
              if (failed++ == 0) {
                first = " first=" + String.valueOf(e.getCause() != null ? e.getCause() : e).replace('\n', ' ');
              }
            }
          }
        }
      }
    }
    return (failed == 0 ? "ok" : "error") + " moved=" + (moves.size() - failed) + " failed=" + failed
        + " ms=" + (System.currentTimeMillis() - t0) + first;
  }

  private String stop(int i, boolean crash) throws Exception {
    RegionServerThread t = servers[index(i)];
    if (!t.isAlive()) {
      return "ok already down";
    }
    long t0 = System.currentTimeMillis();
    if (crash) {
      t.getRegionServer().abort("dcsync cluster-ctl abort " + i);
    } else {
      t.getRegionServer().stop("dcsync cluster-ctl stop " + i);
    }
    cluster.waitOnRegionServer(t);
    return "ok ms=" + (System.currentTimeMillis() - t0);
  }

  private String start(int i) throws Exception {
    if (servers[index(i)].isAlive()) {
      return "ok already live";
    }
    long t0 = System.currentTimeMillis();
    RegionServerThread t = cluster.addRegionServer(serverConf(i), i);
    t.start();
    t.waitForServerOnline();
    servers[i] = t;
    waitSettled(300_000);
    return "ok ms=" + (System.currentTimeMillis() - t0);
  }

  /** Waits until every started region server is live and no region is in transition. */
  private long waitSettled(long timeoutMs) throws Exception {
    long t0 = System.currentTimeMillis();
    while (true) {
      try (Admin admin = admin()) {
        Set<ServerName> live = live(admin);
        boolean all = true;
        for (RegionServerThread t : servers) {
          if (t.isAlive() && !live.contains(t.getRegionServer().getServerName())) {
            all = false;
          }
        }
        if (all && inTransition(admin) == 0) {
          return System.currentTimeMillis() - t0;
        }
      }
      if (System.currentTimeMillis() - t0 > timeoutMs) {
        throw new IllegalStateException("not settled after " + timeoutMs + " ms");
      }
      Thread.sleep(200);
    }
  }

  private synchronized String command(String line) {
    String[] f = line.trim().split("\\s+");
    try {
      switch (f[0]) {
        case "status":
          return status();
        case "regions":
          return regions(f[1]);
        case "move":
          return move(f[1], f.length > 2 ? Integer.parseInt(f[2]) : 0, f.length > 3 ? Integer.parseInt(f[3]) : 0);
        case "stop":
          return stop(Integer.parseInt(f[1]), false);
        case "abort":
          return stop(Integer.parseInt(f[1]), true);
        case "start":
          return start(Integer.parseInt(f[1]));
        case "wait":
          return "ok ms=" + waitSettled(300_000);
        default:
          return "error unknown command " + f[0];
      }
    } catch (Exception e) {
      return "error " + String.valueOf(e).replace('\n', ' ');
    }
  }

  private void serve(int port) throws Exception {
    ServerSocket ss = new ServerSocket();
    ss.setReuseAddress(true);
    ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
    while (true) {
      Socket s = ss.accept();
      Thread t = new Thread(() -> {
        try (s;
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            PrintWriter out = new PrintWriter(s.getOutputStream(), true, StandardCharsets.UTF_8)) {
          String line;
          while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
              out.println(command(line));
            }
          }
        } catch (Exception e) {
          // the client went away
        }
      }, "cluster-ctl");
      t.setDaemon(true);
      t.start();
    }
  }

  public static void main(String[] args) throws Exception {
    String dir = System.getenv("DCSYNC_HBASE_RUN_DIR");
    if (args.length > 0) {
      dir = args[0];
    }
    if (dir == null || dir.isEmpty()) {
      System.err.println("usage: LocalHBaseMulti RUN_DIR (or DCSYNC_HBASE_RUN_DIR)");
      System.exit(2);
    }
    File runDir = new File(dir).getAbsoluteFile();
    runDir.mkdirs();
    Configuration conf = LocalHBase.configure(runDir);
    int n = LocalHBase.envInt("DCSYNC_HBASE_REGION_SERVERS", 2);
    int ctl = LocalHBase.envInt("DCSYNC_HBASE_CTL_PORT", 0);
    int zkPort = conf.getInt("hbase.zookeeper.property.clientPort", 0);
    int rsPort = conf.getInt("hbase.regionserver.port", 0);
    if (ctl <= 0 || zkPort <= 0 || rsPort <= 0) {
      System.err.println("DCSYNC_HBASE_CTL_PORT, DCSYNC_HBASE_ZK_PORT and DCSYNC_HBASE_RS_PORT must be set");
      System.exit(2);
    }
    // A region server that loses its master or ZooKeeper session gives up soon, and the
    // master declares a crashed one dead as soon as its ZooKeeper node goes.
    conf.setInt("zookeeper.session.timeout", 10_000);
    conf.setInt("hbase.zookeeper.property.tickTime", 2000); // LocalHBase's 6 s would make the minimum 12 s
    // An aborting region server schedules a task that ends the whole process when the
    // abort has not finished within hbase.regionserver.abort.timeout (20 min): the
    // timer outlives an abort that did finish, and in this JVM it would take the master
    // and the other region server down 20 minutes after an `abort` command (seen). The
    // task is replaced by one that only logs.
    conf.set("hbase.regionserver.abort.timeout.task", AbortTimeoutLogged.class.getName());

    // Several region servers in one JVM register the same metrics sources: allowed in
    // mini-cluster mode (what HMasterCommandLine sets for a local cluster too).
    DefaultMetricsSystem.setMiniClusterMode(true);
    MiniZooKeeperCluster zk = new MiniZooKeeperCluster(conf);
    zk.setDefaultClientPort(zkPort);
    zk.startup(new File(runDir, "zk"));

    LocalHBaseMulti m = new LocalHBaseMulti(conf, n, rsPort);
    m.cluster.startup();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      m.cluster.shutdown();
      try {
        zk.shutdown();
      } catch (Exception e) {
        // exiting anyway
      }
    }));
    Thread ctlThread = new Thread(() -> {
      try {
        m.serve(ctl);
      } catch (Exception e) {
        System.err.println("cluster-ctl: " + e);
        System.exit(1);
      }
    }, "cluster-ctl-accept");
    ctlThread.setDaemon(true);
    ctlThread.start();
    while (m.cluster.getActiveMaster() == null || !m.cluster.getActiveMaster().isInitialized()) {
      Thread.sleep(200);
    }
    m.waitSettled(600_000);
    Files.writeString(new File(runDir, "ready").toPath(), "ready\n");
    System.err.println("LocalHBaseMulti: ready, " + n + " region servers, control port " + ctl);
    m.cluster.join();
    HMaster master = m.cluster.getMaster(0);
    while (!master.isStopped()) {
      Thread.sleep(1000);
    }
  }
}
