"""The retry loop, written once as a generator of effects.

The sync and asyncio clients drive the same generator: it yields effects
(("mirror",), ("admit", req), ("run",), ("classify", req), ("read_back",), ("sleep", s),
("report_probe", token, ok)) and receives their outcomes as ("ok", value) or
("err", exception) -- or ("busy", detail): an RPC not sent because retryd advised
waiting, taken as retryd unavailable. Nothing here does I/O, so both drivers behave the same.
Admission is one step the holds mirror may answer: ("mirror",) receives True
(admitted locally), (hold, retry_at) (refused locally) or None (send Admit).
"""

from __future__ import annotations

import datetime as _dt
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Optional

from google.protobuf import timestamp_pb2

from .errors import (
    Decision,
    DeadlineExceeded,
    Held,
    Hold,
    Inconclusive,
    RetrydUnavailable,
    rejection,
    refusal,
)
from .v1 import retryd_pb2 as pb
from .words import HoldKind, HoldScope, RefusedReason, SideEffectState, Strategy, Verdict

Mapper = Callable[[BaseException], Optional[dict]]


@dataclass(frozen=True)
class Fallback:
    """What the client does when retryd is unreachable or slow: reads (and
    writes whose idempotency key the dependency enforces) get capped
    exponential backoff with full jitter, at most `max_attempts` in all;
    other writes are never resent."""

    max_attempts: int = 3
    base: float = 0.1
    cap: float = 2.0


@dataclass(frozen=True)
class Event:
    """One step of the loop, for logs and traces: kind is "admit_refused",
    "decision", "wait", "read_back", "fallback" or "success"; the client adds
    "mirror_stale", "mirror_synced" and "retryd_busy" (once per busy period:
    retryd shed a call and advised waiting `wait` seconds)."""

    kind: str
    attempt: int
    decision: Optional[Decision] = None
    hold: Optional[Hold] = None
    wait: float = 0.0
    detail: str = ""
    local: bool = False  # decided by the client's holds mirror, no RPC
    busy: bool = False  # a fallback because retryd advised waiting: the RPC was not sent


_VERDICTS = {v: Verdict.of_proto(k, "VERDICT_") for k, v in pb.Verdict.items()}
_STRATEGIES = {v: Strategy.of_proto(k, "STRATEGY_") for k, v in pb.Strategy.items()}
_SIDE = {v: SideEffectState.of_proto(k, "SIDE_EFFECT_STATE_") for k, v in pb.SideEffectState.items()}
_SCOPES = {v: HoldScope.of_proto(k, "SCOPE_") for k, v in pb.Scope.items()}
_KINDS = {v: HoldKind.of_proto(k, "HOLD_KIND_") for k, v in pb.HoldKind.items()}


def _ts(t: timestamp_pb2.Timestamp) -> Optional[_dt.datetime]:
    if t.seconds == 0 and t.nanos == 0:
        return None
    return t.ToDatetime(tzinfo=_dt.timezone.utc)


def to_hold(h: Any) -> Optional[Hold]:
    if not h.id:
        return None
    return Hold(h.id, h.catalog, h.dependency, h.tenant, h.method, _SCOPES.get(h.scope),
                _KINDS.get(h.kind), _ts(h.until), h.code, h.rule, h.reason)


def to_decision(d: Any) -> Decision:
    r = d.retry
    return Decision(
        verdict=_VERDICTS.get(d.verdict), reason=d.reason, rule=d.rule,
        required_transition=d.required_transition, terminal_state=d.terminal_state,
        catalog=d.catalog, code=d.code, retryable=r.retryable, safe=r.safe,
        after_ms=r.after_ms, max_after_ms=r.max_after_ms, strategy=_STRATEGIES.get(r.strategy),
        attempt=r.attempt, max_attempts=r.max_attempts, side_effect_state=_SIDE.get(r.side_effect_state),
        reconciliation_action=r.reconciliation_action if r.HasField("reconciliation_action") else None,
        hold=to_hold(d.hold) if d.HasField("hold") else None, warnings=tuple(d.warnings),
    )


def _op(operation: Optional[str]) -> int:
    if operation is None:
        return pb.OPERATION_KIND_UNSPECIFIED
    o = operation.lower()
    if o == "read":
        return pb.OPERATION_KIND_READ
    if o == "write":
        return pb.OPERATION_KIND_WRITE
    raise ValueError(f"operation must be 'read', 'write' or None, not {operation!r}")


