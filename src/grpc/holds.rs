//! Fleet-memory RPCs (work in progress).
