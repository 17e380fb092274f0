// Command retryd-example asks a running retryd whether failed calls may be
// retried, prints the answers, and checks them against the contract: it
// exits 1 when an answer is not what the catalog promises, 2 on a usage or
// connection problem.
//
//	go run ./cmd/retryd-example [ADDR]   # default $RETRYD_ADDR, else localhost:50051
//
// TLS (optional, from the environment): RETRYD_TLS_CA (PEM of the CA that
// signed the server's certificate; setting it turns TLS on),
// RETRYD_TLS_CLIENT_CERT and RETRYD_TLS_CLIENT_KEY (PEM, for mutual TLS),
// RETRYD_TLS_SERVER_NAME (the name to verify instead of ADDR's host).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	retrydv1 "github.com/retryd/retryd/examples/go/retrydv1"
)

func main() {
	addr := os.Getenv("RETRYD_ADDR")
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if addr == "" {
		addr = "localhost:50051"
	}

	creds, err := transportCredentials()
	if err != nil {
		fmt.Fprintf(os.Stderr, "retryd-example: TLS: %v\n", err)
		os.Exit(2)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(os.Stderr, "retryd-example: %v\n", err)
		os.Exit(2)
	}
	defer conn.Close()
	client := retrydv1.NewRetryDecisionServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := &checker{}
	classify(ctx, client, c)
	classifyBatch(ctx, client, c)

	if len(c.failures) > 0 {
		fmt.Fprintf(os.Stderr, "go example: %d unexpected answer(s):\n", len(c.failures))
		for _, f := range c.failures {
			fmt.Fprintf(os.Stderr, "  - %s\n", f)
		}
		os.Exit(1)
	}
	fmt.Println("go example: all answers as expected")
}

