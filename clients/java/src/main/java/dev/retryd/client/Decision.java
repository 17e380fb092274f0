package dev.retryd.client;

import dev.retryd.v1.Hold;

/**
 * retryd's answer for one failure: the verdict and the delay's strategy as enums with the CLI's words
 * ({@code d.verdict()} prints {@code retry_with_limit}); {@code raw} is the whole decision as sent (null for the
 * fallback's own).
 */
public record Decision(Verdict verdict, String reason, String rule, String requiredTransition, String terminalState,
    long afterMs, long maxAfterMs, Strategy strategy, Hold hold, dev.retryd.v1.Decision raw) {
  static Decision of(dev.retryd.v1.Decision d) {
    return new Decision(Verdict.of(d.getVerdict()), d.getReason(), d.getRule(), d.getRequiredTransition(),
        d.getTerminalState(), d.getRetry().getAfterMs(), d.getRetry().getMaxAfterMs(),
        Strategy.of(d.getRetry().getStrategy()), d.hasHold() ? d.getHold() : null, d);
  }
}
