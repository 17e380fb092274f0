//! Why an operation was refused, in words both doors map to their own
//! codes: gRPC to a status, HTTP to a status line and a `google.rpc.Status`
//! body. The kinds are the canonical codes of `google.rpc.Code`.

use crate::core::limits;

/// One field violation, named as the client sees it (`failure.code`,
/// `failures[3].catalog`, `counts[0].tenant`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field's path in the request.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl Violation {
    /// `field` is wrong: `description`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Violation {
            field: field.into(),
            description: description.into(),
        }
    }

    /// `field: description`, the status message.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.description)
    }
}

/// The kind of a refusal (the canonical codes the service uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A field is wrong (carries a [`Violation`]).
    InvalidArgument,
    /// The thing named is not there.
    NotFound,
    /// The caller may not do this.
    PermissionDenied,
    /// The server is not set up for this (e.g. no fleet memory).
    FailedPrecondition,
    /// Too much: the caller should slow down or come back.
    ResourceExhausted,
    /// Try again, elsewhere or later.
    Unavailable,
}

/// A refused operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Its kind.
    pub kind: ErrorKind,
    /// The message, for people.
    pub message: String,
    /// The field at fault, for [`ErrorKind::InvalidArgument`].
    pub violation: Option<Violation>,
}

impl Error {
    /// `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            violation: None,
        }
    }

    /// INVALID_ARGUMENT naming `field`.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        Violation::new(field, description).into()
    }

    /// The server runs without fleet memory.
    pub fn no_fleet() -> Self {
        Error::new(ErrorKind::FailedPrecondition, "this server runs without fleet state")
    }
}

impl From<Violation> for Error {
    fn from(v: Violation) -> Self {
        Error {
            kind: ErrorKind::InvalidArgument,
            message: v.message(),
            violation: Some(v),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// `value` of `field` is at most `max` bytes.
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), Violation> {
    if value.len() > max {
        return Err(Violation::new(
            field,
            format!("is {} bytes; the limit is {max}", value.len()),
        ));
    }
    Ok(())
}

/// The locale is a request field, checked once per call.
pub fn check_locale(locale: &str) -> Result<(), Violation> {
    if locale.len() > limits::MAX_LOCALE {
        return Err(Violation::new(
            "locale",
            format!("is {} bytes; the limit is {}", locale.len(), limits::MAX_LOCALE),
        ));
    }
    Ok(())
}
