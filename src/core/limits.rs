//! Sane sizes for the strings of a [`Failure`]. Over a limit, the input is
//! refused with the field's name rather than truncated: a silently cut
//! idempotency key would be a different key.

use super::model::Failure;

/// Longest catalog name, in bytes.
pub const MAX_CATALOG: usize = 64;
/// Longest code.
pub const MAX_CODE: usize = 128;
/// Longest method name.
pub const MAX_METHOD: usize = 256;
/// Longest raw Retry-After value.
pub const MAX_RETRY_AFTER: usize = 64;
/// Longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;
/// Longest request id.
pub const MAX_REQUEST_ID: usize = 256;
/// Longest tenant id.
pub const MAX_TENANT: usize = 256;
/// Longest dependency instance name.
pub const MAX_DEPENDENCY: usize = 256;
/// Longest probe token.
pub const MAX_PROBE_TOKEN: usize = 128;
/// Longest locale tag.
pub const MAX_LOCALE: usize = 35;
/// Longest reconciliation action in an upstream contract.
pub const MAX_ACTION: usize = 128;

/// A field of the input that is out of bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {description}")]
pub struct FieldViolation {
    /// The field's name as in the proto, e.g. `idempotency_key`.
    pub field: &'static str,
    /// What is wrong, naming the limit.
    pub description: String,
}

/// Checks every string of `failure` against its limit.
pub fn check(failure: &Failure<'_>) -> Result<(), FieldViolation> {
    match first_over(failure) {
        None => Ok(()),
        Some((field, len, max)) => Err(FieldViolation {
            field,
            description: format!("is {len} bytes; the limit is {max}"),
        }),
    }
}

/// The first string of `failure` over its limit: its field, length and
/// limit. Compares one after another rather than through a table of
/// (name, value, limit): building that table on the stack for every
/// failure was 4 % of a batch (`perf`).
fn first_over(failure: &Failure<'_>) -> Option<(&'static str, usize, usize)> {
    macro_rules! limit {
        ($field:literal, $value:expr, $max:expr) => {
            if $value.len() > $max {
                return Some(($field, $value.len(), $max));
            }
        };
    }
    limit!("catalog", failure.catalog, MAX_CATALOG);
    limit!("code", failure.code, MAX_CODE);
    limit!("method", failure.method, MAX_METHOD);
    limit!("retry_after", failure.retry_after, MAX_RETRY_AFTER);
    limit!("idempotency_key", failure.idempotency_key, MAX_IDEMPOTENCY_KEY);
    limit!("request_id", failure.request_id, MAX_REQUEST_ID);
    limit!("tenant", failure.tenant, MAX_TENANT);
    limit!("locale", failure.locale, MAX_LOCALE);
    limit!("dependency", failure.dependency, MAX_DEPENDENCY);
    limit!("probe_token", failure.probe_token, MAX_PROBE_TOKEN);
    if let Some(up) = &failure.upstream {
        limit!(
            "upstream.idempotency_key",
            up.idempotency_key.unwrap_or(""),
            MAX_IDEMPOTENCY_KEY
        );
        limit!(
            "upstream.reconciliation_action",
            up.reconciliation_action.unwrap_or(""),
            MAX_ACTION
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_field_over_its_limit() {
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY + 1);
        let f = Failure {
            idempotency_key: &long,
            ..Failure::default()
        };
        let v = check(&f).unwrap_err();
        assert_eq!(v.field, "idempotency_key");
        assert!(v.description.contains("limit is 256"), "{}", v.description);
        let at_limit = "k".repeat(MAX_IDEMPOTENCY_KEY);
        assert!(
            check(&Failure {
                idempotency_key: &at_limit,
                ..Failure::default()
            })
            .is_ok()
        );
    }

    #[test]
    fn every_field_is_named_with_its_limit() {
        // Every failure carries an upstream contract (the engine's, which
        // says nothing over a limit) for the last two fields to be set in.
        let policy = crate::core::Policy::embedded().expect("embedded policy");
        let now = crate::core::UnixMillis(0);
        let upstream = crate::core::decide(&policy, &Failure::default(), now)
            .expect("decided")
            .retry;
        let long = "x".repeat(300);
        type Set = for<'x> fn(&mut Failure<'x>, &'x str);
        let fields: [(&str, usize, Set); 12] = [
            ("catalog", MAX_CATALOG, |f, v| f.catalog = v),
            ("code", MAX_CODE, |f, v| f.code = v),
            ("method", MAX_METHOD, |f, v| f.method = v),
            ("retry_after", MAX_RETRY_AFTER, |f, v| f.retry_after = v),
            ("idempotency_key", MAX_IDEMPOTENCY_KEY, |f, v| f.idempotency_key = v),
            ("request_id", MAX_REQUEST_ID, |f, v| f.request_id = v),
            ("tenant", MAX_TENANT, |f, v| f.tenant = v),
            ("locale", MAX_LOCALE, |f, v| f.locale = v),
            ("dependency", MAX_DEPENDENCY, |f, v| f.dependency = v),
            ("probe_token", MAX_PROBE_TOKEN, |f, v| f.probe_token = v),
            ("upstream.idempotency_key", MAX_IDEMPOTENCY_KEY, |f, v| {
                f.upstream.as_mut().expect("set").idempotency_key = Some(v);
            }),
            ("upstream.reconciliation_action", MAX_ACTION, |f, v| {
                f.upstream.as_mut().expect("set").reconciliation_action = Some(v);
            }),
        ];
        for (name, max, set) in fields {
            let mut f = Failure {
                upstream: Some(upstream),
                ..Failure::default()
            };
            set(&mut f, &long[..max]);
            assert_eq!(check(&f), Ok(()), "{name} at its limit");
            set(&mut f, &long[..=max]);
            let v = check(&f).unwrap_err();
            assert_eq!(v.field, name);
            assert_eq!(v.description, format!("is {} bytes; the limit is {max}", max + 1));
        }
    }
}
