#!/usr/bin/env python3
"""Ask a running retryd whether failed calls may be retried, and check the answers.

    python client.py [ADDR]        # default: $RETRYD_ADDR, else localhost:50051

TLS (optional, all from the environment): RETRYD_TLS_CA (PEM of the CA that
signed the server's certificate; setting it turns TLS on), RETRYD_TLS_CLIENT_CERT
and RETRYD_TLS_CLIENT_KEY (PEM, for mutual TLS), RETRYD_TLS_SERVER_NAME (the
name to verify instead of ADDR's host).

Stubs are generated at run time from proto/ into _gen/ (git-ignored) with
grpcio-tools, so they always match the proto. Exit status: 0 when every answer
is what the catalog promises, 1 when one is not, 2 on a usage or RPC problem.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
GEN_DIR = HERE / "_gen"


def generate_stubs() -> None:
    """Compile retryd.proto into _gen/ (google.rpc comes from googleapis-common-protos)."""
    import grpc_tools
    from grpc_tools import protoc

    GEN_DIR.mkdir(exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={GEN_DIR}",
            f"--grpc_python_out={GEN_DIR}",
            str(PROTO_ROOT / "retryd" / "v1" / "retryd.proto"),
        ]
    )
    if rc != 0:
        sys.exit(f"python example: protoc failed ({rc})")
    sys.path.insert(0, str(GEN_DIR))


generate_stubs()

import grpc  # noqa: E402
from google.rpc import code_pb2, error_details_pb2  # noqa: E402
from retryd.v1 import retryd_pb2 as pb  # noqa: E402
from retryd.v1 import retryd_pb2_grpc as pb_grpc  # noqa: E402

failures: list[str] = []


def expect(what: str, got, want) -> bool:
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")
        return False
    return True


def classify(stub: pb_grpc.RetryDecisionServiceStub) -> None:
    # A write timed out on Bitrix24: the platform stopped waiting, but the
    # write may have gone through. Never resend it blindly.
    resp = stub.Classify(
        pb.ClassifyRequest(
            failure=pb.Failure(
                catalog="vibecode",
                code="BITRIX_TIMEOUT",
                operation=pb.OPERATION_KIND_WRITE,
                method="crm.deal.add",
                attempt=1,
                request_id="py-example-1",
            )
        ),
        timeout=10,
    )
    d, r = resp.decision, resp.decision.retry
    print("Classify vibecode/BITRIX_TIMEOUT write attempt 1:")
    print(f"  verdict={pb.Verdict.Name(d.verdict)} rule={d.rule}")
    print(
        f"  retry.retryable={r.retryable} retry.safe={r.safe} retry.after_ms={r.after_ms}"
        f" retry.max_after_ms={r.max_after_ms} strategy={pb.Strategy.Name(r.strategy)}"
    )
    action = r.reconciliation_action if r.HasField("reconciliation_action") else None
    print(f"  side_effect_state={pb.SideEffectState.Name(r.side_effect_state)} reconciliation_action={action}")
    print(f"  reason: {d.reason}")

    expect("Classify verdict", pb.Verdict.Name(d.verdict), "VERDICT_STATE_VERIFICATION_REQUIRED")
    expect("Classify retry.safe", r.safe, False)
    expect("Classify retry.retryable", r.retryable, True)
    expect("Classify retry.side_effect_state", pb.SideEffectState.Name(r.side_effect_state), "SIDE_EFFECT_STATE_POSSIBLE")
    expect("Classify retry.reconciliation_action", action, "read_back_by_business_key")
    expect("Classify retry.attempt", r.attempt, 1)
    expect("Classify target_reached", pb.TargetReached.Name(d.target_reached), "TARGET_REACHED_YES")
    expect("Classify known_code", d.known_code, True)
    expect("Classify rule", d.rule, "vibecode/BITRIX_TIMEOUT/write")
    expect("Classify request_id echoed", d.request_id, "py-example-1")
    expect("Classify retry.after_ms <= retry.max_after_ms", r.after_ms <= r.max_after_ms, True)


def classify_batch(stub: pb_grpc.RetryDecisionServiceStub) -> None:
    # Three pending records re-driven at once; the third names a catalog the
    # server does not have and gets its own error, the others are decided.
    resp = stub.ClassifyBatch(
        pb.ClassifyBatchRequest(
            failures=[
                # The queue rejected it before it ran: safe to resend after Retry-After.
                pb.Failure(catalog="vibecode", code="QUEUE_OVERFLOW", operation=pb.OPERATION_KIND_WRITE,
                           attempt=1, retry_after="5"),
                # A read timed out (operation inferred from the method): just retry it.
                pb.Failure(catalog="vibecode", code="BITRIX_TIMEOUT", method="crm.deal.get", attempt=1),
                # Unknown catalog: an error for this item only.
                pb.Failure(catalog="no-such-catalog", code="BITRIX_TIMEOUT", attempt=1),
            ]
        ),
        timeout=10,
    )
    print("ClassifyBatch (3 items):")
    for res in resp.results:
        if res.WhichOneof("outcome") == "decision":
            d = res.decision
            action = d.retry.reconciliation_action if d.retry.HasField("reconciliation_action") else None
            print(f"  [{res.index}] verdict={pb.Verdict.Name(d.verdict)} safe={d.retry.safe}"
                  f" after_ms={d.retry.after_ms} reconciliation_action={action}")
        elif res.WhichOneof("outcome") == "error":
            print(f"  [{res.index}] error code={code_pb2.Code.Name(res.error.code)} message={res.error.message!r}")
        else:
            print(f"  [{res.index}] neither decision nor error")
    s = resp.summary
    print(f"  summary: retry_with_limit={s.retry_with_limit}"
          f" state_verification_required={s.state_verification_required} errors={s.errors}")

    if not expect("ClassifyBatch result count", len(resp.results), 3):
        return
    for i, res in enumerate(resp.results):
        expect(f"results[{i}].index", res.index, i)

    r0 = resp.results[0]
    if expect("results[0] outcome", r0.WhichOneof("outcome"), "decision"):
        expect("results[0] verdict", pb.Verdict.Name(r0.decision.verdict), "VERDICT_RETRY_WITH_LIMIT")
        expect("results[0] retry.safe", r0.decision.retry.safe, True)
        expect("results[0] retry.after_ms", r0.decision.retry.after_ms, 5000)
        expect("results[0] retry.strategy", pb.Strategy.Name(r0.decision.retry.strategy), "STRATEGY_RETRY_AFTER")
        expect("results[0] no reconciliation_action", r0.decision.retry.HasField("reconciliation_action"), False)

    r1 = resp.results[1]
    if expect("results[1] outcome", r1.WhichOneof("outcome"), "decision"):
        expect("results[1] verdict", pb.Verdict.Name(r1.decision.verdict), "VERDICT_RETRY_WITH_LIMIT")
        expect("results[1] retry.safe", r1.decision.retry.safe, True)
        expect("results[1] operation", pb.OperationKind.Name(r1.decision.operation), "OPERATION_KIND_READ")
        expect("results[1] operation_inferred", r1.decision.operation_inferred, True)

    r2 = resp.results[2]
    if expect("results[2] outcome", r2.WhichOneof("outcome"), "error"):
        expect("results[2] error code", code_pb2.Code.Name(r2.error.code), "INVALID_ARGUMENT")
        fields = []
        for detail in r2.error.details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                fields.extend(v.field for v in bad.field_violations)
        expect("results[2] BadRequest names failures[2].catalog", "failures[2].catalog" in fields, True)

    expect("summary.retry_with_limit", s.retry_with_limit, 2)
    expect("summary.errors", s.errors, 1)


def open_channel(addr: str) -> grpc.Channel:
    """Plaintext, or TLS (mutual with a client certificate) when RETRYD_TLS_CA is set."""
    ca = os.environ.get("RETRYD_TLS_CA")
    if not ca:
        return grpc.insecure_channel(addr)
    cert, key = os.environ.get("RETRYD_TLS_CLIENT_CERT"), os.environ.get("RETRYD_TLS_CLIENT_KEY")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes(),
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )
    name = os.environ.get("RETRYD_TLS_SERVER_NAME")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(addr, credentials, options=options)


def main() -> int:
    addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("RETRYD_ADDR", "localhost:50051")
    with open_channel(addr) as channel:
        stub = pb_grpc.RetryDecisionServiceStub(channel)
        try:
            classify(stub)
            classify_batch(stub)
        except grpc.RpcError as err:
            print(f"python example: RPC failed: {err.code().name}: {err.details()}", file=sys.stderr)
            return 2
    if failures:
        print(f"python example: {len(failures)} unexpected answer(s):", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print("python example: all answers as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
