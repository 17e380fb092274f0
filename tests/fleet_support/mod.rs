//! The fleet-memory scenarios shared by tests/fleet_holds.rs (one replica,
//! `--state memory`) and tests/fleet_redis_e2e.rs (two replicas sharing a
//! real Redis from tests/redis_support).
#![allow(dead_code)] // each test crate uses a different part

pub mod budgets;
pub mod scenarios;
pub mod trust;
