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
    let (up_key, up_action) = match &failure.upstream {
        Some(up) => (up.idempotency_key.unwrap_or(""), up.reconciliation_action.unwrap_or("")),
        None => ("", ""),
    };
    let fields = [
        ("catalog", failure.catalog, MAX_CATALOG),
        ("code", failure.code, MAX_CODE),
        ("method", failure.method, MAX_METHOD),
        ("retry_after", failure.retry_after, MAX_RETRY_AFTER),
        ("idempotency_key", failure.idempotency_key, MAX_IDEMPOTENCY_KEY),
        ("request_id", failure.request_id, MAX_REQUEST_ID),
        ("tenant", failure.tenant, MAX_TENANT),
        ("locale", failure.locale, MAX_LOCALE),
        ("dependency", failure.dependency, MAX_DEPENDENCY),
        ("probe_token", failure.probe_token, MAX_PROBE_TOKEN),
        ("upstream.idempotency_key", up_key, MAX_IDEMPOTENCY_KEY),
        ("upstream.reconciliation_action", up_action, MAX_ACTION),
    ];
    match fields.into_iter().find(|(_, value, max)| value.len() > *max) {
        None => Ok(()),
        Some((field, value, max)) => Err(FieldViolation {
            field,
            description: format!("is {} bytes; the limit is {max}", value.len()),
        }),
    }
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
}
