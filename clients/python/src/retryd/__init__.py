"""retryd: run a call to a dependency under retryd's retry loop.

    import retryd
    client = retryd.Client("localhost:50051", catalog="vibecode", dependency="portal-1", tenant="acme")
    deal_id = client.call(lambda: b24.add_deal(fields), operation="write", method="crm.deal.add",
                          read_back=lambda: b24.find_deal(external_id))
"""

from ._client import AsyncClient, Client, Tls
from ._loop import Event, Fallback
from ._mirror import MirrorStats
from .errors import (
    Decision,
    DeadlineExceeded,
    DependencyError,
    DoNotRetry,
    FixBeforeRetry,
    Held,
    Hold,
    Inconclusive,
    Rejected,
    RetrydUnavailable,
    RetryRefused,
    VerificationRequired,
)
from .words import HoldKind, HoldScope, RefusedReason, SideEffectState, Strategy, Verdict
from .mappers import default_mapper, from_envelope, from_grpc, from_http, pushback_ms

__all__ = [
    "AsyncClient", "Client", "Tls", "Event", "Fallback", "Decision", "DeadlineExceeded", "DependencyError",
    "DoNotRetry", "FixBeforeRetry", "Held", "Hold", "MirrorStats", "Inconclusive", "Rejected", "RetrydUnavailable", "RetryRefused",
    "VerificationRequired", "Verdict", "Strategy", "SideEffectState", "HoldScope", "HoldKind", "RefusedReason",
    "default_mapper", "from_envelope", "from_grpc", "from_http", "pushback_ms",
]
