// Package retryd runs calls to a dependency under retryd's retry loop:
// Admit before each attempt, the call, batched success reports, Classify of
// each failure, waits, read-backs before resending a write, the caller's
// context as deadline and cancel, and a conservative fallback when retryd is
// unreachable or slow.
//
//	c, _ := retryd.New("localhost:50051", retryd.WithCatalog("vibecode"), retryd.WithDependency("portal-1"))
//	defer c.Close()
//	id, err := retryd.Do(ctx, c, addDeal, retryd.Call[string]{Operation: retryd.Write, Method: "crm.deal.add", ReadBack: findDeal})
package retryd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Operation says whether a call reads or writes.
type Operation int

const (
	// Unspecified lets retryd infer it from the method (the fallback treats it as a write).
	Unspecified Operation = iota
	// Read does not change data.
	Read
	// Write creates, changes, deletes or sends something.
	Write
)

func (o Operation) pb() pb.OperationKind {
	switch o {
	case Read:
		return pb.OperationKind_OPERATION_KIND_READ
	case Write:
		return pb.OperationKind_OPERATION_KIND_WRITE
	}
	return pb.OperationKind_OPERATION_KIND_UNSPECIFIED
}

// Fallback is what the client does when retryd is unreachable or slow:
// reads (and writes whose idempotency key the dependency enforces) get capped
// exponential backoff with full jitter, at most MaxAttempts in all; other
// writes are never resent.
type Fallback struct {
	MaxAttempts int
	Base, Cap   time.Duration
}

// DefaultFallback: 3 attempts, 100 ms base, 2 s cap.
var DefaultFallback = Fallback{MaxAttempts: 3, Base: 100 * time.Millisecond, Cap: 2 * time.Second}

// Event is one step of the loop, for logs and traces.
type Event struct {
	// Kind: "admit_refused", "decision", "wait", "read_back", "fallback",
	// "success"; the mirror's "mirror_stale" (its stream is down) and
	// "mirror_synced" (a snapshot arrived); "retryd_busy" once per busy
	// period (retryd shed a call with advice to wait: see MaxBusy).
	Kind string
	// Local: an admit_refused (or its wait) decided from the holds mirror, no RPC.
	Local    bool
	Attempt  int
	Decision *Decision
	Hold     *Hold
	Wait     time.Duration
	Detail   string
}

// Sleeper waits d or until ctx ends (then it returns ctx.Err()).
type Sleeper func(ctx context.Context, d time.Duration) error

// SleepContext is the default Sleeper.
func SleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type options struct {
	catalog, dependency, tenant, locale  string
	timeout, connectTimeout, reportEvery time.Duration
	creds                                credentials.TransportCredentials
	sleep                                Sleeper
	fallback                             Fallback
	hook                                 func(Event)
	logger                               *slog.Logger
	dialOpts                             []grpc.DialOption
	noMirror                             bool
	maxHolds                             int
}

// Option configures a Client.
type Option func(*options)

// WithCatalog names the catalog failures are judged by (default: the server's).
func WithCatalog(s string) Option { return func(o *options) { o.catalog = s } }

// WithDependency names the dependency instance (a portal, a host): the key of fleet holds.
func WithDependency(s string) Option { return func(o *options) { o.dependency = s } }

// WithTenant names the caller's tenant.
func WithTenant(s string) Option { return func(o *options) { o.tenant = s } }

// WithLocale sets the language of decisions' reasons ("en", "ru").
func WithLocale(s string) Option { return func(o *options) { o.locale = s } }

// WithTimeout bounds each RPC to retryd once connected (default 50 ms).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithConnectTimeout bounds the eager connect in New (default 1 s; 0: connect lazily).
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithTransportCredentials uses TLS or mTLS (see TLSFromEnv).
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = c }
}

// WithSleeper replaces the wait between attempts (tests record waits instead of sleeping).
func WithSleeper(s Sleeper) Option { return func(o *options) { o.sleep = s } }

// WithFallback replaces DefaultFallback.
func WithFallback(f Fallback) Option { return func(o *options) { o.fallback = f } }

// WithHook is called with every Event of every call.
func WithHook(h func(Event)) Option { return func(o *options) { o.hook = h } }

// WithLogger logs fallbacks at warn and other events at debug (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithReportInterval sets how often outcome counts are sent (default 1 s).
func WithReportInterval(d time.Duration) Option { return func(o *options) { o.reportEvery = d } }

