package retryd

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestShedAdviceByRetryInfoThenPushback(t *testing.T) {
	shed := func(ri *durationpb.Duration) *status.Status {
		st := status.New(codes.ResourceExhausted, "full")
		if ri != nil {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: ri})
		}
		return st
	}
	pb := func(v ...string) metadata.MD { return metadata.MD{"grpc-retry-pushback-ms": v} }
	for _, c := range []struct {
		name string
		st   *status.Status
		md   metadata.MD
		want time.Duration
		ok   bool
	}{
		{"RetryInfo", shed(durationpb.New(700 * time.Millisecond)), pb("100"), 700 * time.Millisecond, true},
		{"RetryInfo beyond the cap", shed(durationpb.New(time.Hour)), nil, MaxBusy, true},
		{"RetryInfo negative: pushback", shed(durationpb.New(-time.Second)), pb("250"), 250 * time.Millisecond, true},
		{"RetryInfo invalid: pushback", shed(&durationpb.Duration{Seconds: 1, Nanos: -5}), pb("40"), 40 * time.Millisecond, true},
		{"pushback", shed(nil), pb("500"), 500 * time.Millisecond, true},
		{"pushback repeated, equal", shed(nil), pb("500", "500"), 500 * time.Millisecond, true},
		{"pushback 0 (drain: elsewhere now)", shed(nil), pb("0"), 0, true},
		{"pushback -1", shed(nil), pb("-1"), 0, false},
		{"pushback xxx", shed(nil), pb("xxx"), 0, false},
		{"pushback conflicting", shed(nil), pb("100", "200"), 0, false},
		{"pushback overflow", shed(nil), pb("99999999999999999999"), 0, false},
		{"pushback past the cap", shed(nil), pb("86400000"), MaxBusy, true},
		{"none", shed(nil), nil, 0, false},
	} {
		d, ok := shedAdvice(c.st, c.md)
		if d != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, d, ok, c.want, c.ok)
		}
	}
}

func TestNoteShedSetsBusyOncePerPeriodAndKeepsTheLaterEnd(t *testing.T) {
	var events []Event
	c := &Client{o: options{hook: func(e Event) { events = append(events, e) }, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	c.busy.epoch = time.Now()
	advise := func(code codes.Code, ms string) error {
		c.noteShed(status.Error(code, "x"), metadata.MD{"grpc-retry-pushback-ms": []string{ms}})
		return nil
	}
	_ = advise(codes.Unavailable, "0") // draining: counted, not busy
	if c.busyFor() != 0 || c.busy.answers.Load() != 1 {
		t.Fatalf("advice 0: busy %v, answers %d", c.busyFor(), c.busy.answers.Load())
	}
	_ = advise(codes.Internal, "500") // not a shed answer
	_ = advise(codes.ResourceExhausted, "xxx")
	if c.busyFor() != 0 || c.busy.answers.Load() != 1 {
		t.Fatalf("no advice: busy %v, answers %d", c.busyFor(), c.busy.answers.Load())
	}
	_ = advise(codes.ResourceExhausted, "2000")
	_ = advise(codes.ResourceExhausted, "100") // earlier: the later end stays
	if d := c.busyFor(); d < 1900*time.Millisecond || d > 2000*time.Millisecond {
		t.Fatalf("busy for %v, want ≈ 2 s", d)
	}
	if !c.skipBusy() || c.busy.skips.Load() != 1 || c.Fallbacks() != 1 {
		t.Fatalf("skip: %d skips, %d fallbacks", c.busy.skips.Load(), c.Fallbacks())
	}
	busy := 0
	for _, e := range events {
		if e.Kind == "retryd_busy" {
			busy++
		}
	}
	if busy != 1 || c.busy.answers.Load() != 3 {
		t.Fatalf("%d retryd_busy events, %d answers; want 1 and 3", busy, c.busy.answers.Load())
	}
}
