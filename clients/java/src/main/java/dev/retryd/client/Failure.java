package dev.retryd.client;

import java.time.Instant;

/**
 * What a mapper makes of an exception: the fields of retryd's {@code Failure} the caller knows; the rest come from
 * the client and the call. Empty strings and nulls mean "not known". {@code noRetry}: the dependency itself said "do
 * not retry" (e.g. a negative, unparsable or conflicting {@code grpc-retry-pushback-ms}), sent to retryd as its retry
 * contract, {@code Failure.upstream} retryable false.
 */
public record Failure(String catalog, String code, String retryAfter, Long retryAfterMs, String requestId,
    Instant quotaResetsAt, boolean noRetry) {
  /** A failure the dependency gave no "do not retry" for. */
  public Failure(String catalog, String code, String retryAfter, Long retryAfterMs, String requestId,
      Instant quotaResetsAt) {
    this(catalog, code, retryAfter, retryAfterMs, requestId, quotaResetsAt, false);
  }

  /** A failure with just a code. */
  public static Failure ofCode(String code) {
    return new Failure("", code, "", null, "", null);
  }
}
