package dev.retryd.client;

import dev.retryd.v1.Hold;

/**
 * The loop stopped without a result. {@link #kind()} says why; {@link #decision()} is retryd's whole decision (or the
 * client's own for a fallback); {@link #hold()} the hold when held; the cause is the dependency's last exception.
 */
public class RetryRefusedException extends Exception {
  /** Why the loop stopped. */
  public enum Kind { VERDICT, HELD, DEADLINE, FALLBACK, REJECTED }

  private final Kind kind;
  private final transient Decision decision;
  private final transient Hold hold;

  RetryRefusedException(Kind kind, String message, Decision decision, Hold hold, Throwable cause) {
    super(message, cause);
    this.kind = kind;
    this.decision = decision;
    this.hold = hold;
  }

  public Kind kind() { return kind; }
  public Decision decision() { return decision; }
  public Hold hold() { return hold; }
}
