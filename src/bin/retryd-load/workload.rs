//! The request mix: failures drawn from the catalogs roughly as production
//! sends them (vibecode mostly), built once into a pool so that generating
//! load costs the client next to nothing.
//!
//! Also compiled into `benches/batch.rs` (by `#[path]`), so the benchmark and
//! the load generator decide the same kind of batch.

use retryd::grpc::pb;

/// A small deterministic generator (xorshift64*): the same seed, the same pool.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Self {
        Rng(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with `percent` % probability.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (non-empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// One of `items` chosen by the weights paired with them.
    pub fn weighted<'a, T>(&mut self, items: &'a [(u64, T)]) -> &'a T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut roll = self.below(total);
        for (w, item) in items {
            if roll < *w {
                return item;
            }
            roll -= w;
        }
        &items[items.len() - 1].1
    }
}

/// Catalogs and the share of traffic each gets (percent).
const CATALOGS: &[(u64, &str)] = &[
    (60, "vibecode"),
    (10, "asc"),
    (10, "frontspin"),
    (10, "grpc"),
    (10, "http"),
];

/// Codes each catalog knows, as callers send them (aliases included).
fn known_codes(catalog: &str) -> &'static [&'static str] {
    match catalog {
        "vibecode" => &[
            "QUEUE_OVERFLOW",
            "QUEUE_TIMEOUT",
            "RATE_LIMITED",
            "OPERATION_TIME_LIMIT",
            "TIMEOUT_QUARANTINE",
            "BITRIX_TIMEOUT",
            "BITRIX_ERROR",
            "BITRIX_UNAVAILABLE",
            "POOL_EXHAUSTED",
            "DB_TRANSIENT",
            "SERVICE_UNAVAILABLE",
            "TOKEN_REFRESH_FAILED",
            "ERROR_LOOP_DETECTED",
            "BH_APP_STARTING",
            "BH_APP_TIMEOUT",
            "LARGE_BODY_BACKEND_BUSY",
        ],
        "asc" => &[
            "RESULT_STATE_UNKNOWN",
            "TIMEOUT",
            "FAILED_PRECONDITION",
            "HUMAN_APPROVAL_REQUIRED",
            "AUTHENTICATION_REQUIRED",
            "ASC-6005",
            "ASC-5004",
        ],
        "frontspin" => &[
            "RATE_LIMITED",
            "FRONTSPIN_SERVER_ERROR",
            "TIMEOUT",
            "BAD_REQUEST",
            "AUTHENTICATION_FAILED",
            "FORBIDDEN",
            "NOT_FOUND",
            "NOT_SENT",
        ],
        "grpc" => &[
            "UNAVAILABLE",
            "DEADLINE_EXCEEDED",
            "RESOURCE_EXHAUSTED",
            "ABORTED",
            "INTERNAL",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "FAILED_PRECONDITION",
            "UNAUTHENTICATED",
            "14",
            "4",
        ],
        _ => &[
            "429", "503", "502", "500", "504", "408", "409", "400", "401", "404", "422", "425",
        ],
    }
}

/// Codes no catalog knows (answered by the catalog's `[unknown]` rule).
const UNKNOWN_CODES: &[&str] = &["SOMETHING_NEW", "E_WEIRD", "QUOTA_EXCEEDED_V2", "999"];

/// Methods: reads and writes by the meaning of their names.
const METHODS: &[&str] = &[
    "crm.deal.add",
    "crm.deal.get",
    "crm.deal.list",
    "crm.deal.update",
    "crm.contact.add",
    "crm.contact.get",
    "crm.lead.delete",
    "im.message.send",
    "tasks.task.list",
    "user.current",
];

/// Retry-After header values: delta-seconds and HTTP-dates.
const RETRY_AFTER: &[&str] = &["1", "5", "30", "120", "Sat, 08 Aug 2026 12:05:00 GMT"];

