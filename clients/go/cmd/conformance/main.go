// Command conformance runs every scenario of clients/conformance/scenarios
// against the real retryd with this library, concurrently.
//
//	RETRYD_BIN=target/debug/retryd go run ./cmd/conformance [SCENARIO_DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// slow is the address of a retryd that never answers (main sets it).
var slow string

// shedding: a second retryd that sheds every call with advice
// (--max-buffered-bytes 1), started once, if a scenario needs it.
var (
	shedOnce              sync.Once
	shedAddr, shedErr     string
	shedBin, shedTok, pol string
	shedSrv               *exec.Cmd
)

func shedding() (string, error) {
	shedOnce.Do(func() {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort())
		srv := exec.Command(shedBin, "serve", "--listen", addr, "--metrics-listen", "off", "--operator-token-file", shedTok,
			"--log-level", "error", "--max-buffered-bytes", "1")
		srv.Env = append(os.Environ(), "RETRYD_POLICY="+pol)
		srv.Stderr = os.Stderr
		if err := srv.Start(); err != nil {
			shedErr = err.Error()
			return
		}
		shedSrv = srv
		for i := 0; i < 200; i++ {
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				shedAddr = addr
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		shedErr = "the shedding retryd did not listen on " + addr
	})
	if shedErr != "" {
		return "", errors.New(shedErr)
	}
	return shedAddr, nil
}

const token = "conformance-operator-token-0123456789"

type errorSpec struct {
	Kind              string          `json:"kind"`
	Code              string          `json:"code"`
	RetryAfter        *string         `json:"retry_after"`
	RetryAfterMs      *uint64         `json:"retry_after_ms"`
	RetryAfterDateInS *int            `json:"retry_after_date_in_s"`
	Status            json.RawMessage `json:"status"`
	RetryDelayMs      *int64          `json:"retry_delay_ms"`
	Body              json.RawMessage `json:"body"`
	Message           string          `json:"message"`
	Pushback          []string        `json:"pushback"`
	Catalog           string          `json:"catalog"`
}

type outcome struct {
	Ok      *string    `json:"ok"`
	Error   *errorSpec `json:"error"`
	Applied bool       `json:"applied"`
}

type scenario struct {
	Name   string `json:"name"`
	Sleep  string `json:"sleep"`
	Retryd string `json:"retryd"`
	Setup  []struct {
		PlaceQuotaStop *struct {
			ResetsInMs int64 `json:"resets_in_ms"`
		} `json:"place_quota_stop"`
		ReleaseHolds    *struct{} `json:"release_holds"`
		MirrorSync      *struct{} `json:"mirror_sync"`
		WaitMirrorHolds *struct {
			Min int `json:"min"`
		} `json:"wait_mirror_holds"`
	} `json:"setup"`
	Call struct {
		Catalog                string `json:"catalog"`
		Operation              string `json:"operation"`
		Method                 string `json:"method"`
		IdempotencyKey         string `json:"idempotency_key"`
		IdempotencyKeyEnforced bool   `json:"idempotency_key_enforced"`
		ReadBack               string `json:"read_back"`
		DeadlineMs             *int64 `json:"deadline_ms"`
		CancelAfterMs          *int64 `json:"cancel_after_ms"`
		Repeat                 int    `json:"repeat"`
	} `json:"call"`
	Dependency struct {
		DedupeByKey bool      `json:"dedupe_by_key"`
		Outcomes    []outcome `json:"outcomes"`
	} `json:"dependency"`
	Expect map[string]json.RawMessage `json:"expect"`
}

type envelopeError struct {
	body   []byte
	header http.Header
}

func (e *envelopeError) Error() string { return "envelope" }

type dependency struct {
	sc                       *scenario
	mu                       sync.Mutex
	runs, effects, readBacks int
	keys                     map[string]bool
}

func (d *dependency) apply() {
	if d.sc.Call.Operation != "write" {
		return
	}
	if k := d.sc.Call.IdempotencyKey; d.sc.Dependency.DedupeByKey && k != "" {
		if d.keys[k] {
			return
		}
		d.keys[k] = true
	}
	d.effects++
}

