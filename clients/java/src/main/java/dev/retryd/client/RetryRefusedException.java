package dev.retryd.client;

import dev.retryd.v1.Hold;

/**
 * The loop stopped without a result. {@link #kind()} says why; {@link #decision()} is retryd's whole decision (or the
 * client's own for a fallback); {@link #hold()} the hold when held; the cause is the dependency's last exception.
 */
public class RetryRefusedException extends Exception {
  /** Why the loop stopped; {@link #toString()} gives the word the conformance suite and the other libraries use. */
  public enum Kind {
    /** retryd's verdict does not retry ({@link RetryRefusedException#decision()}). */
    VERDICT("verdict"),
    /** A fleet hold covers the call past its deadline ({@link RetryRefusedException#hold()}). */
    HELD("held"),
    /** The call's deadline passed, or the next attempt would pass it. */
    DEADLINE("deadline_exceeded"),
    /** retryd was unreachable or slow and the conservative fallback refused. */
    FALLBACK("fallback"),
    /** retryd rejected the request itself ({@link RejectedException}). */
    REJECTED("rejected");

    private final String word;

    Kind(String word) { this.word = word; }

    /** The word, e.g. {@code deadline_exceeded}. */
    public String word() { return word; }

    @Override
    public String toString() { return word; }
  }

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