_FAILURE_FIELDS = {f.name for f in pb.Failure.DESCRIPTOR.fields}


@dataclass
class Opts:
    catalog: Optional[str]
    dependency: Optional[str]
    tenant: Optional[str]
    locale: Optional[str]
    operation: Optional[str]
    method: Optional[str]
    idempotency_key: Optional[str]
    idempotency_key_enforced: bool
    read_back: Optional[Callable[[], Any]]
    to_failure: Optional[Mapper]
    deadline_wall: Optional[float]  # unix seconds
    deadline_mono: Optional[float]
    fallback: Fallback


def deadline_of(deadline: Any) -> tuple[Optional[float], Optional[float]]:
    """`deadline`: None, seconds from now (int/float/timedelta) or an aware datetime."""
    if deadline is None:
        return None, None
    if isinstance(deadline, _dt.datetime):
        wall = deadline.timestamp()
        return wall, time.monotonic() + (wall - time.time())
    if isinstance(deadline, _dt.timedelta):
        deadline = deadline.total_seconds()
    secs = float(deadline)
    return time.time() + secs, time.monotonic() + secs


def failure_of(o: Opts, fields: dict, attempt: int, probe: str = "") -> Any:
    """retryd's Failure from a mapper's fields and the call's options."""
    failure = pb.Failure(catalog=o.catalog or "", operation=_op(o.operation), method=o.method or "",
                         attempt=attempt, idempotency_key=o.idempotency_key or "",
                         idempotency_key_enforced=o.idempotency_key_enforced,
                         tenant=o.tenant or "", dependency=o.dependency or "",
                         probe_token=probe)
    for k, v in fields.items():
        if v is None or k not in _FAILURE_FIELDS:
            continue
        if k in ("deadline", "quota_resets_at"):
            ts = timestamp_pb2.Timestamp()
            ts.FromDatetime(v)
            getattr(failure, k).CopyFrom(ts)
        elif k == "operation":
            failure.operation = _op(v)
        elif k == "upstream":
            # the dependency's own retry contract, e.g. {"retryable": False}
            for uk, uv in v.items():
                setattr(failure.upstream, uk, uv)
        else:
            setattr(failure, k, v)
    if o.deadline_wall is not None:
        failure.deadline.FromNanoseconds(int(o.deadline_wall * 1e9))
    return failure


