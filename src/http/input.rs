//! JSON request bodies of the HTTP door, read straight into the domain
//! types the service takes (a core [`Failure`] borrows from the parsed body).
//!
//! What the proto3 JSON mapping requires a parser to accept is accepted:
//! field names as the proto's (snake_case) or in lowerCamelCase
//! (`retryAfter`, as grpcurl prints them); a missing field or `null` is the
//! default; enum values as the core's words (`"operation": "write"`,
//! `"read_back": "effect_absent"`, and the seeds' `"absent"`), as the proto
//! names (`"OPERATION_KIND_WRITE"`) or as numbers; integers as numbers or
//! decimal strings (proto3 JSON writes 64-bit integers as strings); times as
//! RFC 3339 strings. Unknown fields are refused, so a misspelt field is not
//! silently ignored. Every error names its field (`failure.operation`) and
//! where in the body it is (line and column).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::error::ApiError;
use crate::core::{Failure, Operation, ReadBack, RetryContract, SideEffectState, Strategy, UnixMillis};
use crate::service::InputNotes;
use crate::service::holds::AdmitAsk;
use crate::service::reports::OutcomeCount;

/// Parses `body` as JSON into `T`, or a 400 naming the field and position.
pub fn parse<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        // serde_path_to_error writes `?` for a place it cannot name (inside
        // a syntax error): the field is the known part of the path.
        let path = e.path().to_string();
        let known: Vec<&str> = path.split('.').take_while(|s| !s.is_empty() && *s != "?").collect();
        let inner = e.into_inner();
        let field = if known.is_empty() {
            "body".to_owned()
        } else {
            known.join(".")
        };
        ApiError::invalid(field, describe(&inner))
    })?;
    de.end().map_err(|e| ApiError::invalid("body", describe(&e)))?;
    Ok(value)
}

fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("malformed JSON: {e}"),
        Category::Data | Category::Io => e.to_string(),
    }
}

/// The body of `POST /v1/classify`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifyJson {
    #[serde(default)]
    failure: Option<FailureJson>,
    #[serde(default)]
    locale: Option<String>,
}

impl ClassifyJson {
    /// The request's locale (empty: English).
    pub fn locale(&self) -> &str {
        self.locale.as_deref().unwrap_or_default()
    }

    /// The failure, if the body has one, borrowed.
    pub fn failure(&self) -> Option<(Failure<'_>, InputNotes)> {
        self.failure.as_ref().map(|f| f.as_failure(self.locale()))
    }
}

/// The body of `POST /v1/classify:batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchJson {
    #[serde(default)]
    failures: Option<Vec<FailureJson>>,
    #[serde(default)]
    locale: Option<String>,
}

impl BatchJson {
    /// The request's locale (empty: English).
    pub fn locale(&self) -> &str {
        self.locale.as_deref().unwrap_or_default()
    }

    /// The failures, in order.
    pub fn failures(&self) -> &[FailureJson] {
        self.failures.as_deref().unwrap_or_default()
    }
}

/// The body of `POST /v1/admit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmitJson {
    #[serde(default)]
    catalog: Option<String>,
    #[serde(default)]
    dependency: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    method: Option<String>,
    /// Read or write: accepted (and checked) for symmetry with Admit's
    /// proto; admission does not depend on it.
    #[serde(default)]
    #[allow(dead_code)]
    operation: Option<Enum<Operation>>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
}

impl AdmitJson {
    /// What Admit is asked, borrowed.
    pub fn ask(&self) -> AdmitAsk<'_> {
        AdmitAsk {
            catalog: self.catalog.as_deref().unwrap_or_default(),
            dependency: self.dependency.as_deref().unwrap_or_default(),
            tenant: self.tenant.as_deref().unwrap_or_default(),
            method: self.method.as_deref().unwrap_or_default(),
            attempt: self.attempt.as_ref().map_or(0, |n| n.0),
            caller: None,
        }
    }
}

/// The body of `POST /v1/outcomes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomesJson {
    #[serde(default)]
    counts: Vec<OutcomeCountJson>,
    #[serde(default, alias = "probeToken")]
    probe_token: Option<String>,
    #[serde(default, alias = "probeSucceeded")]
    probe_succeeded: Option<bool>,
}

