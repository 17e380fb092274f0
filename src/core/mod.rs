//! The pure decision core, the bottom layer (see `docs/architecture.md`):
//! no I/O, no clock, no wire types; it imports nothing of the crate. What a
//! failure means under a catalog ([`engine`]), and holds and budgets as
//! arithmetic ([`hold`], [`budget`]); each enum's word is defined once
//! ([`words`]). What a retry is under the fleet's holds and budgets is the
//! service's: `crate::service::decide`.

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