// WithMirror turns the local holds mirror on (the default) or off. Off,
// every attempt asks Admit (an RPC per call).
func WithMirror(on bool) Option { return func(o *options) { o.noMirror = !on } }

// WithMaxHolds bounds the mirror (default DefaultMaxHolds). Beyond it the
// hold ending soonest is dropped and its dependency uses Admit until the
// next snapshot.
func WithMaxHolds(n int) Option { return func(o *options) { o.maxHolds = max(n, 1) } }

// WithDialOptions adds grpc dial options.
func WithDialOptions(d ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, d...) }
}

// Client runs calls under the loop. Safe for concurrent use.
type Client struct {
	o         options
	conn      *grpc.ClientConn
	stub      pb.RetryDecisionServiceClient
	fallbacks atomic.Uint64
	counts    *counts
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	mirror    *mirror // nil: off
	counters  counters
	busy      busy
}

// New connects to retryd at address ("host:port"). Connecting eagerly is
// bounded by the connect timeout; an unreachable retryd is not an error:
// calls then use the fallback until it answers.
func New(address string, opts ...Option) (*Client, error) {
	o := options{timeout: 50 * time.Millisecond, connectTimeout: time.Second, reportEvery: time.Second,
		sleep: SleepContext, fallback: DefaultFallback, logger: slog.Default(), maxHolds: DefaultMaxHolds}
	for _, f := range opts {
		f(&o)
	}
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	c := &Client{o: o, counts: newCounts(), stop: make(chan struct{}), done: make(chan struct{})}
	c.busy.epoch = time.Now()
	conn, err := grpc.NewClient(address, append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(c.shedUnary), grpc.WithChainStreamInterceptor(c.shedStream)}, o.dialOpts...)...)
	if err != nil {
		return nil, err
	}
	c.conn, c.stub = conn, pb.NewRetryDecisionServiceClient(conn)
	if o.connectTimeout > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), o.connectTimeout)
		conn.Connect()
		for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
			if !conn.WaitForStateChange(ctx, s) {
				o.logger.Warn("retryd: not reachable yet; calls use the fallback until it is", "address", address)
				break
			}
		}
		cancel()
	}
	go c.reporter()
	if !o.noMirror {
		// The client's own dependency and tenant are declared at once: the
		// snapshot usually arrives before the first call.
		c.mirror = newMirror(c, o.maxHolds)
		c.mirror.want([]string{o.dependency}, []string{o.tenant})
		go c.mirror.run()
	}
	return c, nil
}

// Fallbacks counts the times retryd was unreachable, slow or busy and the client decided alone.
func (c *Client) Fallbacks() uint64 { return c.fallbacks.Load() }

// Close sends the outcome counts not yet reported and closes the connection.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.mirror != nil {
			c.mirror.close()
		}
		close(c.stop)
		<-c.done
	})
	return c.conn.Close()
}

// Stub is the raw generated client, for Classify, ListHolds and the other RPCs by hand.
func (c *Client) Stub() pb.RetryDecisionServiceClient { return c.stub }

func (c *Client) reporter() {
	defer close(c.done)
	t := time.NewTicker(c.o.reportEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.flush(c.o.timeout)
		case <-c.stop:
			// Reports are not sent while retryd's advice to wait runs: wait
			// for it at closing, within the second the last flush has.
			if d := c.busyFor(); d > 0 && d < time.Second {
				time.Sleep(d)
			}
			c.flush(time.Second)
			return
		}
	}
}

func (c *Client) flush(timeout time.Duration) {
	if c.busyFor() > 0 {
		return // kept for a flush after retryd's advice passes
	}
	req := c.counts.take()
	if req == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var n uint64
	for _, k := range req.Counts {
		n += k.Requests
	}
	c.counters.reportRPCs.Add(1)
	c.counters.reportedRequests.Add(n)
	if _, err := c.stub.ReportOutcomes(ctx, req); err != nil {
		// Shed or away: the call was not started; the batch goes back for
		// the next flush (summed into the counts, whose bound it keeps).
		if code := status.Code(err); code == codes.ResourceExhausted || code == codes.Unavailable {
			c.counts.putBack(req)
		}
	}
}

