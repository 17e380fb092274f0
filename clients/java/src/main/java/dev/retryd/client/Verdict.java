package dev.retryd.client;

/**
 * What retryd says the caller may do after a failure, with the words the CLI and HTTP use ({@code retry_with_limit}):
 * {@link #toString()} and {@link #word()} give the word, {@link #name()} the constant ({@code RETRY_WITH_LIMIT}).
 */
public enum Verdict {
  /** Wait for the stated condition, then retry within the attempt limit. */
  RETRY_WITH_LIMIT("retry_with_limit"),
  /** Read the state back by a business key first; retry only if the effect is proven absent. */
  STATE_VERIFICATION_REQUIRED("state_verification_required"),
  /** Fix the cause (the decision's required transition) before a new attempt. */
  FIX_BEFORE_RETRY("fix_before_retry"),
  /** Do not retry automatically; hand the case over. */
  DO_NOT_RETRY("do_not_retry"),
  /** A read-back found the effect: the write succeeded. */
  ALREADY_APPLIED("already_applied");

  private final String word;

  Verdict(String word) { this.word = word; }

  /** The CLI's and HTTP's word, e.g. {@code retry_with_limit}. */
  public String word() { return word; }

  @Override
  public String toString() { return word; }

  /** The verdict a word names ({@code retry_with_limit}); IllegalArgumentException naming the words otherwise. */
  public static Verdict of(String word) {
    for (Verdict v : values()) {
      if (v.word.equals(word)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown verdict \"" + word + "\"; one of retry_with_limit,"
        + " state_verification_required, fix_before_retry, do_not_retry, already_applied");
  }

  /**
   * The proto's verdict. One this library does not know (a newer retryd's, or unspecified) reads as
   * {@link #DO_NOT_RETRY}: the loop never retries what it does not understand; {@code Decision.raw()} keeps it.
   */
  static Verdict of(dev.retryd.v1.Verdict v) {
    return switch (v) {
      case VERDICT_RETRY_WITH_LIMIT -> RETRY_WITH_LIMIT;
      case VERDICT_STATE_VERIFICATION_REQUIRED -> STATE_VERIFICATION_REQUIRED;
      case VERDICT_FIX_BEFORE_RETRY -> FIX_BEFORE_RETRY;
      case VERDICT_ALREADY_APPLIED -> ALREADY_APPLIED;
      default -> DO_NOT_RETRY;
    };
  }
}
