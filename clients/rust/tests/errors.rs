//! `Error::source()` keeps the dependency's error in error chains; an
//! opaque inner error is mapped into one that is a `std::error::Error`.
use std::error::Error as _;

use retryd_client::{DependencyError, Error};

#[test]
fn source_is_the_dependencys_error() {
    let e: Error<DependencyError> = Error::Dependency(DependencyError::new("BITRIX_TIMEOUT"));
    assert_eq!(
        e.source().map(|s| s.to_string()).as_deref(),
        Some("dependency failed: BITRIX_TIMEOUT")
    );
    let held: Error<DependencyError> = Error::Held { hold: None };
    assert!(held.source().is_none());
}

#[test]
fn an_opaque_error_is_mapped_into_one_with_a_source() {
    // E.g. anyhow::Error, which is no std::error::Error: map it.
    let e: Error<String> = Error::DeadlineExceeded {
        source: Some("socket closed".to_string()),
    };
    let e = e.map_source(std::io::Error::other);
    assert_eq!(e.source().unwrap().to_string(), "socket closed");
    assert_eq!(e.dependency_error().unwrap().kind(), std::io::ErrorKind::Other);
}
