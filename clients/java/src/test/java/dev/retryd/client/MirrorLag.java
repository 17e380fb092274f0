package dev.retryd.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * How long a hold placed elsewhere takes to reach a client's mirror (bench/clients.sh): a second client places
 * quota stops on {@code n} tenants one by one (Classify), and the time from sending each Classify to the watching
 * client's mirror holding it is recorded (an upper bound: it includes the Classify RPC).
 *
 * <pre>java -cp … dev.retryd.client.MirrorLag ADDR [n]</pre>
 */
public final class MirrorLag {
  private MirrorLag() {}

  public static void main(String[] args) throws Exception {
    String addr = args[0];
    int n = args.length > 1 ? Integer.parseInt(args[1]) : 100;
    String run = Long.toString(System.nanoTime());
    String dep = "lag-d-" + run;
    List<String> tenants = new ArrayList<>();
    for (int i = 0; i < n; i++) tenants.add("lag-t-" + run + "-" + i);
    try (RetrydClient watcher = RetrydClient.builder(addr).catalog("frontspin").dependency(dep).tenant(tenants.get(0))
             .timeout(Duration.ofSeconds(2)).build();
         RetrydClient placer = RetrydClient.builder(addr).catalog("frontspin").dependency(dep).mirror(false)
             .timeout(Duration.ofSeconds(2)).build()) {
      if (!watcher.watch(List.of(dep), tenants, Duration.ofSeconds(10))) throw new IllegalStateException("not synced");
      long[] lagNs = new long[n];
      for (int i = 0; i < n; i++) {
        long t0 = System.nanoTime();
        if (!MirrorChecks.placeStop(placer, dep, tenants.get(i), 600_000)) {
          throw new IllegalStateException("retryd placed no hold for stop " + i + " (its limits on new holds)");
        }
        while (watcher.mirrorHoldsFor(dep) < i + 1) {
          if (System.nanoTime() - t0 > 5_000_000_000L) throw new IllegalStateException("hold " + i + " not mirrored in 5 s");
          Thread.onSpinWait();
        }
        lagNs[i] = System.nanoTime() - t0;
      }
      Arrays.sort(lagNs);
      System.out.printf("java: a hold placed by another client reaches the mirror in: median %.2f ms, p99 %.2f ms,"
          + " max %.2f ms (%d holds, Classify RPC included; target p99 <= 200 ms)%n", lagNs[n / 2] / 1e6,
          lagNs[(int) Math.ceil(n * 0.99) - 1] / 1e6, lagNs[n - 1] / 1e6, n);
    }
  }
}