func (d *dependency) run(context.Context) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	outs := d.sc.Dependency.Outcomes
	o := outs[min(d.runs, len(outs)-1)]
	d.runs++
	if o.Ok != nil {
		d.apply()
		return *o.Ok, nil
	}
	if o.Applied {
		d.apply()
	}
	return "", makeError(o.Error)
}

func makeError(e *errorSpec) error {
	h := http.Header{}
	if e.RetryAfter != nil {
		h.Set("Retry-After", *e.RetryAfter)
	}
	if e.RetryAfterDateInS != nil {
		h.Set("Retry-After", time.Now().Add(time.Duration(*e.RetryAfterDateInS)*time.Second).UTC().Format(http.TimeFormat))
	}
	switch e.Kind {
	case "code":
		ra := ""
		if e.RetryAfter != nil {
			ra = *e.RetryAfter
		}
		return &retryd.DependencyError{Code: e.Code, RetryAfter: ra, RetryAfterMs: e.RetryAfterMs, Catalog: e.Catalog}
	case "http":
		var st int
		_ = json.Unmarshal(e.Status, &st)
		return &retryd.HTTPStatusError{StatusCode: st, Header: h}
	case "grpc":
		var name string
		_ = json.Unmarshal(e.Status, &name)
		code := codes.Unknown
		for c := codes.OK; c <= codes.Unauthenticated; c++ {
			if strings.EqualFold(strings.ReplaceAll(name, "_", ""), c.String()) || (name == "CANCELLED" && c == codes.Canceled) {
				code = c
			}
		}
		st := status.New(code, "scripted")
		if e.RetryDelayMs != nil {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(*e.RetryDelayMs) * time.Millisecond)})
		}
		if e.Pushback != nil {
			return retryd.WithTrailer(st.Err(), metadata.MD{"grpc-retry-pushback-ms": e.Pushback})
		}
		return st.Err()
	case "envelope":
		return &envelopeError{body: e.Body, header: h}
	}
	return errors.New(e.Message)
}

func (d *dependency) readBack(context.Context) (string, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.readBacks++
	if d.sc.Call.ReadBack == "inconclusive" {
		return "", false, retryd.ErrInconclusive
	}
	return "found", d.effects > 0, nil
}

func toFailure(err error) *retryd.Failure {
	var env *envelopeError
	if errors.As(err, &env) {
		return retryd.FromEnvelope(env.body, env.header)
	}
	return retryd.DefaultMapper(err)
}

