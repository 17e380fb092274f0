package dev.retryd.client;

/** How retryd computed a retry's delay, with the CLI's and HTTP's words: {@link #toString()} gives the word. */
public enum Strategy {
  /** No automatic retry, so no delay (also when retryd gave none). */
  NONE("none"),
  /** Bounded exponential backoff with jitter. */
  EXPONENTIAL_BACKOFF("exponential_backoff"),
  /** The dependency's Retry-After (or pushback) decides. */
  RETRY_AFTER("retry_after"),
  /** A fixed schedule of waits, one per retry. */
  SCHEDULE("schedule"),
  /** A fleet hold on the failure's scope ends later than any other delay. */
  HOLD("hold"),
  /** The fleet retry budget of the failure's scope is spent: the retry waits until its window has room. */
  BUDGET("budget");

  private final String word;

  Strategy(String word) { this.word = word; }

  /** The CLI's and HTTP's word, e.g. {@code exponential_backoff}. */
  public String word() { return word; }

  @Override
  public String toString() { return word; }

  /** The strategy a word names; IllegalArgumentException otherwise. */
  public static Strategy of(String word) {
    for (Strategy s : values()) {
      if (s.word.equals(word)) {
        return s;
      }
    }
    throw new IllegalArgumentException("unknown strategy \"" + word + "\"; one of none, exponential_backoff,"
        + " retry_after, schedule, hold, budget");
  }

  /** The proto's strategy; unspecified (or one this library does not know) reads as {@link #NONE}. */
  static Strategy of(dev.retryd.v1.Strategy s) {
    return switch (s) {
      case STRATEGY_EXPONENTIAL_BACKOFF -> EXPONENTIAL_BACKOFF;
      case STRATEGY_RETRY_AFTER -> RETRY_AFTER;
      case STRATEGY_SCHEDULE -> SCHEDULE;
      case STRATEGY_HOLD -> HOLD;
      case STRATEGY_BUDGET -> BUDGET;
      default -> NONE;
    };
  }
}
