// Command bench measures what the Go library adds to a call against calling
// retryd's RPCs by hand, on one connection, sequentially:
//
//   - success: retryd.Do (Admit, the call, the success counted for the
//     batched ReportOutcomes) vs Admit by hand, then the call;
//
//   - retried once: retryd.Do over a call that fails once with
//     QUEUE_OVERFLOW (a read, no Retry-After: no hold) then succeeds, vs
//     Admit, call, Classify, Admit, call by hand. The wait is not slept
//     (a no-op sleeper in both), so only the overhead is measured.
//
//     go run ./cmd/bench -addr 127.0.0.1:50051 -n 5000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func measure(n int, f func(i int)) []time.Duration {
	for i := 0; i < n/10; i++ { // warm-up
		f(i)
	}
	out := make([]time.Duration, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		f(i)
		out[i] = time.Since(t)
	}
	return out
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "retryd address")
	n := flag.Int("n", 5000, "calls per case")
	flag.Parse()
	ctx := context.Background()
	c, err := retryd.New(*addr, retryd.WithCatalog("vibecode"), retryd.WithDependency("bench-portal"), retryd.WithTenant("bench"),
		retryd.WithTimeout(time.Second), retryd.WithSleeper(func(context.Context, time.Duration) error { return nil }),
		retryd.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	stub := c.Stub()
	admit := &pb.AdmitRequest{Catalog: "vibecode", Dependency: "bench-portal", Tenant: "bench", Method: "crm.deal.get",
		Operation: pb.OperationKind_OPERATION_KIND_READ, Attempt: 1}
	admit2 := &pb.AdmitRequest{Catalog: "vibecode", Dependency: "bench-portal", Tenant: "bench", Method: "crm.deal.get",
		Operation: pb.OperationKind_OPERATION_KIND_READ, Attempt: 2}
	ok := func(context.Context) (int, error) { return 1, nil }
	call := retryd.Call[int]{Operation: retryd.Read, Method: "crm.deal.get"}

	handSuccess := measure(*n, func(int) {
		if _, err := stub.Admit(ctx, admit); err != nil {
			panic(err)
		}
		_, _ = ok(ctx)
	})
	libSuccess := measure(*n, func(int) {
		if _, err := retryd.Do(ctx, c, ok, call); err != nil {
			panic(err)
		}
	})
	failOnce := func() func(context.Context) (int, error) {
		k := 0
		return func(context.Context) (int, error) {
			k++
			if k == 1 {
				return 0, &retryd.DependencyError{Code: "QUEUE_OVERFLOW"}
			}
			return 1, nil
		}
	}
	handRetried := measure(*n, func(int) {
		f := failOnce()
		_, _ = stub.Admit(ctx, admit)
		if _, err := f(ctx); err != nil {
			r, err := stub.Classify(ctx, &pb.ClassifyRequest{Failure: &pb.Failure{Catalog: "vibecode", Code: "QUEUE_OVERFLOW",
				Operation: pb.OperationKind_OPERATION_KIND_READ, Method: "crm.deal.get", Attempt: 1, Tenant: "bench", Dependency: "bench-portal"}})
			if err != nil || r.Decision.Verdict != pb.Verdict_VERDICT_RETRY_WITH_LIMIT {
				panic(fmt.Sprint(err, r))
			}
			_, _ = stub.Admit(ctx, admit2)
			_, _ = f(ctx)
		}
	})
	libRetried := measure(*n, func(int) {
		if _, err := retryd.Do(ctx, c, failOnce(), call); err != nil {
			panic(err)
		}
	})
	row := func(name string, hand, lib []time.Duration) {
		fmt.Printf("%-14s by hand p50 %8v p99 %8v | library p50 %8v p99 %8v | added p50 %8v\n", name,
			pct(hand, .5), pct(hand, .99), pct(lib, .5), pct(lib, .99), pct(lib, .5)-pct(hand, .5))
	}
	fmt.Printf("%d sequential calls per case against %s\n", *n, *addr)
	row("success", handSuccess, libSuccess)
	row("retried once", handRetried, libRetried)
}
