package dev.retryd.client;

import dev.retryd.v1.ClassifyRequest;
import dev.retryd.v1.OperationKind;
import io.github.resilience4j.core.IntervalBiFunction;
import io.github.resilience4j.retry.Retry;
import io.github.resilience4j.retry.RetryConfig;
import io.grpc.StatusRuntimeException;
import java.util.concurrent.Callable;
import java.util.concurrent.ThreadLocalRandom;

/**
 * retryd's decisions inside resilience4j: a {@link RetryConfig} whose predicate retries what retryd said to retry
 * and whose interval function is the wait its decision gave, and {@link #wrap} for the callable it runs.
 *
 * <pre>{@code
 * Resilience4jAdvisor advisor = new Resilience4jAdvisor(client, Call.read("crm.deal.get"));
 * Retry retry = Retry.of("deals", advisor.retryConfig(5));
 * Deal deal = advisor.call(retry, () -> b24.getDeal(id));
 * }</pre>
 *
 * <p>Each attempt is admitted as {@link RetrydClient#call} admits it: from the client's holds mirror with no RPC when
 * it knows, else by Admit (a fleet hold throws {@link RetryRefusedException}, kind {@code HELD}); a failure is
 * classified, and only {@code retry_with_limit} is retried. A mistake throws {@link RejectedException}. Read-back
 * cannot be expressed in resilience4j, so an advisor serves reads and writes whose idempotency key the dependency
 * enforces; a write of unknown outcome is refused by the constructor, never retried blindly. resilience4j-retry is
 * an optional dependency: add it to use this class.
 */
public final class Resilience4jAdvisor {
  /** What a wrapped attempt throws when the call failed: retryd's advice; the cause is the dependency's exception. */
  public static final class Advice extends Exception {
    private final boolean retry;
    private final long waitMillis;

    Advice(boolean retry, long waitMillis, String verdict, Throwable cause) {
      super("retryd: " + verdict, cause);
      this.retry = retry;
      this.waitMillis = waitMillis;
    }

    public boolean retry() { return retry; }
    public long waitMillis() { return waitMillis; }
  }

  private final RetrydClient client;
  private final RetrydClient.Call<?> call;

  public Resilience4jAdvisor(RetrydClient client, RetrydClient.Call<?> call) {
    if (call.operation != OperationKind.OPERATION_KIND_READ
        && !(call.idempotencyKey != null && !call.idempotencyKey.isEmpty() && call.idempotencyKeyEnforced)) {
      throw new IllegalArgumentException("a write of unknown outcome cannot be retried blindly and resilience4j has no"
          + " read-back: give an idempotency key the dependency enforces, or use RetrydClient.call with readBack");
    }
    this.client = client;
    this.call = call;
  }

  /** The predicate and the interval function retryd decides, at most {@code maxAttempts} attempts. */
  public RetryConfig retryConfig(int maxAttempts) {
    IntervalBiFunction<Object> interval = (attempt, either) ->
        either.isLeft() && either.getLeft() instanceof Advice a ? a.waitMillis() : 0L;
    return RetryConfig.custom()
        .maxAttempts(maxAttempts)
        .retryOnException(t -> t instanceof Advice a && a.retry())
        .intervalBiFunction(interval)
        .build();
  }

  /** Runs fn under {@code retry}; a failure ends as the dependency's own exception (Advice unwrapped). */
  public <T> T call(Retry retry, Callable<T> fn) throws Exception {
    try {
      return Retry.decorateCallable(retry, wrap(fn)).call();
    } catch (Advice a) {
      Throwable cause = a.getCause();
      throw cause instanceof Exception e ? e : a;
    }
  }

  /** {@code fn} as one attempt: Admit, the call, and Classify on failure (throws {@link Advice}). */
  public <T> Callable<T> wrap(Callable<T> fn) {
    int[] attempt = {0};
    return () -> {
      int n = ++attempt[0];
      // The client's admission: its holds mirror when it knows (no RPC), else Admit, failing open.
      Gatekeeper.Gate g = client.gate(call, n, null);
      if (!g.admitted()) {
        String reason = g.hold() == null ? "" : g.hold().getReason();
        throw new RetryRefusedException(RetryRefusedException.Kind.HELD, "held: " + reason, null, g.hold(), null);
      }
      Exception error;
      try {
        T v = fn.call();
        client.probeSucceeded(g.probe());
        return v;
      } catch (Exception e) {
        error = e;
      }
      Failure f = call.toFailure.apply(error);
      if (f == null) {
        throw error;
      }
      dev.retryd.v1.Decision d;
      try {
        d = client.classify(ClassifyRequest.newBuilder()
            .setFailure(client.failureProto(f, call, n, g.probe())).setLocale(client.locale()).build(), null);
      } catch (StatusRuntimeException e) {
        RejectedException rejected = RejectedException.of(e, error);
        if (rejected != null) {
          throw rejected;
        }
        // The client's conservative fallback: capped exponential backoff, its attempt limit.
        RetrydClient.Fallback fb = client.fallback();
        long top = Math.min(fb.cap().toMillis(), fb.base().toMillis() << Math.min(n - 1, 20));
        throw new Advice(n < fb.maxAttempts(), ThreadLocalRandom.current().nextLong(top + 1), "client_fallback", error);
      }
      client.learn(d.hasHold() ? d.getHold() : null);
      long lo = d.getRetry().getAfterMs(), hi = Math.max(lo, d.getRetry().getMaxAfterMs());
      Verdict verdict = Verdict.of(d.getVerdict());
      throw new Advice(verdict == Verdict.RETRY_WITH_LIMIT, lo + ThreadLocalRandom.current().nextLong(hi - lo + 1),
          verdict.word(), error);
    };
  }
}
