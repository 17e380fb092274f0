//! retryd: answers "this call to a dependency failed — may I retry it, when,
//! and would a retry create a duplicate?"
//!
//! The crate is layered: [`core`] is the pure decision engine (no I/O, `now`
//! passed in); the gRPC adapter and server assembly are built on top of it.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod cli;
pub mod core;
pub mod fleet;
pub mod grpc;
pub mod http;
pub mod load;
pub mod safety;
pub mod server;
