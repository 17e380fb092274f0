// Command mirrorbench measures the clients' holds mirror in a fleet (issue
// 26), with the Go client, on loopback: it starts two `retryd serve
// --state REDIS_URL` replicas itself (bench/mirror.sh starts the
// redis-server) and reports:
//
//  1. Admit RPCs retryd receives for 1 000 successful calls after the
//     snapshot (grpc_server_started_total{grpc_method="Admit"} from the
//     replica's /metrics; target 0);
//
//  2. a hold placed on a replica -> in a client's mirror, over -placements
//     placements (half on the client's replica, half on the other one,
//     through Redis): p50, p99, max (target p99 <= 200 ms);
//
//  3. the reset of #22 item 1 with 40 mirror clients (20 per replica): a
//     FrontSpin quota stop for tenant acme ends 1.5 s ahead; each client
//     calls in a loop, each call reaching the dependency takes 150 ms and
//     fails with RATE_LIMITED again: calls reaching the dependency in the
//     3 s after the reset (target 1);
//
//  4. a replica restarted (SIGKILL, then started on the same port, same
//     Redis) under 40 mirror clients during a quota stop (reset 10 min
//     ahead), the clients calling throughout: calls reaching the stopped
//     tenant (target 0), and how long until every mirror is synced again.
//
//     go run ./cmd/mirrorbench -bin target/release/retryd -redis redis://127.0.0.1:6379/0
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type replica struct {
	name, addr, metrics string
	cmd                 *exec.Cmd
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (r *replica) start(bin, state string) {
	r.cmd = exec.Command(bin, "serve", "--listen", r.addr, "--metrics-listen", r.metrics, "--state", state,
		"--log-level", "warn", "--hold-placements-per-sec", "100000", "--dependency-holds-per-sec", "100000")
	r.cmd.Stderr = os.Stderr
	if err := r.cmd.Start(); err != nil {
		panic(err)
	}
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", r.addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if i > 300 {
			panic(r.name + " did not listen")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *replica) kill() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

func stub(addr string) pb.RetryDecisionServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return pb.NewRetryDecisionServiceClient(conn)
}

func client(addr, dep, tenant string, sleep retryd.Sleeper) *retryd.Client {
	opts := []retryd.Option{retryd.WithCatalog("frontspin"), retryd.WithDependency(dep), retryd.WithTenant(tenant),
		retryd.WithTimeout(2 * time.Second), retryd.WithLogger(quiet)}
	if sleep != nil {
		opts = append(opts, retryd.WithSleeper(sleep))
	}
	c, err := retryd.New(addr, opts...)
	if err != nil {
		panic(err)
	}
	return c
}

// admits reads grpc_server_started_total{grpc_method="Admit"} from a replica's /metrics.
func admits(metricsAddr string) float64 {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "grpc_server_started_total{") && strings.Contains(l, `grpc_method="Admit"`) {
			f, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				panic(l)
			}
			return f
		}
	}
	panic("no grpc_server_started_total for Admit at " + metricsAddr)
}

func quotaStop(dep, tenant string, reset time.Time, token string) *pb.ClassifyRequest {
	return &pb.ClassifyRequest{Failure: &pb.Failure{Catalog: "frontspin", Code: "RATE_LIMITED",
		Operation: pb.OperationKind_OPERATION_KIND_WRITE, Attempt: 1, Dependency: dep, Tenant: tenant,
		QuotaResetsAt: timestamppb.New(reset), ProbeToken: token}}
}

func watch(c *retryd.Client, deps, tenants []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Watch(ctx, deps, tenants); err != nil {
		panic(err)
	}
}

