package retryd

import (
	"fmt"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

// One vocabulary: verdicts, strategies, hold kinds and scopes print in the
// words retryd's CLI, HTTP API, metrics and logs use ("retry_with_limit"),
// whatever the proto's spelling (VERDICT_RETRY_WITH_LIMIT).

// Verdict: may the caller retry, and on what terms.
type Verdict int

// The verdicts (VerdictUnknown: one this library does not know yet).
const (
	VerdictUnknown Verdict = iota
	RetryWithLimit
	StateVerificationRequired
	FixBeforeRetry
	DoNotRetry
	AlreadyApplied
)

var verdictWords = [...]string{"unknown", "retry_with_limit", "state_verification_required", "fix_before_retry",
	"do_not_retry", "already_applied"}

func (v Verdict) String() string { return word(verdictWords[:], int(v), "Verdict") }

// MarshalText writes the word (JSON, slog).
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// VerdictOf is the proto verdict's Verdict (for adapters).
func VerdictOf(v pb.Verdict) Verdict {
	switch v {
	case pb.Verdict_VERDICT_RETRY_WITH_LIMIT:
		return RetryWithLimit
	case pb.Verdict_VERDICT_STATE_VERIFICATION_REQUIRED:
		return StateVerificationRequired
	case pb.Verdict_VERDICT_FIX_BEFORE_RETRY:
		return FixBeforeRetry
	case pb.Verdict_VERDICT_DO_NOT_RETRY:
		return DoNotRetry
	case pb.Verdict_VERDICT_ALREADY_APPLIED:
		return AlreadyApplied
	}
	return VerdictUnknown
}

// Strategy: how the decision's wait was computed.
type Strategy int

// The strategies.
const (
	StrategyUnknown Strategy = iota
	StrategyNone
	StrategyExponentialBackoff
	StrategyRetryAfter
	StrategySchedule
	StrategyHold
	StrategyBudget
)

var strategyWords = [...]string{"unknown", "none", "exponential_backoff", "retry_after", "schedule", "hold", "budget"}

func (s Strategy) String() string { return word(strategyWords[:], int(s), "Strategy") }

// MarshalText writes the word.
func (s Strategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// The proto numbers them in the same order (STRATEGY_NONE = 1 …).
func strategyOf(s pb.Strategy) Strategy {
	if s < 0 || int(s) >= len(strategyWords) {
		return StrategyUnknown
	}
	return Strategy(s)
}

// HoldKind: why calls are held.
type HoldKind int

// The hold kinds.
const (
	HoldKindUnknown HoldKind = iota
	Pause
	QuotaStop
	Quarantine
	CircuitOpen
)

var holdKindWords = [...]string{"unknown", "pause", "quota_stop", "quarantine", "circuit_open"}

func (k HoldKind) String() string { return word(holdKindWords[:], int(k), "HoldKind") }

// MarshalText writes the word.
func (k HoldKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// HoldScope: what a hold covers.
type HoldScope int

// The scopes.
const (
	ScopeUnknown HoldScope = iota
	ScopeTenant
	ScopeDependency
	ScopeMethod
)

var scopeWords = [...]string{"unknown", "tenant", "dependency", "method"}

func (s HoldScope) String() string { return word(scopeWords[:], int(s), "HoldScope") }

// MarshalText writes the word.
func (s HoldScope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func scopeOf(s pb.Scope) HoldScope {
	switch s {
	case pb.Scope_SCOPE_TENANT:
		return ScopeTenant
	case pb.Scope_SCOPE_DEPENDENCY:
		return ScopeDependency
	case pb.Scope_SCOPE_METHOD:
		return ScopeMethod
	}
	return ScopeUnknown
}

func holdKindOf(k pb.HoldKind) HoldKind {
	if k < 0 || int(k) >= len(holdKindWords) {
		return HoldKindUnknown
	}
	return HoldKind(k)
}

// String gives the operation's word ("read", "write", "unspecified").
func (o Operation) String() string {
	return word([]string{"unspecified", "read", "write"}, int(o), "Operation")
}

// MarshalText writes the word.
func (r RefusedReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func word(words []string, i int, typ string) string {
	if i < 0 || i >= len(words) {
		return fmt.Sprintf("%s(%d)", typ, i)
	}
	return words[i]
}