/// One scope's first attempts in `POST /v1/outcomes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeCountJson {
    #[serde(default)]
    catalog: Option<String>,
    #[serde(default)]
    dependency: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    requests: Option<Int<u64>>,
}

impl OutcomesJson {
    /// The counts, borrowed.
    pub fn counts(&self) -> Vec<OutcomeCount<'_>> {
        self.counts
            .iter()
            .map(|c| OutcomeCount {
                catalog: c.catalog.as_deref().unwrap_or_default(),
                dependency: c.dependency.as_deref().unwrap_or_default(),
                tenant: c.tenant.as_deref().unwrap_or_default(),
                method: c.method.as_deref().unwrap_or_default(),
                requests: c.requests.as_ref().map_or(0, |n| n.0),
            })
            .collect()
    }

    /// The probe token reported, if any.
    pub fn probe_token(&self) -> &str {
        self.probe_token.as_deref().unwrap_or_default()
    }

    /// Whether the probe succeeded.
    pub fn probe_succeeded(&self) -> bool {
        self.probe_succeeded.unwrap_or(false)
    }
}

/// A `Failure` in JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureJson {
    #[serde(default)]
    catalog: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    operation: Option<Enum<Operation>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
    #[serde(default, alias = "maxAttempts")]
    max_attempts: Option<Int<u32>>,
    #[serde(default, alias = "retryAfter")]
    retry_after: Option<String>,
    #[serde(default, alias = "retryAfterMs")]
    retry_after_ms: Option<Int<u64>>,
    #[serde(default)]
    deadline: Option<Time>,
    #[serde(default, alias = "idempotencyKey")]
    idempotency_key: Option<String>,
    #[serde(default, alias = "idempotencyKeyEnforced")]
    idempotency_key_enforced: Option<bool>,
    #[serde(default, alias = "readBack")]
    read_back: Option<Enum<ReadBack>>,
    #[serde(default, alias = "cannotVerifyEffect")]
    cannot_verify_effect: Option<bool>,
    #[serde(default, alias = "requestId")]
    request_id: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    upstream: Option<ContractJson>,
    #[serde(default)]
    dependency: Option<String>,
    #[serde(default, alias = "quotaResetsAt")]
    quota_resets_at: Option<Time>,
    #[serde(default, alias = "probeToken")]
    probe_token: Option<String>,
}

fn text(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

impl FailureJson {
    /// The failure (borrowing from `self`), in the request's `locale`.
    pub fn as_failure<'a>(&'a self, locale: &'a str) -> (Failure<'a>, InputNotes) {
        let failure = Failure {
            catalog: text(&self.catalog),
            code: text(&self.code),
            operation: self.operation.as_ref().map_or_else(Operation::default, |e| e.0),
            method: text(&self.method),
            attempt: self.attempt.as_ref().map_or(0, |n| n.0),
            max_attempts: self.max_attempts.as_ref().map_or(0, |n| n.0),
            retry_after: text(&self.retry_after),
            retry_after_ms: self.retry_after_ms.as_ref().map(|n| n.0),
            deadline: self.deadline.as_ref().map(|t| t.0),
            idempotency_key: text(&self.idempotency_key),
            idempotency_key_enforced: self.idempotency_key_enforced.unwrap_or_default(),
            read_back: self.read_back.as_ref().map_or_else(ReadBack::default, |e| e.0),
            cannot_verify_effect: self.cannot_verify_effect.unwrap_or_default(),
            request_id: text(&self.request_id),
            tenant: text(&self.tenant),
            upstream: self.upstream.as_ref().map(ContractJson::as_contract),
            locale,
            dependency: text(&self.dependency),
            quota_resets_at: self.quota_resets_at.as_ref().map(|t| t.0),
            probe_token: text(&self.probe_token),
        };
        // RFC 3339 times are within what the wire carries, so nothing is
        // clamped here (see `Time`).
        (failure, InputNotes::default())
    }
}