func setup(c *retryd.Client, stub pb.RetryDecisionServiceClient, sc *scenario, tenant, dep string) error {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, s := range sc.Setup {
		if s.PlaceQuotaStop != nil {
			f := &pb.Failure{Catalog: "frontspin", Code: "RATE_LIMITED", Operation: pb.OperationKind_OPERATION_KIND_WRITE,
				Attempt: 1, Tenant: tenant, Dependency: dep,
				QuotaResetsAt: timestamppb.New(time.Now().Add(time.Duration(s.PlaceQuotaStop.ResetsInMs) * time.Millisecond))}
			r, err := stub.Classify(ctx, &pb.ClassifyRequest{Failure: f})
			if err != nil || r.Decision.Hold == nil {
				return fmt.Errorf("setup placed no hold: %v", err)
			}
			// The stop stands for one placed elsewhere in the fleet: it reaches
			// the mirror by its watch event, within milliseconds (a call in that
			// window is admitted; bench/mirror.sh measures it). The scenarios
			// written before the mirror call at once: wait for it here.
			for until := time.Now().Add(3 * time.Second); c.Stats().Holds == 0 && time.Now().Before(until); {
				time.Sleep(2 * time.Millisecond)
			}
		}
		if s.MirrorSync != nil {
			wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := c.Watch(wctx, []string{dep}, []string{tenant})
			wcancel()
			if err != nil {
				return fmt.Errorf("setup mirror_sync: %w", err)
			}
		}
		if w := s.WaitMirrorHolds; w != nil {
			until := time.Now().Add(3 * time.Second)
			for c.Stats().Holds < w.Min {
				if time.Now().After(until) {
					return fmt.Errorf("setup wait_mirror_holds: %d < %d after 3 s", c.Stats().Holds, w.Min)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if s.ReleaseHolds != nil {
			l, err := stub.ListHolds(ctx, &pb.ListHoldsRequest{Tenant: tenant, Dependency: dep})
			if err != nil || len(l.Holds) == 0 {
				return fmt.Errorf("setup: no hold to release: %v", err)
			}
			for _, h := range l.Holds {
				if _, err := stub.ReleaseHold(ctx, &pb.ReleaseHoldRequest{Id: h.Id}); err != nil {
					return err
				}
			}
			// The lift reaches the mirror by its watch event: wait for it (as for a placement).
			for until := time.Now().Add(3 * time.Second); c.Stats().Holds > 0 && time.Now().Before(until); {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	return nil
}

func runOne(stub pb.RetryDecisionServiceClient, addr, down string, sc *scenario) []string {
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)
	tenant, depName := "t-"+sc.Name+"-go-"+run, "d-"+sc.Name+"-go-"+run
	dep := &dependency{sc: sc, keys: map[string]bool{}}
	var mu sync.Mutex
	var waits []time.Duration
	refusals := 0
	sleeper := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		if sc.Sleep == "record" {
			return ctx.Err()
		}
		return retryd.SleepContext(ctx, d)
	}
	target := addr
	switch sc.Retryd {
	case "down":
		target = down
	case "slow":
		target = slow
	case "shedding":
		a, err := shedding()
		if err != nil {
			return []string{err.Error()}
		}
		target = a
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := retryd.New(target, retryd.WithCatalog(sc.Call.Catalog), retryd.WithDependency(depName), retryd.WithTenant(tenant),
		retryd.WithSleeper(sleeper), retryd.WithConnectTimeout(500*time.Millisecond),
		// Scenarios test the loop, not the 50 ms default: on a loaded CI machine 34 concurrent first
		// calls to a debug server can take longer (the retryd-down scenarios test the fallback).
		retryd.WithTimeout(2*time.Second), retryd.WithLogger(quiet),
		retryd.WithHook(func(e retryd.Event) {
			if e.Kind == "admit_refused" {
				mu.Lock()
				refusals++
				mu.Unlock()
			}
		}))
	if err != nil {
		return []string{err.Error()}
	}
	if err := setup(c, stub, sc, tenant, depName); err != nil {
		_ = c.Close()
		return []string{err.Error()}
	}
	call := retryd.Call[string]{Method: sc.Call.Method, IdempotencyKey: sc.Call.IdempotencyKey,
		IdempotencyKeyEnforced: sc.Call.IdempotencyKeyEnforced, ToFailure: toFailure}
	switch sc.Call.Operation {
	case "read":
		call.Operation = retryd.Read
	case "write":
		call.Operation = retryd.Write
	}
	if sc.Call.ReadBack != "" {
		call.ReadBack = dep.readBack
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if sc.Call.DeadlineMs != nil {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*sc.Call.DeadlineMs)*time.Millisecond)
		defer cancel()
	}
	if sc.Call.CancelAfterMs != nil {
		time.AfterFunc(time.Duration(*sc.Call.CancelAfterMs)*time.Millisecond, cancel)
	}
	before := c.Stats()
	t0 := time.Now()
	var result string
	for i := 0; i < max(sc.Call.Repeat, 1); i++ {
		result, err = retryd.Do(ctx, c, dep.run, call)
	}
	elapsed := time.Since(t0)
	_ = c.Close() // flushes the outcome counts
	after := c.Stats()
	// Shed answers and busy skips over the client's life: its mirror's
	// stream, opened at New, may be the RPC that met the shed server first.
	st := stats{admits: after.AdmitRPCs - before.AdmitRPCs, localRefusals: after.LocalRefusals - before.LocalRefusals,
		reports: after.ReportRPCs - before.ReportRPCs, reported: after.ReportedRequests - before.ReportedRequests,
		shedAnswers: after.ShedAnswers, busySkips: after.BusySkips}

	out := map[string]string{}
	var re *retryd.RefusedError
	var rej *retryd.RejectedError
	switch {
	case err == nil:
	case errors.As(err, &rej):
		out["error"] = "rejected"
		out["field"] = rej.Field
	case errors.As(err, &re):
		switch re.Reason {
		case retryd.RefusedHeld:
			out["error"] = "held"
		case retryd.RefusedDeadline:
			out["error"] = "deadline_exceeded"
		case retryd.RefusedFallback:
			out["error"] = "fallback"
		default:
			out["error"] = "retry_refused"
			out["verdict"] = strings.ToUpper(re.Decision.Verdict.String()) // the scenarios spell verdicts as the proto does
			out["terminal_state"] = re.Decision.TerminalState
		}
	case errors.Is(err, context.Canceled):
		out["error"] = "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		out["error"] = "deadline_exceeded"
	default:
		out["error"] = "unmapped"
	}
	var total time.Duration
	for _, w := range waits {
		total += w
	}
	return check(sc, dep, waits, total, refusals, result, out, elapsed, c.Fallbacks(), st)
}

// stats: what the client sent during the call phase (and the final flush).
type stats struct {
	admits, localRefusals, reports, reported, shedAnswers, busySkips uint64
}

func check(sc *scenario, dep *dependency, waits []time.Duration, total time.Duration, refusals int, result string,
	out map[string]string, elapsed time.Duration, fallbacks uint64, st stats) []string {
	var bad []string
	e := sc.Expect
	num := func(k string) (float64, bool) {
		v, ok := e[k]
		if !ok {
			return 0, false
		}
		var f float64
		_ = json.Unmarshal(v, &f)
		return f, true
	}
	str := func(k string) (string, bool) {
		v, ok := e[k]
		if !ok {
			return "", false
		}
		var s string
		_ = json.Unmarshal(v, &s)
		return s, true
	}
	strs := func(k string) []string {
		var s []string
		if v, ok := e[k]; ok {
			_ = json.Unmarshal(v, &s)
		}
		return s
	}
	want := func(ok bool, f string, a ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(f, a...))
		}
	}
	ms := float64(total) / float64(time.Millisecond)
	if n, ok := num("runs"); ok {
		want(float64(dep.runs) == n, "runs %d != %v", dep.runs, n)
	}
	if n, ok := num("runs_min"); ok {
		want(float64(dep.runs) >= n, "runs %d < %v", dep.runs, n)
	}
	if n, ok := num("runs_max"); ok {
		want(float64(dep.runs) <= n, "runs %d > %v", dep.runs, n)
	}
	if n, ok := num("effects"); ok {
		want(float64(dep.effects) == n, "effects %d != %v", dep.effects, n)
	}
	if n, ok := num("read_backs"); ok {
		want(float64(dep.readBacks) == n, "read_backs %d != %v", dep.readBacks, n)
	}
	if n, ok := num("wait_ms_min"); ok {
		want(ms >= n, "waited %.0f ms < %v", ms, n)
	}
	if n, ok := num("wait_ms_max"); ok {
		want(ms <= n, "waited %.0f ms > %v", ms, n)
	}
	if v, ok := e["waits_ms"]; ok {
		var w []int64
		_ = json.Unmarshal(v, &w)
		got := make([]int64, len(waits))
		for i, x := range waits {
			got[i] = int64((x + time.Millisecond/2) / time.Millisecond)
		}
		want(fmt.Sprint(got) == fmt.Sprint(w), "waits %v != %v", got, w)
	}
	if n, ok := num("elapsed_ms_max"); ok {
		want(float64(elapsed.Milliseconds()) <= n, "took %d ms > %v", elapsed.Milliseconds(), n)
	}
	if n, ok := num("admit_refusals_min"); ok {
		want(float64(refusals) >= n, "admit refusals %d < %v", refusals, n)
	}
	if n, ok := num("fallbacks_min"); ok {
		want(float64(fallbacks) >= n, "fallbacks %d < %v", fallbacks, n)
	}
	if n, ok := num("admit_rpcs_max"); ok {
		want(float64(st.admits) <= n, "Admit RPCs %d > %v", st.admits, n)
	}
	if n, ok := num("admit_rpcs_min"); ok {
		want(float64(st.admits) >= n, "Admit RPCs %d < %v", st.admits, n)
	}
	if n, ok := num("local_refusals_min"); ok {
		want(float64(st.localRefusals) >= n, "local refusals %d < %v", st.localRefusals, n)
	}
	if n, ok := num("report_rpcs_max"); ok {
		want(float64(st.reports) <= n, "ReportOutcomes RPCs %d > %v", st.reports, n)
	}
	if n, ok := num("shed_answers_min"); ok {
		want(float64(st.shedAnswers) >= n, "shed answers %d < %v", st.shedAnswers, n)
	}
	if n, ok := num("busy_skips_min"); ok {
		want(float64(st.busySkips) >= n, "busy skips %d < %v", st.busySkips, n)
	}
	if n, ok := num("reported_requests"); ok {
		want(float64(st.reported) == n, "reported first attempts %d != %v", st.reported, n)
	}
	errs := strs("error_any")
	if s, ok := str("error"); ok {
		errs = []string{s}
	}
	if len(errs) > 0 {
		want(contains(errs, out["error"]), "error %v not in %v", out, errs)
	} else {
		want(len(out) == 0, "unexpected error %v", out)
	}
	if s, ok := str("result"); ok {
		want(result == s, "result %q != %q", result, s)
	}
	if s, ok := str("verdict"); ok {
		want(out["verdict"] == s, "verdict %q != %q", out["verdict"], s)
	}
	if vs := strs("verdict_any"); len(vs) > 0 {
		want(contains(vs, out["verdict"]), "verdict %q not in %v", out["verdict"], vs)
	}
	if s, ok := str("rejected_field"); ok {
		want(out["field"] == s, "rejected field %q != %q", out["field"], s)
	}
	if s, ok := str("terminal_state"); ok {
		want(out["terminal_state"] == s, "terminal_state %q != %q", out["terminal_state"], s)
	}
	return bad
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func main() {
	bin := os.Getenv("RETRYD_BIN")
	if bin == "" {
		bin = "../../target/debug/retryd"
	}
	dir := "../conformance/scenarios"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	var scs []*scenario
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		sc := &scenario{}
		if err := json.Unmarshal(b, sc); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			os.Exit(2)
		}
		scs = append(scs, sc)
	}
	tmp, _ := os.MkdirTemp("", "retryd-conf-go-")
	defer os.RemoveAll(tmp)
	tok := filepath.Join(tmp, "operator.token")
	_ = os.WriteFile(tok, []byte(token+"\n"), 0o600)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort())
	srv := exec.Command(bin, "serve", "--listen", addr, "--metrics-listen", "off", "--operator-token-file", tok, "--log-level", "warn")
	// The suite's own catalog (a circuit with a 600 ms probe), on top of the embedded ones.
	shedBin, shedTok, pol = bin, tok, filepath.Join(filepath.Dir(dir), "policies")
	srv.Env = append(os.Environ(), "RETRYD_POLICY="+pol)
	defer func() {
		if shedSrv != nil {
			_ = shedSrv.Process.Kill()
			_ = shedSrv.Wait()
		}
	}()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }()
	conn, _ := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	stub := pb.NewRetryDecisionServiceClient(conn)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := stub.ListCatalogs(ctx, &pb.ListCatalogsRequest{})
		cancel()
		if err == nil {
			break
		}
		if i > 100 {
			panic("retryd did not start: " + err.Error())
		}
		time.Sleep(100 * time.Millisecond)
	}
	down := fmt.Sprintf("127.0.0.1:%d", freePort())
	// A retryd slower than any timeout: it accepts connections (the kernel
	// does, from the backlog) and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	slow = ln.Addr().String()
	// The shedding retryd, if a scenario needs it, starts before the
	// scenarios start together (its start would compete with their first calls).
	for _, sc := range scs {
		if sc.Retryd == "shedding" {
			if _, err := shedding(); err != nil {
				panic(err)
			}
			break
		}
	}
	t0 := time.Now()
	res := make([][]string, len(scs))
	var wg sync.WaitGroup
	for i, sc := range scs {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = runOne(stub, addr, down, sc) }()
	}
	wg.Wait()
	failed := 0
	for i, sc := range scs {
		if len(res[i]) > 0 {
			failed++
			fmt.Printf("conformance go: FAIL %s: %s\n", sc.Name, strings.Join(res[i], "; "))
		} else {
			fmt.Printf("conformance go: PASS %s\n", sc.Name)
		}
	}
	fmt.Printf("conformance go: %d passed, %d failed (%.1f s)\n", len(scs)-failed, failed, time.Since(t0).Seconds())
	if failed > 0 {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		if shedSrv != nil {
			_ = shedSrv.Process.Kill()
			_ = shedSrv.Wait()
		}
		os.Exit(1)
	}
}