func (c *Client) event(e Event) {
	if e.Kind == "fallback" {
		c.fallbacks.Add(1)
		c.o.logger.Warn("retryd: conservative fallback", "detail", e.Detail, "attempt", e.Attempt)
	} else if e.Kind == "retryd_busy" {
		c.o.logger.Warn("retryd: busy; calls take the fallback until its advice passes", "detail", e.Detail, "wait", e.Wait)
	} else if e.Kind == "mirror_stale" {
		c.o.logger.Warn("retryd: holds mirror stale; known holds still refuse, other calls ask Admit", "detail", e.Detail)
	} else {
		c.o.logger.Debug("retryd", "event", e.Kind, "attempt", e.Attempt, "wait", e.Wait)
	}
	if c.o.hook != nil {
		c.o.hook(e)
	}
}

// Settings are what the adapters (package failsafe) build their requests from.
type Settings struct {
	Catalog, Dependency, Tenant, Locale string
	Timeout                             time.Duration
	Fallback                            Fallback
}

// Settings returns the client's catalog, dependency, tenant, locale, per-RPC timeout and fallback.
func (c *Client) Settings() Settings {
	return Settings{Catalog: c.o.catalog, Dependency: c.o.dependency, Tenant: c.o.tenant, Locale: c.o.locale,
		Timeout: c.o.timeout, Fallback: c.o.fallback}
}

// FailureProto is retryd's Failure for a mapper's Failure, as Do sends it (for adapters).
func (c *Client) FailureProto(f *Failure, call Call[any], attempt int) *pb.Failure {
	return f.proto(c, call.Method, call.IdempotencyKey, call.IdempotencyKeyEnforced, call.Operation.pb(), attempt, "")
}

// AsRejection is the RejectedError for retryd's answer rpcErr when it says
// the request is wrong (nil otherwise), chaining the dependency's depErr.
func AsRejection(rpcErr, depErr error) *RejectedError { return rejectionOf(rpcErr, depErr) }

// PB is the proto value of the operation.
func (o Operation) PB() pb.OperationKind { return o.pb() }

func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.o.timeout)
}

type scope struct{ catalog, dependency, tenant, method string }

type counts struct {
	mu sync.Mutex
	m  map[scope]*pb.OutcomeCount
}

func newCounts() *counts { return &counts{m: map[scope]*pb.OutcomeCount{}} }

func (k *counts) add(s scope, req, ok, fail uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.m[s]
	if c == nil {
		c = &pb.OutcomeCount{Catalog: s.catalog, Dependency: s.dependency, Tenant: s.tenant, Method: s.method}
		k.m[s] = c
	}
	c.Requests += req
	c.Successes += ok
	c.Failures += fail
}

func (k *counts) putBack(req *pb.ReportOutcomesRequest) {
	for _, c := range req.Counts {
		k.add(scope{c.Catalog, c.Dependency, c.Tenant, c.Method}, c.Requests, c.Successes, c.Failures)
	}
}

func (k *counts) take() *pb.ReportOutcomesRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) == 0 {
		return nil
	}
	req := &pb.ReportOutcomesRequest{}
	for s, c := range k.m {
		if len(req.Counts) == 1000 {
			break
		}
		req.Counts = append(req.Counts, c)
		delete(k.m, s)
	}
	return req
}

// ErrInconclusive is returned by a ReadBack that cannot tell whether the effect is there.
var ErrInconclusive = errors.New("retryd: read-back inconclusive")

// Call describes one call: what it is and how to verify it.
type Call[T any] struct {
	Operation              Operation
	Method                 string
	IdempotencyKey         string
	IdempotencyKeyEnforced bool
	// ReadBack looks the write's effect up by a business key: (value, true, nil)
	// when present (Do returns value without resending), (_, false, nil) when
	// absent, ErrInconclusive when it cannot tell.
	ReadBack func(ctx context.Context) (T, bool, error)
	// ToFailure maps fn's error to a Failure (nil: not a dependency failure,
	// returned untouched). Default: DefaultMapper.
	ToFailure func(error) *Failure
}

