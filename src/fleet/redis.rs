//! `--state redis://…`: holds shared through Redis (being written).

use std::sync::Arc;

use super::store::SharedStore;

/// Connects the Redis store for `url` (placeholder until the store lands).
pub fn connect(url: &str) -> Result<Arc<dyn SharedStore>, String> {
    Err(format!("{url}: the Redis store is not built into this binary yet"))
}