/// One failure of the mix; `n` makes ids unique.
pub fn failure(rng: &mut Rng, n: u64) -> pb::Failure {
    let catalog = *rng.weighted(CATALOGS);
    let code = match rng.below(100) {
        0..=4 => "",                          // no envelope: a network error
        5..=11 => *rng.pick(UNKNOWN_CODES),   // unknown to the catalog
        _ => *rng.pick(known_codes(catalog)), // the bulk
    };
    let operation = *rng.weighted(&[
        (40, pb::OperationKind::Unspecified),
        (25, pb::OperationKind::Read),
        (35, pb::OperationKind::Write),
    ]);
    let method = if rng.chance(90) { *rng.pick(METHODS) } else { "" };
    let retry_after = if rng.chance(15) { *rng.pick(RETRY_AFTER) } else { "" };
    let retry_after_ms = rng.chance(5).then(|| 250 * (1 + rng.below(8)));
    let keyed = rng.chance(30);
    pb::Failure {
        // Empty means the server's default catalog (vibecode).
        catalog: if catalog == "vibecode" && rng.chance(30) {
            String::new()
        } else {
            catalog.to_owned()
        },
        code: code.to_owned(),
        operation: operation as i32,
        method: method.to_owned(),
        attempt: 1 + rng.below(5) as u32,
        max_attempts: if rng.chance(20) { 3 } else { 0 },
        retry_after: retry_after.to_owned(),
        retry_after_ms,
        idempotency_key: if keyed { format!("idem-{n:08x}") } else { String::new() },
        idempotency_key_enforced: keyed && rng.chance(70),
        read_back: if rng.chance(5) {
            pb::ReadBack::EffectAbsent as i32
        } else {
            0
        },
        request_id: format!("req-{n:010}"),
        tenant: format!("tenant-{}", rng.below(50)),
        // Most callers name the instance they called, so the failures that
        // place fleet holds (a 429 with a Retry-After, a quota stop) do.
        dependency: if rng.chance(80) {
            format!("portal-{}.example", rng.below(20))
        } else {
            String::new()
        },
        ..pb::Failure::default()
    }
}

/// An Admit of the mix: "may I call now?" before a first attempt.
pub fn admit_request(rng: &mut Rng) -> pb::AdmitRequest {
    let catalog = *rng.weighted(CATALOGS);
    pb::AdmitRequest {
        catalog: catalog.to_owned(),
        dependency: format!("portal-{}.example", rng.below(20)),
        tenant: format!("tenant-{}", rng.below(50)),
        method: (*rng.pick(METHODS)).to_owned(),
        operation: pb::OperationKind::Unspecified as i32,
        attempt: 1,
    }
}

/// Locale of a request: mostly default, some Russian.
fn locale(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => "ru".to_owned(),
        1 => "en".to_owned(),
        _ => String::new(),
    }
}

/// One Classify request of the mix.
pub fn classify_request(rng: &mut Rng, n: u64) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(failure(rng, n))),
        locale: locale(rng),
    }
}

/// One ClassifyBatch request of `size` failures of the mix.
pub fn batch_request(rng: &mut Rng, size: u32, first: u64) -> pb::ClassifyBatchRequest {
    pb::ClassifyBatchRequest {
        failures: (0..u64::from(size)).map(|i| failure(rng, first + i)).collect(),
        locale: locale(rng),
    }
}

/// Dependency `n` of `spread` of the quota stops `--call place-holds`
/// places (`spread` 0: one dependency).
pub fn holds_dependency(n: u64, spread: u32) -> String {
    if spread == 0 {
        "frontspin-bench".to_owned()
    } else {
        format!("frontspin-bench-{}", n % u64::from(spread))
    }
}

/// FrontSpin's RATE_LIMITED for tenant number `n` on dependency
/// [`holds_dependency`]`(n, spread)`, the allowance coming back at
/// `resets_at`: a tenant quota stop (names of at most 20 bytes, within the
/// "typical lengths" of issue 22).
pub fn quota_stop_request(n: u64, spread: u32, resets_at: std::time::SystemTime) -> pb::ClassifyRequest {
    let since = resets_at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            catalog: "frontspin".into(),
            code: "RATE_LIMITED".into(),
            operation: pb::OperationKind::Write as i32,
            method: "crm.deal.add".into(),
            attempt: 1,
            dependency: holds_dependency(n, spread),
            tenant: format!("bench-{n:06}"),
            quota_resets_at: Some(prost_types::Timestamp {
                seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            ..Default::default()
        })),
        locale: String::new(),
    }
}
