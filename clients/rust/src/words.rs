//! One vocabulary: verdicts and strategies print in the words retryd's CLI,
//! HTTP API, metrics and logs use (`retry_with_limit`), whatever the
//! proto's spelling (`VERDICT_RETRY_WITH_LIMIT`).

use std::fmt;

use crate::pb;

macro_rules! words {
    ($(#[$doc:meta])* $name:ident, $pb:ty { $($(#[$vdoc:meta])* $v:ident = $pbv:ident => $w:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vdoc])* $v,)+
            /// A value this library does not know yet (a newer retryd).
            Unknown,
        }
        impl $name {
            /// The word (`retry_with_limit`), as the CLI and HTTP API spell it.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $w,)+ $name::Unknown => "unknown" }
            }
            /// From the proto's number.
            pub fn from_pb(v: i32) -> Self {
                match <$pb>::try_from(v) { $(Ok(<$pb>::$pbv) => $name::$v,)+ _ => $name::Unknown }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $($w => Ok($name::$v),)+ _ => Err(format!("unknown {}: {s:?}", stringify!($name))) }
            }
        }
    };
}

words!(
    /// May the caller retry, and on what terms.
    Verdict, pb::Verdict {
        /// Wait, then retry within the attempt limit.
        RetryWithLimit = RetryWithLimit => "retry_with_limit",
        /// Read the state back first; retry only if the effect is proven absent.
        StateVerificationRequired = StateVerificationRequired => "state_verification_required",
        /// Fix the cause before any new attempt.
        FixBeforeRetry = FixBeforeRetry => "fix_before_retry",
        /// Do not retry.
        DoNotRetry = DoNotRetry => "do_not_retry",
        /// The write's effect is there: do not resend.
        AlreadyApplied = AlreadyApplied => "already_applied",
    }
);

words!(
    /// How the decision's wait was computed.
    Strategy, pb::Strategy {
        /// No automatic retry, so no delay.
        None = None => "none",
        /// Bounded exponential backoff with jitter.
        ExponentialBackoff = ExponentialBackoff => "exponential_backoff",
        /// The dependency's Retry-After (or pushback).
        RetryAfter = RetryAfter => "retry_after",
        /// A catalog's schedule.
        Schedule = Schedule => "schedule",
        /// A fleet hold.
        Hold = Hold => "hold",
        /// The retry budget.
        Budget = Budget => "budget",
    }
);

words!(
    /// Why calls are held.
    HoldKind, pb::HoldKind {
        /// A Retry-After that applies to everyone.
        Pause = Pause => "pause",
        /// An allowance is exhausted until it resets.
        QuotaStop = QuotaStop => "quota_stop",
        /// Calls wait out a quarantine.
        Quarantine = Quarantine => "quarantine",
        /// An open circuit: one probe per slot.
        CircuitOpen = CircuitOpen => "circuit_open",
    }
);

words!(
    /// What a hold covers.
    HoldScope, pb::Scope {
        /// Every call of one tenant to the dependency.
        Tenant = Tenant => "tenant",
        /// Every call to the dependency.
        Dependency = Dependency => "dependency",
        /// Every call of one method.
        Method = Method => "method",
    }
);

impl fmt::Display for crate::Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            crate::Operation::Unspecified => "unspecified",
            crate::Operation::Read => "read",
            crate::Operation::Write => "write",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_clis_and_https() {
        let got = format!(
            "{} {} {} {} {} {} {} {} {} {}",
            Verdict::from_pb(pb::Verdict::RetryWithLimit as i32),
            Verdict::StateVerificationRequired,
            Verdict::FixBeforeRetry,
            Verdict::DoNotRetry,
            Verdict::AlreadyApplied,
            Strategy::from_pb(pb::Strategy::ExponentialBackoff as i32),
            HoldKind::from_pb(pb::HoldKind::QuotaStop as i32),
            HoldScope::from_pb(pb::Scope::Tenant as i32),
            crate::Operation::Write,
            Verdict::from_pb(99),
        );
        assert_eq!(
            got,
            "retry_with_limit state_verification_required fix_before_retry do_not_retry already_applied \
             exponential_backoff quota_stop tenant write unknown"
        );
        assert_eq!("do_not_retry".parse::<Verdict>(), Ok(Verdict::DoNotRetry));
        assert!("DO_NOT_RETRY".parse::<Verdict>().is_err());
    }
}
