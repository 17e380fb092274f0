"""Ready-made mappers from an exception to `Failure` fields.

Each returns a dict of Failure fields (``code``, ``catalog``,
``retry_after``, ``retry_after_ms``, ``request_id`` …) or None when it does
not understand the exception.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from .errors import DependencyError

Fields = dict[str, Any]


def _header(headers: Any, name: str) -> Optional[str]:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is not None:
        v = getter(name)
        if v is None and isinstance(headers, Mapping):
            for k, val in headers.items():
                if str(k).lower() == name.lower():
                    return str(val)
        return None if v is None else str(v)
    return None


def from_dependency_error(exc: BaseException) -> Optional[Fields]:
    if not isinstance(exc, DependencyError):
        return None
    out: Fields = {"code": exc.code}
    if exc.retry_after is not None:
        out["retry_after"] = exc.retry_after
    if exc.retry_after_ms is not None:
        out["retry_after_ms"] = exc.retry_after_ms
    out.update(exc.fields)
    return out


_U64_MAX = (1 << 64) - 1


def pushback_ms(values: list) -> tuple[Optional[int], bool]:
    """The grpc-retry-pushback-ms values of one response, read as gRFC A6
    says: (delay, False) for one value (repeated or not); (None, True) --
    "do not retry" -- for a negative, unparsable or too large value, or for
    values that disagree; (None, False) when there is none."""
    if not values:
        return None, False
    parsed = set()
    for v in values:
        s = v.decode("ascii", "replace") if isinstance(v, bytes) else str(v)
        s = s.strip()
        if not s.isdigit() or not s.isascii() or int(s) > _U64_MAX:
            return None, True
        parsed.add(int(s))
    if len(parsed) > 1:
        return None, True
    return parsed.pop(), False


def from_grpc(exc: BaseException) -> Optional[Fields]:
    """A grpc.RpcError: its status name, and RetryInfo (in
    grpc-status-details-bin) or grpc-retry-pushback-ms as retry_after_ms;
    a pushback that says "do not retry" (gRFC A6) as upstream retryable false."""
    code_fn = getattr(exc, "code", None)
    if not callable(code_fn):
        return None
    try:
        code = code_fn()
    except Exception:  # noqa: BLE001 - not an RpcError after all
        return None
    name = getattr(code, "name", None)
    if not isinstance(name, str):
        return None
    out: Fields = {"catalog": "grpc", "code": name}
    trailers = ()
    md_fn = getattr(exc, "trailing_metadata", None)
    if callable(md_fn):
        trailers = md_fn() or ()
    pushback = [value for key, value in trailers if key == "grpc-retry-pushback-ms"]
    for key, value in trailers:
        if key == "grpc-status-details-bin":
            from google.rpc import error_details_pb2, status_pb2

            st = status_pb2.Status.FromString(value)
            for d in st.details:
                if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    ri = error_details_pb2.RetryInfo()
                    d.Unpack(ri)
                    ms = ri.retry_delay.seconds * 1000 + ri.retry_delay.nanos // 1_000_000
                    out["retry_after_ms"] = max(out.get("retry_after_ms", 0), ms)
    ms, refuse = pushback_ms(pushback)
    if refuse:
        # The dependency said "do not retry": its own retry contract says so.
        out.pop("retry_after_ms", None)
        out["upstream"] = {"retryable": False}
    elif ms is not None:
        out["retry_after_ms"] = max(out.get("retry_after_ms", 0), ms)
    return out


def from_http(exc: BaseException) -> Optional[Fields]:
    """An HTTP error with a status and headers: requests' HTTPError and
    httpx's HTTPStatusError (`.response.status_code`, `.response.headers`),
    urllib's HTTPError (`.code`, `.headers`), or any exception with
    `.status`/`.status_code` and `.headers`."""
    resp = getattr(exc, "response", None)
    status = getattr(resp, "status_code", None) if resp is not None else None
    headers = getattr(resp, "headers", None) if resp is not None else None
    if status is None:
        for attr in ("status_code", "status", "code"):
            v = getattr(exc, attr, None)
            if isinstance(v, int):
                status = v
                break
        headers = getattr(exc, "headers", None)
    if not isinstance(status, int) or not 100 <= status <= 599:
        return None
    out: Fields = {"catalog": "http", "code": str(status)}
    ra = _header(headers, "Retry-After")
    if ra is not None:
        out["retry_after"] = ra
    rid = _header(headers, "X-Request-Id")
    if rid is not None:
        out["request_id"] = rid
    return out


def from_envelope(body: Any, headers: Any = None) -> Optional[Fields]:
    """The Vibecode / Bitrix24 JSON envelope: ``{"error": {"code": "QUEUE_OVERFLOW", …}}``
    or Bitrix24's ``{"error": "CODE", "error_description": …}``; Retry-After and
    X-Request-Id from the headers. `body` is a dict, str or bytes."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError:
            body = None
    code = ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            code = str(err.get("code", ""))
        elif isinstance(err, str):
            code = err
    # No envelope: a network error or a foreign body; code "" says so.
    out: Fields = {"catalog": "vibecode", "code": code}
    ra = _header(headers, "Retry-After")
    if ra is not None:
        out["retry_after"] = ra
    rid = _header(headers, "X-Request-Id")
    if rid is not None:
        out["request_id"] = rid
    return out


def default_mapper(exc: BaseException) -> Optional[Fields]:
    """DependencyError, then grpc RpcError, then HTTP errors; None otherwise."""
    for m in (from_dependency_error, from_grpc, from_http):
        got = m(exc)
        if got is not None:
            return got
    return None
