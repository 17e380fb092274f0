package dev.retryd.client;

import java.time.Instant;

/**
 * What a mapper makes of an exception: the fields of retryd's {@code Failure} the caller knows; the rest come from
 * the client and the call. Empty strings and nulls mean "not known".
 */
public record Failure(String catalog, String code, String retryAfter, Long retryAfterMs, String requestId,
    Instant quotaResetsAt) {
  /** A failure with just a code. */
  public static Failure ofCode(String code) {
    return new Failure("", code, "", null, "", null);
  }
}
