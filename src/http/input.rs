//! JSON request bodies of the HTTP door, read into the proto requests the
//! gRPC service takes, so both doors decide through the same code.
//!
//! Field names are the proto's, snake_case; a missing field or `null` is the
//! proto default. Enum values are accepted as the seeds' words
//! (`"operation": "write"`, `"read_back": "absent"`), as the proto names
//! (`"OPERATION_KIND_WRITE"`) or as numbers; integers as numbers or decimal
//! strings (proto3 JSON writes 64-bit integers as strings); times as RFC 3339
//! strings. Unknown fields are refused, so a misspelt field is not silently
//! ignored. Every error names its field (`failure.operation`) and where in
//! the body it is (line and column).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::error::ApiError;
use crate::core::UnixMillis;
use crate::grpc::convert::timestamp_from_millis;
use crate::grpc::pb;

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

impl From<ClassifyJson> for pb::ClassifyRequest {
    fn from(j: ClassifyJson) -> Self {
        pb::ClassifyRequest {
            failure: j.failure.map(pb::Failure::from),
            locale: j.locale.unwrap_or_default(),
        }
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

impl From<BatchJson> for pb::ClassifyBatchRequest {
    fn from(j: BatchJson) -> Self {
        pb::ClassifyBatchRequest {
            failures: j
                .failures
                .unwrap_or_default()
                .into_iter()
                .map(pb::Failure::from)
                .collect(),
            locale: j.locale.unwrap_or_default(),
        }
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
    #[serde(default)]
    operation: Option<Enum<OperationWords>>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
}

impl From<AdmitJson> for pb::AdmitRequest {
    fn from(j: AdmitJson) -> Self {
        pb::AdmitRequest {
            catalog: j.catalog.unwrap_or_default(),
            dependency: j.dependency.unwrap_or_default(),
            tenant: j.tenant.unwrap_or_default(),
            method: j.method.unwrap_or_default(),
            operation: j.operation.map_or(0, |e| e.0),
            attempt: j.attempt.map_or(0, |n| n.0),
        }
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
    operation: Option<Enum<OperationWords>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
    #[serde(default)]
    max_attempts: Option<Int<u32>>,
    #[serde(default)]
    retry_after: Option<String>,
    #[serde(default)]
    retry_after_ms: Option<Int<u64>>,
    #[serde(default)]
    deadline: Option<Time>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    idempotency_key_enforced: Option<bool>,
    #[serde(default)]
    read_back: Option<Enum<ReadBackWords>>,
    #[serde(default)]
    cannot_verify_effect: Option<bool>,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    upstream: Option<ContractJson>,
    #[serde(default)]
    dependency: Option<String>,
    #[serde(default)]
    quota_resets_at: Option<Time>,
    #[serde(default)]
    probe_token: Option<String>,
}

impl From<FailureJson> for pb::Failure {
    fn from(j: FailureJson) -> Self {
        pb::Failure {
            catalog: j.catalog.unwrap_or_default(),
            code: j.code.unwrap_or_default(),
            operation: j.operation.map_or(0, |e| e.0),
            method: j.method.unwrap_or_default(),
            attempt: j.attempt.map_or(0, |n| n.0),
            max_attempts: j.max_attempts.map_or(0, |n| n.0),
            retry_after: j.retry_after.unwrap_or_default(),
            retry_after_ms: j.retry_after_ms.map(|n| n.0),
            deadline: j.deadline.map(|t| timestamp_from_millis(t.0)),
            idempotency_key: j.idempotency_key.unwrap_or_default(),
            idempotency_key_enforced: j.idempotency_key_enforced.unwrap_or_default(),
            read_back: j.read_back.map_or(0, |e| e.0),
            cannot_verify_effect: j.cannot_verify_effect.unwrap_or_default(),
            request_id: j.request_id.unwrap_or_default(),
            tenant: j.tenant.unwrap_or_default(),
            upstream: j.upstream.map(pb::RetryContract::from),
            dependency: j.dependency.unwrap_or_default(),
            quota_resets_at: j.quota_resets_at.map(|t| timestamp_from_millis(t.0)),
            probe_token: j.probe_token.unwrap_or_default(),
        }
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
    #[serde(default)]
    after_ms: Option<Int<u64>>,
    #[serde(default)]
    max_after_ms: Option<Int<u64>>,
    #[serde(default)]
    strategy: Option<Enum<StrategyWords>>,
    #[serde(default)]
    attempt: Option<Int<u32>>,
    #[serde(default)]
    max_attempts: Option<Int<u32>>,
    #[serde(default)]
    deadline: Option<Time>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    side_effect_state: Option<Enum<SideEffectWords>>,
    #[serde(default)]
    reconciliation_action: Option<String>,
}

impl From<ContractJson> for pb::RetryContract {
    fn from(j: ContractJson) -> Self {
        pb::RetryContract {
            retryable: j.retryable.unwrap_or_default(),
            safe: j.safe.unwrap_or_default(),
            after_ms: j.after_ms.map_or(0, |n| n.0),
            max_after_ms: j.max_after_ms.map_or(0, |n| n.0),
            strategy: j.strategy.map_or(0, |e| e.0),
            attempt: j.attempt.map_or(0, |n| n.0),
            max_attempts: j.max_attempts.map_or(0, |n| n.0),
            deadline: j.deadline.map(|t| timestamp_from_millis(t.0)),
            idempotency_key: j.idempotency_key,
            side_effect_state: j.side_effect_state.map_or(0, |e| e.0),
            reconciliation_action: j.reconciliation_action,
        }
    }
}

/// The accepted spellings of one proto enum: `(word, number)` pairs, the
/// seeds' words and the proto names alike.
pub trait Words {
    /// Every accepted spelling and the number it means.
    const WORDS: &'static [(&'static str, i32)];
}

/// `OperationKind`.
#[derive(Debug)]
pub struct OperationWords;
impl Words for OperationWords {
    const WORDS: &'static [(&'static str, i32)] = &[
        ("read", 1),
        ("write", 2),
        ("unspecified", 0),
        ("OPERATION_KIND_UNSPECIFIED", 0),
        ("OPERATION_KIND_READ", 1),
        ("OPERATION_KIND_WRITE", 2),
    ];
}

/// `ReadBack`: the seeds' `present`/`absent`/`inconclusive`, the CLI's and
/// the core's words, and the proto names.
#[derive(Debug)]
pub struct ReadBackWords;
impl Words for ReadBackWords {
    const WORDS: &'static [(&'static str, i32)] = &[
        ("present", 1),
        ("absent", 2),
        ("inconclusive", 3),
        ("not_done", 0),
        ("effect_present", 1),
        ("effect_absent", 2),
        ("unspecified", 0),
        ("READ_BACK_UNSPECIFIED", 0),
        ("READ_BACK_EFFECT_PRESENT", 1),
        ("READ_BACK_EFFECT_ABSENT", 2),
        ("READ_BACK_INCONCLUSIVE", 3),
    ];
}

