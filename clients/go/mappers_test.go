package retryd

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
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
