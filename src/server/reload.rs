//! Policy as data in operation: `--policy` paths loaded at start-up and
//! reloaded while serving.
//!
//! A reload is triggered by SIGHUP or by any change in a watched directory
//! (a directory given to `--policy` is watched itself, a file through the
//! directory that contains it; never recursively). Every trigger re-resolves
//! the paths from scratch, so a Kubernetes ConfigMap update — which swaps a
//! `..data` symlink atomically — is picked up like an edit in place.
//! Triggers are debounced ([`DEBOUNCE`] after the last one) and reloads run
//! one at a time on a background task; the files are read and compiled on
//! the blocking pool, never on a request path. A new policy is published with
//! one `ArcSwap::store`, so each call is decided wholly by the old or wholly
//! by the new policy. A policy that fails to load is refused: the old one
//! keeps serving, every error is logged with its file and line, and health
//! stays SERVING. Every reload ends in one `policy reload: applied …`,
//! `… unchanged …` or `… refused …` line at info.
//!
//! Metrics:
//! - `retryd_policy_reload_total{result}`: reload attempts, `result` one of
//!   `ok` (a new version is in force), `unchanged` (it loaded, and its
//!   version is the one already in force — e.g. a SIGHUP with nothing
//!   edited, or an unrelated file in a watched directory), `error` (refused;
//!   the old version keeps serving);
//! - `retryd_policy_info{version}`: 1 for the version in force; versions
//!   that were in force earlier stay exported with 0;
//! - `retryd_policy_last_reload_successful`: 1 unless the latest reload was
//!   refused (for alerting: the files on disk are broken).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use crate::core::Policy;
use crate::load::{self, LoadError};
use crate::service::PolicyHandle;

/// Counter of reload attempts, by `result` (`ok`, `unchanged`, `error`).
pub const RELOAD_TOTAL: &str = "retryd_policy_reload_total";
/// Gauge: 1 for the policy version in force (label `version`).
pub const POLICY_INFO: &str = "retryd_policy_info";
/// Gauge: 1 unless the latest reload attempt was refused.
pub const LAST_RELOAD_SUCCESSFUL: &str = "retryd_policy_last_reload_successful";

/// Quiet time after the last trigger before reloading: an editor's or a
/// ConfigMap's burst of file events becomes one reload.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Longest a steady stream of events can hold a reload back.
const MAX_DEBOUNCE: Duration = Duration::from_secs(2);

/// Where the policy comes from: the embedded catalogs plus `paths`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    /// `--policy` files and directories, in order (empty: embedded only).
    pub paths: Vec<PathBuf>,
    /// `--default-catalog`.
    pub default_catalog: String,
    /// `--max-policy-bytes`: the largest catalog file read.
    pub max_file_bytes: u64,
}

impl PolicySource {
    /// Loads and validates the policy (reads files: call off async workers).
    pub fn load(&self) -> Result<Policy, LoadError> {
        load::load_policy_limited(&self.paths, &self.default_catalog, self.max_file_bytes)
    }

    /// The directories to watch: each directory path itself, and the parent
    /// of each file path (so replacing the file, or a symlink swap next to
    /// it, is seen). Deduplicated, in order.
    pub fn watch_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for path in &self.paths {
            let dir = if path.is_dir() {
                path.clone()
            } else {
                match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                }
            };
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }
}

/// Every error of a failed load as its own line (`file:line: key: message`
/// for catalog errors).
pub fn error_lines(e: &LoadError) -> Vec<String> {
    e.lines()
}

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// A change in a watched directory.
    FileChange,
}

impl Trigger {
    /// The log word.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChange => "file change",
        }
    }
}

/// The result of one reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new version is in force.
    Swapped {
        /// The version replaced.
        from: String,
        /// The version now in force.
        to: String,
    },
    /// The policy loaded and its version is the one in force; nothing swapped.
    Unchanged(String),
    /// The policy was refused; the old one keeps serving.
    Refused(Vec<String>),
}

/// Loads the policy from its source and swaps it into the handle.
#[derive(Debug, Clone)]
pub struct Reloader {
    source: Arc<PolicySource>,
    handle: PolicyHandle,
    /// The latest reload was refused (so an unchanged one is a recovery).
    refused_last: Arc<AtomicBool>,
    /// Reloads `--shadow-policy`: logged as such, not counted in the live policy's metrics.
    shadow: bool,
}

impl Reloader {
    /// A reloader publishing into `handle` (which holds the policy loaded at
    /// start-up). Exports `retryd_policy_info` for it and zeroes the reload
    /// counters so they are visible before the first reload.
    pub fn new(source: PolicySource, handle: PolicyHandle) -> Self {
        for result in ["ok", "unchanged", "error"] {
            metrics::counter!(RELOAD_TOTAL, "result" => result).increment(0);
        }
        metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(1.0);
        metrics::gauge!(POLICY_INFO, "version" => handle.load().version().to_owned()).set(1.0);
        Reloader {
            source: Arc::new(source),
            handle,
            refused_last: Arc::new(AtomicBool::new(false)),
            shadow: false,
        }
    }

