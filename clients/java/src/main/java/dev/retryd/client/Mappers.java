package dev.retryd.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Ready-made mappers from an exception to a {@link Failure}; null means "not a dependency failure". */
public final class Mappers {
  private Mappers() {}

  /** A dependency failure by its code; {@link #defaultMapper} understands it. */
  public static class DependencyException extends Exception {
    public final String code;
    public final String retryAfter;
    public final Long retryAfterMs;
    /** The catalog to judge the code by; empty: the client's. */
    public final String catalog;

    public DependencyException(String code, String retryAfter, Long retryAfterMs) {
      this(code, retryAfter, retryAfterMs, "");
    }

    public DependencyException(String code, String retryAfter, Long retryAfterMs, String catalog) {
      super("dependency failed: " + code);
      this.code = code;
      this.retryAfter = retryAfter == null ? "" : retryAfter;
      this.retryAfterMs = retryAfterMs;
      this.catalog = catalog == null ? "" : catalog;
    }
  }

  /** An HTTP answer that failed: its status and headers. */
  public static class HttpStatusException extends Exception {
    public final int status;
    public final Map<String, String> headers;

    public HttpStatusException(int status, Map<String, String> headers) {
      super("HTTP " + status);
      this.status = status;
      this.headers = headers;
    }
  }

  /** DependencyException, HttpStatusException, then gRPC StatusRuntimeException; null otherwise. */
  public static Failure defaultMapper(Throwable t) {
    if (t instanceof DependencyException d) {
      return new Failure(d.catalog, d.code, d.retryAfter, d.retryAfterMs, "", null);
    }
    if (t instanceof HttpStatusException h) {
      return fromHttp(h.status, h.headers);
    }
    if (t instanceof StatusRuntimeException s) {
      return fromGrpc(s);
    }
    return null;
  }

  private static String header(Map<String, String> headers, String name) {
    if (headers == null) {
      return "";
    }
    for (Map.Entry<String, String> e : headers.entrySet()) {
      if (e.getKey().equalsIgnoreCase(name)) {
        return e.getValue();
      }
    }
    return "";
  }

  /** An HTTP status and headers: code = the status (catalog "http"), Retry-After and X-Request-Id. */
  public static Failure fromHttp(int status, Map<String, String> headers) {
    return new Failure("http", Integer.toString(status), header(headers, "Retry-After"), null,
        header(headers, "X-Request-Id"), null);
  }

  /** What one response's {@code grpc-retry-pushback-ms} values say (gRFC A6). */
  public record Pushback(Long ms, boolean doNotRetry) {}

  private static final java.math.BigInteger U64_MAX = java.math.BigInteger.ONE.shiftLeft(64).subtract(java.math.BigInteger.ONE);

  /**
   * The {@code grpc-retry-pushback-ms} values of one response, read as gRFC A6 does: one value, or the same value
   * repeated, is a delay; a negative, unparsable or too large value (past 2^63-1 ms, beyond any catalog's cap), or
   * values that disagree, mean "do not retry"; none: no delay.
   */
  public static Pushback pushback(Iterable<String> values) {
    Long got = null;
    if (values != null) {
      for (String raw : values) {
        String v = raw == null ? "" : raw.trim();
        if (!v.matches("[0-9]+")) {
          return new Pushback(null, true);
        }
        java.math.BigInteger n = new java.math.BigInteger(v);
        if (n.compareTo(java.math.BigInteger.valueOf(Long.MAX_VALUE)) > 0 || n.compareTo(U64_MAX) > 0
            || (got != null && got != n.longValue())) {
          return new Pushback(null, true);
        }
        got = n.longValue();
      }
    }
    return new Pushback(got, false);
  }

  /**
   * A gRPC status: its code name (catalog "grpc"), google.rpc.RetryInfo or grpc-retry-pushback-ms as retryAfterMs; a
   * pushback that says "do not retry" as {@link Failure#noRetry()}.
   */
  public static Failure fromGrpc(StatusRuntimeException e) {
    Status.Code code = e.getStatus().getCode();
    Long ms = null;
    Metadata md = e.getTrailers();
    Pushback pushback = pushback(md == null ? null
        : md.getAll(Metadata.Key.of("grpc-retry-pushback-ms", Metadata.ASCII_STRING_MARSHALLER)));
    com.google.rpc.Status st = StatusProto.fromThrowable(e);
    if (st != null) {
      for (com.google.protobuf.Any any : st.getDetailsList()) {
        if (any.is(RetryInfo.class)) {
          try {
            RetryInfo ri = any.unpack(RetryInfo.class);
            ms = ri.getRetryDelay().getSeconds() * 1000 + ri.getRetryDelay().getNanos() / 1_000_000;
          } catch (InvalidProtocolBufferException ignored) {
            // a malformed detail is no advice
          }
        }
      }
    }
    if (pushback.doNotRetry()) {
      return new Failure("grpc", code.name(), "", null, "", null, true);
    }
    if (pushback.ms() != null && (ms == null || pushback.ms() > ms)) {
      ms = pushback.ms();
    }
    return new Failure("grpc", code.name(), "", ms, "", null);
  }

  private static final Pattern STRING_ERROR = Pattern.compile("\"error\"\\s*:\\s*\"([^\"]*)\"");
  private static final Pattern OBJECT_ERROR = Pattern.compile("\"error\"\\s*:\\s*\\{[^}]*?\"code\"\\s*:\\s*\"([^\"]*)\"");

  /**
   * The Vibecode / Bitrix24 JSON envelope ({@code {"error":{"code":"QUEUE_OVERFLOW"}}} or {@code {"error":"CODE"}}),
   * catalog "vibecode", with Retry-After and X-Request-Id from the headers; no envelope gives an empty code.
   */
  public static Failure fromEnvelope(String body, Map<String, String> headers) {
    String code = "";
    Matcher m = STRING_ERROR.matcher(body == null ? "" : body);
    if (m.find()) {
      code = m.group(1);
    } else {
      m = OBJECT_ERROR.matcher(body == null ? "" : body);
      if (m.find()) {
        code = m.group(1);
      }
    }
    return new Failure("vibecode", code, header(headers, "Retry-After"), null, header(headers, "X-Request-Id"), null);
  }
}
