//! The decision tap: the service's [`DecisionObserver`], which copies each
//! decision once into an owned [`DecisionEvent`] and offers it to the shadow
//! policy and the decision log, each through its own bounded queue. It never
//! blocks a call: a full queue drops the event and counts the drop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::Duration;

use crate::core::hold::Hold;
use crate::core::{Failure, UnixMillis};
use crate::fleet::budget::Judged;
use crate::service::Decided;
use crate::service::observe::DecisionObserver;
use crate::service::outcome::Outcome;
use crate::service::record::{Hasher, LoggedFailure};

/// One decision, owned, as the live policy made it.
#[derive(Debug, Clone)]
pub struct DecisionEvent {
    /// When it was decided.
    pub now: UnixMillis,
    /// The failure as received (nothing hashed yet).
    pub failure: LoggedFailure,
    /// The live decision.
    pub decision: Outcome,
    /// The catalog that decided (a loaded catalog's name).
    pub catalog: String,
    /// The live policy's version.
    pub policy_version: String,
    /// The hold in force on the failure's scope after the decision.
    pub hold: Option<Hold>,
    /// The budget the decision was judged against, before its withdrawal.
    pub budget: Option<Judged>,
}

/// A bounded queue's sending side; a full queue drops and counts.
#[derive(Debug)]
pub struct Lane {
    tx: SyncSender<Arc<DecisionEvent>>,
    dropped: metrics::Counter,
}

impl Lane {
    /// A lane of `capacity` events; drops are counted in `dropped`.
    pub fn new(capacity: usize, dropped: metrics::Counter) -> (Lane, Receiver<Arc<DecisionEvent>>) {
        dropped.increment(0);
        let (tx, rx) = sync_channel(capacity.max(1));
        (Lane { tx, dropped }, rx)
    }

    /// Offers `event` without waiting.
    pub fn offer(&self, event: Arc<DecisionEvent>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(event) {
            self.dropped.increment(1);
        }
    }
}

/// How long a consumer sleeps when its queue is empty. The consumers poll
/// instead of blocking in `recv`, so a call's `offer` never has to wake a
/// sleeping thread (a futex call and a context switch per decision, the
/// largest cost measured); events wait at most this long.
pub const POLL: Duration = Duration::from_millis(5);

/// Runs `each` on every event of `rx`, in batches: when the queue is empty
/// `idle` runs (flush) and the thread sleeps [`POLL`]. Returns when every
/// sender is gone and the queue is drained.
pub fn consume(rx: &Receiver<Arc<DecisionEvent>>, mut each: impl FnMut(&DecisionEvent), mut idle: impl FnMut()) {
    loop {
        match rx.try_recv() {
            Ok(ev) => each(&ev),
            Err(TryRecvError::Empty) => {
                idle();
                std::thread::sleep(POLL);
            }
            Err(TryRecvError::Disconnected) => {
                idle();
                return;
            }
        }
    }
}

/// The observer the server installs when a shadow policy or a decision log is on.
#[derive(Debug)]
pub struct Tap {
    /// The shadow policy's lane.
    pub shadow: Option<Lane>,
    /// The decision log's lane and its sampling rate in [0, 1].
    pub log: Option<(Lane, f64)>,
}

impl DecisionObserver for Tap {
    fn observe(&self, failure: &Failure<'_>, decided: &Decided<'_>, now: UnixMillis) {
        let decision = &decided.decision;
        let log = self
            .log
            .as_ref()
            .filter(|(_, sample)| *sample >= 1.0 || rand::random::<f64>() < *sample);
        if self.shadow.is_none() && log.is_none() {
            return;
        }
        let event = Arc::new(DecisionEvent {
            now,
            failure: LoggedFailure::from_failure(failure, &Hasher::raw()),
            decision: Outcome::of(decision),
            catalog: decision.catalog.to_owned(),
            policy_version: decision.policy_version.to_owned(),
            hold: decided.hold.as_deref().cloned(),
            budget: decided.budget.clone(),
        });
        if let Some((lane, _)) = log {
            match &self.shadow {
                Some(shadow) => {
                    shadow.offer(Arc::clone(&event));
                    lane.offer(event);
                }
                None => lane.offer(event),
            }
        } else if let Some(shadow) = &self.shadow {
            shadow.offer(event);
        }
    }
}

/// `retryd serve`'s flags for the shadow policy and the decision log.
#[derive(Debug, Clone, clap::Args)]
pub struct TapArgs {
    /// A candidate policy decided beside the live one on every call, off the
    /// response path (catalog files or directories on top of the embedded
    /// catalogs, repeatable; hot-reloaded like --policy). Callers always get
    /// the live answer; disagreements are counted and logged (sampled).
    #[arg(
        long = "shadow-policy",
        value_name = "PATH",
        env = "RETRYD_SHADOW_POLICY",
        value_delimiter = ','
    )]
    pub shadow_policy: Vec<PathBuf>,
    /// Decisions waiting for the shadow policy; over it they are dropped (counted).
    #[arg(long, env = "RETRYD_SHADOW_QUEUE", default_value_t = 8_192, value_parser = clap::value_parser!(u32).range(1..))]
    pub shadow_queue: u32,
    /// Write one JSON line per decision to this file (rotated by size), or `stderr`.
    #[arg(long, env = "RETRYD_DECISION_LOG", value_name = "PATH|stderr")]
    pub decision_log: Option<String>,
    /// Share of decisions logged, 0 to 1 (default: 1.0 to a file, 0.01 to stderr).
    #[arg(long, env = "RETRYD_DECISION_LOG_SAMPLE")]
    pub decision_log_sample: Option<f64>,
    /// Rotate the log file when it reaches this many bytes.
    #[arg(long, env = "RETRYD_DECISION_LOG_MAX_BYTES", default_value_t = 100 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..))]
    pub decision_log_max_bytes: u64,
    /// Rotated files kept (`PATH.1` newest … `PATH.N`).
    #[arg(long, env = "RETRYD_DECISION_LOG_KEEP", default_value_t = 5)]
    pub decision_log_keep: u32,
    /// File holding the key of the hash that replaces tenants, idempotency
    /// keys and request ids (give every replica the same; default: random per process).
    #[arg(long, env = "RETRYD_DECISION_LOG_KEY_FILE", value_name = "PATH")]
    pub decision_log_key_file: Option<PathBuf>,
    /// Write tenants, idempotency keys and request ids in clear.
    #[arg(long, env = "RETRYD_DECISION_LOG_RAW", default_value_t = false)]
    pub decision_log_raw: bool,
    /// Lines waiting to be written; over it decisions are not logged (counted).
    #[arg(long, env = "RETRYD_DECISION_LOG_QUEUE", default_value_t = 8_192, value_parser = clap::value_parser!(u32).range(1..))]
    pub decision_log_queue: u32,
}
