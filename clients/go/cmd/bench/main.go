// Command bench measures what the Go library adds to a call against calling
// the function bare, sequentially, per call (median and p99 over -n calls):
//
//   - bare: a no-op function called directly;
//
//   - mirror: retryd.Do over it, the holds mirror synced and no hold in
//     force (the success path: local admission, the success counted for
//     the batched ReportOutcomes; no RPC — the Admit RPCs sent are printed);
//
//   - admit: the same with the mirror off (WithMirror(false)): an Admit RPC
//     per call, what every call cost before the mirror.
//
//     go run ./cmd/bench -addr 127.0.0.1:50051 -n 20000
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
)

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func measure(n int, f func()) []time.Duration {
	for i := 0; i < n/10; i++ { // warm-up
		f()
	}
	out := make([]time.Duration, n)
	for i := range out {
		t := time.Now()
		f()
		out[i] = time.Since(t)
	}
	return out
}

//go:noinline
func noop(context.Context) (int, error) { return 1, nil }

func client(addr string, mirror bool) *retryd.Client {
	c, err := retryd.New(addr, retryd.WithCatalog("vibecode"), retryd.WithDependency("bench-portal"), retryd.WithTenant("bench"),
		retryd.WithTimeout(time.Second), retryd.WithMirror(mirror),
		retryd.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return c
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "retryd address")
	n := flag.Int("n", 20000, "calls per case (>= 10000 for the figures in the note)")
	flag.Parse()
	ctx := context.Background()
	call := retryd.Call[int]{Operation: retryd.Read, Method: "crm.deal.get"}

	bare := measure(*n, func() { _, _ = noop(ctx) })

	c := client(*addr, true)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := c.Watch(wctx, []string{"bench-portal"}, []string{"bench"}); err != nil {
		fmt.Fprintln(os.Stderr, "mirror not synced:", err)
		os.Exit(1)
	}
	cancel()
	before := c.Stats()
	lib := measure(*n, func() {
		if _, err := retryd.Do(ctx, c, noop, call); err != nil {
			panic(err)
		}
	})
	after := c.Stats()
	_ = c.Close()

	off := client(*addr, false)
	admit := measure(*n/4, func() {
		if _, err := retryd.Do(ctx, off, noop, call); err != nil {
			panic(err)
		}
	})
	_ = off.Close()

	fmt.Printf("%d sequential calls per case (admit: %d) against %s\n", *n, *n/4, *addr)
	row := func(name string, d []time.Duration) {
		fmt.Printf("%-28s p50 %9v  p99 %9v  added p50 %9v\n", name, pct(d, .5), pct(d, .99), pct(d, .5)-pct(bare, .5))
	}
	row("bare function", bare)
	row("retryd.Do, mirror synced", lib)
	row("retryd.Do, mirror off", admit)
	fmt.Printf("mirror case: %d Admit RPCs, %d local admissions (of %d calls with warm-up)\n",
		after.AdmitRPCs-before.AdmitRPCs, after.LocalAdmissions-before.LocalAdmissions, *n+*n/10)
}
