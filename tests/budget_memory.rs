//! Memory per retry-budget scope, measured: every allocation of this test
//! binary is counted, and a table of 20 000 scopes at typical name lengths
//! (catalog `vibecode`, a portal host name, a tenant id; dependency and
//! tenant scopes, both with unflushed counts) must hold under 1 KiB each.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use retryd::core::UnixMillis;
use retryd::core::budget::{BudgetRule, BudgetScope};
use retryd::fleet::budget::{Budgets, ScopeOf};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only the
// live byte count is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn a_budget_scope_costs_under_one_kib() {
    const N: usize = 10_000;
    let rule = |scope| BudgetRule {
        scope,
        window_ms: 10_000,
        retry_percent: 20,
        min_retries_per_sec: 10,
        requests: None,
    };
    let rules = [rule(BudgetScope::Dependency), rule(BudgetScope::Tenant)];
    let names: Vec<(String, String)> = (0..N)
        .map(|i| (format!("portal-{i:05}.bitrix24.example"), format!("tenant-{i:08}")))
        .collect();
    let now = UnixMillis::now();
    let hash = |t: &str| format!("h:{:016x}", t.len() * 7919);
    let before = LIVE.load(Ordering::Relaxed);
    let b = Budgets::new(4 * N, true, 100);
    for (dependency, tenant) in &names {
        let scope = ScopeOf {
            catalog: "vibecode",
            dependency,
            tenant,
        };
        b.deposit(&rules, scope, 3, now, &hash);
        b.withdraw(&rules, scope, now, &hash);
    }
    let after = LIVE.load(Ordering::Relaxed);
    assert_eq!(b.len(), 2 * N);
    let per_scope = (after - before) as f64 / (2 * N) as f64;
    println!("{per_scope:.0} bytes per budget scope ({} scopes)", 2 * N);
    assert!(per_scope <= 1_024.0, "{per_scope:.0} bytes per scope");
}
