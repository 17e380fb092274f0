//! The answer writer against prost: the same bytes as prost's encoding of
//! the message `convert` builds from the same decisions, holds and errors.

use super::*;
use crate::core::hold::{HoldKey, HoldKind, HoldScope};
use crate::core::{Policy, Warning};
use crate::grpc::convert::{decision_to_proto, failure_from_proto, hold_to_proto_at};
use proptest::prelude::*;

const NOW: UnixMillis = UnixMillis(1_786_190_400_000);

/// What one item of the answer is.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Decision(usize, Option<usize>),
    Error(usize),
}

fn failures() -> Vec<pb::Failure> {
    vec![
        pb::Failure {
            code: "QUERY_LIMIT_EXCEEDED".into(),
            operation: pb::OperationKind::Write as i32,
            idempotency_key: "order-1".into(),
            request_id: "r-1".into(),
            retry_after: "tomorrow".into(),
            ..Default::default()
        },
        pb::Failure {
            catalog: "asc".into(),
            code: "RESULT_STATE_UNKNOWN".into(),
            operation: pb::OperationKind::Write as i32,
            idempotency_key: "k".into(),
            idempotency_key_enforced: true,
            ..Default::default()
        },
        pb::Failure {
            code: "BITRIX_TIMEOUT".into(),
            method: "crm.deal.get".into(),
            deadline: Some(prost_types::Timestamp {
                seconds: 1_786_190_500,
                nanos: 0,
            }),
            ..Default::default()
        },
        pb::Failure {
            code: "bitrix_timeout".into(),
            attempt: 0,
            ..Default::default()
        },
        pb::Failure {
            code: "BITRIX_TIMEOUX".into(),
            ..Default::default()
        },
        pb::Failure::default(),
    ]
}

fn holds() -> Vec<Hold> {
    let hold = |scope, kind, text: &str| Hold {
        id: format!("id-{text}"),
        key: HoldKey {
            scope,
            catalog: "vibecode".into(),
            dependency: format!("dep-{text}"),
            subject: text.into(),
        },
        kind,
        since: NOW,
        until: NOW.plus_ms(60_000),
        probe_every_ms: 0,
        probe_window_ms: 0,
        rank: Default::default(),
        code: text.repeat(3),
        rule: format!("rule/{text}"),
        reason: text.repeat(40),
    };
    let mut probing = hold(HoldScope::Dependency, HoldKind::QuotaStop, "quota");
    probing.until = NOW;
    probing.probe_window_ms = 30_000;
    let mut circuit = hold(HoldScope::Method, HoldKind::CircuitOpen, "charge");
    circuit.probe_every_ms = 5_000;
    circuit.since = UnixMillis(NOW.0 - 12_000);
    let mut ancient = hold(HoldScope::Tenant, HoldKind::Pause, "");
    ancient.since = UnixMillis(i64::MIN);
    ancient.until = UnixMillis(i64::MAX);
    // Past 16 KiB: the hold's, decision's and result's lengths take 3 bytes.
    let huge = hold(HoldScope::Tenant, HoldKind::Quarantine, &"é".repeat(200));
    vec![
        hold(HoldScope::Tenant, HoldKind::Pause, "acme"),
        probing,
        circuit,
        ancient,
        huge,
    ]
}

