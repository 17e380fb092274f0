"""Typed results and errors of the retry loop."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Optional

from .words import HoldKind, HoldScope, RefusedReason, SideEffectState, Strategy, Verdict


@dataclass(frozen=True)
class Hold:
    """A fleet hold: "do not call this scope until `until`"."""

    id: str
    catalog: str
    dependency: str
    tenant: str
    method: str
    scope: Optional[HoldScope]  # "tenant", "dependency", "method"
    kind: Optional[HoldKind]  # "pause", "quota_stop", "quarantine", "circuit_open"
    until: Optional[_dt.datetime]
    code: str
    rule: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """retryd's answer for one failure (the fields a caller acts on)."""

    verdict: Optional[Verdict]  # str(verdict) is the CLI's and HTTP's word, e.g. "retry_with_limit"
    reason: str = ""
    rule: str = ""
    required_transition: str = ""
    terminal_state: str = ""
    catalog: str = ""
    code: str = ""
    retryable: bool = False
    safe: bool = False
    after_ms: int = 0
    max_after_ms: int = 0
    strategy: Optional[Strategy] = None
    attempt: int = 0
    max_attempts: int = 0
    side_effect_state: Optional[SideEffectState] = None
    reconciliation_action: Optional[str] = None
    hold: Optional[Hold] = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


class DependencyError(Exception):
    """Raise from `fn` to report a dependency failure by its code.

    `retry_after` is the raw Retry-After (delta-seconds or HTTP-date),
    `retry_after_ms` an already parsed delay; other Failure fields
    (`request_id`, `catalog`, `dependency`, `quota_resets_at` …) may be passed
    as keywords.
    """

    def __init__(self, code: str, *, retry_after: Optional[str] = None,
                 retry_after_ms: Optional[int] = None, **fields: Any) -> None:
        super().__init__(code)
        self.code = code
        self.retry_after = retry_after
        self.retry_after_ms = retry_after_ms
        self.fields = fields


class Inconclusive(Exception):
    """Raise from `read_back` when it cannot tell whether the effect is there."""


class RetryRefused(Exception):
    """The loop stopped without a result. `.reason` says why (a `RefusedReason`),
    `.decision` is retryd's whole decision (or the client's own, for a
    fallback), `.error` the dependency's last exception, if any."""

    reason_default = RefusedReason.VERDICT

    def __init__(self, message: str, decision: Optional[Decision] = None,
                 error: Optional[BaseException] = None, reason: Optional[RefusedReason] = None) -> None:
        super().__init__(message)
        self.decision = decision
        self.error = error
        self.reason: RefusedReason = reason or type(self).reason_default


class FixBeforeRetry(RetryRefused):
    """`fix_before_retry`: fix `decision.required_transition` first."""


class DoNotRetry(RetryRefused):
    """`do_not_retry`: hand the case over (`decision.terminal_state` may say how it ended)."""


class VerificationRequired(RetryRefused):
    """`state_verification_required` and no read-back could settle it."""


class Held(RetryRefused):
    """A fleet hold refuses the call past the caller's deadline; `.hold` says which."""

    reason_default = RefusedReason.HELD

    def __init__(self, message: str, hold: Optional[Hold]) -> None:
        super().__init__(message)
        self.hold = hold


class DeadlineExceeded(RetryRefused):
    """The caller's deadline would pass before the next attempt."""

    reason_default = RefusedReason.DEADLINE_EXCEEDED


class RetrydUnavailable(RetryRefused):
    """retryd was unreachable or slow, and the conservative fallback refused
    another attempt (a write without an enforced key, or a read past 3 attempts)."""

    reason_default = RefusedReason.FALLBACK


class Rejected(Exception):
    """retryd refused the request itself (INVALID_ARGUMENT, NOT_FOUND,
    PERMISSION_DENIED): a mistake in the client's configuration or in what a
    mapper sent, not an outage, so no fallback runs. `.field` is the field
    retryd named (e.g. "failure.catalog"), `.code` the gRPC status name,
    `.error` the dependency's exception when there was one (also `__cause__`)."""

    def __init__(self, code: str, field: str, message: str, error: Optional[BaseException] = None) -> None:
        super().__init__(f"retryd rejected the request ({code}): {message}")
        self.code = code
        self.field = field
        self.message = message
        self.error = error


# The gRPC codes by which retryd says the request is wrong, not that it is down.
REJECTION_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED"})


def rejection(code: str, message: str, error: Optional[BaseException] = None) -> Rejected:
    """retryd's messages start with the field they are about ("failure.catalog: …")."""
    head, sep, _ = message.partition(":")
    field = head.strip() if sep and head.strip() and " " not in head.strip() else ""
    return Rejected(code, field, message, error)


_BY_VERDICT = {
    Verdict.FIX_BEFORE_RETRY: FixBeforeRetry,
    Verdict.DO_NOT_RETRY: DoNotRetry,
    Verdict.STATE_VERIFICATION_REQUIRED: VerificationRequired,
}


def refusal(decision: Decision, error: Optional[BaseException]) -> RetryRefused:
    cls = _BY_VERDICT.get(decision.verdict, RetryRefused)  # type: ignore[arg-type]
    return cls(f"{decision.verdict}: {decision.reason}", decision, error)
