package retryd

import (
	"context"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

// Admit asks whether an attempt of method may go now, as Do does before
// each attempt (for adapters): from the holds mirror when it knows the
// scope (no RPC), else the Admit RPC; retryd unreachable admits (fail
// open). A hold in force returns *RefusedError (RefusedHeld) at once,
// without waiting. probeToken is set when retryd admitted the attempt as a
// hold's one probe: report its success with ReportProbe.
func (c *Client) Admit(ctx context.Context, method string, op Operation, attempt int) (probeToken string, err error) {
	return c.admit(ctx, scope{c.o.catalog, c.o.dependency, c.o.tenant, method}, op.pb(), attempt, false)
}

// ReportProbe reports a probe's success with its token (Admit's probeToken).
func (c *Client) ReportProbe(ctx context.Context, probeToken string) {
	if probeToken == "" {
		return
	}
	c.counters.reportRPCs.Add(1)
	rctx, cancel := c.rpcCtx(context.WithoutCancel(ctx))
	defer cancel()
	_, _ = c.stub.ReportOutcomes(rctx, &pb.ReportOutcomesRequest{ProbeToken: probeToken, ProbeSucceeded: true})
}

// admit: local admission, else Admit; with wait, a hold is waited out
// (until the context's deadline), else it is returned at once.
func (c *Client) admit(ctx context.Context, sc scope, op pb.OperationKind, attempt int, wait bool) (string, error) {
	deadline, hasDeadline := ctx.Deadline()
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		var hold *Hold
		var retryAt time.Time
		local := false
		switch adm, mh, localAt := c.mirror.decide(sc.catalog, sc.dependency, sc.tenant, sc.method); adm {
		case admitLocal:
			c.counters.localAdmits.Add(1)
			if attempt == 1 {
				c.counts.add(sc, 1, 0, 0) // the deposit Admit would have made
			}
			return "", nil
		case refuseLocal:
			c.counters.localRefusals.Add(1)
			hold, retryAt, local = holdOf(mh.raw), localAt, true
		default:
			if c.skipBusy() { // retryd advised waiting: fail open, as when it is away
				if attempt == 1 {
					c.counts.add(sc, 1, 0, 0)
				}
				return "", nil
			}
			c.counters.admitRPCs.Add(1)
			rctx, cancel := c.rpcCtx(ctx)
			resp, err := c.stub.Admit(rctx, &pb.AdmitRequest{Catalog: sc.catalog, Dependency: sc.dependency,
				Tenant: sc.tenant, Method: sc.method, Operation: op, Attempt: uint32(attempt)})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return "", ctx.Err()
				}
				if rej := rejectionOf(err, nil); rej != nil {
					return "", rej
				}
				c.event(Event{Kind: "fallback", Attempt: attempt, Detail: "Admit failed: " + err.Error()})
				if attempt == 1 {
					c.counts.add(sc, 1, 0, 0) // retryd made no deposit
				}
				return "", nil
			}
			if resp.Admitted {
				return resp.ProbeToken, nil
			}
			c.mirror.learn(resp.Hold)
			hold, retryAt = holdOf(resp.Hold), time.Now().Add(time.Second)
			if resp.RetryAt != nil {
				retryAt = resp.RetryAt.AsTime()
			}
		}
		w := max(time.Until(retryAt)+10*time.Millisecond, 0)
		c.event(Event{Kind: "admit_refused", Attempt: attempt, Hold: hold, Wait: w, Local: local})
		if !wait || hasDeadline && time.Now().Add(w).After(deadline) {
			return "", &RefusedError{Reason: RefusedHeld, Hold: hold}
		}
		c.event(Event{Kind: "wait", Attempt: attempt, Hold: hold, Wait: w, Detail: "hold", Local: local})
		if err := c.o.sleep(ctx, w); err != nil {
			return "", err
		}
	}
}
