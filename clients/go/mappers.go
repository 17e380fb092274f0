package retryd

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Failure is what a mapper makes of an error: the fields of retryd's Failure
// a caller knows. Empty fields take the Client's and the Call's values.
type Failure struct {
	Catalog       string
	Code          string
	RetryAfter    string  // raw Retry-After: delta-seconds or HTTP-date
	RetryAfterMs  *uint64 // an already parsed delay (RetryInfo, pushback)
	RequestID     string
	QuotaResetsAt time.Time
	// NoRetry: the dependency itself said "do not retry" (e.g. a negative,
	// unparsable or conflicting grpc-retry-pushback-ms); sent as the
	// dependency's retry contract, Failure.upstream retryable false.
	NoRetry bool
}

func (f *Failure) proto(c *Client, method, key string, enforced bool, op pb.OperationKind, attempt int, probe string) *pb.Failure {
	catalog := f.Catalog
	if catalog == "" {
		catalog = c.o.catalog
	}
	out := &pb.Failure{Catalog: catalog, Code: f.Code, Operation: op, Method: method, Attempt: uint32(attempt),
		RetryAfter: f.RetryAfter, RetryAfterMs: f.RetryAfterMs, IdempotencyKey: key, IdempotencyKeyEnforced: enforced,
		RequestId: f.RequestID, Tenant: c.o.tenant, Dependency: c.o.dependency, ProbeToken: probe}
	if f.NoRetry {
		out.Upstream = &pb.RetryContract{Retryable: false}
	}
	if !f.QuotaResetsAt.IsZero() {
		out.QuotaResetsAt = timestamppb.New(f.QuotaResetsAt)
	}
	return out
}

var grpcNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

// DependencyError reports a dependency failure by its code; DefaultMapper understands it.
type DependencyError struct {
	Code         string
	RetryAfter   string
	RetryAfterMs *uint64
	Catalog      string
}

func (e *DependencyError) Error() string { return "dependency failed: " + e.Code }

// HTTPStatusError is an HTTP answer that failed; DefaultMapper understands it.
type HTTPStatusError struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

func (e *HTTPStatusError) Error() string { return "HTTP " + strconv.Itoa(e.StatusCode) }

// DefaultMapper understands *DependencyError, *HTTPStatusError and gRPC status errors; nil otherwise.
func DefaultMapper(err error) *Failure {
	var de *DependencyError
	if errors.As(err, &de) {
		return &Failure{Catalog: de.Catalog, Code: de.Code, RetryAfter: de.RetryAfter, RetryAfterMs: de.RetryAfterMs}
	}
	var he *HTTPStatusError
	if errors.As(err, &he) {
		return FromHTTP(he.StatusCode, he.Header)
	}
	return FromGRPC(err)
}

// TrailerError carries a failed gRPC call's trailer with its error, so that
// FromGRPC can read grpc-retry-pushback-ms (grpc-go hands the trailer out
// apart from the error: grpc.Trailer(&md)). Wrap with WithTrailer.
type TrailerError struct {
	Err     error
	Trailer metadata.MD
}

func (e *TrailerError) Error() string { return e.Err.Error() }
func (e *TrailerError) Unwrap() error { return e.Err }

// WithTrailer wraps a gRPC error with the call's trailer (nil err: nil).
func WithTrailer(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	return &TrailerError{Err: err, Trailer: trailer}
}

// Pushback reads the grpc-retry-pushback-ms values of one response as gRFC
// A6 does: one value, or the same value repeated, is a delay (ms, false);
// a negative, unparsable or too large value, or values that disagree, mean
// "do not retry" (0, true); none: (0, false) and no delay.
func Pushback(values []string) (ms *uint64, doNotRetry bool) {
	var got *uint64
	for _, v := range values {
		v = strings.TrimSpace(v)
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || v == "" || v[0] == '+' {
			return nil, true
		}
		if got != nil && *got != n {
			return nil, true
		}
		got = &n
	}
	return got, false
}

// FromGRPC maps a gRPC status error: its code name (catalog "grpc") and
// google.rpc.RetryInfo as RetryAfterMs; with a trailer (WithTrailer),
// grpc-retry-pushback-ms too, by Pushback. nil when err carries no status.
func FromGRPC(err error) *Failure {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return nil
	}
	// grpc-go names codes in CamelCase ("Unavailable"); the catalog uses the proto names.
	f := &Failure{Catalog: "grpc", Code: grpcNames[st.Code()]}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			ms := uint64(ri.RetryDelay.AsDuration() / time.Millisecond)
			f.RetryAfterMs = &ms
		}
	}
	var te *TrailerError
	if errors.As(err, &te) {
		ms, refuse := Pushback(te.Trailer.Get("grpc-retry-pushback-ms"))
		switch {
		case refuse:
			f.NoRetry, f.RetryAfterMs = true, nil
		case ms != nil && (f.RetryAfterMs == nil || *ms > *f.RetryAfterMs):
			f.RetryAfterMs = ms
		}
	}
	return f
}

// FromHTTP maps an HTTP status and headers: code = the status (catalog
// "http"), Retry-After and X-Request-Id from the headers.
func FromHTTP(statusCode int, h http.Header) *Failure {
	return &Failure{Catalog: "http", Code: strconv.Itoa(statusCode), RetryAfter: h.Get("Retry-After"),
		RequestID: h.Get("X-Request-Id")}
}

// FromEnvelope maps the Vibecode / Bitrix24 JSON envelope
// ({"error":{"code":"QUEUE_OVERFLOW",…}} or {"error":"CODE","error_description":…})
// with Retry-After and X-Request-Id from the headers (catalog "vibecode").
func FromEnvelope(body []byte, h http.Header) *Failure {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	code := ""
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		var s string
		var o struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(env.Error, &s) == nil {
			code = s
		} else if json.Unmarshal(env.Error, &o) == nil {
			code = o.Code
		}
	}
	return &Failure{Catalog: "vibecode", Code: code, RetryAfter: h.Get("Retry-After"), RequestID: h.Get("X-Request-Id")}
}
