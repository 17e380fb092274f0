//! Reasons for outcomes the engine decides itself (limits, read-back,
//! idempotency keys, upstream advice), in every locale.

use super::model::Locale;

/// An engine outcome with a fixed reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A read-back found the write's effect.
    EffectPresent,
    /// A read-back proved the effect absent.
    EffectAbsent,
    /// The outcome is unknown and cannot be verified.
    CannotVerify,
    /// The dependency deduplicates by the idempotency key.
    ResendWithKey,
    /// The attempt limit is reached.
    AttemptsExhausted,
    /// The catalog's schedule is exhausted.
    ScheduleExhausted,
    /// The next attempt would start after the deadline.
    DeadlineWouldPass,
    /// The dependency's own contract says not retryable.
    UpstreamNotRetryable,
    /// The dependency's own contract says a replay is unsafe.
    UpstreamUnsafe,
    /// The dependency asks for a wait longer than the catalog's cap.
    AdviceBeyondCap,
}

impl Outcome {
    /// The reason in `locale`.
    pub fn reason(self, locale: Locale) -> &'static str {
        let [en, ru] = match self {
            Outcome::EffectPresent => [
                "A read-back found the write's effect: treat the original write as successful and do not retry it.",
                "Проверка нашла эффект записи: считайте исходную запись успешной и не повторяйте её.",
            ],
            Outcome::EffectAbsent => [
                "A read-back proved the effect absent: a new attempt is safe within the attempt limit.",
                "Проверка доказала, что эффекта нет: новая попытка безопасна в пределах лимита попыток.",
            ],
            Outcome::CannotVerify => [
                "The write's outcome is unknown and cannot be verified reliably: do not retry automatically; resolve the case manually.",
                "Исход записи неизвестен и надёжно проверить его нельзя: не повторяйте автоматически, разберите случай вручную.",
            ],
            Outcome::ResendWithKey => [
                "The dependency deduplicates by the idempotency key: resend with the same key within the attempt limit; never with a new key.",
                "Зависимость устраняет дубли по ключу идемпотентности: повторите с тем же ключом в пределах лимита попыток, но не с новым ключом.",
            ],
            Outcome::AttemptsExhausted => [
                "The attempt limit is reached: stop, and pass the time and X-Request-Id to support.",
                "Лимит попыток исчерпан: остановитесь и передайте в поддержку время и X-Request-Id.",
            ],
            Outcome::ScheduleExhausted => [
                "The retry schedule is exhausted: the record becomes Failed_Permanent and waits for a person.",
                "Расписание повторов исчерпано: запись переходит в Failed_Permanent и ждёт человека.",
            ],
            Outcome::DeadlineWouldPass => [
                "The next attempt would start after the deadline: stop retrying.",
                "Следующая попытка начнётся после дедлайна: прекратите повторы.",
            ],
            Outcome::UpstreamNotRetryable => [
                "The dependency's own retry contract says another attempt will not succeed: do not retry automatically.",
                "Собственный контракт повтора зависимости говорит, что новая попытка не удастся: не повторяйте автоматически.",
            ],
            Outcome::UpstreamUnsafe => [
                "The dependency's own retry contract says a replay is not safe: read the state back before any retry.",
                "Собственный контракт повтора зависимости говорит, что повтор небезопасен: сначала перечитайте состояние.",
            ],
            Outcome::AdviceBeyondCap => [
                "The dependency asks for a wait longer than the catalog's max_delay_ms: do not retry automatically (no fleet hold is placed from it); re-drive the call later.",
                "Зависимость просит ждать дольше, чем max_delay_ms каталога: не повторяйте автоматически (общая пауза по нему не ставится); отправьте вызов повторно позже.",
            ],
        };
        match locale {
            Locale::En => en,
            Locale::Ru => ru,
        }
    }
}

/// Machine-readable reconciliation actions the engine itself assigns.
pub mod action {
    /// Locate the effect by a stable business key before any retry.
    pub const READ_BACK: &str = "read_back_by_business_key";
    /// Resend with the very same idempotency key.
    pub const RESEND_WITH_KEY: &str = "resend_with_same_idempotency_key";
    /// Stop; hand the time and request id to support.
    pub const ESCALATE: &str = "escalate_with_request_id";
    /// A person resolves the case.
    pub const MANUAL_REVIEW: &str = "manual_review";
}