/// The dependency's own ASC contract (`Failure.upstream`), in the seed's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractJson {
    #[serde(default)]
    retryable: Option<bool>,
    #[serde(default)]
    safe: Option<bool>,
    #[serde(default, alias = "afterMs")]
    after_ms: Option<Int<u64>>,
    #[serde(default, alias = "maxAfterMs")]
    max_after_ms: Option<Int<u64>>,
    #[serde(default)]
    strategy: Option<Enum<Strategy>>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
    #[serde(default, alias = "maxAttempts")]
    max_attempts: Option<Int<u32>>,
    #[serde(default)]
    deadline: Option<Time>,
    #[serde(default, alias = "idempotencyKey")]
    idempotency_key: Option<String>,
    #[serde(default, alias = "sideEffectState")]
    side_effect_state: Option<Enum<SideEffectState>>,
    #[serde(default, alias = "reconciliationAction")]
    reconciliation_action: Option<String>,
}

impl ContractJson {
    /// The contract, borrowing from `self`. A strategy or side-effect state
    /// not given is "none", as the proto documents for its unspecified value.
    fn as_contract(&self) -> RetryContract<'_> {
        RetryContract {
            retryable: self.retryable.unwrap_or_default(),
            safe: self.safe.unwrap_or_default(),
            after_ms: self.after_ms.as_ref().map_or(0, |n| n.0),
            max_after_ms: self.max_after_ms.as_ref().map_or(0, |n| n.0),
            strategy: self.strategy.as_ref().map_or(Strategy::None, |e| e.0),
            attempt: self.attempt.as_ref().map_or(0, |n| n.0),
            max_attempts: self.max_attempts.as_ref().map_or(0, |n| n.0),
            deadline: self.deadline.as_ref().map(|t| t.0),
            idempotency_key: self.idempotency_key.as_deref(),
            side_effect_state: self.side_effect_state.as_ref().map_or(SideEffectState::None, |e| e.0),
            reconciliation_action: self.reconciliation_action.as_deref(),
        }
    }
}

/// The accepted spellings of one enum beyond the core's words
/// (`T::WORDS`): the seeds' other words, and the proto's names and numbers
/// (proto3 JSON accepts either).
pub trait Words: Copy + Sized + 'static {
    /// The core's words ([`crate::words!`]).
    const CORE: &'static [(Self, &'static str)];
    /// Other words for a value.
    const ALIASES: &'static [(&'static str, Self)] = &[];
    /// The proto enum's value names and numbers.
    const PROTO: &'static [(&'static str, i32, Self)];
}

impl Words for Operation {
    const CORE: &'static [(Self, &'static str)] = Operation::WORDS;
    const PROTO: &'static [(&'static str, i32, Self)] = &[
        ("OPERATION_KIND_UNSPECIFIED", 0, Operation::Unspecified),
        ("OPERATION_KIND_READ", 1, Operation::Read),
        ("OPERATION_KIND_WRITE", 2, Operation::Write),
    ];
}

/// The seeds' `present`/`absent` are read-back words too.
impl Words for ReadBack {
    const CORE: &'static [(Self, &'static str)] = ReadBack::WORDS;
    const ALIASES: &'static [(&'static str, Self)] = &[
        ("present", ReadBack::EffectPresent),
        ("absent", ReadBack::EffectAbsent),
        ("unspecified", ReadBack::NotDone),
    ];
    const PROTO: &'static [(&'static str, i32, Self)] = &[
        ("READ_BACK_UNSPECIFIED", 0, ReadBack::NotDone),
        ("READ_BACK_EFFECT_PRESENT", 1, ReadBack::EffectPresent),
        ("READ_BACK_EFFECT_ABSENT", 2, ReadBack::EffectAbsent),
        ("READ_BACK_INCONCLUSIVE", 3, ReadBack::Inconclusive),
    ];
}

