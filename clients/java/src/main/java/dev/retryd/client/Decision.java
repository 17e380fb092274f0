package dev.retryd.client;

import dev.retryd.v1.Hold;

/** retryd's answer for one failure; {@code raw} is the whole decision as sent (null for the fallback's own). */
public record Decision(String verdict, String reason, String rule, String requiredTransition, String terminalState,
    long afterMs, long maxAfterMs, Hold hold, dev.retryd.v1.Decision raw) {
  static Decision of(dev.retryd.v1.Decision d) {
    String v = d.getVerdict().name().replaceFirst("^VERDICT_", "");
    return new Decision(v, d.getReason(), d.getRule(), d.getRequiredTransition(), d.getTerminalState(),
        d.getRetry().getAfterMs(), d.getRetry().getMaxAfterMs(), d.hasHold() ? d.getHold() : null, d);
  }
}