    /// A reloader of the shadow policy (`--shadow-policy`): it reloads like
    /// the live one, logs `shadow policy reload: …` and leaves the live
    /// policy's metrics alone.
    pub fn for_shadow(source: PolicySource, handle: PolicyHandle) -> Self {
        Reloader {
            source: Arc::new(source),
            handle,
            refused_last: Arc::new(AtomicBool::new(false)),
            shadow: true,
        }
    }

    /// The source reloaded from.
    pub fn source(&self) -> &PolicySource {
        &self.source
    }

    /// Whether there is anything to reload (`--policy` was given).
    pub fn has_paths(&self) -> bool {
        !self.source.paths.is_empty()
    }

    /// Loads the policy on the blocking pool and, if valid and different,
    /// publishes it; logs and counts the outcome. Reloads must not overlap
    /// (the server runs them one at a time on one task).
    pub async fn reload(&self, trigger: Trigger) -> ReloadOutcome {
        let outcome = self.load_and_publish().await;
        self.record(trigger, &outcome);
        outcome
    }

    /// Once the watch is set up: picks up a change made between the
    /// start-up load and the watch (recorded only if something changed).
    async fn catch_up(&self) {
        let outcome = self.load_and_publish().await;
        if !matches!(outcome, ReloadOutcome::Unchanged(_)) {
            self.record(Trigger::FileChange, &outcome);
        }
    }

    async fn load_and_publish(&self) -> ReloadOutcome {
        let source = Arc::clone(&self.source);
        let loaded = match tokio::task::spawn_blocking(move || source.load()).await {
            Ok(result) => result.map_err(|e| error_lines(&e)),
            Err(e) => Err(vec![format!("policy loader failed: {e}")]),
        };
        self.publish(loaded)
    }

    fn publish(&self, loaded: Result<Policy, Vec<String>>) -> ReloadOutcome {
        let policy = match loaded {
            Ok(p) => p,
            Err(errors) => return ReloadOutcome::Refused(errors),
        };
        // Reloads run one at a time (one task), so nothing else stores
        // between this load and the store below.
        let old = self.handle.load_full();
        if old.version() == policy.version() {
            return ReloadOutcome::Unchanged(old.version().to_owned());
        }
        let to = policy.version().to_owned();
        self.handle.store(Arc::new(policy));
        ReloadOutcome::Swapped {
            from: old.version().to_owned(),
            to,
        }
    }

    /// Logs the outcome of one reload — one `policy reload: …` line at info
    /// (`applied` with the new version, `unchanged`, or `refused`, after an
    /// error line per problem) — and counts it.
    fn record(&self, trigger: Trigger, outcome: &ReloadOutcome) {
        let trigger = trigger.as_str();
        if self.shadow {
            match outcome {
                ReloadOutcome::Swapped { to, .. } => tracing::info!(trigger, "shadow policy reload: applied {to}"),
                ReloadOutcome::Unchanged(v) => {
                    tracing::info!(trigger, "shadow policy reload: unchanged; {v} stays in force")
                }
                ReloadOutcome::Refused(errors) => {
                    for e in errors {
                        tracing::error!(trigger, "shadow policy reload refused: {e}");
                    }
                    tracing::info!(
                        trigger,
                        "shadow policy reload: refused; the previous shadow policy keeps deciding"
                    );
                }
            }
            return;
        }
        match outcome {
            ReloadOutcome::Swapped { from, to } => {
                self.refused_last.store(false, Ordering::Relaxed);
                metrics::counter!(RELOAD_TOTAL, "result" => "ok").increment(1);
                metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(1.0);
                metrics::gauge!(POLICY_INFO, "version" => from.clone()).set(0.0);
                metrics::gauge!(POLICY_INFO, "version" => to.clone()).set(1.0);
                tracing::info!(
                    trigger,
                    policy_version = %to,
                    previous_version = %from,
                    catalogs = %self.handle.load().catalog_names(),
                    "policy reload: applied {to}"
                );
                for note in self.handle.load().notes() {
                    tracing::warn!("{note}");
                }
            }
            ReloadOutcome::Unchanged(version) => {
                metrics::counter!(RELOAD_TOTAL, "result" => "unchanged").increment(1);
                metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(1.0);
                if self.refused_last.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        trigger,
                        policy_version = %version,
                        "policy reload: unchanged; the files load again and are the version in force, {version}"
                    );
                } else {
                    tracing::info!(
                        trigger,
                        policy_version = %version,
                        "policy reload: unchanged; {version} stays in force"
                    );
                }
            }
            ReloadOutcome::Refused(errors) => {
                self.refused_last.store(true, Ordering::Relaxed);
                // Log before counting: whoever is alerted by the counter finds
                // the file and line already in the log.
                let serving = self.handle.load().version().to_owned();
                for e in errors {
                    tracing::error!(trigger, policy_version = %serving, "policy reload refused: {e}");
                }
                tracing::info!(
                    trigger,
                    policy_version = %serving,
                    errors = errors.len(),
                    "policy reload: refused; the previous policy, {serving}, keeps serving"
                );
                metrics::gauge!(LAST_RELOAD_SUCCESSFUL).set(0.0);
                metrics::counter!(RELOAD_TOTAL, "result" => "error").increment(1);
            }
        }
    }
}

