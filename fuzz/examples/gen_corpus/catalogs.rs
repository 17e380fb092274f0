//! Small catalogs (1–2 KB) for the `policy_file` seeds. Each carries a hold
//! rule, a `[[budgets]]` table and a `[[tests]]` table, so every seed (and
//! most of its mutants) reaches the hold, budget and test parts of the
//! catalog format; together they use every key the format has. The embedded
//! catalogs (6–18 KB) made each input several times dearer to compile and
//! their mutants rarely kept a hold or a budget intact.

/// `(seed name, TOML text)`; each compiles and its tests pass (checked by
/// `main` before writing).
pub const SMALL: &[(&str, &str)] = &[
    ("pause", PAUSE),
    ("quota-daily", QUOTA_DAILY),
    ("quarantine-rolling", QUARANTINE_ROLLING),
    ("circuit", CIRCUIT),
    ("verify", VERIFY),
];

/// A dependency pause (with and without Retry-After), a retried write, a
/// dependency budget.
const PAUSE: &str = r#"name = "pause"
description = "A 503 pauses the dependency"
locales = ["en", "ru"]
max_attempts = 3

[backoff]
base_ms = 200
multiplier = 2.0
cap_ms = 5000

[operations]
read = ["get", "list"]
write = ["create", "delete"]

[[codes]]
code = "503"
aliases = ["UNAVAILABLE"]
target_reached = "yes"
delay = "retry_after"
condition.en = "Unavailable."
condition.ru = "Недоступен."
read = { verdict = "retry_with_limit", hold = { scope = "dependency", kind = "pause", hold_ms = 30000 } }
write = { verdict = "retry_with_limit", side_effect = "none" }
write_with_retry_after = { verdict = "retry_with_limit", side_effect = "none", hold = { scope = "dependency", kind = "pause" }, reason = { en = "Deferred.", ru = "Отложено." } }

[[codes]]
code = "409"
target_reached = "yes"
condition.en = "Conflict."
condition.ru = "Конфликт."
read = { verdict = "fix_before_retry", required_transition = "conflict_resolved" }
write = { verdict = "fix_before_retry", side_effect = "none", required_transition = "conflict_resolved" }
retried_write = { verdict = "state_verification_required", side_effect = "possible", reconciliation_action = "read_back_by_business_key" }

[unknown]
target_reached = "unknown"
condition.en = "Unknown code."
condition.ru = "Неизвестный код."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
condition.ru = "Нет конверта."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[[budgets]]
scope = "dependency"
window = "10s"
retry_percent = 20
min_retries_per_sec = 10

[[tests]]
name = "503 read pauses the dependency"
code = "503"
operation = "read"
dependency = "api"
retry_after = "5"
expect = { verdict = "retry_with_limit", hold = "pause/dependency" }

[[tests]]
name = "409 retried write is read back"
code = "409"
operation = "write"
attempt = 2
expect = { verdict = "state_verification_required", reconciliation_action = "read_back_by_business_key" }
"#;

/// A tenant quota stop resetting daily in a time zone, a fixed schedule,
/// a tenant allowance budget.
const QUOTA_DAILY: &str = r#"name = "quota-daily"
description = "A daily tenant quota"
locales = ["en"]
max_attempts = 4
schedule_ms = [900000, 3600000, 14400000]
exhausted_terminal_state = "FAILED_PERMANENT"

[quota]
resets_at = "03:00"
time_zone = "Europe/Moscow"

[backoff]
base_ms = 900000
multiplier = 4.0
cap_ms = 14400000

[operations]
read = ["fetch"]
write = ["sync", "push"]

[[codes]]
code = "RATE_LIMITED"
target_reached = "yes"
delay = "schedule"
condition.en = "Quota spent."
read = { verdict = "retry_with_limit", scope = "tenant", hold = { scope = "tenant", kind = "quota_stop", probe_timeout_ms = 60000 } }
write = { verdict = "retry_with_limit", side_effect = "none", scope = "tenant", reconciliation_action = "redrive_pending_after_quota_reset", hold = { scope = "tenant", kind = "quota_stop" } }

[[codes]]
code = "TIMEOUT"
target_reached = "unknown"
delay = "schedule"
condition.en = "No answer in time."
read = { verdict = "retry_with_limit" }
write = { verdict = "retry_with_limit", side_effect = "possible" }

[unknown]
target_reached = "unknown"
condition.en = "Unknown code."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[[budgets]]
scope = "tenant"
window = "1d"
retry_percent = 20
requests = 500

[[tests]]
name = "quota stop until the next reset"
code = "RATE_LIMITED"
operation = "write"
tenant = "acme"
expect = { hold = "quota_stop/tenant", hold_until = "2026-01-16T00:00:00Z" }

[[tests]]
name = "TIMEOUT attempt 4: FAILED_PERMANENT"
code = "TIMEOUT"
operation = "write"
attempt = 4
expect = { verdict = "do_not_retry", terminal_state = "FAILED_PERMANENT" }
"#;

/// A method quarantine with no probe at its end, a rolling quota, a strict
/// Retry-After, two budgets, a code's own cap on delays.
const QUARANTINE_ROLLING: &str = r#"name = "quarantine-rolling"
description = "A method quarantine and a rolling quota"
max_attempts = 2
max_delay_ms = 7200000

[quota]
period_ms = 3600000