// Do runs fn under the loop and returns its result (or a read-back's). The
// context's deadline bounds everything; cancelling it stops at once.
func Do[T any](ctx context.Context, c *Client, fn func(ctx context.Context) (T, error), call Call[T]) (T, error) {
	var zero T
	op := call.Operation.pb()
	sc := scope{c.o.catalog, c.o.dependency, c.o.tenant, call.Method}
	attempt := 1
	mapper := call.ToFailure
	if mapper == nil {
		mapper = DefaultMapper
	}
	deadline, hasDeadline := ctx.Deadline()
	for {
		// 1. Admit: from the mirror when it knows the scope, else the RPC.
		probe, err := c.admit(ctx, sc, op, attempt, true)
		if err != nil {
			return zero, err
		}

		// 2. The call.
		v, err := fn(ctx)
		if err == nil {
			c.counts.add(sc, 0, 1, 0)
			c.ReportProbe(ctx, probe)
			c.event(Event{Kind: "success", Attempt: attempt})
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, err
		}

		// 3. Map the failure.
		f := mapper(err)
		if f == nil {
			c.counts.add(sc, 0, 0, 1)
			return zero, err
		}
		failure := f.proto(c, call.Method, call.IdempotencyKey, call.IdempotencyKeyEnforced, op, attempt, probe)
		if hasDeadline {
			failure.Deadline = timestamppb.New(deadline)
		}

		// 4. Classify and act; a read-back's answer goes in a second Classify.
		var readBackValue T
		var wait time.Duration
		for {
			resp, rerr := c.Classify(ctx, &pb.ClassifyRequest{Failure: failure, Locale: c.o.locale})
			if rerr != nil {
				if ctx.Err() != nil {
					return zero, ctx.Err()
				}
				if rej := rejectionOf(rerr, err); rej != nil {
					return zero, rej
				}
				w, ok := c.fallbackWait(failure, attempt)
				if !errors.Is(rerr, ErrBusy) { // a busy period is said once (retryd_busy), not per call
					c.event(Event{Kind: "fallback", Attempt: attempt, Wait: w, Detail: "Classify failed: " + rerr.Error()})
				}
				if !ok {
					kind := "write"
					if failure.Operation == pb.OperationKind_OPERATION_KIND_READ {
						kind = "read"
					}
					d := &Decision{Verdict: DoNotRetry, Rule: "client_fallback/" + kind,
						Reason: "retryd unavailable (" + rerr.Error() + "); the conservative fallback does not retry this " + kind}
					return zero, &RefusedError{Reason: RefusedFallback, Decision: d, Err: err}
				}
				wait = w
				break
			}
			c.mirror.learn(resp.Decision.GetHold())
			d := decisionOf(resp.Decision)
			c.event(Event{Kind: "decision", Attempt: attempt, Decision: d})
			if d.Verdict == AlreadyApplied {
				return readBackValue, nil
			}
			if d.Verdict == StateVerificationRequired && call.ReadBack != nil &&
				failure.ReadBack == pb.ReadBack_READ_BACK_UNSPECIFIED {
				rv, present, rbErr := call.ReadBack(ctx)
				switch {
				case errors.Is(rbErr, ErrInconclusive):
					failure.ReadBack = pb.ReadBack_READ_BACK_INCONCLUSIVE
				case rbErr != nil:
					return zero, rbErr
				case present:
					failure.ReadBack = pb.ReadBack_READ_BACK_EFFECT_PRESENT
					readBackValue = rv
				default:
					failure.ReadBack = pb.ReadBack_READ_BACK_EFFECT_ABSENT
				}
				c.event(Event{Kind: "read_back", Attempt: attempt, Detail: failure.ReadBack.String()})
				continue
			}
			if d.Verdict != RetryWithLimit {
				return zero, &RefusedError{Reason: RefusedVerdict, Decision: d, Err: err}
			}
			lo, hi := d.AfterMs, d.MaxAfterMs
			if hi < lo {
				hi = lo
			}
			wait = time.Duration(lo)*time.Millisecond + time.Duration(rand.Int64N(int64(hi-lo)*int64(time.Millisecond)+1))
			break
		}
		if hasDeadline && time.Now().Add(wait).After(deadline) {
			return zero, &RefusedError{Reason: RefusedDeadline, Err: err}
		}
		c.event(Event{Kind: "wait", Attempt: attempt, Wait: wait})
		if serr := c.o.sleep(ctx, wait); serr != nil {
			return zero, serr
		}
		attempt++
	}
}

func (c *Client) fallbackWait(f *pb.Failure, attempt int) (time.Duration, bool) {
	may := f.Operation == pb.OperationKind_OPERATION_KIND_READ || f.IdempotencyKeyEnforced
	if !may || attempt >= c.o.fallback.MaxAttempts {
		return 0, false
	}
	top := c.o.fallback.Base << (attempt - 1)
	if top > c.o.fallback.Cap || top <= 0 {
		top = c.o.fallback.Cap
	}
	return time.Duration(rand.Int64N(int64(top) + 1)), true
}

