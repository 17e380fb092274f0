//! What both doors (gRPC and HTTP) share, below them and above the service:
//!
//! - admission: the per-connection [`ledger`] of calls and answer bytes,
//!   answers held for slow readers ([`answer`]), shedding under
//!   [`overload`];
//! - who is calling: peer addresses, certificate identities and operators
//!   ([`peers`]);
//! - observation: OpenTelemetry spans ([`traces`]);
//! - presentation: the one JSON form of a decision and a hold ([`json`]) and
//!   the text and ASC forms ([`render`]), which the CLI prints too.
//!
//! Neither door imports the other; both import this.

pub mod answer;
pub mod json;
pub mod ledger;
pub mod overload;
pub mod peers;
pub mod render;
pub mod traces;
pub mod watch_bytes;

use crate::service::ErrorKind;

/// The canonical (gRPC) code of a refused operation: gRPC answers it, the
/// HTTP door puts it in its `google.rpc.Status` and picks the HTTP status
/// from it.
pub fn code_of(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::InvalidArgument => tonic::Code::InvalidArgument,
        ErrorKind::NotFound => tonic::Code::NotFound,
        ErrorKind::PermissionDenied => tonic::Code::PermissionDenied,
        ErrorKind::FailedPrecondition => tonic::Code::FailedPrecondition,
        ErrorKind::ResourceExhausted => tonic::Code::ResourceExhausted,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
    }
}
