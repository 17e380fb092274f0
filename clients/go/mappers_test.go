package retryd

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestDefaultMapper(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "7")
	f := DefaultMapper(fmt.Errorf("wrapped: %w", &HTTPStatusError{StatusCode: 429, Header: h}))
	if f == nil || f.Catalog != "http" || f.Code != "429" || f.RetryAfter != "7" {
		t.Fatalf("http: %+v", f)
	}
	st, _ := status.New(codes.Unavailable, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(300 * time.Millisecond)})
	f = DefaultMapper(st.Err())
	if f == nil || f.Code != "UNAVAILABLE" || f.RetryAfterMs == nil || *f.RetryAfterMs != 300 {
		t.Fatalf("grpc: %+v", f)
	}
	if f := DefaultMapper(errors.New("plain")); f != nil {
		t.Fatalf("plain error mapped: %+v", f)
	}
}

func TestFromEnvelope(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"code":"QUEUE_OVERFLOW"}}`:                  "QUEUE_OVERFLOW",
		`{"error":"BITRIX_ERROR","error_description":"TITLE"}`: "BITRIX_ERROR",
		`<html>`: "",
	} {
		if got := FromEnvelope([]byte(body), http.Header{}).Code; got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

// grpc-retry-pushback-ms as gRFC A6 reads it.
func TestPushback(t *testing.T) {
	if ms, no := Pushback([]string{"250", "250"}); no || ms == nil || *ms != 250 {
		t.Fatalf("250 twice: %v %v", ms, no)
	}
	if ms, no := Pushback(nil); no || ms != nil {
		t.Fatalf("none: %v %v", ms, no)
	}
	for _, vs := range [][]string{{"-1"}, {"xxx"}, {""}, {"100", "200"}, {"99999999999999999999"}, {"+5"}, {"1.5"}} {
		if ms, no := Pushback(vs); !no || ms != nil {
			t.Fatalf("%q: want do not retry, got %v %v", vs, ms, no)
		}
	}
	err := WithTrailer(status.Error(codes.Unavailable, "x"), metadata.MD{"grpc-retry-pushback-ms": {"-1"}})
	f := DefaultMapper(err)
	if f == nil || !f.NoRetry || f.RetryAfterMs != nil || f.Code != "UNAVAILABLE" {
		t.Fatalf("negative pushback: %+v", f)
	}
}

func TestRefusedReasonString(t *testing.T) {
	got := fmt.Sprint(RefusedVerdict, " ", RefusedHeld, " ", RefusedDeadline, " ", RefusedFallback, " ", RefusedReason(9))
	if got != "verdict held deadline_exceeded fallback RefusedReason(9)" {
		t.Fatal(got)
	}
}
