package dev.retryd.client.bench;

import dev.retryd.client.RetrydClient;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What the client adds to a successful call: a no-op through {@code client.call} (mirror synced, no hold in force)
 * against the no-op called bare, and (for reference) the same with the mirror off, one Admit RPC per call. Sample
 * time: JMH times sampled calls one by one, so the median (p0.50) is over every sampled call (bench/clients.sh).
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class ClientBench {
  /** retryd's address (bench/clients.sh starts one). */
  @Param("127.0.0.1:50051")
  public String addr;

  private final Callable<String> noop = () -> "ok";
  private final RetrydClient.Call<String> read = RetrydClient.Call.read("crm.deal.get");
  private RetrydClient mirrored, admitting;

  @Setup(Level.Trial)
  public void setUp() throws Exception {
    String run = Long.toString(System.nanoTime());
    mirrored = RetrydClient.builder(addr).catalog("vibecode").dependency("bench-d-" + run).tenant("bench-t-" + run)
        .timeout(Duration.ofSeconds(2)).build();
    if (!mirrored.watch(List.of("bench-d-" + run), List.of("bench-t-" + run), Duration.ofSeconds(10))) {
      throw new IllegalStateException("the mirror did not sync in 10 s");
    }
    admitting = RetrydClient.builder(addr).catalog("vibecode").dependency("bench-d-" + run).tenant("bench-t-" + run)
        .timeout(Duration.ofSeconds(2)).mirror(false).build();
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    long admits = mirrored.stats().admitRpcs();
    mirrored.close();
    admitting.close();
    // Visible in the output: the mirrored client's Admit RPCs (the setup's catalog check only, if it stayed synced).
    System.out.println("mirrored client: " + mirrored.stats() + " (Admit RPCs at the end of the trial: " + admits + ")");
  }

  @Benchmark
  public String bare() throws Exception {
    return noop.call();
  }

  @Benchmark
  public String clientMirror() throws Exception {
    return mirrored.call(read, noop);
  }

  @Benchmark
  public String clientMirrorOff() throws Exception {
    return admitting.call(read, noop);
  }
}
