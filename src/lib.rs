//! retryd: answers "this call to a dependency failed — may I retry it, when,
//! and would a retry create a duplicate?"
//!
//! The crate is layered; each layer imports only those below it (checked
//! by `scripts/layers.py` in CI; see `docs/architecture.md`):
//!
//! 1. [`core`]: pure decisions — catalogs, the engine, holds and budgets as
//!    arithmetic; no I/O, no clock (`now` is passed in), no wire types;
//! 2. [`load`]: policies from disk;
//! 3. [`fleet`]: state shared by replicas — the hold mirror, budgets, the
//!    in-process and Redis stores behind one trait;
//! 4. [`service`]: every operation, protocol-neutral, and the one place
//!    that says what a retry is under holds and budgets
//!    ([`service::decide`]);
//! 5. [`doors`]: what both doors share — admission, callers and operators,
//!    spans, the JSON and text forms of a decision;
//! 6. [`grpc`] and [`http`]: the two doors, thin and parallel (neither
//!    imports the other);
//! 7. [`server`]: assembly — listeners, layers, reload, the shadow policy
//!    and the decision log;
//! 8. [`safety`]: the offline policy tools (`policy test`, `diff`, `replay`);
//! 9. [`cli`]: the command line (and `main.rs` on top).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod cli;
pub mod core;
pub mod doors;
pub mod fleet;
pub mod grpc;
pub mod http;
pub mod load;
pub mod safety;
pub mod server;
pub mod service;
