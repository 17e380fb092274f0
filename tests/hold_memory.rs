//! What one hold costs in memory: the replica's mirror with every index,
//! counted by a global allocator that tracks the bytes live. Issue 22's
//! budget is 1 KiB per hold at typical lengths (ids and names up to 32
//! bytes), so 100 000 holds (the default --max-holds) fit in about 100 MiB.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use retryd::core::UnixMillis;
use retryd::core::hold::{HoldKind, HoldPlan, HoldScope};
use retryd::fleet::Mirror;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same pointer and layout, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes live per hold after placing `n` holds whose names are `len` bytes.
fn per_hold(n: usize, len: usize, reason: &str) -> f64 {
    let now = UnixMillis::now();
    let before = LIVE.load(Ordering::Relaxed);
    let mirror = Mirror::new(n);
    let pad = |prefix: &str, i: usize| {
        let s = format!("{prefix}{i}");
        format!("{s:x<len$}")
    };
    for i in 0..n {
        let (dependency, tenant) = (pad("portal-", i % 1000), pad("tenant-", i));
        let plan = HoldPlan {
            scope: HoldScope::Tenant,
            kind: HoldKind::QuotaStop,
            catalog: "frontspin",
            dependency: &dependency,
            subject: &tenant,
            until: now.plus_ms(3_600_000),
            probe_every_ms: 0,
            probe_window_ms: 30_000,
            code: "RATE_LIMITED",
            rule: "frontspin/RATE_LIMITED/write",
            reason,
        };
        mirror.place(&plan, now, || format!("{:016x}", rand_id(i)));
    }
    assert_eq!(mirror.len(), n);
    let after = LIVE.load(Ordering::Relaxed);
    let per = (after - before) as f64 / n as f64;
    drop(mirror);
    per
}

fn rand_id(i: usize) -> u64 {
    // Spread like random ids (a multiplicative hash), deterministic.
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[test]
fn a_hold_costs_at_most_1_kib_at_typical_lengths() {
    // FrontSpin's quota stop reason, as the catalog gives it (its longest).
    let reason = "The allowance resets. Stop calling this tenant now; write down every pending record and re-drive them after the reset. Do not ask whether the allowance is back: that costs a request from it.";
    let typical = per_hold(100_000, 32, reason);
    println!("per hold, names of 32 bytes: {typical:.0} bytes");
    assert!(typical <= 1024.0, "{typical:.0} bytes per hold");
    // The worst case, names at their maximum lengths, is stated, not bounded here.
    let long = per_hold(2_000, 256, reason);
    println!("per hold, names of 256 bytes: {long:.0} bytes");
}
