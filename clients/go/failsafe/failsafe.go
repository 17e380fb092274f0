// Package failsafe puts retryd's decisions inside a failsafe-go retry policy.
//
//	adv, err := failsafe.NewAdvisor[string](client, retryd.Call[any]{Operation: retryd.Read, Method: "crm.deal.get"})
//	deal, err := adv.Get(ctx, 5, func(ctx context.Context) (string, error) { return b24.GetDeal(ctx, id) })
//
// Or with a policy of one's own composition: adv.Policy(5) is a
// retrypolicy.RetryPolicy whose HandleIf retries what retryd said to retry,
// after the wait its decision gave; adv.Wrap(fn) is the function to run
// under it. Each attempt asks Admit (a fleet hold ends the run with
// *retryd.RefusedError, RefusedHeld) and, when the call fails, Classify.
// Read-back cannot be expressed in failsafe-go, so an Advisor serves reads
// and writes whose idempotency key the dependency enforces; a write of
// unknown outcome is refused by NewAdvisor, never retried blindly.
package failsafe

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	fs "github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	retryd "github.com/retryd/retryd/clients/go"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

// Advice is what a wrapped attempt returns when the call failed: retryd's
// verdict, whether and after how long to retry; Unwrap gives the dependency's error.
type Advice struct {
	Retry bool
	Wait  time.Duration
	// Verdict: retryd's (VerdictUnknown with Fallback).
	Verdict retryd.Verdict
	// Fallback: retryd was unreachable; the client's conservative fallback advised.
	Fallback bool
	Err      error
}

func (a *Advice) Error() string {
	if a.Fallback {
		return "retryd: client_fallback: " + a.Err.Error()
	}
	return "retryd: " + a.Verdict.String() + ": " + a.Err.Error()
}
func (a *Advice) Unwrap() error { return a.Err }

// Advisor asks retryd about one kind of call.
type Advisor[R any] struct {
	c    *retryd.Client
	call retryd.Call[any]
}

// ErrUnknownOutcomeWrite: a write without an enforced idempotency key cannot be retried blindly.
var ErrUnknownOutcomeWrite = errors.New("retryd/failsafe: a write of unknown outcome cannot be retried blindly " +
	"and failsafe-go has no read-back: give an idempotency key the dependency enforces, or use retryd.Do with ReadBack")

// NewAdvisor refuses a write without an enforced idempotency key (ErrUnknownOutcomeWrite).
func NewAdvisor[R any](c *retryd.Client, call retryd.Call[any]) (*Advisor[R], error) {
	if call.Operation != retryd.Read && !(call.IdempotencyKey != "" && call.IdempotencyKeyEnforced) {
		return nil, ErrUnknownOutcomeWrite
	}
	return &Advisor[R]{c: c, call: call}, nil
}

// Policy retries what retryd said to retry, after its decision's wait, at most maxAttempts times.
func (a *Advisor[R]) Policy(maxAttempts int) retrypolicy.RetryPolicy[R] {
	return retrypolicy.NewBuilder[R]().
		HandleIf(func(_ R, err error) bool {
			var adv *Advice
			return errors.As(err, &adv) && adv.Retry
		}).
		WithDelayFunc(func(exec fs.ExecutionAttempt[R]) time.Duration {
			var adv *Advice
			if errors.As(exec.LastError(), &adv) {
				return adv.Wait
			}
			return 0
		}).
		WithMaxAttempts(maxAttempts).
		ReturnLastFailure().
		Build()
}

// Get runs fn under Policy(maxAttempts); a failure ends as the dependency's
// own error (or a *retryd.RejectedError / *retryd.RefusedError).
func (a *Advisor[R]) Get(ctx context.Context, maxAttempts int, fn func(context.Context) (R, error)) (R, error) {
	r, err := fs.With[R](a.Policy(maxAttempts)).WithContext(ctx).GetWithExecution(a.Wrap(fn))
	var adv *Advice
	if errors.As(err, &adv) {
		return r, adv.Err
	}
	return r, err
}

// Wrap is fn as one failsafe-go attempt: admission (the mirror or Admit), the call, and Classify on failure.
func (a *Advisor[R]) Wrap(fn func(context.Context) (R, error)) func(fs.Execution[R]) (R, error) {
	return func(exec fs.Execution[R]) (R, error) {
		var zero R
		ctx, s, attempt := exec.Context(), a.c.Settings(), exec.Attempts()
		// The client's admission: its holds mirror (no RPC) or Admit; a hold ends the run.
		probe, err := a.c.Admit(ctx, a.call.Method, a.call.Operation, attempt)
		if err != nil {
			return zero, err
		}
		v, callErr := fn(ctx)
		if callErr == nil {
			a.c.ReportProbe(ctx, probe)
			return v, nil
		}
		mapper := a.call.ToFailure
		if mapper == nil {
			mapper = retryd.DefaultMapper
		}
		f := mapper(callErr)
		if f == nil {
			return zero, callErr
		}
		failure := a.c.FailureProto(f, a.call, attempt)
		failure.ProbeToken = probe // a failed probe re-places its hold
		// The client's Classify: its RPC timeout, and not sent while retryd advises waiting (ErrBusy).
		cr, err := a.c.Classify(ctx, &pb.ClassifyRequest{Failure: failure, Locale: s.Locale})
		if err != nil {
			if rej := retryd.AsRejection(err, callErr); rej != nil {
				return zero, rej
			}
			// The client's conservative fallback: capped exponential backoff, its attempt limit.
			top := min(s.Fallback.Cap, s.Fallback.Base<<min(attempt-1, 20))
			return zero, &Advice{Retry: attempt < s.Fallback.MaxAttempts, Wait: time.Duration(rand.Int64N(int64(top) + 1)),
				Fallback: true, Err: callErr}
		}
		d := cr.GetDecision()
		lo, hi := d.GetRetry().GetAfterMs(), d.GetRetry().GetMaxAfterMs()
		hi = max(hi, lo)
		wait := time.Duration(lo)*time.Millisecond + time.Duration(rand.Int64N(int64(hi-lo)*int64(time.Millisecond)+1))
		return zero, &Advice{Retry: d.GetVerdict() == pb.Verdict_VERDICT_RETRY_WITH_LIMIT, Wait: wait,
			Verdict: retryd.VerdictOf(d.GetVerdict()), Err: callErr}
	}
}