/// The reload machinery of a running server: the SIGHUP listener, the
/// directory watcher and the reload task. Dropping it stops them.
#[derive(Debug)]
pub struct ReloadTasks {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for ReloadTasks {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts listening for SIGHUP and, when `watch` is set and there are
/// `--policy` paths, watching their directories. Must be called inside a
/// tokio runtime; SIGHUP is handled from the moment this returns (so it
/// never kills the process, even without `--policy`).
pub fn start(reloader: Reloader, watch: bool) -> ReloadTasks {
    let (tx, rx) = mpsc::channel::<Trigger>(16);
    let mut tasks = Vec::new();
    if let Some(task) = listen_for_sighup(tx.clone(), reloader.has_paths()) {
        tasks.push(task);
    }
    if !reloader.has_paths() {
        return ReloadTasks { tasks };
    }
    let watcher = if watch { watch_dirs(reloader.source(), tx) } else { None };
    tasks.push(tokio::spawn(reload_loop(reloader, rx, watcher)));
    ReloadTasks { tasks }
}

#[cfg(unix)]
fn listen_for_sighup(tx: mpsc::Sender<Trigger>, has_paths: bool) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; the policy reloads only on file changes");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            if !has_paths {
                tracing::info!("received SIGHUP; serving the embedded policy (no --policy given), nothing to reload");
                continue;
            }
            tracing::info!("received SIGHUP; reloading the policy");
            if tx.send(Trigger::Signal).await.is_err() {
                return;
            }
        }
    }))
}

#[cfg(not(unix))]
fn listen_for_sighup(_tx: mpsc::Sender<Trigger>, _has_paths: bool) -> Option<tokio::task::JoinHandle<()>> {
    None
}

/// Watches the source's directories; each relevant event sends a trigger
/// (dropped when one is already queued). `None` if no watcher could start.
fn watch_dirs(source: &PolicySource, tx: mpsc::Sender<Trigger>) -> Option<RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| match event {
        Ok(event) if relevant(&event.kind) => {
            tracing::trace!(?event, "policy directory changed");
            let _ = tx.try_send(Trigger::FileChange);
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "policy watcher error"),
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the policy files; reload with SIGHUP");
            return None;
        }
    };
    for dir in source.watch_dirs() {
        match watcher.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => tracing::info!(dir = %dir.display(), "watching for policy changes"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot watch; reload with SIGHUP"),
        }
    }
    Some(watcher)
}

/// Opening and reading files (ours included: every reload reads them) is
/// not a change; anything else, a closed write included, is.
fn relevant(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

async fn reload_loop(reloader: Reloader, mut rx: mpsc::Receiver<Trigger>, mut watcher: Option<RecommendedWatcher>) {
    if watcher.is_some() {
        reloader.catch_up().await;
    }
    while let Some(first) = rx.recv().await {
        let Some(trigger) = debounce(first, &mut rx).await else {
            return;
        };
        reloader.reload(trigger).await;
        // A watched directory reached through a symlink (or deleted and
        // made again) is a new inode now: watch the path again.
        if let Some(w) = watcher.as_mut() {
            rewatch(w, reloader.source());
        }
    }
}

/// Waits until no trigger came for [`DEBOUNCE`] (at most [`MAX_DEBOUNCE`]);
/// a SIGHUP among them wins as the reported trigger. `None` when the
/// channel closed.
async fn debounce(first: Trigger, rx: &mut mpsc::Receiver<Trigger>) -> Option<Trigger> {
    let started = Instant::now();
    let mut trigger = first;
    while started.elapsed() < MAX_DEBOUNCE {
        match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
            Ok(Some(next)) => {
                if next == Trigger::Signal {
                    trigger = Trigger::Signal;
                }
            }
            Ok(None) => return None,
            Err(_) => break,
        }
    }
    Some(trigger)
}

