//! The write queue: one entry per hold, its newest state replacing an older
//! queued one (so a flood of extensions costs one write per hold, and the
//! queue is bounded by distinct holds, not by placements), in two lanes —
//! dependency-wide and method holds ahead of tenant holds, so a tenant-hold
//! flood cannot delay the holds that protect a whole dependency. A lane at
//! its capacity drops the new entry (counted); the periodic anti-entropy
//! pass writes what the mirror has and Redis lacks, so nothing dropped here
//! is lost for good.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::core::hold::{Hold, HoldScope};

/// One queued write.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Put(Hold),
    Lift(Hold),
}

impl Op {
    pub(super) fn hold(&self) -> &Hold {
        match self {
            Op::Put(h) | Op::Lift(h) => h,
        }
    }
}

#[derive(Debug, Default)]
struct Lane {
    order: VecDeque<String>,
    ops: HashMap<String, Op>,
}

impl Lane {
    /// Queues `op`, replacing a queued op of the same hold; false when full.
    fn push(&mut self, op: Op, capacity: usize) -> bool {
        let id = op.hold().id.clone();
        if let Some(queued) = self.ops.get_mut(&id) {
            *queued = op;
            return true;
        }
        if self.ops.len() >= capacity {
            return false;
        }
        self.order.push_back(id.clone());
        self.ops.insert(id, op);
        true
    }

    fn pop(&mut self) -> Option<Op> {
        while let Some(id) = self.order.pop_front() {
            if let Some(op) = self.ops.remove(&id) {
                return Some(op);
            }
        }
        None
    }
}

/// The queue shared by `put`/`lift` (producers) and the writer task.
#[derive(Debug)]
pub(super) struct WriteQueue {
    lanes: Mutex<[Lane; 2]>,
    capacity: usize,
    ready: Notify,
}

impl WriteQueue {
    /// A queue of at most `capacity` holds per lane.
    pub(super) fn new(capacity: usize) -> Self {
        WriteQueue {
            lanes: Mutex::new([Lane::default(), Lane::default()]),
            capacity: capacity.max(1),
            ready: Notify::new(),
        }
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, [Lane; 2]> {
        self.lanes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `op`; false when its lane is full (the op is dropped).
    pub(super) fn push(&self, op: Op) -> bool {
        let lane = usize::from(op.hold().key.scope == HoldScope::Tenant);
        let pushed = self.lanes()[lane].push(op, self.capacity);
        if pushed {
            self.ready.notify_one();
        }
        pushed
    }

    /// Up to `n` ops, dependency-wide ones first.
    pub(super) fn take(&self, n: usize) -> Vec<Op> {
        let mut lanes = self.lanes();
        let mut out = Vec::new();
        for lane in lanes.iter_mut() {
            while out.len() < n {
                match lane.pop() {
                    Some(op) => out.push(op),
                    None => break,
                }
            }
        }
        out
    }

    /// Waits until something may be queued.
    pub(super) async fn ready(&self) {
        self.ready.notified().await;
    }

    /// Holds queued, both lanes.
    pub(super) fn len(&self) -> usize {
        self.lanes().iter().map(|l| l.ops.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::UnixMillis;
    use crate::core::hold::{HoldKey, HoldKind};

    fn hold(id: &str, scope: HoldScope, until: i64) -> Hold {
        Hold {
            id: id.into(),
            key: HoldKey {
                scope,
                catalog: "c".into(),
                dependency: "d".into(),
                subject: id.into(),
            },
            kind: HoldKind::Quarantine,
            since: UnixMillis(0),
            until: UnixMillis(until),
            probe_every_ms: 0,
            probe_window_ms: 0,
            rank: Default::default(),
            code: String::new(),
            rule: String::new(),
            reason: String::new(),
        }
    }

    #[test]
    fn newest_state_wins_dependency_holds_go_first_and_a_full_lane_drops() {
        let q = WriteQueue::new(3);
        for until in 1..=1000 {
            assert!(q.push(Op::Put(hold("t1", HoldScope::Tenant, until))));
        }
        assert_eq!(q.len(), 1, "a thousand extensions of one hold are one write");
        assert!(q.push(Op::Put(hold("t2", HoldScope::Tenant, 5))));
        assert!(q.push(Op::Put(hold("t3", HoldScope::Tenant, 5))));
        assert!(
            !q.push(Op::Put(hold("t4", HoldScope::Tenant, 5))),
            "the tenant lane is full"
        );
        assert!(
            q.push(Op::Put(hold("d1", HoldScope::Dependency, 5))),
            "the dependency lane is not"
        );
        let taken = q.take(2);
        let ids: Vec<&str> = taken.iter().map(|op| op.hold().id.as_str()).collect();
        assert_eq!(ids, ["d1", "t1"]);
        assert_eq!(taken[1].hold().until, UnixMillis(1000), "the newest state");
        // A lift replaces a queued put of the same hold.
        q.push(Op::Lift(hold("t2", HoldScope::Tenant, 5)));
        assert!(matches!(q.take(1)[0], Op::Lift(_)));
        assert_eq!(q.take(10).len(), 1);
        assert!(q.take(10).is_empty());
    }
}
