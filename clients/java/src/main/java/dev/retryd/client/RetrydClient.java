package dev.retryd.client;

import com.google.protobuf.Timestamp;
import dev.retryd.v1.ClassifyRequest;
import dev.retryd.v1.Hold;
import dev.retryd.v1.OperationKind;
import dev.retryd.v1.ReadBack;
import dev.retryd.v1.RetryDecisionServiceGrpc;
import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Runs calls to a dependency under retryd's retry loop, blocking: admission before each attempt (from the local
 * holds mirror with no RPC, or Admit when the mirror does not know or at a probe point), the call, batched outcome
 * reports, Classify of each failure, waits, a read-back before a write is resent, the call's deadline, and a
 * conservative fallback when retryd is unreachable or slow. Interrupting the calling thread stops at once.
 */
public final class RetrydClient implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger("dev.retryd.client");

  /** Waits a duration (tests record waits instead of sleeping). */
  @FunctionalInterface
  public interface Sleeper {
    void sleep(Duration d) throws InterruptedException;
  }

  /** What a read-back found: present (with the value the call returns), absent, or inconclusive. */
  public record ReadBackResult<T>(ReadBack state, T value) {
    public static <T> ReadBackResult<T> present(T value) { return new ReadBackResult<>(ReadBack.READ_BACK_EFFECT_PRESENT, value); }
    public static <T> ReadBackResult<T> absent() { return new ReadBackResult<>(ReadBack.READ_BACK_EFFECT_ABSENT, null); }
    public static <T> ReadBackResult<T> inconclusive() { return new ReadBackResult<>(ReadBack.READ_BACK_INCONCLUSIVE, null); }
  }

  /**
   * One step of the loop, for logs and traces. {@code local}: an {@code admit_refused} the holds mirror decided (no
   * RPC), or a {@code success} it admitted.
   */
  public record Event(String kind, int attempt, Decision decision, Duration waitTime, String detail, boolean local) {
    public Event(String kind, int attempt, Decision decision, Duration waitTime, String detail) {
      this(kind, attempt, decision, waitTime, detail, false);
    }
  }

  /** Reads (and writes whose key the dependency enforces) back off, at most maxAttempts; other writes never resend. */
  public record Fallback(int maxAttempts, Duration base, Duration cap) {
    public static final Fallback DEFAULT = new Fallback(3, Duration.ofMillis(100), Duration.ofSeconds(2));
  }

  /** One call's options. */
  public static final class Call<T> {
    OperationKind operation = OperationKind.OPERATION_KIND_UNSPECIFIED;
    String method = "";
    String idempotencyKey = "";
    boolean idempotencyKeyEnforced;
    Callable<ReadBackResult<T>> readBack;
    Function<Throwable, Failure> toFailure = Mappers::defaultMapper;
    Instant deadline;

    public static <T> Call<T> read(String method) { Call<T> c = new Call<>(); c.operation = OperationKind.OPERATION_KIND_READ; c.method = method; return c; }
    public static <T> Call<T> write(String method) { Call<T> c = new Call<>(); c.operation = OperationKind.OPERATION_KIND_WRITE; c.method = method; return c; }
    public Call<T> idempotencyKey(String key, boolean enforced) { idempotencyKey = key; idempotencyKeyEnforced = enforced; return this; }
    public Call<T> readBack(Callable<ReadBackResult<T>> f) { readBack = f; return this; }
    public Call<T> toFailure(Function<Throwable, Failure> f) { toFailure = f; return this; }
    public Call<T> deadline(Instant at) { deadline = at; return this; }
    public Call<T> timeout(Duration d) { deadline = Instant.now().plus(d); return this; }
  }

  /** Builds a client. */
  public static final class Builder {
    private final String address;
    private String catalog = "", dependency = "", tenant = "", locale = "";
    private Duration timeout = Duration.ofMillis(50), connectTimeout = Duration.ofSeconds(1), reportInterval = Duration.ofSeconds(1);
    private Sleeper sleeper = d -> Thread.sleep(d.toMillis(), d.toNanosPart() % 1_000_000);
    private Fallback fallback = Fallback.DEFAULT;
    private Consumer<Event> hook = e -> { };
    private ManagedChannel channel;
    private boolean mirror = true;
    private int maxHolds = 10_000;
    private MirrorListener mirrorListener = new MirrorListener() { };

    Builder(String address) { this.address = address; }
    public Builder catalog(String s) { catalog = s; return this; }
    public Builder dependency(String s) { dependency = s; return this; }
    public Builder tenant(String s) { tenant = s; return this; }
    public Builder locale(String s) { locale = s; return this; }
    /** Bound on each RPC once connected (default 50 ms). */
    public Builder timeout(Duration d) { timeout = d; return this; }
    /** Bound on the eager connect (default 1 s). */
    public Builder connectTimeout(Duration d) { connectTimeout = d; return this; }
    public Builder reportInterval(Duration d) { reportInterval = d; return this; }
    public Builder sleeper(Sleeper s) { sleeper = s; return this; }
    public Builder fallback(Fallback f) { fallback = f; return this; }
    public Builder hook(Consumer<Event> h) { hook = h; return this; }
    /** A channel of your own (TLS/mTLS: NettyChannelBuilder with sslContext). */
    public Builder channel(ManagedChannel ch) { channel = ch; return this; }
    /**
     * The local holds mirror (default on): one WatchHolds stream per retryd address in the process (shared by its
     * clients; per channel for clients given one) keeps the holds that can cover their calls, and an attempt no hold
     * covers goes ahead with no RPC. Off: every attempt asks Admit.
     */
    public Builder mirror(boolean on) { mirror = on; return this; }
    /**
     * Most holds the mirror keeps (default 10 000; the first client of an address sets it for the shared mirror);
     * beyond it the one ending soonest goes and its dependency asks Admit.
     */
    public Builder maxHolds(int n) { maxHolds = n; return this; }
    /** Hears the mirror go stale (watch stream down) and sync again. */
    public Builder mirrorListener(MirrorListener l) { mirrorListener = l; return this; }

    public RetrydClient build() {
      ManagedChannel ch = channel != null ? channel : NettyChannelBuilder.forTarget(address).usePlaintext().build();
      return new RetrydClient(this, ch);
    }
  }

  public static Builder builder(String address) { return new Builder(address); }

  private final Builder o;
  private final ManagedChannel channel;
  private final RetryDecisionServiceGrpc.RetryDecisionServiceBlockingStub stub;
  private final AtomicLong fallbacks = new AtomicLong();
  private final Thread reporter;
  private final Gatekeeper keeper;

  private RetrydClient(Builder o, ManagedChannel channel) {
    this.o = o;
    this.channel = channel;
    this.stub = RetryDecisionServiceGrpc.newBlockingStub(channel);
    // A client with no dependency names no hold's scope: it always asks Admit.
    SharedMirror shared = o.mirror && !o.dependency.isEmpty() ? SharedMirror.acquire(o.address, o.channel, o.maxHolds) : null;
    this.keeper = new Gatekeeper(stub, shared, o.catalog, o.dependency, o.tenant, o.mirrorListener, this::busyBegan);
    // Connect eagerly, bounded; an unreachable retryd is not an error (the fallback decides).
    long until = System.nanoTime() + o.connectTimeout.toNanos();
    while (channel.getState(true) != ConnectivityState.READY && System.nanoTime() < until) {
      try {
        Thread.sleep(5);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    // Warm up: a cold JVM loads grpc's classes on the first RPC, which alone can take longer than the 50 ms
    // per-RPC timeout; one Admit within the connect timeout does it here instead of in the first call.
    if (channel.getState(false) == ConnectivityState.READY) {
      try {
        keeper.checkCatalog(o.connectTimeout);
      } catch (StatusRuntimeException ignored) {
        // only the warm-up: calls meet the error (a rejection, or the fallback)
      }
    }
    keeper.startWatch();
    reporter = new Thread(() -> {
      try {
        while (!Thread.currentThread().isInterrupted()) {
          Thread.sleep(o.reportInterval.toMillis());
          keeper.flush(o.timeout);
          keeper.prune();
        }
      } catch (InterruptedException ignored) {
        // closing
      }
    }, "retryd-report");
    reporter.setDaemon(true);
    reporter.start();
  }

  /** Times retryd was unreachable or slow and the client decided alone. */
  public long fallbacks() { return fallbacks.get(); }

  /** The generated blocking stub, for the RPCs by hand. */
  public RetryDecisionServiceGrpc.RetryDecisionServiceBlockingStub stub() { return stub; }

  /** Where the holds mirror stands and what it saved (all zero and unsynced with the mirror off). */
  public MirrorStats stats() { return keeper.stats(); }

  /**
   * Declares dependencies and tenants up front (at startup) and waits until the mirror's snapshot covers them: true
   * then; false at the timeout, with the mirror off, or for names beyond 256 dependencies or 256 tenants (their
   * calls always ask Admit). This client's own dependency and tenant are watched from {@link Builder#build()}. It
   * also checks the client's catalog (one Admit naming only it) if no answer has yet: a mistaken catalog throws
   * {@link RejectedException} here, at startup.
   */
  public boolean watch(Collection<String> dependencies, Collection<String> tenants, Duration timeout)
      throws InterruptedException, RejectedException {
    return keeper.watch(dependencies, tenants, timeout);
  }

  /** Holds in force in the mirror on {@code dependency} (the conformance runner waits on it). */
  int mirrorHoldsFor(String dependency) { return keeper.mirrorHoldsFor(dependency); }

  /** Whether retryd's shed advice holds this client's RPCs back now (checks). */
  boolean busy() { return keeper.busy(); }

  /** First attempts counted and not yet reported (checks). */
  long pendingRequests() { return keeper.pendingRequests(); }

  /** Sends the outcome counts not yet reported, closes the watch stream and the channel. */
  @Override
  public void close() {
    reporter.interrupt();
    keeper.close();
    channel.shutdown();
  }

  /** Sends the outcome counts not yet reported now (they also go every {@code reportInterval}, and at close). */
  public void flush() { keeper.flush(o.timeout); }

  /**
   * One attempt's admission (the mirror's, else Admit, failing open); shared by {@link #call} (so
   * {@link #callAsync}) and {@link Resilience4jAdvisor}.
   */
  Gatekeeper.Gate gate(Call<?> call, int attempt, Instant deadline) throws RejectedException {
    Gatekeeper.Gate g = keeper.gate(call.method, call.operation, attempt, rpcMillis(deadline));
    if (g.failed() != null) {
      event(new Event("fallback", attempt, null, Duration.ZERO, "Admit failed: " + g.failed()));
    }
    return g;
  }

  void probeSucceeded(String probe) { keeper.probeSucceeded(probe, o.timeout); }

  void learn(Hold hold) { keeper.learn(hold); }

  private void event(Event e) {
    if (e.kind().equals("fallback")) {
      fallbacks.incrementAndGet();
      // While retryd advises waiting, the period's one warning (busyBegan) stands for every call's fallback.
      if (!e.detail().contains(Gatekeeper.NOT_SENT.getDescription())) {
        LOG.log(Level.WARNING, "retryd: conservative fallback: {0}", e.detail());
      }
    }
    o.hook.accept(e);
  }

  /** A busy period began: logged and hooked once (event {@code busy}, its wait the advice), not per call. */
  private void busyBegan(long adviceMillis) {
    LOG.log(Level.WARNING, "retryd: shed a call and advised waiting {0} ms: no Admit, Classify or ReportOutcomes until"
        + " then (calls take the conservative fallback; the holds mirror still refuses)", adviceMillis);
    o.hook.accept(new Event("busy", 0, null, Duration.ofMillis(adviceMillis), "retryd advised waiting"));
  }

  private long rpcMillis(Instant deadline) {
    long t = o.timeout.toMillis();
    if (deadline != null) {
      t = Math.min(t, Duration.between(Instant.now(), deadline).toMillis());
    }
    return Math.max(1, t);
  }

  private static Timestamp ts(Instant i) {
    return Timestamp.newBuilder().setSeconds(i.getEpochSecond()).setNanos(i.getNano()).build();
  }

  /** retryd's Failure for a mapper's {@link Failure}, as {@link #call} sends it (the adapters share it). */
  dev.retryd.v1.Failure.Builder failureProto(Failure f, Call<?> call, int attempt, String probe) {
    dev.retryd.v1.Failure.Builder failure = dev.retryd.v1.Failure.newBuilder()
        .setCatalog(f.catalog() == null || f.catalog().isEmpty() ? o.catalog : f.catalog())
        .setCode(f.code() == null ? "" : f.code()).setOperation(call.operation).setMethod(call.method)
        .setAttempt(attempt).setRetryAfter(f.retryAfter() == null ? "" : f.retryAfter())
        .setIdempotencyKey(call.idempotencyKey).setIdempotencyKeyEnforced(call.idempotencyKeyEnforced)
        .setRequestId(f.requestId() == null ? "" : f.requestId()).setTenant(o.tenant).setDependency(o.dependency)
        .setProbeToken(probe);
    if (f.retryAfterMs() != null) {
      failure.setRetryAfterMs(f.retryAfterMs());
    }
    if (f.quotaResetsAt() != null) {
      failure.setQuotaResetsAt(ts(f.quotaResetsAt()));
    }
    if (f.noRetry()) {
      failure.setUpstream(dev.retryd.v1.RetryContract.newBuilder().setRetryable(false));
    }
    return failure;
  }

  /**
   * Classify within the per-RPC timeout (and the deadline, if any); not sent while retryd advises waiting (throws
   * {@link Gatekeeper#NOT_SENT}). The adapters share it.
   */
  dev.retryd.v1.Decision classify(ClassifyRequest request, Instant deadline) {
    return keeper.classify(request, rpcMillis(deadline));
  }

  String catalog() { return o.catalog; }
  String dependency() { return o.dependency; }
  String tenant() { return o.tenant; }
  String locale() { return o.locale; }
  Fallback fallback() { return o.fallback; }

  /**
   * {@link #call} on {@code executor}: the future completes with the result, or exceptionally with what
   * {@code call} throws (a {@link RetryRefusedException}, a {@link RejectedException}, the dependency's unmapped
   * exception). Cancelling the future interrupts the running loop, which stops at once.
   */
  public <T> CompletableFuture<T> callAsync(Call<T> call, Callable<T> fn, Executor executor) {
    CompletableFuture<T> future = new CompletableFuture<>();
    java.util.concurrent.atomic.AtomicReference<Thread> runner = new java.util.concurrent.atomic.AtomicReference<>();
    executor.execute(() -> {
      runner.set(Thread.currentThread());
      try {
        if (!future.isDone()) {
          future.complete(call(call, fn));
        }
      } catch (Throwable t) {
        future.completeExceptionally(t);
      } finally {
        runner.set(null);
        Thread.interrupted();
      }
    });
    future.whenComplete((v, t) -> {
      Thread r = runner.get();
      if (future.isCancelled() && r != null) {
        r.interrupt();
      }
    });
    return future;
  }

  /**
   * Runs {@code fn} under the loop and returns its result (or a read-back's).
   *
   * @throws RetryRefusedException when the loop stops (verdict, hold, deadline, fallback)
   * @throws Exception an exception no mapper understands, untouched; InterruptedException when interrupted
   */
  public <T> T call(Call<T> call, Callable<T> fn) throws Exception {
    Instant deadline = call.deadline;
    int attempt = 1;
    while (true) {
      // 1. Admission; retryd unreachable does not stop the call (fail open).
      String probe = "";
      boolean local;
      while (true) {
        if (Thread.interrupted()) {
          throw new InterruptedException();
        }
        if (deadline != null && !Instant.now().isBefore(deadline)) {
          throw new RetryRefusedException(RetryRefusedException.Kind.DEADLINE, "deadline passed", null, null, null);
        }
        Gatekeeper.Gate g = gate(call, attempt, deadline);
        if (g.admitted()) {
          probe = g.probe();
          local = g.local();
          break;
        }
        String reason = g.hold() == null ? "" : g.hold().getReason();
        Duration wait = Duration.between(Instant.now(), g.retryAt()).plusMillis(10);
        if (wait.isNegative()) {
          wait = Duration.ZERO;
        }
        event(new Event("admit_refused", attempt, null, wait, reason, g.local()));
        if (deadline != null && Instant.now().plus(wait).isAfter(deadline)) {
          throw new RetryRefusedException(RetryRefusedException.Kind.HELD, "held: " + reason, null, g.hold(), null);
        }
        event(new Event("wait", attempt, null, wait, "hold"));
        o.sleeper.sleep(wait);
      }

      // 2. The call.
      Exception error;
      try {
        T v = fn.call();
        keeper.count(call.method, Gatekeeper.SUCCESSES);
        probeSucceeded(probe);
        event(new Event("success", attempt, null, Duration.ZERO, "", local));
        return v;
      } catch (InterruptedException e) {
        throw e;
      } catch (Exception e) {
        error = e;
      }

      // 3. Map the failure.
      Failure f = call.toFailure.apply(error);
      if (f == null) {
        keeper.count(call.method, Gatekeeper.FAILURES);
        throw error;
      }
      dev.retryd.v1.Failure.Builder failure = failureProto(f, call, attempt, probe);
      if (deadline != null) {
        failure.setDeadline(ts(deadline));
      }

      // 4. Classify and act; a read-back's answer goes in a second Classify.
      T readBackValue = null;
      Duration wait;
      while (true) {
        dev.retryd.v1.Decision raw;
        try {
          raw = classify(ClassifyRequest.newBuilder().setFailure(failure).setLocale(o.locale).build(), deadline);
        } catch (StatusRuntimeException e) {
          RejectedException rejected = RejectedException.of(e, error);
          if (rejected != null) {
            throw rejected;
          }
          if (deadline != null && !Instant.now().isBefore(deadline)) {
            throw new RetryRefusedException(RetryRefusedException.Kind.DEADLINE, "the deadline passed while asking retryd", null, null, error);
          }
          boolean may = call.operation == OperationKind.OPERATION_KIND_READ || call.idempotencyKeyEnforced;
          if (!may || attempt >= o.fallback.maxAttempts()) {
            event(new Event("fallback", attempt, null, Duration.ZERO, "Classify failed: " + e.getStatus()));
            String kind = call.operation == OperationKind.OPERATION_KIND_READ ? "read" : "write";
            Decision d = new Decision(Verdict.DO_NOT_RETRY, "retryd unavailable (" + e.getStatus()
                + "); the conservative fallback does not retry this " + kind, "client_fallback/" + kind, "", "", 0, 0,
                Strategy.NONE, null, null);
            throw new RetryRefusedException(RetryRefusedException.Kind.FALLBACK, d.reason(), d, null, error);
          }
          long top = Math.min(o.fallback.cap().toNanos(), o.fallback.base().toNanos() << Math.min(attempt - 1, 20));
          wait = Duration.ofNanos(ThreadLocalRandom.current().nextLong(top + 1));
          event(new Event("fallback", attempt, null, wait, "Classify failed: " + e.getStatus()));
          break;
        }
        Decision d = Decision.of(raw);
        learn(d.hold());
        event(new Event("decision", attempt, d, Duration.ZERO, ""));
        if (d.verdict() == Verdict.ALREADY_APPLIED) {
          return readBackValue;
        }
        if (d.verdict() == Verdict.STATE_VERIFICATION_REQUIRED && call.readBack != null
            && failure.getReadBack() == ReadBack.READ_BACK_UNSPECIFIED) {
          ReadBackResult<T> rb = call.readBack.call();
          failure.setReadBack(rb.state());
          if (rb.state() == ReadBack.READ_BACK_EFFECT_PRESENT) {
            readBackValue = rb.value();
          }
          event(new Event("read_back", attempt, null, Duration.ZERO, rb.state().name()));
          continue;
        }
        if (d.verdict() != Verdict.RETRY_WITH_LIMIT) {
          throw new RetryRefusedException(RetryRefusedException.Kind.VERDICT, d.verdict() + ": " + d.reason(), d, null,
              error);
        }
        long hi = Math.max(d.afterMs(), d.maxAfterMs());
        wait = Duration.ofMillis(d.afterMs() + ThreadLocalRandom.current().nextLong(hi - d.afterMs() + 1));
        break;
      }
      if (deadline != null && Instant.now().plus(wait).isAfter(deadline)) {
        throw new RetryRefusedException(RetryRefusedException.Kind.DEADLINE,
            "the next attempt would pass the deadline", null, null, error);
      }
      event(new Event("wait", attempt, null, wait, ""));
      o.sleeper.sleep(wait);
      attempt++;
    }
  }

  static Optional<String> env(String k) { return Optional.ofNullable(System.getenv(k)); }
}
