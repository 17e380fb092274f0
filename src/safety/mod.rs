//! The offline policy tools: policy tests ([`mod@test`]), an exhaustive diff of
//! two policies ([`diff`]) and replay of a decision log under another policy
//! ([`replay`]).
//!
//! All of them decide through the service's read-only decision path
//! ([`crate::service::decide::read_only`]) and compare decisions through
//! [`crate::service::outcome::Outcome`], so a test, a diff, the shadow
//! policy and a replay agree with the live server on what a decision is and
//! on what "the decision changed" means.

pub mod diff;
pub mod replay;
pub mod test;
