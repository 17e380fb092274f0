// retryd's words (src/core/words.rs): the same words as the CLI, HTTP, metrics
// and logs, e.g. Verdict.RetryWithLimit is "retry_with_limit". Each is a const
// object (the values) and a string-literal union type of the same name.

/** What retryd says about a failure. */
export const Verdict = {
  RetryWithLimit: "retry_with_limit",
  StateVerificationRequired: "state_verification_required",
  FixBeforeRetry: "fix_before_retry",
  DoNotRetry: "do_not_retry",
  AlreadyApplied: "already_applied",
} as const;
export type Verdict = (typeof Verdict)[keyof typeof Verdict];

/** How the decision's delay was computed. */
export const Strategy = {
  None: "none",
  ExponentialBackoff: "exponential_backoff",
  RetryAfter: "retry_after",
  Schedule: "schedule",
  Hold: "hold",
  Budget: "budget",
} as const;
export type Strategy = (typeof Strategy)[keyof typeof Strategy];

/** What is known about the failed call's side effect. */
export const SideEffectState = { None: "none", Possible: "possible", Confirmed: "confirmed", Unknown: "unknown" } as const;
export type SideEffectState = (typeof SideEffectState)[keyof typeof SideEffectState];

/** What a fleet hold covers. */
export const HoldScope = { Tenant: "tenant", Dependency: "dependency", Method: "method" } as const;
export type HoldScope = (typeof HoldScope)[keyof typeof HoldScope];

/** Why a fleet hold stops calls. */
export const HoldKind = { Pause: "pause", QuotaStop: "quota_stop", Quarantine: "quarantine", CircuitOpen: "circuit_open" } as const;
export type HoldKind = (typeof HoldKind)[keyof typeof HoldKind];

/** Why the loop stopped without a result (RetryRefused.reason). */
export const RefusedReason = {
  /** retryd's decision (see decision.verdict). */
  Verdict: "verdict",
  /** A fleet hold past the deadline. */
  Held: "held",
  DeadlineExceeded: "deadline_exceeded",
  /** retryd unreachable or slow; the conservative fallback refused. */
  Fallback: "fallback",
} as const;
export type RefusedReason = (typeof RefusedReason)[keyof typeof RefusedReason];

/** The word of a proto enum name ("VERDICT_RETRY_WITH_LIMIT" → "retry_with_limit"), if it is one of `words`.
 * @internal */
export function wordOf<W extends string>(words: Record<string, W>, name: string | null | undefined, prefix: string): W | undefined {
  const w = (name ?? "").startsWith(prefix) ? (name ?? "").slice(prefix.length).toLowerCase() : "";
  return (Object.values(words) as string[]).includes(w) ? (w as W) : undefined;
}
