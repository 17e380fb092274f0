"""retryd's words as enums: the same words as the CLI, HTTP, metrics and logs
(src/core/words.rs), e.g. `Verdict.RETRY_WITH_LIMIT` is "retry_with_limit".

Each member is a `str` (so JSON, logging and f-strings give the word) and
`str(member)` is the word. For code written before these enums, a member
also equals its upper-case name ("RETRY_WITH_LIMIT"); that spelling is
deprecated.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional, TypeVar

W = TypeVar("W", bound="Word")


class Word(str, Enum):
    """A str enum whose value is retryd's word."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Word):
            return self is other
        if isinstance(other, str):
            return other == self.value or other == self.name  # the name: the old spelling
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = str.__hash__

    @classmethod
    def of_proto(cls: type[W], name: str, prefix: str) -> Optional[W]:
        """The member for a proto enum name ("VERDICT_RETRY_WITH_LIMIT"), None for UNSPECIFIED."""
        try:
            return cls(name[len(prefix):].lower())
        except ValueError:
            return None


class Verdict(Word):
    """What retryd says about a failure."""

    RETRY_WITH_LIMIT = "retry_with_limit"
    STATE_VERIFICATION_REQUIRED = "state_verification_required"
    FIX_BEFORE_RETRY = "fix_before_retry"
    DO_NOT_RETRY = "do_not_retry"
    ALREADY_APPLIED = "already_applied"


class Strategy(Word):
    """How the decision's delay was computed."""

    NONE = "none"
    EXPONENTIAL_BACKOFF = "exponential_backoff"
    RETRY_AFTER = "retry_after"
    SCHEDULE = "schedule"
    HOLD = "hold"
    BUDGET = "budget"


class SideEffectState(Word):
    """What is known about the failed call's side effect."""

    NONE = "none"
    POSSIBLE = "possible"
    CONFIRMED = "confirmed"
    UNKNOWN = "unknown"


class HoldScope(Word):
    """What a fleet hold covers."""

    TENANT = "tenant"
    DEPENDENCY = "dependency"
    METHOD = "method"


class HoldKind(Word):
    """Why a fleet hold stops calls."""

    PAUSE = "pause"
    QUOTA_STOP = "quota_stop"
    QUARANTINE = "quarantine"
    CIRCUIT_OPEN = "circuit_open"


class RefusedReason(Word):
    """Why the loop stopped without a result (`RetryRefused.reason`)."""

    VERDICT = "verdict"  # retryd's decision (see .decision.verdict)
    HELD = "held"  # a fleet hold past the deadline
    DEADLINE_EXCEEDED = "deadline_exceeded"
    FALLBACK = "fallback"  # retryd unreachable or slow; the conservative fallback refused


def word(v: Any) -> str:
    """The word of a member, or the string itself."""
    return v.value if isinstance(v, Word) else str(v)
