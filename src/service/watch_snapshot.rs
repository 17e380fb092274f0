//! A watch's snapshot: the holds in force, page by page from the mirror
//! (never copied whole per stream), then `synced`. A reconnecting client
//! mirror may resume: it sends the 256 bucket digests of the holds it has
//! (`core::hold::resume`), and only the buckets that differ are sent, so
//! a reconnect storm after a restart costs a message per stream, not one
//! per hold per stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::watch_filter::WatchFilter;
use super::watch_out::{Out, WatchWire};
use crate::core::UnixMillis;
use crate::core::hold::{Hold, RESUME_BUCKETS, bucket, bucket_digests};
use crate::fleet::{Fleet, HoldEventKind};

/// Counter of watches resumed from a mirror's digests, labelled `resent`
/// (`none`: the mirror was right, the snapshot was SYNCED alone; `some`).
pub const WATCH_RESUMED_TOTAL: &str = "retryd_watch_resumed_total";

/// Gauge of filters whose resume digests are cached (at most
/// [`RESUME_CACHE_FILTERS`]).
pub const RESUME_CACHE_GAUGE: &str = "retryd_watch_resume_cache_filters";

/// Holds read from the mirror per snapshot page.
const SNAPSHOT_PAGE: usize = 64;

/// Sends the holds in force, page by page in id order (dependency by
/// dependency when the watch names some: each through its index), then
/// `synced`. A resumed watch sends only the buckets whose digest differs
/// from the mirror's, and names them in `synced`.
pub(super) async fn snapshot<W: WatchWire>(
    fleet: &Fleet,
    filter: &WatchFilter,
    operator: bool,
    resumes: &ResumeCache,
    out: &Out<W>,
) -> bool {
    let mut named: Vec<&str> = filter.dependencies.iter().map(String::as_str).collect();
    named.sort_unstable();
    named.dedup();
    let scopes: Vec<Option<&str>> = if named.is_empty() {
        vec![None]
    } else {
        named.into_iter().map(Some).collect()
    };
    let resent = if filter.resume.is_empty() {
        None
    } else {
        let mine = resumes.digests(fleet, filter, &scopes).await;
        let differ: Vec<u32> = (0..RESUME_BUCKETS)
            .filter(|&b| mine[b] != filter.resume[b])
            .map(|b| b as u32)
            .collect();
        let resent = if differ.is_empty() { "none" } else { "some" };
        metrics::counter!(WATCH_RESUMED_TOTAL, "resent" => resent).increment(1);
        Some(differ)
    };
    if resent.as_ref().is_none_or(|b| !b.is_empty()) {
        let mut send = [true; RESUME_BUCKETS];
        if let Some(b) = &resent {
            send = [false; RESUME_BUCKETS];
            for &i in b {
                send[i as usize] = true;
            }
        }
        for &dependency in &scopes {
            if !pages(fleet, dependency, filter, operator, &send, out).await {
                return false;
            }
        }
    }
    out.send_synced(resent).await
}

/// Filters whose digests are kept: past it the cache starts again empty.
pub(super) const RESUME_CACHE_FILTERS: usize = 256;

/// The digests of one filter at one `changes`, computed once for every
/// watch that asks meanwhile.
type Once = Arc<tokio::sync::OnceCell<Arc<Vec<u64>>>>;
/// Filter key → (the mirror's `changes` when first asked, its digests).
type Cached = HashMap<[u8; 32], (u64, Once)>;

/// The server's bucket digests per filter (by a SHA-256 of the filter, so
/// 256 long dependency lists cost 256 × 32 bytes of keys), each valid
/// while the mirror's [`crate::fleet::Mirror::changes`] has not moved: a
/// reconnect storm of 2 000 mirrors of one filter walks the holds once,
/// not 2 000 times — the first walks, the others arriving meanwhile wait
/// for its result. A write during the walk may leave the digests between
/// two states: harmless, since every watch that is given them subscribed
/// to changes before that write, and is sent it as an event.
#[derive(Debug, Default)]
pub(super) struct ResumeCache {
    by_filter: Mutex<Cached>,
}