impl Words for Strategy {
    const CORE: &'static [(Self, &'static str)] = Strategy::WORDS;
    const PROTO: &'static [(&'static str, i32, Self)] = &[
        ("STRATEGY_UNSPECIFIED", 0, Strategy::None),
        ("STRATEGY_NONE", 1, Strategy::None),
        ("STRATEGY_EXPONENTIAL_BACKOFF", 2, Strategy::ExponentialBackoff),
        ("STRATEGY_RETRY_AFTER", 3, Strategy::RetryAfter),
        ("STRATEGY_SCHEDULE", 4, Strategy::Schedule),
        ("STRATEGY_HOLD", 5, Strategy::Hold),
        ("STRATEGY_BUDGET", 6, Strategy::Budget),
    ];
}

impl Words for SideEffectState {
    const CORE: &'static [(Self, &'static str)] = SideEffectState::WORDS;
    const PROTO: &'static [(&'static str, i32, Self)] = &[
        ("SIDE_EFFECT_STATE_UNSPECIFIED", 0, SideEffectState::None),
        ("SIDE_EFFECT_STATE_NONE", 1, SideEffectState::None),
        ("SIDE_EFFECT_STATE_POSSIBLE", 2, SideEffectState::Possible),
        ("SIDE_EFFECT_STATE_CONFIRMED", 3, SideEffectState::Confirmed),
        ("SIDE_EFFECT_STATE_UNKNOWN", 4, SideEffectState::Unknown),
    ];
}

/// An enum value given as a word or a number.
#[derive(Debug)]
pub struct Enum<T>(pub T);

impl<'de, T: Words> Deserialize<'de> for Enum<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: Words> Visitor<'_> for V<T> {
            type Value = Enum<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one of ")?;
                f.write_str(&words::<T>())
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                T::CORE
                    .iter()
                    .find(|(_, w)| *w == s)
                    .map(|(v, _)| *v)
                    .or_else(|| T::ALIASES.iter().find(|(w, _)| *w == s).map(|(_, v)| *v))
                    .or_else(|| T::PROTO.iter().find(|(w, _, _)| *w == s).map(|(_, _, v)| *v))
                    .map(Enum)
                    .ok_or_else(|| E::custom(format!("unknown value {s:?}; expected one of {}", words::<T>())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                T::PROTO
                    .iter()
                    .find(|(_, m, _)| i64::from(*m) == n)
                    .map(|(_, _, v)| Enum(*v))
                    .ok_or_else(|| E::custom(format!("unknown value {n}; expected one of {}", words::<T>())))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

fn words<T: Words>() -> String {
    let core = T::CORE.iter().map(|(_, w)| *w);
    let aliases = T::ALIASES.iter().map(|(w, _)| *w);
    let proto = T::PROTO.iter().map(|(w, _, _)| *w);
    core.chain(aliases).chain(proto).collect::<Vec<_>>().join(", ")
}

/// An unsigned integer given as a number or a decimal string.
#[derive(Debug)]
pub struct Int<T>(pub T);

impl<'de, T: TryFrom<u64> + std::str::FromStr> Deserialize<'de> for Int<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: TryFrom<u64> + std::str::FromStr> Visitor<'_> for V<T> {
            type Value = Int<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an unsigned integer up to {} (a number or a string)", max::<T>())
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                T::try_from(n)
                    .map(Int)
                    .map_err(|_| E::custom(format!("{n} is over {}", max::<T>())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!("{n} is negative"))),
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                match s.parse::<u64>() {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!(
                        "{s:?} is not an unsigned integer up to {}",
                        max::<T>()
                    ))),
                }
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

fn max<T: TryFrom<u64>>() -> u64 {
    if T::try_from(u64::MAX).is_ok() {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    }
}

