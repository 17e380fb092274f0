//! The pure decision core: no I/O, no clock, no gRPC types. Everything the
//! adapters need is re-exported here.

pub mod budget;
pub mod catalog;
pub mod engine;
pub mod hold;
pub mod limits;
pub mod messages;
pub mod model;
pub mod policy;
pub mod retry_after;
pub mod time;
pub mod warnings;
pub mod words;

pub use engine::{DecideError, Floor, decide, decide_floored, decide_held};
pub use model::{
    Decision, Failure, Locale, Operation, ReadBack, RetryContract, Scope, SideEffectState, Strategy, TargetReached,
    TerminalState, Verdict,
};
pub use policy::{Policy, PolicyError};
pub use time::UnixMillis;
pub use warnings::{Warning, WarningText, Warnings};