impl ResumeCache {
    async fn digests(&self, fleet: &Fleet, filter: &WatchFilter, scopes: &[Option<&str>]) -> Arc<Vec<u64>> {
        let key = filter_key(filter, scopes);
        let before = fleet.mirror().changes();
        let once = {
            let mut cache = self.lock();
            match cache.get(&key) {
                Some((at, once)) if *at == before => Arc::clone(once),
                _ => {
                    if cache.len() >= RESUME_CACHE_FILTERS && !cache.contains_key(&key) {
                        cache.clear();
                    }
                    let once = Once::default();
                    cache.insert(key, (before, Arc::clone(&once)));
                    metrics::gauge!(RESUME_CACHE_GAUGE).set(cache.len() as f64);
                    once
                }
            }
        };
        let digests = once
            .get_or_init(|| async {
                let now = UnixMillis::now();
                let mut mine = Vec::new();
                for &dependency in scopes {
                    digests_of(fleet, dependency, filter, now, &mut mine).await;
                }
                Arc::new(bucket_digests(mine))
            })
            .await;
        Arc::clone(digests)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.by_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Filters cached now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// What a filter selects, hashed (the dependencies as `scopes`: sorted,
/// deduplicated; the tenants sorted).
fn filter_key(filter: &WatchFilter, scopes: &[Option<&str>]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut tenants: Vec<&str> = filter.tenants.iter().map(String::as_str).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let dependencies: Vec<&str> = scopes.iter().flatten().copied().collect();
    let mut h = Sha256::new();
    // Every string and list length-prefixed: no two filters hash alike.
    let mut field = |s: &str| {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    };
    field(&filter.catalog);
    field(&filter.tenant);
    for list in [dependencies, tenants] {
        field(&list.len().to_string());
        for x in list {
            field(x);
        }
    }
    h.finalize().into()
}

/// Holds visited per read lock while a resume's digests are computed.
const DIGEST_CHUNK: usize = 1024;

/// Appends the digests of the matching holds in force of `dependency` (or
/// of all), a chunk per read lock, yielding between chunks.
async fn digests_of(
    fleet: &Fleet,
    dependency: Option<&str>,
    filter: &WatchFilter,
    now: UnixMillis,
    into: &mut Vec<u64>,
) {
    let mut after = String::new();
    while let Some(last) = fleet.mirror().visit(dependency, &after, DIGEST_CHUNK, now, |h| {
        if filter.matches(h) {
            into.push(h.resume_digest(now));
        }
    }) {
        after = last;
        tokio::task::yield_now().await;
    }
}

/// Sends the matching holds in force of `dependency` (or of all) whose
/// bucket is in `send`, page by page.
async fn pages<W: WatchWire>(
    fleet: &Fleet,
    dependency: Option<&str>,
    filter: &WatchFilter,
    operator: bool,
    send: &[bool; RESUME_BUCKETS],
    out: &Out<W>,
) -> bool {
    let all = send.iter().all(|s| *s);
    let mut after = String::new();
    loop {
        let now = UnixMillis::now();
        let keep = |h: &Hold| filter.matches(h) && (all || send[bucket(h.resume_digest(now))]);
        let page = match dependency {
            Some(d) => fleet.mirror().page_of(d, &after, SNAPSHOT_PAGE, now, keep),
            None => fleet.mirror().page(&after, SNAPSHOT_PAGE, now, keep),
        };
        let last = page.len() < SNAPSHOT_PAGE;
        if let Some(h) = page.last() {
            after.clone_from(&h.id);
        }
        for h in page {
            let kind = if h.probing(now) {
                HoldEventKind::Probing
            } else {
                HoldEventKind::Placed
            };
            if !out.send(kind, Some(filter.show(fleet, h, operator))).await {
                return false;
            }
        }
        if last {
            return true;
        }
    }
}
