package retryd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// When retryd is busy: a retryd with no room answers any RPC
// RESOURCE_EXHAUSTED with retry advice (google.rpc.RetryInfo and
// grpc-retry-pushback-ms). Until the advice passes the client sends it no
// Classify and no Admit (the calls take the path they take when retryd is
// away), keeps its outcome reports, and reconnects its mirror no earlier:
// a shed server is not hammered by its own callers.

// MaxBusy caps retryd's advice: a hostile or broken server cannot silence
// the client for longer.
const MaxBusy = 30 * time.Second

// ErrBusy is what Classify (and the loop) see while retryd's advice to wait
// runs: the RPC was not sent.
var ErrBusy = errors.New("retryd busy: it advised waiting; not asked")

type busy struct {
	epoch          time.Time
	until          atomic.Int64 // since epoch (monotonic); 0: never busy
	answers, skips atomic.Uint64
}

// shedAdvice is retryd's advice on a shed answer: RetryInfo's retry_delay
// when present and valid, else grpc-retry-pushback-ms read by gRFC A6 (one
// value of digits, or the same value repeated); ok false: no advice (a
// negative, unparsable or conflicting pushback is none). Capped at MaxBusy.
func shedAdvice(st *status.Status, trailer metadata.MD) (d time.Duration, ok bool) {
	for _, x := range st.Details() {
		if ri, isRI := x.(*errdetails.RetryInfo); isRI && ri.RetryDelay != nil && ri.RetryDelay.CheckValid() == nil {
			if d := ri.RetryDelay.AsDuration(); d >= 0 {
				return min(d, MaxBusy), true
			}
		}
	}
	ms, refuse := Pushback(trailer.Get("grpc-retry-pushback-ms"))
	if refuse || ms == nil {
		return 0, false
	}
	if *ms >= uint64(MaxBusy/time.Millisecond) {
		return MaxBusy, true
	}
	return time.Duration(*ms) * time.Millisecond, true
}

// noteShed reads a failed RPC's answer: RESOURCE_EXHAUSTED or UNAVAILABLE
// with advice is a shed answer; advice > 0 makes the client busy until it
// passes (the later instant wins).
func (c *Client) noteShed(err error, trailer metadata.MD) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return
	}
	d, ok := shedAdvice(st, trailer)
	if !ok {
		return
	}
	c.busy.answers.Add(1)
	if d <= 0 {
		return // a draining server's 0: go elsewhere at once, nothing to wait for
	}
	now := int64(time.Since(c.busy.epoch))
	want := now + int64(d)
	for {
		old := c.busy.until.Load()
		if old >= want {
			return
		}
		if c.busy.until.CompareAndSwap(old, want) {
			if old <= now { // a new busy period: said once, not per call
				c.event(Event{Kind: "retryd_busy", Wait: d,
					Detail: fmt.Sprintf("retryd answered %s with advice %v: no Classify or Admit until it passes", grpcNames[st.Code()], d)})
			}
			return
		}
	}
}

// busyFor is how long retryd's advice still runs (0: not busy).
func (c *Client) busyFor() time.Duration {
	return max(time.Duration(c.busy.until.Load()-int64(time.Since(c.busy.epoch))), 0)
}

// skipBusy: retryd advised waiting, so the RPC is not sent; counted (and
// as a fallback: the client decides alone), not logged per call.
func (c *Client) skipBusy() bool {
	if c.busyFor() <= 0 {
		return false
	}
	c.busy.skips.Add(1)
	c.fallbacks.Add(1)
	return true
}

// Classify sends a failure to retryd within the client's RPC timeout, as the
// loop does (for adapters): ErrBusy, unsent, while retryd's advice to wait runs.
func (c *Client) Classify(ctx context.Context, req *pb.ClassifyRequest) (*pb.ClassifyResponse, error) {
	if c.skipBusy() {
		return nil, fmt.Errorf("%w for %v", ErrBusy, c.busyFor().Round(time.Millisecond))
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.stub.Classify(rctx, req)
}

// The interceptors see every RPC of the client (the loop's, the mirror's,
// adapters' and Stub()'s) and note shed answers.
func (c *Client) shedUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var md metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&md))...)
	if err != nil {
		c.noteShed(err, md)
	}
	return err
}

func (c *Client) shedStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.noteShed(err, nil)
		return nil, err
	}
	return &shedStream{ClientStream: s, c: c}, nil
}

type shedStream struct {
	grpc.ClientStream
	c *Client
}

func (s *shedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.c.noteShed(err, s.ClientStream.Trailer())
	}
	return err
}