[backoff]
base_ms = 50
multiplier = 1.5
cap_ms = 800

[operations]
read = ["read"]
write = ["write"]

[[codes]]
code = "POISON"
target_reached = "yes"
delay = "strict_retry_after"
max_delay_ms = 600000
condition.en = "This method fails for every caller."
read = { verdict = "retry_with_limit", hold = { scope = "method", kind = "quarantine", hold_ms = 120000, probe_on_end = false } }
write = { verdict = "retry_with_limit", side_effect = "none", hold = { scope = "method", kind = "quarantine", hold_ms = 120000, probe_timeout_ms = 5000 } }

[[codes]]
code = "SPENT"
target_reached = "yes"
condition.en = "The hourly allowance is spent."
read = { verdict = "retry_with_limit", scope = "tenant", hold = { scope = "tenant", kind = "quota_stop" } }
write = { verdict = "retry_with_limit", side_effect = "none", scope = "tenant", hold = { scope = "tenant", kind = "quota_stop", probe_on_end = true } }

[unknown]
target_reached = "unknown"
condition.en = "Unknown code."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[[budgets]]
scope = "dependency"
window = "15m"
retry_percent = 10

[[budgets]]
scope = "tenant"
window = "1h"
retry_percent = 5
min_retries_per_sec = 1

[[tests]]
name = "POISON quarantines the method"
code = "POISON"
operation = "read"
method = "orders.read"
dependency = "orders"
expect = { hold = "quarantine/method", after_ms = 120000 }
"#;

/// An open circuit probed every 30 s, a reason of its own for reads, a hold
/// already in force in a test.
const CIRCUIT: &str = r#"name = "circuit"
description = "A circuit breaker opened for the fleet"
locales = ["en", "ru"]
max_attempts = 5

[backoff]
base_ms = 1000
multiplier = 2.0
cap_ms = 60000

[operations]
read = ["get"]
write = ["add"]

[[codes]]
code = "LOOP_DETECTED"
target_reached = "no"
condition.en = "Stopped by the breaker."
condition.ru = "Остановлен предохранителем."
read.verdict = "fix_before_retry"
read.required_transition = "cause_resolved"
read.reason.en = "Fix the cause."
read.reason.ru = "Устраните причину."
read.hold = { scope = "dependency", kind = "circuit_open", probe_every_ms = 30000 }
write = { verdict = "fix_before_retry", required_transition = "cause_resolved", hold = { scope = "dependency", kind = "circuit_open" } }

[[codes]]
code = "QUEUE_TIMEOUT"
target_reached = "unknown"
condition.en = "No answer."
condition.ru = "Нет ответа."
read = { verdict = "retry_with_limit" }
write = { verdict = "retry_with_limit", side_effect = "unknown", acknowledge_less_conservative = true }

[unknown]
target_reached = "unknown"
condition.en = "Unknown code."
condition.ru = "Неизвестный код."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
condition.ru = "Нет конверта."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[[budgets]]
scope = "dependency"
window = "10s"
retry_percent = 20
min_retries_per_sec = 10

[[tests]]
name = "a paused dependency holds a read"
code = "QUEUE_TIMEOUT"
operation = "read"
dependency = "portal"
now = "2026-01-15T12:00:00Z"
holds = [{ kind = "pause", scope = "dependency", until = "2026-01-15T12:10:00Z" }]
expect = { verdict = "retry_with_limit", strategy = "hold", after_ms = 600000, hold = "pause/dependency" }

[[tests]]
name = "the circuit opens"
code = "LOOP_DETECTED"
operation = "read"
dependency = "portal"
expect = { verdict = "fix_before_retry", hold = "circuit_open/dependency" }
"#;

/// A result that must be reconciled first, an idempotency key, a read-back,
/// a tenant quarantine.
const VERIFY: &str = r#"name = "verify"
description = "Results whose state must be verified"
max_attempts = 3

[backoff]
base_ms = 500
multiplier = 2.0
cap_ms = 8000

[operations]
read = ["status"]
write = ["charge"]

[[codes]]
code = "RESULT_STATE_UNKNOWN"
aliases = ["ASC-6005"]
target_reached = "unknown"
condition.en = "The outcome is unknown."
read = { verdict = "state_verification_required", reconcile_before_retry = true }
write = { verdict = "state_verification_required", reconcile_before_retry = true, reconciliation_action = "read_back_by_business_key" }

[[codes]]
code = "FRAUD_SUSPECTED"
target_reached = "yes"
condition.en = "The tenant is suspended for review."
read = { verdict = "do_not_retry", scope = "tenant", hold = { scope = "tenant", kind = "quarantine", hold_ms = 3600000 } }
write = { verdict = "do_not_retry", side_effect = "none", scope = "tenant", hold = { scope = "tenant", kind = "quarantine", hold_ms = 3600000 } }

[unknown]
target_reached = "unknown"
condition.en = "Unknown code."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }

[[budgets]]
scope = "dependency"
window = "30s"
retry_percent = 50

[[tests]]
name = "an absent effect with an enforced key may retry"
code = "ASC-6005"
operation = "write"
method = "payments.charge"
idempotency_key = "deal-42"
idempotency_key_enforced = true
read_back = "effect_absent"
expect = { rule = "verify/RESULT_STATE_UNKNOWN/write" }
"#;
