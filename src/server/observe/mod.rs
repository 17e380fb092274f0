//! Builds the shadow policy and the decision log from `retryd serve`'s
//! flags (see [`tap::TapArgs`]): [`tap`] copies each decision off the call path,
//! [`shadow`] decides it again by a candidate policy, [`decision_log`] writes it.

pub mod decision_log;
pub mod log_file;
pub mod shadow;
pub mod tap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::reload::{self, PolicySource, Reloader};
use crate::service::record::Hasher;
use decision_log::{DECISION_LOG_DROPPED_TOTAL, LogConfig};
use shadow::SHADOW_DROPPED_TOTAL;
use tap::{Lane, Tap, TapArgs};

/// What `serve` runs beside the service for `--shadow-policy` and `--decision-log`.
#[derive(Debug, Default)]
pub struct Observing {
    /// The observer to install (none when both are off).
    pub tap: Option<Arc<Tap>>,
    /// Reloads the shadow policy (started inside the runtime).
    pub shadow_reloader: Option<Reloader>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Observing {
    /// Waits up to `within` for the writer threads to drain and stop (their
    /// queues close when the service is gone).
    pub fn finish(mut self, within: Duration) {
        drop(self.tap.take());
        let deadline = Instant::now() + within;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in self.threads.drain(..).filter(|t| t.is_finished()) {
            let _ = t.join();
        }
    }
}

/// Loads the shadow policy (read like `live`, the live policy's source:
/// the same default catalog and file size limit) and opens the decision
/// log; an error is the configuration's (exit 2).
pub fn build(t: &TapArgs, live: &PolicySource) -> Result<Observing, String> {
    let mut out = Observing::default();
    let mut tap = Tap {
        shadow: None,
        log: None,
    };
    if !t.shadow_policy.is_empty() {
        let source = PolicySource {
            paths: t.shadow_policy.clone(),
            default_catalog: live.default_catalog.clone(),
            max_file_bytes: live.max_file_bytes,
        };
        let policy = source.load().map_err(|e| {
            format!(
                "--shadow-policy: {}",
                reload::error_lines(&e).join("\n--shadow-policy: ")
            )
        })?;
        tracing::info!(shadow_policy_version = policy.version(), paths = ?source.paths, "shadow policy loaded");
        let handle = Arc::new(ArcSwap::from_pointee(policy));
        let (lane, rx) = Lane::new(t.shadow_queue as usize, metrics::counter!(SHADOW_DROPPED_TOTAL));
        out.threads
            .push(shadow::spawn(Arc::clone(&handle), rx).map_err(|e| format!("--shadow-policy: {e}"))?);
        out.shadow_reloader = Some(Reloader::for_shadow(source, handle));
        tap.shadow = Some(lane);
    }
    if let Some(dest) = &t.decision_log {
        let to_stderr = dest == "stderr";
        let sample = t.decision_log_sample.unwrap_or(if to_stderr { 0.01 } else { 1.0 });
        if !(0.0..=1.0).contains(&sample) {
            return Err(format!("--decision-log-sample: {sample} is not between 0 and 1"));
        }
        let hasher = if t.decision_log_raw {
            Hasher::raw()
        } else {
            match &t.decision_log_key_file {
                Some(p) => {
                    let key = crate::load::read_secret(p).map_err(|e| format!("--decision-log-key-file: {e}"))?;
                    let key = key.as_slice();
                    if key.len() < 16 {
                        return Err("--decision-log-key-file: the key must be at least 16 bytes".to_owned());
                    }
                    Hasher::keyed(key)
                }
                None => {
                    tracing::warn!(
                        "--decision-log without --decision-log-key-file: tenants, keys and request ids are hashed with a random key of this process (hashes differ across restarts and replicas)"
                    );
                    Hasher::keyed(&rand::random::<[u8; 32]>())
                }
            }
        };
        let config = LogConfig {
            path: (!to_stderr).then(|| std::path::PathBuf::from(dest)),
            max_bytes: t.decision_log_max_bytes,
            keep: t.decision_log_keep,
            hasher,
        };
        // Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default action
        // kills the process; with a handler installed (tokio's, kept for the
        // life of the process) the write fails with EFBIG instead, and the
        // log counts the lines it drops.
        #[cfg(unix)]
        if let Err(e) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ)) {
            tracing::warn!(error = %e, "cannot handle SIGXFSZ: a file-size limit would stop the process");
        }
        let (lane, rx) = Lane::new(
            t.decision_log_queue as usize,
            metrics::counter!(DECISION_LOG_DROPPED_TOTAL, "reason" => "queue_full"),
        );
        out.threads
            .push(decision_log::spawn(config, rx).map_err(|e| format!("--decision-log: {dest}: {e}"))?);
        tracing::info!(to = %dest, sample, raw = t.decision_log_raw, "decision log on");
        tap.log = Some((lane, sample));
    }
    if tap.shadow.is_some() || tap.log.is_some() {
        out.tap = Some(Arc::new(tap));
    }
    Ok(out)
}
