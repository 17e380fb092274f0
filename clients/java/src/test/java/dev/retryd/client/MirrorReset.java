package dev.retryd.client;

import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The fleet-holds reset measure with mirror clients (bench/clients.sh): a FrontSpin quota stop on a tenant resets
 * 1.5 s ahead; 40 clients (each its own channel, so its own mirror and stream) call the tenant in a loop, honouring
 * the loop's waits; an admitted call takes 150 ms and fails again with RATE_LIMITED (the quota is still spent, next
 * reset 10 min ahead). Counts the calls that reach the dependency in the 3 s after the reset (target 1: the probe).
 *
 * <pre>java -cp … dev.retryd.client.MirrorReset ADDR [clients]</pre>
 */
public final class MirrorReset {
  private MirrorReset() {}

  public static void main(String[] args) throws Exception {
    String addr = args[0];
    int n = args.length > 1 ? Integer.parseInt(args[1]) : 40;
    String run = Long.toString(System.nanoTime());
    String dep = "reset-d-" + run, tenant = "reset-t-" + run;
    List<RetrydClient> clients = new ArrayList<>();
    List<ManagedChannel> channels = new ArrayList<>();
    ConcurrentLinkedQueue<Long> reachedAt = new ConcurrentLinkedQueue<>();
    AtomicBoolean stop = new AtomicBoolean();
    List<Thread> workers = new ArrayList<>();
    Instant reset;
    try {
      for (int i = 0; i < n; i++) {
        ManagedChannel ch = NettyChannelBuilder.forTarget(addr).usePlaintext().build();
        channels.add(ch);
        RetrydClient c = RetrydClient.builder(addr).channel(ch).catalog("frontspin").dependency(dep).tenant(tenant)
            .timeout(Duration.ofSeconds(1)).connectTimeout(Duration.ofSeconds(2)).build();
        clients.add(c);
        if (!c.watch(List.of(dep), List.of(tenant), Duration.ofSeconds(10))) throw new IllegalStateException("not synced");
      }
      try (RetrydClient placer = RetrydClient.builder(addr).catalog("frontspin").mirror(false).build()) {
        reset = Instant.now().plusMillis(1_500);
        if (!MirrorChecks.placeStop(placer, dep, tenant, 1_500)) throw new IllegalStateException("no stop placed");
      }
      for (RetrydClient c : clients) {
        if (!Conformance.waitFor(() -> c.mirrorHoldsFor(dep) >= 1)) throw new IllegalStateException("stop not mirrored");
      }
      Instant next = reset.plus(Duration.ofMinutes(10));
      for (RetrydClient c : clients) {
        Thread t = new Thread(() -> {
          while (!stop.get()) {
            try {
              c.call(RetrydClient.Call.<String>write("record.sync").timeout(Duration.ofSeconds(5))
                  .toFailure(e -> new Failure("", "RATE_LIMITED", "", null, "", next)), () -> {
                    reachedAt.add(System.currentTimeMillis());
                    Thread.sleep(150);
                    throw new IllegalStateException("quota still spent");
                  });
            } catch (InterruptedException e) {
              return;
            } catch (Exception e) {
              // refused, held or past its deadline: the worker calls again
            }
          }
        });
        t.start();
        workers.add(t);
      }
      Thread.sleep(Duration.between(Instant.now(), reset).toMillis() + 3_000);
    } finally {
      stop.set(true);
      for (Thread t : workers) t.interrupt();
      for (Thread t : workers) t.join(5_000);
      for (RetrydClient c : clients) c.close();
      for (ManagedChannel ch : channels) ch.shutdownNow();
    }
    long r = reset.toEpochMilli();
    long before = reachedAt.stream().filter(t -> t < r).count();
    long after = reachedAt.stream().filter(t -> t >= r && t < r + 3_000).count();
    System.out.printf("java: quota stop reset under %d mirror clients (each admitted call fails again after 150 ms):"
        + " %d calls reached the dependency in the 3 s after the reset (target 1), %d before it%n", n, after, before);
    System.exit(0);
  }
}
