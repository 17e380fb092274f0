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
