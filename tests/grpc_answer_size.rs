//! Item 7 of issue 12: the default `--max-batch` is consistent with the 4 MiB
//! receive limit every gRPC client has by default. The largest answer of one
//! batch item is measured over every code of every embedded catalog, in
//! every locale, with every echoed field at its limit and the inputs that add
//! warnings and the longest reasons; the server's per-item answer bound
//! (which `--max-buffered-bytes` charges before a batch runs) must cover it,
//! and the default batch of such items must fit 4 MiB.

use std::sync::Arc;

use arc_swap::ArcSwap;
use prost::Message as _;
use retryd::core::{Policy, UnixMillis};
use retryd::doors::peers::Operators;
use retryd::fleet::{Fleet, FleetConfig, PlacementLimits};
use retryd::grpc::RetryDecisionApi;
use retryd::grpc::pb;
use retryd::server::admission::ITEM_ANSWER_BYTES;
use retryd::service::{DEFAULT_MAX_BATCH, ServiceConfig};

/// gRPC clients' default receive limit (grpc-go, grpc-java, tonic, grpcio).
const CLIENT_RECEIVE_LIMIT: usize = 4 * 1024 * 1024;
const NOW: UnixMillis = UnixMillis(1_780_000_000_000);

/// Failures of `catalog` meant to give the longest answers: each code (and
/// an unknown one of the longest allowed length) crossed with every
/// operation kind, read-back, key and limit, echoed strings at their limits.
fn failures(catalog: &str, codes: &[String]) -> Vec<pb::Failure> {
    use retryd::core::limits::{
        MAX_ACTION, MAX_CODE, MAX_DEPENDENCY, MAX_IDEMPOTENCY_KEY, MAX_METHOD, MAX_REQUEST_ID, MAX_RETRY_AFTER,
        MAX_TENANT,
    };
    let mut codes = codes.to_vec();
    codes.push("Z".repeat(MAX_CODE));
    codes.push(String::new());
    let upstreams = [
        None,
        Some(pb::RetryContract {
            retryable: true,
            safe: false,
            after_ms: u64::MAX,
            max_after_ms: u64::MAX,
            attempt: u32::MAX,
            max_attempts: u32::MAX,
            idempotency_key: Some("u".repeat(MAX_IDEMPOTENCY_KEY)),
            reconciliation_action: Some("a".repeat(MAX_ACTION)),
            side_effect_state: 2,
            ..Default::default()
        }),
    ];
    let mut out = Vec::new();
    for code in &codes {
        for operation in [0, 1, 2] {
            for read_back in [0, 1, 2, 3] {
                for (attempt, max_attempts) in [(1, 0), (u32::MAX, 2)] {
                    for retry_after in [String::new(), "9".repeat(MAX_RETRY_AFTER), "x".repeat(MAX_RETRY_AFTER)] {
                        for upstream in &upstreams {
                            for (cannot_verify, open_ended) in
                                [(false, false), (true, false), (false, true), (true, true)]
                            {
                                // Open-ended: no Retry-After and no deadline, so retries stay
                                // retries and carry the fleet retry budget.
                                out.push(pb::Failure {
                                    catalog: catalog.to_owned(),
                                    code: code.clone(),
                                    operation,
                                    // Echoed in a method hold: at its limit, ending in a write word.
                                    method: format!("{}.add", "m".repeat(MAX_METHOD - 4)),
                                    attempt,
                                    max_attempts,
                                    retry_after: retry_after.clone(),
                                    retry_after_ms: (!open_ended).then_some(u64::MAX),
                                    deadline: (!open_ended).then_some(prost_types::Timestamp {
                                        seconds: 1_780_000_000 + 3600,
                                        nanos: 999_999_999,
                                    }),
                                    idempotency_key: "k".repeat(MAX_IDEMPOTENCY_KEY),
                                    idempotency_key_enforced: cannot_verify,
                                    read_back,
                                    cannot_verify_effect: cannot_verify,
                                    request_id: "r".repeat(MAX_REQUEST_ID),
                                    tenant: "t".repeat(MAX_TENANT),
                                    upstream: upstream.clone(),
                                    // Echoed in the hold a decision reports: at its limit.
                                    dependency: "d".repeat(MAX_DEPENDENCY),
                                    quota_resets_at: None,
                                    probe_token: String::new(),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_default_batch_answer_fits_the_clients_receive_limit() {
    let policy = Policy::embedded().expect("embedded policy");
    let catalogs: Vec<(String, Vec<String>)> = policy
        .catalogs()
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.codes().iter().map(|e| e.code.to_string()).collect(),
            )
        })
        .collect();
    // With fleet memory, so that results carry the holds their failures
    // place (dependency, tenant and method at their limits, the rule's reason).
    let fleet = Fleet::in_memory(FleetConfig {
        limits: PlacementLimits {
            per_sec: 1e9,
            dependency_per_sec: 1e9,
        },
        ..FleetConfig::default()
    });
    // First attempts recorded for the scopes of the failures below, so that
    // results also carry the retry budget (scope key at its longest) and,
    // once it is spent, the budget_exhausted warning with its numbers.
    for c in policy.catalogs() {
        let scope = retryd::fleet::budget::ScopeOf {
            catalog: &c.name,
            dependency: &"d".repeat(retryd::core::limits::MAX_DEPENDENCY),
            tenant: &"t".repeat(retryd::core::limits::MAX_TENANT),
        };
        fleet.budget_deposit(&c.budgets, scope, u64::MAX / 4, NOW);
    }
    let api = RetryDecisionApi::new(
        Arc::new(ArcSwap::from_pointee(policy)),
        ServiceConfig {
            max_batch: usize::MAX,
            ..Default::default()
        },
    )
    .with_fleet(fleet, Operators::default(), tokio::sync::watch::channel(false).1);
    let mut largest = (0, String::new());
    let mut items = 0;
    let (mut budgeted, mut deferred) = (0, 0);
    for (catalog, codes) in &catalogs {
        for locale in ["en", "ru"] {
            let req = pb::ClassifyBatchRequest {
                failures: failures(catalog, codes),
                locale: locale.into(),
            };
            items += req.failures.len();
            let answer = api.classify_batch_at(&req, NOW).expect("batch");
            for (result, failure) in answer.results.iter().zip(&req.failures) {
                if let Some(pb::batch_result::Outcome::Decision(d)) = &result.outcome {
                    budgeted += usize::from(d.budget.is_some());
                    deferred += usize::from(d.warnings.iter().any(|w| w.starts_with("budget_exhausted")));
                }
                // The bytes the result adds to the answer: key, length, body.
                let len = prost::encoding::message::encoded_len(1, result);
                if len > largest.0 {
                    largest = (len, format!("{catalog}/{locale}/{:?}", failure.code));
                }
            }
        }
    }
    assert!(
        budgeted > 0 && deferred > 0,
        "budgets measured: {budgeted} budgeted, {deferred} deferred"
    );
    let (largest, which) = largest;
    let default_batch = DEFAULT_MAX_BATCH * largest + 1024 + 5;
    eprintln!(
        "{items} items: largest result {largest} bytes ({which}); a batch of {DEFAULT_MAX_BATCH} \
         such results answers at most {default_batch} bytes (limit {CLIENT_RECEIVE_LIMIT})"
    );
    assert!(
        largest <= ITEM_ANSWER_BYTES,
        "ITEM_ANSWER_BYTES must cover {largest} bytes ({which})"
    );
    let bound = DEFAULT_MAX_BATCH * ITEM_ANSWER_BYTES + 1024 + 5;
    assert!(
        bound <= CLIENT_RECEIVE_LIMIT,
        "the default --max-batch ({DEFAULT_MAX_BATCH}) times {ITEM_ANSWER_BYTES} bytes must fit 4 MiB: {bound}"
    );

    // And a real answer of the default size, of the issue's Russian batch of
    // empty items, fits.
    let req = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); DEFAULT_MAX_BATCH],
        locale: "ru".into(),
    };
    let answer = api.classify_batch_at(&req, NOW).expect("batch");
    let framed = answer.encoded_len() + 5;
    eprintln!("{DEFAULT_MAX_BATCH} empty items in Russian: {framed} bytes");
    assert!(framed <= CLIENT_RECEIVE_LIMIT, "{framed} bytes");
}