/// `Strategy` (of an upstream contract).
#[derive(Debug)]
pub struct StrategyWords;
impl Words for StrategyWords {
    const WORDS: &'static [(&'static str, i32)] = &[
        ("none", 1),
        ("exponential_backoff", 2),
        ("retry_after", 3),
        ("schedule", 4),
        ("hold", 5),
        ("budget", 6),
        ("STRATEGY_UNSPECIFIED", 0),
        ("STRATEGY_NONE", 1),
        ("STRATEGY_EXPONENTIAL_BACKOFF", 2),
        ("STRATEGY_RETRY_AFTER", 3),
        ("STRATEGY_SCHEDULE", 4),
        ("STRATEGY_HOLD", 5),
        ("STRATEGY_BUDGET", 6),
    ];
}

/// `SideEffectState` (of an upstream contract).
#[derive(Debug)]
pub struct SideEffectWords;
impl Words for SideEffectWords {
    const WORDS: &'static [(&'static str, i32)] = &[
        ("none", 1),
        ("possible", 2),
        ("confirmed", 3),
        ("unknown", 4),
        ("SIDE_EFFECT_STATE_UNSPECIFIED", 0),
        ("SIDE_EFFECT_STATE_NONE", 1),
        ("SIDE_EFFECT_STATE_POSSIBLE", 2),
        ("SIDE_EFFECT_STATE_CONFIRMED", 3),
        ("SIDE_EFFECT_STATE_UNKNOWN", 4),
    ];
}

/// An enum value given as a word or a number.
pub struct Enum<W>(pub i32, PhantomData<W>);

impl<W> fmt::Debug for Enum<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de, W: Words> Deserialize<'de> for Enum<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<W>(PhantomData<W>);
        impl<W: Words> Visitor<'_> for V<W> {
            type Value = Enum<W>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one of ")?;
                f.write_str(&words::<W>())
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                W::WORDS
                    .iter()
                    .find(|(w, _)| *w == s)
                    .map(|(_, n)| Enum(*n, PhantomData))
                    .ok_or_else(|| E::custom(format!("unknown value {s:?}; expected one of {}", words::<W>())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                i32::try_from(n)
                    .ok()
                    .filter(|n| W::WORDS.iter().any(|(_, m)| m == n))
                    .map(|n| Enum(n, PhantomData))
                    .ok_or_else(|| E::custom(format!("unknown value {n}; expected one of {}", words::<W>())))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

fn words<W: Words>() -> String {
    W::WORDS.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", ")
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

/// A time as an RFC 3339 string (proto3 JSON's Timestamp).
#[derive(Debug)]
pub struct Time(pub UnixMillis);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        UnixMillis::parse_rfc3339(&s)
            .map(Time)
            .ok_or_else(|| de::Error::custom(format!("{s:?} is not an RFC 3339 time such as 2026-08-08T12:05:00Z")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_words_and_proto_names() {
        let a: ClassifyJson =
            parse(br#"{"failure": {"operation": "write", "read_back": "absent", "attempt": "2"}}"#).expect("parsed");
        let f = pb::ClassifyRequest::from(a).failure.expect("failure");
        assert_eq!((f.operation, f.read_back, f.attempt), (2, 2, 2));
        let b: ClassifyJson =
            parse(br#"{"failure": {"operation": "OPERATION_KIND_READ", "read_back": 3}}"#).expect("parsed");
        let f = pb::ClassifyRequest::from(b).failure.expect("failure");
        assert_eq!((f.operation, f.read_back), (1, 3));
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