/// Builds decisions of every shape from the embedded engine's and hands
/// them to `check`: contracts with and without their optional fields,
/// warnings (with texts naming codes and budgets), budgets, long and
/// non-ASCII strings, answers under 128 bytes and over 16 KiB.
fn with_decisions(check: impl FnOnce(&[Decision<'_>])) {
    let policy = Policy::embedded().expect("embedded policy");
    let failures = failures();
    let mut decisions: Vec<Decision<'_>> = failures
        .iter()
        .map(|f| crate::core::decide(&policy, &failure_from_proto(f, "ru"), NOW).expect("decides"))
        .collect();
    let long = "r".repeat(127);
    let rule = "q".repeat(128);
    let accented = "é".repeat(200);
    let action = "a".repeat(300);
    let mut full = decisions[1].clone();
    full.required_transition = Some("draft -> sent");
    full.terminal_state = Some(crate::core::TerminalState::FailedPermanent);
    full.known_code = true;
    full.operation_inferred = true;
    full.reason = &long;
    full.rule = &rule;
    full.retry.after_ms = u64::MAX;
    full.retry.deadline = Some(UnixMillis(-1));
    full.retry.idempotency_key = Some("");
    full.retry.reconciliation_action = Some(&action);
    for w in Warning::ALL {
        full.warnings.add(w);
    }
    full.budget = Some(BudgetView {
        scope_key: "t:vibecode:portal:h:0123456789abcdef".into(),
        requests: u64::MAX,
        retries: 0,
        allowed: 130,
        window_start: UnixMillis(i64::MIN),
        deferred: 1,
        next_room_at: NOW,
    });
    decisions.push(full);
    let mut accent = decisions[0].clone();
    accent.reason = &accented;
    accent.retry.deadline = Some(UnixMillis(i64::MAX));
    decisions.push(accent);
    // Under 128 bytes whole: the lengths shrink to one byte.
    let mut tiny = decisions[5].clone();
    (tiny.reason, tiny.rule, tiny.policy_version, tiny.catalog, tiny.code) = ("", "", "", "", "");
    tiny.warnings = Default::default();
    decisions.push(tiny);
    assert!(decisions.iter().any(|d| !d.warnings.is_empty()));
    check(&decisions);
}

fn violations() -> Vec<Violation> {
    vec![
        Violation::new("failures[7].code", "is 200 bytes; the limit is 128"),
        Violation::new("failures[0].catalog", "é".repeat(100)),
        Violation::new("", ""),
    ]
}

/// Our bytes, and prost's for the message `convert` builds.
fn both(decisions: &[Decision<'_>], items: &[(Shape, u32)], summary: &pb::BatchSummary) -> (Vec<u8>, Vec<u8>) {
    let (holds, violations) = (holds(), violations());
    let mut ours = AnswerWriter::new(b"junk of an earlier answer".to_vec());
    let mut results = Vec::new();
    for (shape, index) in items {
        let outcome = match *shape {
            Shape::Decision(d, h) => {
                let (d, h) = (&decisions[d % decisions.len()], h.map(|h| &holds[h % holds.len()]));
                ours.decision(*index, d, h, NOW);
                let mut proto = decision_to_proto(d);
                proto.hold = h.map(|h| hold_to_proto_at(h, h.key.tenant(), NOW));
                pb::batch_result::Outcome::Decision(Box::new(proto))
            }
            Shape::Error(v) => {
                let v = &violations[v % violations.len()];
                ours.error(*index, v);
                pb::batch_result::Outcome::Error(violation_rpc_status(v))
            }
        };
        results.push(pb::BatchResult {
            index: *index,
            outcome: Some(outcome),
        });
    }
    let prost = pb::ClassifyBatchResponse {
        results,
        summary: Some(*summary),
    };
    (ours.finish(summary).split_off(FRAME_HEADER), prost.encode_to_vec())
}

#[test]
fn every_shape_encodes_as_prost_does() {
    with_decisions(|decisions| {
        let mut items = Vec::new();
        for d in 0..decisions.len() {
            for h in [None, Some(0), Some(1), Some(2), Some(3), Some(4)] {
                items.push((Shape::Decision(d, h), (d * 7) as u32));
            }
        }
        for v in 0..violations().len() {
            items.push((Shape::Error(v), 300 + v as u32));
        }
        items.push((Shape::Decision(0, None), u32::MAX));
        let (ours, prost) = both(decisions, &items, &pb::BatchSummary::default());
        assert_eq!(ours, prost);
        let (ours, prost) = both(decisions, &[], &pb::BatchSummary::default());
        assert_eq!(ours, prost);
    });
}

#[test]
fn classify_answers_encode_as_prost_does() {
    let holds = holds();
    with_decisions(|decisions| {
        let mut ours = b"junk of an earlier answer".to_vec();
        for d in decisions {
            for h in std::iter::once(None).chain(holds.iter().map(Some)) {
                classify_answer(&mut ours, d, h, NOW);
                let mut proto = decision_to_proto(d);
                proto.hold = h.map(|h| hold_to_proto_at(h, h.key.tenant(), NOW));
                let prost = pb::ClassifyResponse {
                    decision: Some(Box::new(proto)),
                }
                .encode_to_vec();
                assert_eq!(ours[..FRAME_HEADER], [0; FRAME_HEADER], "room for the header");
                assert_eq!(ours[FRAME_HEADER..], prost, "{d:?} with {h:?}");
            }
        }
    });
}

proptest! {
    /// Any mix of decisions, holds, errors, indexes and summaries.
    #[test]
    fn answers_encode_as_prost_does(
        picks in proptest::collection::vec((0usize..64, 0usize..8, any::<u32>()), 0..40),
        summary in (any::<u32>(), any::<u32>(), any::<u32>()),
    ) {
        let items: Vec<(Shape, u32)> = picks
            .iter()
            .map(|&(d, h, index)| {
                let shape = match h {
                    0 => Shape::Error(d),
                    1 | 2 => Shape::Decision(d, None),
                    h => Shape::Decision(d, Some(h)),
                };
                (shape, if d % 2 == 0 { index } else { index % 200 })
            })
            .collect();
        let summary = pb::BatchSummary {
            retry_with_limit: summary.0,
            do_not_retry: summary.1 % 3,
            errors: summary.2,
            ..Default::default()
        };
        let mut result = Ok(());
        with_decisions(|decisions| {
            let (ours, prost) = both(decisions, &items, &summary);
            result = (|| {
                prop_assert_eq!(ours, prost);
                Ok(())
            })();
        });
        result?;
    }
}
