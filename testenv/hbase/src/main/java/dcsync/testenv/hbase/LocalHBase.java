package dcsync.testenv.hbase;

import java.io.File;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.master.HMaster;
import org.apache.hadoop.hbase.master.HMasterCommandLine;
import org.apache.hadoop.util.ToolRunner;

/**
 * Starts a standalone HBase (HMaster + one RegionServer + ZooKeeper, all in this JVM) on the
 * local filesystem, bound to 127.0.0.1. This is the same code path as `bin/hbase master start`
 * with hbase.cluster.distributed=false (HMasterCommandLine -> MiniZooKeeperCluster +
 * LocalHBaseCluster), with the configuration set programmatically.
 *
 * Environment: DCSYNC_HBASE_RUN_DIR (required), DCSYNC_HBASE_ZK_PORT (21818),
 * DCSYNC_HBASE_MASTER_PORT (16000), DCSYNC_HBASE_RS_PORT (16020).
 */
public final class LocalHBase {
  private LocalHBase() {}

  static int envInt(String name, int def) {
    String v = System.getenv(name);
    return (v == null || v.isEmpty()) ? def : Integer.parseInt(v.trim());
  }

  public static Configuration configure(File runDir) {
    int zkPort = envInt("DCSYNC_HBASE_ZK_PORT", 21818);
    int masterPort = envInt("DCSYNC_HBASE_MASTER_PORT", 16000);
    int rsPort = envInt("DCSYNC_HBASE_RS_PORT", 16020);
    Configuration conf = HBaseConfiguration.create();
    conf.setBoolean("hbase.cluster.distributed", false);
    conf.set("hbase.rootdir", new File(runDir, "hbase").toURI().toString());
    conf.set("hbase.tmp.dir", new File(runDir, "tmp").getAbsolutePath());
    conf.set("hadoop.tmp.dir", new File(runDir, "tmp/hadoop").getAbsolutePath());
    conf.set("hbase.zookeeper.property.dataDir", new File(runDir, "zk").getAbsolutePath());
    conf.set("hbase.zookeeper.quorum", "127.0.0.1");
    conf.setInt("hbase.zookeeper.property.clientPort", zkPort);
    conf.set("zookeeper.znode.parent", "/hbase");
    // Advertise and bind 127.0.0.1 (not the machine's hostname).
    conf.set("hbase.master.hostname", "127.0.0.1");
    conf.set("hbase.regionserver.hostname", "127.0.0.1");
    conf.set("hbase.unsafe.regionserver.hostname", "127.0.0.1");
    conf.set("hbase.master.ipc.address", "127.0.0.1");
    conf.set("hbase.regionserver.ipc.address", "127.0.0.1");
    conf.setInt("hbase.master.port", masterPort);
    conf.setInt("hbase.regionserver.port", rsPort);
    conf.setBoolean("hbase.localcluster.assign.random.ports", false);
    // No web UIs.
    conf.setInt("hbase.master.info.port", -1);
    conf.setInt("hbase.regionserver.info.port", -1);
    // Local filesystem: no hflush/hsync capability; classic FSHLog WAL.
    conf.setBoolean("hbase.unsafe.stream.capability.enforce", false);
    conf.set("hbase.wal.provider", "filesystem");
    // Plain, unauthenticated RPC.
    conf.set("hbase.security.authentication", "simple");
    conf.set("hadoop.security.authentication", "simple");
    conf.set("hbase.security.authorization", "false");
    // Faster startup / region assignment in tests.
    conf.setInt("hbase.master.wait.on.regionservers.mintostart", 1);
    conf.setInt("hbase.regionserver.msginterval", 1000);
    conf.setInt("hbase.zookeeper.property.maxClientCnxns", 1000);
    // The master and region server must outlive a starved machine: on a shared 2-core
    // host at load average 50, their ZooKeeper sessions (default 90 s asked, capped by
    // the embedded server at 20 ticks of 2 s = 40 s) expired and both aborted. Ticks of
    // 6 s allow the 120 s asked here. No test here kills a region server on this
    // launcher (the cluster launcher, LocalHBaseMulti, keeps its own short timeout).
    conf.setInt("hbase.zookeeper.property.tickTime", 6000);
    conf.setInt("zookeeper.session.timeout", 120_000);
    return conf;
  }

  public static void main(String[] args) throws Exception {
    String dir = System.getenv("DCSYNC_HBASE_RUN_DIR");
    if (args.length > 0) {
      dir = args[0];
    }
    if (dir == null || dir.isEmpty()) {
      System.err.println("usage: LocalHBase RUN_DIR (or DCSYNC_HBASE_RUN_DIR)");
      System.exit(2);
    }
    File runDir = new File(dir).getAbsoluteFile();
    runDir.mkdirs();
    Configuration conf = configure(runDir);
    int rc = ToolRunner.run(conf, new HMasterCommandLine(HMaster.class), new String[] {"start"});
    System.exit(rc);
  }
}
