//! `--state memory`: one replica, nothing else to run. The mirror is the
//! whole truth, so there is nothing to write and probe slots are taken here.

use std::sync::Arc;

use super::mirror::{Mirror, Redeemed};
use super::store::{SharedStore, StoreFuture, Take};
use crate::core::hold::Hold;

/// The in-process store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    mirror: std::sync::OnceLock<Arc<Mirror>>,
}

impl SharedStore for MemoryStore {
    fn put(&self, _hold: &Hold) {}

    fn lift(&self, _hold: &Hold) {}

    fn take_probe_slot<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Take> {
        Box::pin(async move {
            // One check-and-mark under the mirror's lock: exactly one caller wins.
            let won = self
                .mirror
                .get()
                .is_some_and(|m| m.try_take_probe(&hold.id, slot, nonce));
            if won { Take::Taken } else { Take::Refused }
        })
    }

    fn redeem_probe<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Redeemed> {
        Box::pin(async move {
            self.mirror
                .get()
                .map_or(Redeemed::Forged, |m| m.redeem_probe(&hold.id, slot, nonce))
        })
    }

    fn start(self: Arc<Self>, mirror: Arc<Mirror>) {
        let _ = self.mirror.set(mirror);
    }

    fn connected(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}
