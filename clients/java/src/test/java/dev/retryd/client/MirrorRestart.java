package dev.retryd.client;

import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The restart measure (bench/clients.sh): 40 clients, each with its own channel (so its own mirror and
 * stream, as 40 processes would have), call a tenant under a quota stop every 20 ms while retryd (state in a real
 * redis-server) is killed and started again; counts the calls that reach the stopped tenant (target 0) and when
 * each mirror synced again (the reconnect's jitter spreads them).
 *
 * <pre>java -cp … dev.retryd.client.MirrorRestart RETRYD_BIN [clients]</pre>
 */
public final class MirrorRestart {
  private MirrorRestart() {}

  static void awaitPort(int port) throws Exception {
    for (int i = 0; ; i++) {
      try (Socket ignored = new Socket("127.0.0.1", port)) {
        return;
      } catch (Exception e) {
        if (i > 400) throw new IllegalStateException("nothing listens on " + port);
        Thread.sleep(25);
      }
    }
  }

  static Process retryd(String bin, int port, int redisPort) throws Exception {
    Process p = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:" + port, "--state",
        "redis://127.0.0.1:" + redisPort, "--metrics-listen", "off", "--log-level", "error").inheritIO().start();
    awaitPort(port);
    return p;
  }

  public static void main(String[] args) throws Exception {
    String bin = args[0];
    int n = args.length > 1 ? Integer.parseInt(args[1]) : 40;
    int redisPort = Conformance.freePort(), port = Conformance.freePort();
    Process redis = new ProcessBuilder("redis-server", "--port", Integer.toString(redisPort), "--bind", "127.0.0.1",
        "--save", "", "--appendonly", "no").redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    Process server = null;
    List<RetrydClient> clients = new ArrayList<>();
    List<ManagedChannel> channels = new ArrayList<>();
    try {
      awaitPort(redisPort);
      server = retryd(bin, port, redisPort);
      String addr = "127.0.0.1:" + port, run = Long.toString(System.nanoTime());
      String dep = "restart-d-" + run, tenant = "restart-t-" + run;
      AtomicLongArray syncedAt = new AtomicLongArray(n);
      for (int i = 0; i < n; i++) {
        int k = i;
        ManagedChannel ch = NettyChannelBuilder.forTarget(addr).usePlaintext().build();
        channels.add(ch);
        clients.add(RetrydClient.builder(addr).channel(ch).catalog("frontspin").dependency(dep).tenant(tenant)
            .timeout(Duration.ofMillis(200)).connectTimeout(Duration.ofSeconds(2)).mirrorListener(new MirrorListener() {
              @Override public void synced(int holds) { syncedAt.set(k, System.nanoTime()); }
            }).build());
      }
      for (RetrydClient c : clients) {
        if (!c.watch(List.of(dep), List.of(tenant), Duration.ofSeconds(10))) throw new IllegalStateException("not synced");
      }
      try (RetrydClient placer = RetrydClient.builder(addr).catalog("frontspin").mirror(false).build()) {
        if (!MirrorChecks.placeStop(placer, dep, tenant, 120_000)) throw new IllegalStateException("no stop placed");
      }
      for (RetrydClient c : clients) {
        if (!Conformance.waitFor(() -> c.mirrorHoldsFor(dep) >= 1)) throw new IllegalStateException("stop not mirrored");
      }
      Thread.sleep(500); // the stop reaches Redis
      AtomicInteger reached = new AtomicInteger(), refused = new AtomicInteger();
      AtomicBoolean stop = new AtomicBoolean();
      List<Thread> callers = new ArrayList<>();
      for (RetrydClient c : clients) {
        Thread t = new Thread(() -> {
          while (!stop.get()) {
            try {
              c.call(RetrydClient.Call.<String>write("record.sync").timeout(Duration.ofMillis(100)), () -> {
                reached.incrementAndGet();
                return "called";
              });
            } catch (RetryRefusedException e) {
              refused.incrementAndGet();
            } catch (Exception e) {
              throw new IllegalStateException(e);
            }
            try {
              Thread.sleep(20);
            } catch (InterruptedException e) {
              return;
            }
          }
        });
        t.start();
        callers.add(t);
      }
      Thread.sleep(500);
      server.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
      long killed = System.nanoTime();
      Thread.sleep(1_000); // retryd away for a second: every mirror stale
      int staleNow = (int) clients.stream().filter(c -> c.stats().stale()).count();
      server = retryd(bin, port, redisPort);
      long restarted = System.nanoTime();
      boolean all = Conformance.waitFor(() -> clients.stream().allMatch(c -> c.stats().synced()), Duration.ofSeconds(15));
      Thread.sleep(2_000);
      stop.set(true);
      for (Thread t : callers) t.join();
      long[] resync = new long[n];
      for (int i = 0; i < n; i++) resync[i] = (syncedAt.get(i) - restarted) / 1_000_000;
      Arrays.sort(resync);
      // Each mirror's reconnect resumes from its digests: a retryd whose Redis has the same stop resends nothing.
      long resumed = clients.stream().mapToLong(c -> c.stats().resumedSyncs()).sum();
      long resent = clients.stream().mapToLong(c -> c.stats().resentBuckets()).sum();
      System.out.printf("java: retryd killed and restarted (state in Redis) under %d mirror clients during a quota stop:"
          + " %d calls reached the stopped tenant (target 0), %d refused; %d of %d stale while it was away;"
          + " synced again %s, after the restart in %d..%d ms (median %d ms); away %.1f s;"
          + " %d resumed snapshots, %d buckets resent%n",
          n, reached.get(), refused.get(), staleNow, n, all ? "all" : "NOT all", resync[0], resync[n - 1], resync[n / 2],
          (restarted - killed) / 1e9, resumed, resent);
    } finally {
      for (RetrydClient c : clients) c.close();
      for (ManagedChannel ch : channels) ch.shutdownNow();
      if (server != null) server.destroyForcibly();
      redis.destroyForcibly();
    }
    System.exit(0);
  }
}
