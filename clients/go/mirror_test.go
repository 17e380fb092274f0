package retryd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func syncedMirror(max int) *mirror {
	m := newMirror(nil, max)
	m.want([]string{"d"}, []string{"t"})
	m.syncDeps, m.syncTenants, m.everSynced = map[string]bool{"d": true}, map[string]bool{"t": true}, true
	return m
}

func ev(kind pb.HoldEventKind, id string, scope pb.Scope, tenant string, until time.Time) *pb.WatchHoldsResponse {
	return &pb.WatchHoldsResponse{Kind: kind, Hold: &pb.Hold{Id: id, Catalog: "frontspin", Dependency: "d", Tenant: tenant,
		Scope: scope, Until: timestamppb.New(until)}}
}

func TestMirrorAdmitsLocallyWithoutHoldAndRefusesByOne(t *testing.T) {
	m := syncedMirror(10)
	if a, _, _ := m.decide("frontspin", "d", "t", "m"); a != admitLocal {
		t.Fatalf("no hold: %v, want a local admission", a)
	}
	until := time.Now().Add(time.Hour)
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "other", pb.Scope_SCOPE_TENANT, "t2", until))
	if a, _, _ := m.decide("frontspin", "d", "t", "m"); a != admitLocal {
		t.Fatalf("another tenant's hold: %v, want a local admission", a)
	}
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "mine", pb.Scope_SCOPE_TENANT, "t", until))
	a, h, at := m.decide("", "d", "t", "m") // no catalog: matches a hold of any catalog
	if a != refuseLocal || h.raw.Id != "mine" || at.Sub(until).Abs() > time.Millisecond {
		t.Fatalf("own tenant's hold: %v %v %v, want refused until %v", a, h, at, until)
	}
	if a, _, _ := m.decide("vibecode", "d", "t", "m"); a != admitLocal {
		t.Fatalf("another catalog's hold: %v, want a local admission", a)
	}
	// A probe point (next_probe_at passed) and a probe phase ask Admit.
	e := ev(pb.HoldEventKind_HOLD_EVENT_KIND_EXTENDED, "mine", pb.Scope_SCOPE_TENANT, "t", until)
	e.Hold.NextProbeAt = timestamppb.New(time.Now().Add(-time.Millisecond))
	m.applyLocked(m.live, e)
	if a, _, _ := m.decide("frontspin", "d", "t", "m"); a != askAdmit {
		t.Fatalf("at a probe point: %v, want Admit", a)
	}
	// Past until, a hold with a probe point still covers (its probe window is not sent).
	e = ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "stop", pb.Scope_SCOPE_DEPENDENCY, "", time.Now().Add(-time.Second))
	e.Hold.NextProbeAt = e.Hold.Until
	m2 := syncedMirror(10)
	m2.applyLocked(m2.live, e)
	if a, _, _ := m2.decide("frontspin", "d", "t", "m"); a != askAdmit {
		t.Fatalf("a stop past until, no event yet: %v, want Admit", a)
	}
	// Unsynced or unwatched scopes ask Admit; an unwatched one is added.
	if a, _, _ := m.decide("frontspin", "d2", "t", "m"); a != askAdmit || !m.wantDeps["d2"] {
		t.Fatalf("unwatched dependency: %v (watched %v), want Admit and widening", a, m.wantDeps["d2"])
	}
}

func TestMirrorEventsAreIdempotentByIDAndUntil(t *testing.T) {
	m := syncedMirror(10)
	t1, t2 := time.Now().Add(time.Minute), time.Now().Add(time.Hour)
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h", pb.Scope_SCOPE_DEPENDENCY, "", t2))
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h", pb.Scope_SCOPE_DEPENDENCY, "", t1))
	if got := m.live.byID["h"].until; !got.Equal(t2.Truncate(0)) && got.Sub(t2).Abs() > time.Microsecond {
		t.Fatalf("an older until replaced a later one: %v", got)
	}
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_LIFTED, "h", pb.Scope_SCOPE_DEPENDENCY, "", t2))
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h", pb.Scope_SCOPE_DEPENDENCY, "", t2))
	if len(m.live.byID) != 0 {
		t.Fatal("a PLACED that raced the snapshot came back after its lift")
	}
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h", pb.Scope_SCOPE_DEPENDENCY, "", t2.Add(time.Hour)))
	if len(m.live.byID) != 1 {
		t.Fatal("a re-placement later than the lift was ignored")
	}
}