def loop(o: Opts, default_mapper: Mapper) -> Generator[tuple, tuple, Any]:
    """The whole retry loop. Returns fn's (or read_back's) result, raises a RetryRefused."""
    op = _op(o.operation)
    attempt = 1
    admitted_once = False
    while True:
        # 1. Admission: from the holds mirror when it can answer, else Admit (fail open:
        # retryd unreachable must not stop the call).
        probe = ""
        while True:
            if o.deadline_mono is not None and time.monotonic() >= o.deadline_mono:
                raise DeadlineExceeded("deadline passed before the attempt")
            local = yield ("mirror",)
            if local is True:
                if not admitted_once:
                    yield ("count", "request")  # the deposit Admit would have made
                break
            if local is not None:
                hold_msg, retry_at = local
                yield from _held(o, attempt, to_hold(hold_msg), retry_at, True)
                continue
            req = pb.AdmitRequest(catalog=o.catalog or "", dependency=o.dependency or "",
                                  tenant=o.tenant or "", method=o.method or "", operation=op,
                                  attempt=attempt)
            status, resp = yield ("admit", req)
            if status == "rejected":
                raise rejection(resp[0], resp[1])
            if status != "ok":
                yield ("event", Event("fallback", attempt, detail=f"Admit failed: {resp}", busy=status == "busy"))
                if not admitted_once:
                    yield ("count", "request")  # Admit made no deposit
                break
            if resp.admitted:
                probe = resp.probe_token
                break
            hold = to_hold(resp.hold) if resp.HasField("hold") else None
            retry_at = resp.retry_at.ToDatetime(tzinfo=_dt.timezone.utc).timestamp() if resp.HasField("retry_at") else time.time() + 1
            yield from _held(o, attempt, hold, retry_at, False)
        admitted_once = True

        # 2. Run the caller's function.
        status, value = yield ("run",)
        if status == "ok":
            yield ("count", "success")
            if probe:
                yield ("report_probe", probe, True)
            yield ("event", Event("success", attempt))
            return value
        exc: BaseException = value

        # 3. Map the failure.
        mapper = o.to_failure or default_mapper
        fields = mapper(exc)
        if fields is None:
            yield ("count", "failure")
            raise exc
        failure = failure_of(o, fields, attempt, probe)

        # 4. Classify and act; a read-back sends its answer in a second Classify.
        read_back_value: Any = None
        while True:
            status, resp = yield ("classify", pb.ClassifyRequest(failure=failure, locale=o.locale or ""))
            if status == "rejected":
                raise rejection(resp[0], resp[1], exc) from exc
            if status != "ok":
                if o.deadline_mono is not None and time.monotonic() >= o.deadline_mono:
                    raise DeadlineExceeded("the deadline passed while asking retryd", None, exc)
                wait = _fallback(o, failure, attempt)
                yield ("event", Event("fallback", attempt, wait=wait or 0.0, detail=f"Classify failed: {resp}",
                                      busy=status == "busy"))
                if wait is None:
                    kind = "read" if failure.operation == pb.OPERATION_KIND_READ else "write"
                    d = Decision(verdict=Verdict.DO_NOT_RETRY, rule=f"client_fallback/{kind}",
                                 reason=f"retryd unavailable ({resp}); the conservative fallback does not retry this {kind}")
                    raise RetrydUnavailable(d.reason, d, exc, RefusedReason.FALLBACK) from exc
                break
            d = to_decision(resp.decision)
            yield ("event", Event("decision", attempt, decision=d))
            if d.verdict is Verdict.ALREADY_APPLIED:
                return read_back_value
            if d.verdict is Verdict.STATE_VERIFICATION_REQUIRED and o.read_back is not None \
                    and failure.read_back == pb.READ_BACK_UNSPECIFIED:
                status, rb = yield ("read_back",)
                if status == "ok" and rb is not None:
                    failure.read_back = pb.READ_BACK_EFFECT_PRESENT
                    read_back_value = rb
                elif status == "ok":
                    failure.read_back = pb.READ_BACK_EFFECT_ABSENT
                elif isinstance(rb, Inconclusive):
                    failure.read_back = pb.READ_BACK_INCONCLUSIVE
                else:
                    raise rb
                yield ("event", Event("read_back", attempt, detail=pb.ReadBack.Name(failure.read_back)))
                continue
            if d.verdict is not Verdict.RETRY_WITH_LIMIT:
                raise refusal(d, exc) from exc
            lo, hi = d.after_ms, max(d.after_ms, d.max_after_ms)
            wait = random.uniform(lo, hi) / 1000.0
            break
        if o.deadline_mono is not None and time.monotonic() + wait > o.deadline_mono:
            raise DeadlineExceeded(f"the next attempt ({wait:.3f} s away) would pass the deadline", None, exc)
        yield ("event", Event("wait", attempt, wait=wait))
        yield ("sleep", wait)
        attempt += 1


def _held(o: Opts, attempt: int, hold: Optional[Hold], retry_at: float, local: bool) -> Generator[tuple, tuple, None]:
    """A refusal by a hold (retryd's Admit or the local mirror): wait until retry_at, or raise Held
    when that passes the deadline."""
    wait = max(0.0, retry_at - time.time()) + 0.01
    yield ("event", Event("admit_refused", attempt, hold=hold, wait=wait, local=local))
    if o.deadline_mono is not None and time.monotonic() + wait > o.deadline_mono:
        raise Held(f"held until {hold.until if hold else retry_at}: {hold.reason if hold else ''}", hold)
    yield ("event", Event("wait", attempt, hold=hold, wait=wait, detail="hold", local=local))
    yield ("sleep", wait)


def _fallback(o: Opts, failure: Any, attempt: int) -> Optional[float]:
    """The wait before the fallback's next attempt, or None for no retry."""
    may = failure.operation == pb.OPERATION_KIND_READ or failure.idempotency_key_enforced
    if not may or attempt >= o.fallback.max_attempts:
        return None
    return random.uniform(0.0, min(o.fallback.cap, o.fallback.base * 2 ** (attempt - 1)))