func waitHolds(cs []*retryd.Client, min int, within time.Duration) {
	until := time.Now().Add(within)
	for _, c := range cs {
		for c.Stats().Holds < min {
			if time.Now().After(until) {
				panic(fmt.Sprintf("a mirror holds %d < %d after %v", c.Stats().Holds, min, within))
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func part1(a *replica) {
	c := client(a.addr, "m1-portal", "m1-tenant", nil)
	defer c.Close()
	watch(c, []string{"m1-portal"}, []string{"m1-tenant"})
	// One Admit by hand, so the counter's series exists and is read (not taken as 0).
	if _, err := stub(a.addr).Admit(context.Background(), &pb.AdmitRequest{Catalog: "frontspin", Dependency: "m1-other"}); err != nil {
		panic(err)
	}
	before, sent := admits(a.metrics), c.Stats().AdmitRPCs
	for i := 0; i < 1000; i++ {
		if _, err := retryd.Do(context.Background(), c, func(context.Context) (int, error) { return 1, nil },
			retryd.Call[int]{Operation: retryd.Read, Method: "crm.deal.get"}); err != nil {
			panic(err)
		}
	}
	fmt.Printf("1. 1 000 successful calls after the snapshot: Admit RPCs received by retryd %.0f (counter %.0f -> %.0f; client sent %d; target 0)\n",
		admits(a.metrics)-before, before, admits(a.metrics), c.Stats().AdmitRPCs-sent)
}

func part2(a, b *replica, n int) {
	deps := make([]string, n)
	for i := range deps {
		deps[i] = fmt.Sprintf("m2-dep-%d", i)
	}
	c := client(a.addr, deps[0], "m2-tenant", nil)
	defer c.Close()
	watch(c, deps, []string{"m2-tenant"})
	sa, sb := stub(a.addr), stub(b.addr)
	var same, other []time.Duration
	for i, dep := range deps {
		s, into := sa, &same
		if i%2 == 1 {
			s, into = sb, &other
		}
		have := c.Stats().Holds
		t0 := time.Now()
		if _, err := s.Classify(context.Background(), quotaStop(dep, "m2-tenant", t0.Add(10*time.Minute), "")); err != nil {
			panic(err)
		}
		for c.Stats().Holds == have {
			if time.Since(t0) > 10*time.Second {
				panic("a placement never reached the mirror")
			}
			time.Sleep(100 * time.Microsecond)
		}
		*into = append(*into, time.Since(t0))
	}
	all := append(append([]time.Duration(nil), same...), other...)
	row := func(name string, d []time.Duration) {
		fmt.Printf("   %-38s n=%3d p50 %8v p99 %8v max %8v\n", name, len(d), pct(d, .5).Round(10*time.Microsecond),
			pct(d, .99).Round(10*time.Microsecond), pct(d, 1).Round(10*time.Microsecond))
	}
	fmt.Println("2. hold placed (Classify sent) -> in the client's mirror (target p99 <= 200 ms):")
	row("placed on the client's replica", same)
	row("placed on the other replica (Redis)", other)
	row("all", all)
}

// calls counts calls reaching the dependency, by time.
type calls struct {
	mu sync.Mutex
	at []time.Time
}

func (k *calls) add(t time.Time) { k.mu.Lock(); k.at = append(k.at, t); k.mu.Unlock() }

func (k *calls) between(from, to time.Time) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, t := range k.at {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func rateLimitedMapper(error) *retryd.Failure {
	return &retryd.Failure{Catalog: "frontspin", Code: "RATE_LIMITED", QuotaResetsAt: time.Now().Add(time.Minute)}
}

func errRateLimited() error { return errors.New("RATE_LIMITED") }

func fleet(a, b *replica, dep, tenant string) []*retryd.Client {
	cs := make([]*retryd.Client, 40)
	for i := range cs {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		cs[i] = client(addr, dep, tenant, nil)
	}
	for _, c := range cs {
		watch(c, []string{dep}, []string{tenant})
	}
	return cs
}

func part3(a, b *replica) {
	const dep, tenant = "m3-frontspin", "acme"
	cs := fleet(a, b, dep, tenant)
	reset := time.Now().Add(1500 * time.Millisecond)
	if _, err := stub(a.addr).Classify(context.Background(), quotaStop(dep, tenant, reset, "")); err != nil {
		panic(err)
	}
	waitHolds(cs, 1, time.Second)
	var got calls
	end := reset.Add(3 * time.Second)
	call := retryd.Call[int]{Operation: retryd.Write, Method: "deal.sync", ToFailure: rateLimitedMapper}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithDeadline(context.Background(), end)
			defer cancel()
			for ctx.Err() == nil {
				_, _ = retryd.Do(ctx, c, func(context.Context) (int, error) {
					got.add(time.Now())
					time.Sleep(150 * time.Millisecond)
					return 0, errRateLimited()
				}, call)
				if ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond) // a caller that polls again at once
				}
			}
		}()
	}
	wg.Wait()
	var admitRPCs, local uint64
	for _, c := range cs {
		s := c.Stats()
		admitRPCs, local = admitRPCs+s.AdmitRPCs, local+s.LocalRefusals
		_ = c.Close()
	}
	fmt.Printf("3. reset with 40 mirror clients (2 replicas, Redis): calls reaching the dependency in the 3 s after the reset: %d (target 1); "+
		"Admit RPCs %d, local refusals %d\n", got.between(reset.Add(-50*time.Millisecond), end), admitRPCs, local)
}

func part4(a, b *replica, bin, state string) {
	const dep, tenant = "m4-frontspin", "stopped"
	if _, err := stub(a.addr).Classify(context.Background(), quotaStop(dep, tenant, time.Now().Add(10*time.Minute), "")); err != nil {
		panic(err)
	}
	cs := fleet(a, b, dep, tenant)
	waitHolds(cs, 1, 2*time.Second)
	var got calls
	var stale, synced atomic.Int64
	stop := make(chan struct{})
	call := retryd.Call[int]{Operation: retryd.Write, Method: "deal.sync", ToFailure: rateLimitedMapper}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, _ = retryd.Do(ctx, c, func(context.Context) (int, error) {
					got.add(time.Now())
					return 0, errRateLimited()
				}, call)
				cancel()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	t0 := time.Now()
	a.kill()
	time.Sleep(500 * time.Millisecond)
	for _, c := range cs {
		if c.Stats().Stale {
			stale.Add(1)
		}
	}
	a.start(bin, state)
	restarted := time.Since(t0)
	until := time.Now().Add(15 * time.Second)
	for time.Now().Before(until) {
		n := int64(0)
		for _, c := range cs {
			if c.Stats().Synced {
				n++
			}
		}
		synced.Store(n)
		if n == int64(len(cs)) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resynced := time.Since(t0)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	var refusals uint64
	for _, c := range cs {
		refusals += c.Stats().LocalRefusals
		_ = c.Close()
	}
	fmt.Printf("4. replica A killed and restarted (--state redis) under 40 mirror clients during a quota stop: "+
		"calls reaching the stopped tenant %d (target 0); stale mirrors 0.5 s after the kill %d of 20 on A; "+
		"A listening again %v after the kill, %d/40 mirrors synced %v after it; local refusals %d\n",
		len(got.at), stale.Load(), restarted.Round(time.Millisecond), synced.Load(), resynced.Round(time.Millisecond), refusals)
}

func main() {
	bin := flag.String("bin", "../../target/debug/retryd", "retryd binary")
	state := flag.String("redis", "", "redis URL for --state (both replicas)")
	placements := flag.Int("placements", 200, "placements measured in part 2 (<= 256)")
	only := flag.Int("only", 0, "run one part (1-4)")
	flag.Parse()
	if *state == "" {
		fmt.Fprintln(os.Stderr, "mirrorbench: -redis is required")
		os.Exit(2)
	}
	a := &replica{name: "A", addr: freePort(), metrics: freePort()}
	b := &replica{name: "B", addr: freePort(), metrics: freePort()}
	a.start(*bin, *state)
	b.start(*bin, *state)
	defer a.kill()
	defer b.kill()
	run := func(p int) bool { return *only == 0 || *only == p }
	if run(1) {
		part1(a)
	}
	if run(2) {
		part2(a, b, min(*placements, retryd.MaxWatched))
	}
	if run(3) {
		part3(a, b)
	}
	if run(4) {
		part4(a, b, *bin, *state)
	}
}