// RefusedReason says why Do stopped without a result.
type RefusedReason int

const (
	// RefusedVerdict: retryd's decision (Decision.Verdict) said stop.
	RefusedVerdict RefusedReason = iota
	// RefusedHeld: a fleet hold refuses the call past the context's deadline.
	RefusedHeld
	// RefusedDeadline: the next attempt would pass the context's deadline.
	RefusedDeadline
	// RefusedFallback: retryd was unreachable and the fallback does not retry.
	RefusedFallback
)

// String gives the reason in the CLI's and HTTP's words (it printed 0 before).
func (r RefusedReason) String() string {
	switch r {
	case RefusedVerdict:
		return "verdict"
	case RefusedHeld:
		return "held"
	case RefusedDeadline:
		return "deadline_exceeded"
	case RefusedFallback:
		return "fallback"
	}
	return fmt.Sprintf("RefusedReason(%d)", int(r))
}

// RefusedError is Do's error when the loop stops: the whole Decision (or
// the client's own for a fallback), the Hold when held, and the dependency's
// last error (Unwrap).
type RefusedError struct {
	Reason   RefusedReason
	Decision *Decision
	Hold     *Hold
	Err      error
}

func (e *RefusedError) Error() string {
	switch e.Reason {
	case RefusedHeld:
		if e.Hold != nil {
			return fmt.Sprintf("retryd: held until %s: %s", e.Hold.Until.Format(time.RFC3339), e.Hold.Reason)
		}
		return "retryd: held"
	case RefusedDeadline:
		return fmt.Sprintf("retryd: the next attempt would pass the deadline: %v", e.Err)
	}
	return fmt.Sprintf("retryd: %s (%s): %v", e.Decision.Verdict, e.Decision.Reason, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// RejectedError is Do's error when retryd refuses the request itself
// (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED): a mistake in the
// client's configuration or in what a mapper sent, not an outage, so no
// fallback runs. Field is the field retryd named ("failure.catalog"); Unwrap
// gives the dependency's error, when there was one.
type RejectedError struct {
	Code    codes.Code
	Field   string
	Message string
	Err     error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("retryd rejected the request (%s): %s", grpcNames[e.Code], e.Message)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// rejectionOf: retryd's status says the request is wrong (nil otherwise).
// retryd's messages start with the field they are about ("failure.catalog: …").
func rejectionOf(rpcErr, depErr error) *RejectedError {
	st, ok := status.FromError(rpcErr)
	if !ok {
		return nil
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied:
	default:
		return nil
	}
	field := ""
	if head, _, found := strings.Cut(st.Message(), ":"); found && head != "" && !strings.ContainsAny(head, " \t") {
		field = head
	}
	return &RejectedError{Code: st.Code(), Field: field, Message: st.Message(), Err: depErr}
}

// Decision is retryd's answer for one failure.
type Decision struct {
	Verdict                                         Verdict  // prints retry_with_limit, do_not_retry, …
	Strategy                                        Strategy // how the wait was computed
	Reason, Rule, RequiredTransition, TerminalState string
	AfterMs, MaxAfterMs                             uint64
	Hold                                            *Hold
	Raw                                             *pb.Decision
}

// Hold is a fleet hold: do not call this scope until Until.
type Hold struct {
	ID, Catalog, Dependency, Tenant, Method, Code, Rule, Reason string
	Scope                                                       HoldScope
	Kind                                                        HoldKind
	Until                                                       time.Time
}

func holdOf(h *pb.Hold) *Hold {
	if h == nil || h.Id == "" {
		return nil
	}
	return &Hold{ID: h.Id, Catalog: h.Catalog, Dependency: h.Dependency, Tenant: h.Tenant, Method: h.Method,
		Scope: scopeOf(h.Scope), Kind: holdKindOf(h.Kind), Code: h.Code,
		Rule: h.Rule, Reason: h.Reason, Until: h.Until.AsTime()}
}

func decisionOf(d *pb.Decision) *Decision {
	return &Decision{Verdict: VerdictOf(d.Verdict), Strategy: strategyOf(d.GetRetry().GetStrategy()), Reason: d.Reason, Rule: d.Rule,
		RequiredTransition: d.RequiredTransition, TerminalState: d.TerminalState,
		AfterMs: d.GetRetry().GetAfterMs(), MaxAfterMs: d.GetRetry().GetMaxAfterMs(), Hold: holdOf(d.Hold), Raw: d}
}