// classify: a write timed out on Bitrix24; the platform stopped waiting, but
// the write may have gone through. Never resend it blindly.
func classify(ctx context.Context, client retrydv1.RetryDecisionServiceClient, c *checker) {
	resp, err := client.Classify(ctx, &retrydv1.ClassifyRequest{
		Failure: &retrydv1.Failure{
			Catalog:   "vibecode",
			Code:      "BITRIX_TIMEOUT",
			Operation: retrydv1.OperationKind_OPERATION_KIND_WRITE,
			Method:    "crm.deal.add",
			Attempt:   1,
			RequestId: "go-example-1",
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "retryd-example: Classify: %v\n", err)
		os.Exit(2)
	}
	d := resp.GetDecision()
	r := d.GetRetry()
	fmt.Printf("Classify vibecode/BITRIX_TIMEOUT write attempt 1:\n")
	fmt.Printf("  verdict=%s rule=%s\n", d.GetVerdict(), d.GetRule())
	fmt.Printf("  retry.retryable=%t retry.safe=%t retry.after_ms=%d retry.max_after_ms=%d strategy=%s\n",
		r.GetRetryable(), r.GetSafe(), r.GetAfterMs(), r.GetMaxAfterMs(), r.GetStrategy())
	fmt.Printf("  side_effect_state=%s reconciliation_action=%s\n", r.GetSideEffectState(), optional(r.ReconciliationAction))
	fmt.Printf("  reason: %s\n", d.GetReason())

	c.eq("Classify verdict", d.GetVerdict(), retrydv1.Verdict_VERDICT_STATE_VERIFICATION_REQUIRED)
	c.eq("Classify retry.safe", r.GetSafe(), false)
	c.eq("Classify retry.retryable", r.GetRetryable(), true)
	c.eq("Classify retry.side_effect_state", r.GetSideEffectState(), retrydv1.SideEffectState_SIDE_EFFECT_STATE_POSSIBLE)
	c.eq("Classify retry.reconciliation_action set", r.ReconciliationAction != nil, true)
	c.eq("Classify retry.reconciliation_action", r.GetReconciliationAction(), "read_back_by_business_key")
	c.eq("Classify retry.attempt", r.GetAttempt(), uint32(1))
	c.eq("Classify target_reached", d.GetTargetReached(), retrydv1.TargetReached_TARGET_REACHED_YES)
	c.eq("Classify known_code", d.GetKnownCode(), true)
	c.eq("Classify rule", d.GetRule(), "vibecode/BITRIX_TIMEOUT/write")
	c.eq("Classify request_id echoed", d.GetRequestId(), "go-example-1")
	c.check("Classify retry.after_ms <= retry.max_after_ms", r.GetAfterMs() <= r.GetMaxAfterMs(),
		"after_ms=%d max_after_ms=%d", r.GetAfterMs(), r.GetMaxAfterMs())
}

// classifyBatch: three pending records re-driven at once; the third names a
// catalog the server does not have and gets its own error, the others are
// still decided.
func classifyBatch(ctx context.Context, client retrydv1.RetryDecisionServiceClient, c *checker) {
	resp, err := client.ClassifyBatch(ctx, &retrydv1.ClassifyBatchRequest{
		Failures: []*retrydv1.Failure{
			// The queue rejected it before it ran: safe to resend after Retry-After.
			{Catalog: "vibecode", Code: "QUEUE_OVERFLOW", Operation: retrydv1.OperationKind_OPERATION_KIND_WRITE, Attempt: 1, RetryAfter: "5"},
			// A read timed out: just retry it.
			{Catalog: "vibecode", Code: "BITRIX_TIMEOUT", Method: "crm.deal.get", Attempt: 1},
			// Unknown catalog: an error for this item only.
			{Catalog: "no-such-catalog", Code: "BITRIX_TIMEOUT", Attempt: 1},
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "retryd-example: ClassifyBatch: %v\n", err)
		os.Exit(2)
	}
	results := resp.GetResults()
	fmt.Printf("ClassifyBatch (3 items):\n")
	for _, res := range results {
		switch o := res.GetOutcome().(type) {
		case *retrydv1.BatchResult_Decision:
			r := o.Decision.GetRetry()
			fmt.Printf("  [%d] verdict=%s safe=%t after_ms=%d reconciliation_action=%s\n",
				res.GetIndex(), o.Decision.GetVerdict(), r.GetSafe(), r.GetAfterMs(), optional(r.ReconciliationAction))
		case *retrydv1.BatchResult_Error:
			fmt.Printf("  [%d] error code=%s message=%q\n", res.GetIndex(), codes.Code(o.Error.GetCode()), o.Error.GetMessage())
		default:
			fmt.Printf("  [%d] neither decision nor error\n", res.GetIndex())
		}
	}
	s := resp.GetSummary()
	fmt.Printf("  summary: retry_with_limit=%d state_verification_required=%d errors=%d\n",
		s.GetRetryWithLimit(), s.GetStateVerificationRequired(), s.GetErrors())

	if !c.eq("ClassifyBatch result count", len(results), 3) {
		return
	}
	for i, res := range results {
		c.eq(fmt.Sprintf("ClassifyBatch results[%d].index", i), res.GetIndex(), uint32(i))
	}

	d0 := results[0].GetDecision()
	c.eq("results[0] verdict", d0.GetVerdict(), retrydv1.Verdict_VERDICT_RETRY_WITH_LIMIT)
	c.eq("results[0] retry.safe", d0.GetRetry().GetSafe(), true)
	c.eq("results[0] retry.after_ms", d0.GetRetry().GetAfterMs(), uint64(5000))
	c.eq("results[0] retry.strategy", d0.GetRetry().GetStrategy(), retrydv1.Strategy_STRATEGY_RETRY_AFTER)
	c.eq("results[0] no reconciliation_action", d0.GetRetry().ReconciliationAction == nil, true)

	d1 := results[1].GetDecision()
	c.eq("results[1] verdict", d1.GetVerdict(), retrydv1.Verdict_VERDICT_RETRY_WITH_LIMIT)
	c.eq("results[1] retry.safe", d1.GetRetry().GetSafe(), true)
	c.eq("results[1] operation (inferred from crm.deal.get)", d1.GetOperation(), retrydv1.OperationKind_OPERATION_KIND_READ)
	c.eq("results[1] operation_inferred", d1.GetOperationInferred(), true)

	e2 := results[2].GetError()
	if c.check("results[2] is an error", e2 != nil, "got %v", results[2].GetOutcome()) {
		c.eq("results[2] error code", codes.Code(e2.GetCode()), codes.InvalidArgument)
		var fields []string
		for _, any := range e2.GetDetails() {
			var br errdetails.BadRequest
			if any.MessageIs(&br) && any.UnmarshalTo(&br) == nil {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		c.check("results[2] BadRequest names failures[2].catalog", contains(fields, "failures[2].catalog"),
			"field violations: %v", fields)
	}

	c.eq("summary.retry_with_limit", s.GetRetryWithLimit(), uint32(2))
	c.eq("summary.errors", s.GetErrors(), uint32(1))
}

type checker struct{ failures []string }

func (c *checker) check(what string, ok bool, format string, args ...any) bool {
	if !ok {
		c.failures = append(c.failures, what+": "+fmt.Sprintf(format, args...))
	}
	return ok
}

func (c *checker) eq(what string, got, want any) bool {
	return c.check(what, got == want, "got %v, want %v", got, want)
}

// optional renders a proto3 optional string: quoted when set, <unset> otherwise.
func optional(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return fmt.Sprintf("%q", *s)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// transportCredentials: plaintext, or TLS (mutual with a client certificate)
// when RETRYD_TLS_CA is set.
func transportCredentials() (credentials.TransportCredentials, error) {
	caFile := os.Getenv("RETRYD_TLS_CA")
	if caFile == "" {
		return insecure.NewCredentials(), nil
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	config := &tls.Config{RootCAs: roots, ServerName: os.Getenv("RETRYD_TLS_SERVER_NAME")}
	if certFile := os.Getenv("RETRYD_TLS_CLIENT_CERT"); certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, os.Getenv("RETRYD_TLS_CLIENT_KEY"))
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}
