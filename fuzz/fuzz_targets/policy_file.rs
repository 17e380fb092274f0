//! bytes → UTF-8 (lossy) → `compile_catalog("fuzz.toml", text)` → if it
//! compiles, a Policy of that catalog (`Policy::of_catalog`) decides a few
//! failures for every code, operation and attempt shape, and the file's own
//! `[[tests]]` run as `retryd policy test` runs them. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retryd::core::catalog::compile_catalog;
use retryd::core::{
    Failure, Operation, Policy, ReadBack, RetryContract, SideEffectState, Strategy, UnixMillis, decide,
};
use retryd::safety::test::{has_tests_section, run_file};

const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

fn decide_all(policy: &Policy, catalog: &str, codes: &[&str]) {
    let upstream = RetryContract {
        retryable: true,
        safe: false,
        after_ms: 1_500,
        max_after_ms: 3_000,
        strategy: Strategy::RetryAfter,
        attempt: 2,
        max_attempts: 3,
        deadline: Some(NOW.plus_ms(60_000)),
        idempotency_key: Some("k"),
        side_effect_state: SideEffectState::Unknown,
        reconciliation_action: Some("read_back_by_business_key"),
    };
    for code in codes {
        for (i, operation) in [Operation::Unspecified, Operation::Read, Operation::Write]
            .into_iter()
            .enumerate()
        {
            for attempt in [0, 1, 2, 7, u32::MAX] {
                let f = Failure {
                    catalog,
                    code,
                    operation,
                    method: ["", "crm.deal.add", "crm.deal.get"][i],
                    attempt,
                    max_attempts: if attempt == 2 { 3 } else { 0 },
                    retry_after: if attempt == 1 {
                        "5"
                    } else if attempt == 7 {
                        "Fri, 31 Dec 1999 23:59:59 GMT"
                    } else {
                        ""
                    },
                    retry_after_ms: (attempt == u32::MAX).then_some(u64::MAX),
                    deadline: (attempt == 2).then_some(NOW.plus_ms(1_000)),
                    idempotency_key: if attempt == 1 { "key-1" } else { "" },
                    idempotency_key_enforced: attempt == 1,
                    read_back: [ReadBack::NotDone, ReadBack::EffectAbsent, ReadBack::Inconclusive][i],
                    cannot_verify_effect: attempt == 7,
                    upstream: (attempt == 2).then_some(upstream),
                    locale: ["", "ru", "en-US"][i],
                    ..Failure::default()
                };
                let d = decide(policy, &f, NOW).expect("the catalog just loaded is known");
                assert!(d.retry.after_ms <= d.retry.max_after_ms, "jitter window: {:?}", d.retry);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(catalog) = compile_catalog("fuzz.toml", &text) else {
        return;
    };
    let name = catalog.name.to_string();
    // The policy `from_sources` builds for one file, without compiling it again.
    let policy = Policy::of_catalog(&text, catalog);
    let catalog = policy.default_catalog();
    let mut codes: Vec<&str> = catalog.codes().iter().take(8).map(|c| &*c.code).collect();
    codes.extend(
        catalog
            .codes()
            .iter()
            .flat_map(|c| c.aliases.iter())
            .take(4)
            .map(|a| &**a),
    );
    codes.extend(["", "NO_SUCH_CODE_IN_ANY_CATALOG"]);
    decide_all(&policy, &name, &codes);
    // The default catalog is chosen for a failure that names none.
    decide_all(&policy, "", &codes[codes.len() - 2..]);
    if has_tests_section(&text) {
        // Pass or fail, the report is the answer; only a panic is a finding.
        let _ = run_file("fuzz.toml", &text, &policy, Some(&name));
    }
});
