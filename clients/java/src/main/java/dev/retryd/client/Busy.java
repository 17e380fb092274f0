package dev.retryd.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.concurrent.atomic.AtomicLong;

/**
 * retryd's own advice to wait, when it sheds a call (RESOURCE_EXHAUSTED, or a draining server's UNAVAILABLE): until
 * the advice passes, the client sends it no Admit, Classify or ReportOutcomes and a watch stream does not reopen
 * (clients/java/README.md, "When retryd is busy"). Lock-free: one atomic instant on {@link System#nanoTime()}.
 */
final class Busy {
  /** Longest advice honoured: a hostile or broken server cannot silence a client for longer. */
  static final long CAP_MS = 30_000;
  private static final Metadata.Key<String> PUSHBACK =
      Metadata.Key.of("grpc-retry-pushback-ms", Metadata.ASCII_STRING_MARSHALLER);
  /** {@link #until} before any advice. */
  private static final long NONE = Long.MIN_VALUE;

  /** End of the busy period on {@link System#nanoTime()}'s clock ({@link #NONE}: never advised). */
  private final AtomicLong until = new AtomicLong(NONE);

  /**
   * A retryd answer that sheds the call: RESOURCE_EXHAUSTED or UNAVAILABLE carrying advice (retryd's sheds always do;
   * a draining server's is 0). Without advice it is retryd away (refused connection, network) or not retryd's own
   * answer, as the other libraries count it.
   */
  static boolean shed(Throwable t) {
    return adviceMillis(t) != null;
  }

  /**
   * The advice of a RESOURCE_EXHAUSTED or UNAVAILABLE answer, in ms capped at {@link #CAP_MS}; null for none (another
   * code, no advice, or advice that cannot be read). {@code google.rpc.RetryInfo}'s {@code retry_delay} when present
   * and valid (non-negative, nanos within a second), else {@code grpc-retry-pushback-ms} as gRFC A6 reads it: one
   * value of digits (or the same value repeated); negative, unparsable, too large or conflicting values are none.
   */
  static Long adviceMillis(Throwable t) {
    Status.Code code = Status.fromThrowable(t).getCode();
    if (code != Status.Code.RESOURCE_EXHAUSTED && code != Status.Code.UNAVAILABLE) {
      return null;
    }
    com.google.rpc.Status details = StatusProto.fromThrowable(t);
    if (details != null) {
      for (com.google.protobuf.Any any : details.getDetailsList()) {
        if (!any.is(RetryInfo.class)) {
          continue;
        }
        try {
          com.google.protobuf.Duration d = any.unpack(RetryInfo.class).getRetryDelay();
          if (d.getSeconds() >= 0 && d.getNanos() >= 0 && d.getNanos() < 1_000_000_000) {
            // Seconds past the cap need no multiplication (which could overflow).
            return d.getSeconds() >= CAP_MS / 1000 ? CAP_MS
                : Math.min(CAP_MS, d.getSeconds() * 1000 + d.getNanos() / 1_000_000);
          }
        } catch (InvalidProtocolBufferException ignored) {
          // a malformed detail is no advice: the pushback may still say
        }
      }
    }
    Metadata trailers = Status.trailersFromThrowable(t);
    Mappers.Pushback p = Mappers.pushback(trailers == null ? null : trailers.getAll(PUSHBACK));
    return p.doNotRetry() || p.ms() == null ? null : Math.min(CAP_MS, p.ms());
  }

  /**
   * Keeps {@code ms} of advice (the later end if one is set). True when this begins a busy period (none was in force):
   * the caller logs and hooks it once per period, not per call. Advice 0 (a draining server: reconnect at once) or
   * none changes nothing.
   */
  boolean advise(Long ms) {
    if (ms == null || ms <= 0) {
      return false;
    }
    long now = System.nanoTime();
    long end = now + Math.min(ms, CAP_MS) * 1_000_000;
    while (true) {
      long cur = until.get();
      boolean inForce = cur != NONE && cur - now > 0;
      if (inForce && cur - end >= 0) {
        return false;
      }
      if (until.compareAndSet(cur, end)) {
        return !inForce;
      }
    }
  }

  /** Whether retryd's advice to wait is still in force. */
  boolean busy() {
    long cur = until.get();
    return cur != NONE && cur - System.nanoTime() > 0;
  }

  /** Milliseconds of advice left (0 when none is in force), rounded up. */
  long remainingMillis() {
    long cur = until.get();
    if (cur == NONE) {
      return 0;
    }
    long left = cur - System.nanoTime();
    return left <= 0 ? 0 : (left + 999_999) / 1_000_000;
  }
}