func TestMirrorPastItsCapDropsTheSoonestAndAsksAdmitForItsDependency(t *testing.T) {
	m := syncedMirror(3)
	for i := range 5 {
		m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, fmt.Sprint("h", i), pb.Scope_SCOPE_METHOD, "",
			time.Now().Add(time.Duration(10-i)*time.Minute)))
	}
	if len(m.live.byID) != 3 || m.live.byID["h4"] != nil || m.live.byID["h0"] == nil {
		t.Fatalf("kept %d holds (h4 %v, h0 %v): want 3, the soonest ending dropped", len(m.live.byID), m.live.byID["h4"], m.live.byID["h0"])
	}
	if a, _, _ := m.decide("frontspin", "d", "t", "other-method"); a != askAdmit {
		t.Fatalf("after a drop: %v, want Admit until the next SYNCED", a)
	}
	// Tombstones are bounded too.
	for i := range maxTombstones + 10 {
		m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_LIFTED, fmt.Sprint("x", i), pb.Scope_SCOPE_METHOD, "", time.Now()))
	}
	if len(m.lifted) != maxTombstones || len(m.liftedOrder) != maxTombstones {
		t.Fatalf("tombstones %d/%d, want %d", len(m.lifted), len(m.liftedOrder), maxTombstones)
	}
}

func TestMirrorCorrectsClockSkew(t *testing.T) {
	m := syncedMirror(10)
	m.offset.Store(int64(time.Hour)) // the server's clock is an hour ahead
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h", pb.Scope_SCOPE_DEPENDENCY, "", time.Now().Add(30*time.Minute)))
	if a, _, _ := m.decide("frontspin", "d", "t", "m"); a != admitLocal {
		t.Fatalf("a hold that ended by the server's clock: %v, want a local admission", a)
	}
	m.applyLocked(m.live, ev(pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, "h2", pb.Scope_SCOPE_DEPENDENCY, "", time.Now().Add(90*time.Minute)))
	a, _, at := m.decide("frontspin", "d", "t", "m")
	if a != refuseLocal || time.Until(at) > 31*time.Minute || time.Until(at) < 29*time.Minute {
		t.Fatalf("retry_at %v from now, want ~30 min on the local clock", time.Until(at))
	}
}

func TestWordsAreTheCLIsAndHTTPs(t *testing.T) {
	got := fmt.Sprint(RetryWithLimit, " ", StateVerificationRequired, " ", FixBeforeRetry, " ", DoNotRetry, " ",
		AlreadyApplied, " ", StrategyExponentialBackoff, " ", QuotaStop, " ", CircuitOpen, " ", ScopeTenant, " ", Write, " ", Verdict(42))
	want := "retry_with_limit state_verification_required fix_before_retry do_not_retry already_applied " +
		"exponential_backoff quota_stop circuit_open tenant write Verdict(42)"
	if got != want {
		t.Fatalf("%q != %q", got, want)
	}
	b, _ := json.Marshal(Decision{Verdict: VerdictOf(pb.Verdict_VERDICT_RETRY_WITH_LIMIT), Strategy: strategyOf(pb.Strategy_STRATEGY_BUDGET)})
	if s := string(b); !json.Valid(b) || !strings.Contains(s, `"Verdict":"retry_with_limit"`) || !strings.Contains(s, `"Strategy":"budget"`) {
		t.Fatalf("JSON: %s", s)
	}
}
