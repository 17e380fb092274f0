package dev.retryd.client;

import io.grpc.Status;

/**
 * retryd refused the request itself ({@code INVALID_ARGUMENT}, {@code NOT_FOUND}, {@code PERMISSION_DENIED}): a
 * mistake in the client's configuration or in what a mapper sent, not an outage, so no fallback runs. {@link #field()}
 * is the field retryd named ({@code "failure.catalog"}); the cause is the dependency's exception, when there was one.
 */
public class RejectedException extends RetryRefusedException {
  private final Status.Code code;
  private final String field;

  RejectedException(Status.Code code, String field, String message, Throwable cause) {
    super(Kind.REJECTED, "retryd rejected the request (" + code + "): " + message, null, null, cause);
    this.code = code;
    this.field = field;
  }

  public Status.Code code() { return code; }
  public String field() { return field; }

  /** retryd's status says the request is wrong (null otherwise); its messages start with the field. */
  static RejectedException of(io.grpc.StatusRuntimeException e, Throwable cause) {
    Status.Code code = e.getStatus().getCode();
    if (code != Status.Code.INVALID_ARGUMENT && code != Status.Code.NOT_FOUND && code != Status.Code.PERMISSION_DENIED) {
      return null;
    }
    String msg = e.getStatus().getDescription() == null ? "" : e.getStatus().getDescription();
    int i = msg.indexOf(':');
    String head = i > 0 ? msg.substring(0, i).trim() : "";
    return new RejectedException(code, head.isEmpty() || head.matches(".*\\s.*") ? "" : head, msg, cause);
  }
}