fn rewatch(watcher: &mut RecommendedWatcher, source: &PolicySource) {
    for dir in source.watch_dirs() {
        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot watch again");
        }
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;

    use super::*;
    use crate::core::policy::EMBEDDED;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("retryd-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn catalog(name: &str, max_attempts: u32) -> String {
        EMBEDDED[0]
            .1
            .replace("name = \"vibecode\"", &format!("name = \"{name}\""))
            .replace("max_attempts = 5", &format!("max_attempts = {max_attempts}"))
    }

    #[test]
    fn watch_dirs_are_directories_and_parents_of_files() {
        let dir = temp_dir("dirs");
        std::fs::write(dir.join("a.toml"), "").unwrap();
        let source = PolicySource {
            paths: vec![dir.clone(), dir.join("a.toml"), PathBuf::from("b.toml")],
            default_catalog: "vibecode".into(),
            max_file_bytes: load::DEFAULT_MAX_POLICY_BYTES,
        };
        assert_eq!(source.watch_dirs(), vec![dir.clone(), PathBuf::from(".")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_changes_are_relevant() {
        assert!(!relevant(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!relevant(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(relevant(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(relevant(&EventKind::Any));
        assert!(relevant(&EventKind::Remove(notify::event::RemoveKind::Any)));
    }

    #[tokio::test]
    async fn a_broken_policy_is_refused_and_a_good_one_swapped() {
        let dir = temp_dir("swap");
        std::fs::write(dir.join("mine.toml"), catalog("mine", 3)).unwrap();
        let source = PolicySource {
            paths: vec![dir.clone()],
            default_catalog: "vibecode".into(),
            max_file_bytes: load::DEFAULT_MAX_POLICY_BYTES,
        };
        let handle: PolicyHandle = Arc::new(ArcSwap::from_pointee(source.load().unwrap()));
        let reloader = Reloader::new(source, Arc::clone(&handle));
        let v1 = handle.load().version().to_owned();

        assert_eq!(
            reloader.reload(Trigger::Signal).await,
            ReloadOutcome::Unchanged(v1.clone())
        );

        std::fs::write(dir.join("mine.toml"), "name = \"mine\"\nmax_attempts = \"x\"\n").unwrap();
        let ReloadOutcome::Refused(errors) = reloader.reload(Trigger::FileChange).await else {
            panic!("a broken catalog must be refused");
        };
        assert!(errors.iter().any(|e| e.contains("mine.toml:")), "{errors:?}");
        assert_eq!(handle.load().version(), v1);

        std::fs::write(dir.join("mine.toml"), catalog("mine", 2)).unwrap();
        let ReloadOutcome::Swapped { from, to } = reloader.reload(Trigger::FileChange).await else {
            panic!("a good catalog must be swapped in");
        };
        assert_eq!(from, v1);
        assert_eq!(handle.load().version(), to);
        assert_eq!(handle.load().catalog("mine").unwrap().max_attempts, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn an_unreadable_file_in_a_policy_directory_refuses_the_reload_and_keeps_the_catalog() {
        let dir = temp_dir("special");
        std::fs::write(dir.join("mine.toml"), catalog("mine", 3)).unwrap();
        let source = PolicySource {
            paths: vec![dir.clone()],
            default_catalog: "vibecode".into(),
            max_file_bytes: load::DEFAULT_MAX_POLICY_BYTES,
        };
        let handle: PolicyHandle = Arc::new(ArcSwap::from_pointee(source.load().unwrap()));
        let reloader = Reloader::new(source, Arc::clone(&handle));
        let v1 = handle.load().version().to_owned();

        // The catalog's file swapped for a symlink to a device, then a FIFO:
        // refused, naming the path; "mine" keeps serving.
        std::fs::remove_file(dir.join("mine.toml")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("mine.toml")).unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(10), reloader.reload(Trigger::FileChange))
            .await
            .expect("the reload blocked");
        let ReloadOutcome::Refused(errors) = outcome else {
            panic!("a device in place of a catalog must be refused, got {outcome:?}");
        };
        assert!(
            errors.iter().any(|e| e.contains("mine.toml: not a regular file")),
            "{errors:?}"
        );
        assert_eq!(handle.load().version(), v1);
        assert!(handle.load().catalog("mine").is_some());

        std::fs::remove_file(dir.join("mine.toml")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("mine.toml"))
            .status()
            .unwrap();
        assert!(made.success());
        let outcome = tokio::time::timeout(Duration::from_secs(10), reloader.reload(Trigger::Signal))
            .await
            .expect("the reload blocked on a FIFO");
        assert!(matches!(outcome, ReloadOutcome::Refused(_)), "{outcome:?}");
        assert!(handle.load().catalog("mine").is_some());

        // Only a file that is really gone removes its catalog.
        std::fs::remove_file(dir.join("mine.toml")).unwrap();
        let outcome = reloader.reload(Trigger::FileChange).await;
        assert!(matches!(outcome, ReloadOutcome::Swapped { .. }), "{outcome:?}");
        assert!(handle.load().catalog("mine").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