/// A time as an RFC 3339 string (proto3 JSON's Timestamp), clamped to what
/// a Timestamp can carry, as the gRPC door reads it.
#[derive(Debug)]
pub struct Time(pub UnixMillis);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        UnixMillis::parse_rfc3339(&s)
            .map(|t| Time(t.clamp_to_timestamp_range()))
            .ok_or_else(|| de::Error::custom(format!("{s:?} is not an RFC 3339 time such as 2026-08-08T12:05:00Z")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_words_seed_words_and_proto_names() {
        let a: ClassifyJson =
            parse(br#"{"failure": {"operation": "write", "read_back": "absent", "attempt": "2"}}"#).expect("parsed");
        let (f, _) = a.failure().expect("failure");
        assert_eq!(
            (f.operation, f.read_back, f.attempt),
            (Operation::Write, ReadBack::EffectAbsent, 2)
        );
        let b: ClassifyJson =
            parse(br#"{"failure": {"operation": "OPERATION_KIND_READ", "read_back": 3}}"#).expect("parsed");
        let (f, _) = b.failure().expect("failure");
        assert_eq!((f.operation, f.read_back), (Operation::Read, ReadBack::Inconclusive));
        let c: ClassifyJson = parse(br#"{"failure": {"read_back": "effect_present"}}"#).expect("parsed");
        assert_eq!(c.failure().expect("failure").0.read_back, ReadBack::EffectPresent);
    }

    /// What grpcurl prints (proto3 JSON: lowerCamelCase, 64-bit integers as
    /// strings, enums by name, `null` as the default) is read as the
    /// snake_case form is.
    #[test]
    fn proto3_json_names_are_accepted() {
        let camel: ClassifyJson = parse(
            br#"{"failure": {"catalog": "vibecode", "code": "QUEUE_OVERFLOW", "operation": "OPERATION_KIND_WRITE",
                "maxAttempts": 4, "retryAfter": "5", "retryAfterMs": "5000", "idempotencyKey": "k",
                "idempotencyKeyEnforced": true, "readBack": "READ_BACK_EFFECT_ABSENT", "cannotVerifyEffect": false,
                "requestId": "r", "quotaResetsAt": "2026-12-02T00:00:00Z", "probeToken": null,
                "upstream": {"afterMs": "100", "maxAfterMs": 200, "maxAttempts": 3, "sideEffectState": "SIDE_EFFECT_STATE_POSSIBLE",
                             "reconciliationAction": "check", "idempotencyKey": "u", "strategy": 3}},
              "locale": null}"#,
        )
        .expect("parsed");
        let snake: ClassifyJson = parse(
            br#"{"failure": {"catalog": "vibecode", "code": "QUEUE_OVERFLOW", "operation": "write",
                "max_attempts": 4, "retry_after": "5", "retry_after_ms": 5000, "idempotency_key": "k",
                "idempotency_key_enforced": true, "read_back": "effect_absent", "cannot_verify_effect": false,
                "request_id": "r", "quota_resets_at": "2026-12-02T00:00:00Z",
                "upstream": {"after_ms": 100, "max_after_ms": 200, "max_attempts": 3, "side_effect_state": "possible",
                             "reconciliation_action": "check", "idempotency_key": "u", "strategy": "retry_after"}}}"#,
        )
        .expect("parsed");
        let (a, b) = (camel.failure().expect("failure"), snake.failure().expect("failure"));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(a.0.upstream.map(|u| u.strategy), Some(Strategy::RetryAfter));
        assert_eq!(a.0.retry_after_ms, Some(5000));
    }

    #[test]
    fn errors_name_the_field_and_the_place() {
        let e = parse::<ClassifyJson>(br#"{"failure": {"operation": "wrte"}}"#).unwrap_err();
        assert_eq!(e.violations[0].0, "failure.operation");
        assert!(e.message.contains("unknown value \"wrte\""), "{}", e.message);
        assert!(e.message.contains("column"), "{}", e.message);
        let e = parse::<ClassifyJson>(br#"{"failure": {"attempt": -1}}"#).unwrap_err();
        assert_eq!(e.violations[0].0, "failure.attempt");
        let e = parse::<ClassifyJson>(br#"{"failure": {"code": 5}}"#).unwrap_err();
        assert_eq!(e.violations[0].0, "failure.code");
        let e = parse::<ClassifyJson>(br#"{"failure": {"cod": "X"}}"#).unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let e = parse::<ClassifyJson>(b"{\"failure\": {").unwrap_err();
        assert!(
            e.message.starts_with("failure: malformed JSON") || e.message.starts_with("body: malformed JSON"),
            "{}",
            e.message
        );
        let e = parse::<ClassifyJson>(b"{} x").unwrap_err();
        assert_eq!(e.violations[0].0, "body");
    }
}
