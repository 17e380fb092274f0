package retryd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

// The holds mirror: one WatchHolds stream per Client keeps a local copy of
// the fleet holds that can cover the client's calls, so a call whose scope
// has no hold goes ahead with no RPC (MIRROR-SPEC in docs/clients.md).

const (
	// MaxWatched is how many dependencies (and, apart, tenants) one stream
	// watches; calls for others always use Admit.
	MaxWatched = 256
	// DefaultMaxHolds bounds the mirror (WithMaxHolds).
	DefaultMaxHolds = 10_000
	// Lifted hold ids remembered, so a PLACED that raced the snapshot is ignored.
	maxTombstones = 4096
	// A hold with a probe point stays covering past its until for this long
	// unless an event says otherwise: the server keeps a stop in force
	// through its probe window (not sent), and calls there must ask Admit.
	probeGrace = time.Minute
	// Reconnect backoff: full jitter, base 100 ms, x2, cap 5 s.
	backoffBase, backoffCap = 100 * time.Millisecond, 5 * time.Second
)

// ErrNotWatched is Watch's error when the mirror is off or a limit
// (MaxWatched) leaves a dependency or tenant unwatched.
var ErrNotWatched = errors.New("retryd: not watched")

// MirrorStats are the mirror's state and what it saved.
type MirrorStats struct {
	// Synced: the stream's snapshot covers every watched dependency and tenant.
	Synced bool
	// Stale: the stream is down; known holds still refuse, unknown scopes use Admit.
	Stale bool
	// Holds in the mirror.
	Holds int
	// AdmitRPCs sent, local admissions and refusals made from the mirror.
	AdmitRPCs, LocalAdmissions, LocalRefusals uint64
	// ReportRPCs (ReportOutcomes sent) and the first attempts they reported.
	ReportRPCs, ReportedRequests uint64
	// ShedAnswers: retryd's answers shedding an RPC with retry advice;
	// BusySkips: Classify and Admit RPCs not sent while that advice ran.
	ShedAnswers, BusySkips uint64
	// ResumedSyncs: snapshots retryd resumed from the mirror's bucket
	// digests; ResentBuckets: the buckets those snapshots sent again.
	ResumedSyncs, ResentBuckets uint64
}

type mhold struct {
	catalog, dependency, tenant, method string
	scope                               pb.Scope
	until, nextProbe                    time.Time // server clock; nextProbe zero: none
	untilMs                             int64     // until as the server sent it (its resume digest)
	probing                             bool
	raw                                 *pb.Hold
}

func (h *mhold) covers(catalog, tenant, method string) bool {
	if catalog != "" && h.catalog != catalog {
		return false
	}
	switch h.scope {
	case pb.Scope_SCOPE_TENANT:
		// A hashed tenant ("h:…", from a retryd that ignores `tenants`)
		// may be this one: it covers, and the call asks Admit (probe point).
		return h.tenant == tenant || (tenant != "" && strings.HasPrefix(h.tenant, "h:"))
	case pb.Scope_SCOPE_METHOD:
		return h.method == method
	}
	return true // dependency scope, or one this library does not know: cover (conservative)
}

func (h *mhold) inForce(now time.Time) bool {
	if now.Before(h.until) {
		return true
	}
	return !h.nextProbe.IsZero() && now.Before(h.until.Add(probeGrace))
}

type holdSet struct {
	byID    map[string]*mhold
	byDep   map[string]map[string]*mhold
	dropped map[string]bool // dependencies a drop at the cap left unsynced
}

func newHoldSet() *holdSet {
	return &holdSet{byID: map[string]*mhold{}, byDep: map[string]map[string]*mhold{}, dropped: map[string]bool{}}
}

func (s *holdSet) remove(id string) {
	if h := s.byID[id]; h != nil {
		delete(s.byID, id)
		delete(s.byDep[h.dependency], id)
		if len(s.byDep[h.dependency]) == 0 {
			delete(s.byDep, h.dependency)
		}
	}
}

type watchStream struct {
	gen               uint64
	deps, tenants     []string
	cancel            context.CancelFunc
	synced            chan struct{}
	done              chan error
	depSet, tenantSet map[string]bool
}

type mirror struct {
	c   *Client
	max int

	mu                    sync.RWMutex
	live                  *holdSet
	lifted                map[string]time.Time
	liftedOrder           []string
	wantDeps, wantTenants map[string]bool
	syncDeps, syncTenants map[string]bool
	liveGen, nextGen      uint64
	stale, everSynced     bool
	changed               chan struct{} // closed and replaced at every sync or stale

	offset atomic.Int64 // server clock - local clock, ns
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// counters: what the client sent and decided (kept with the mirror off too).
type counters struct {
	admitRPCs, localAdmits, localRefusals, reportRPCs, reportedRequests atomic.Uint64
	resumedSyncs, resentBuckets                                         atomic.Uint64
}

func newMirror(c *Client, max int) *mirror {
	m := &mirror{c: c, max: max, live: newHoldSet(), lifted: map[string]time.Time{},
		wantDeps: map[string]bool{}, wantTenants: map[string]bool{}, syncDeps: map[string]bool{},
		syncTenants: map[string]bool{}, changed: make(chan struct{}), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	return m
}

func (m *mirror) now() time.Time { return time.Now().Add(time.Duration(m.offset.Load())) }

// want adds dependencies and tenants to the watched sets (up to MaxWatched
// each) and asks for a wider stream; false if any was left out.
func (m *mirror) want(deps, tenants []string) bool {
	all, added := true, false
	m.mu.Lock()
	for _, d := range deps {
		if d == "" || m.wantDeps[d] {
			continue
		}
		if len(m.wantDeps) >= MaxWatched {
			all = false
			continue
		}
		m.wantDeps[d], added = true, true
	}
	for _, t := range tenants {
		if t == "" || m.wantTenants[t] {
			continue
		}
		if len(m.wantTenants) >= MaxWatched {
			all = false
			continue
		}
		m.wantTenants[t], added = true, true
	}
	m.mu.Unlock()
	if added {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	return all
}

func (m *mirror) coveredLocked(deps, tenants []string) bool {
	for _, d := range deps {
		if d != "" && (!m.syncDeps[d] || m.live.dropped[d]) {
			return false
		}
	}
	for _, t := range tenants {
		if t != "" && !m.syncTenants[t] {
			return false
		}
	}
	return true
}

// wait blocks until the synced snapshot covers deps and tenants.
func (m *mirror) wait(ctx context.Context, deps, tenants []string) error {
	for {
		m.mu.RLock()
		ok, ch := m.coveredLocked(deps, tenants), m.changed
		m.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("retryd: mirror not synced for %v %v: %w", deps, tenants, ctx.Err())
		case <-ch:
		}
	}
}

type admission int

const (
	askAdmit admission = iota
	admitLocal
	refuseLocal
)

// decide is local admission: admitted, refused (with the hold and when to
// come back, on the local clock), or ask Admit.
func (m *mirror) decide(catalog, dep, tenant, method string) (admission, *mhold, time.Time) {
	if m == nil || dep == "" {
		return askAdmit, nil, time.Time{}
	}
	m.mu.RLock()
	watched := m.wantDeps[dep] && (tenant == "" || m.wantTenants[tenant])
	if !watched || !m.syncDeps[dep] || m.live.dropped[dep] || (tenant != "" && !m.syncTenants[tenant]) {
		m.mu.RUnlock()
		if !watched {
			m.want([]string{dep}, []string{tenant})
		}
		return askAdmit, nil, time.Time{}
	}
	now := m.now()
	var best *mhold
	for _, h := range m.live.byDep[dep] {
		if h.covers(catalog, tenant, method) && h.inForce(now) && (best == nil || h.until.After(best.until)) {
			best = h
		}
	}
	stale := m.stale
	m.mu.RUnlock()
	switch {
	case best == nil && stale:
		return askAdmit, nil, time.Time{}
	case best == nil:
		return admitLocal, nil, time.Time{}
	case best.probing || (!best.nextProbe.IsZero() && !best.nextProbe.After(now)) || best.tenant != tenant && best.scope == pb.Scope_SCOPE_TENANT:
		return askAdmit, best, time.Time{} // a probe point: retryd arbitrates the one probe
	}
	at := best.until
	if !best.nextProbe.IsZero() && best.nextProbe.Before(at) {
		at = best.nextProbe
	}
	return refuseLocal, best, at.Add(-time.Duration(m.offset.Load()))
}

// learn puts a hold from an Admit or Classify answer into the mirror at
// once, so a retry right after a failure does not slip through before the
// watch event arrives.
func (m *mirror) learn(h *pb.Hold) {
	if m == nil || h == nil || h.Id == "" {
		return
	}
	m.mu.Lock()
	m.applyLocked(m.live, &pb.WatchHoldsResponse{Kind: pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, Hold: h})
	m.mu.Unlock()
}

// applyLocked applies one event to s, idempotently by hold id and until.
func (m *mirror) applyLocked(s *holdSet, ev *pb.WatchHoldsResponse) {
	h := ev.Hold
	if h == nil || h.Id == "" {
		return
	}
	until := h.Until.AsTime()
	switch ev.Kind {
	case pb.HoldEventKind_HOLD_EVENT_KIND_LIFTED:
		s.remove(h.Id)
		if _, ok := m.lifted[h.Id]; !ok {
			m.liftedOrder = append(m.liftedOrder, h.Id)
			if len(m.liftedOrder) > maxTombstones {
				delete(m.lifted, m.liftedOrder[0])
				m.liftedOrder = m.liftedOrder[1:]
			}
		}
		if prev, ok := m.lifted[h.Id]; !ok || until.After(prev) {
			m.lifted[h.Id] = until
		}
		return
	case pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, pb.HoldEventKind_HOLD_EVENT_KIND_EXTENDED,
		pb.HoldEventKind_HOLD_EVENT_KIND_PROBING:
	default:
		return
	}
	if l, ok := m.lifted[h.Id]; ok && !until.After(l) {
		return // a PLACED that raced the snapshot: already lifted
	}
	if old := s.byID[h.Id]; old != nil && until.Before(old.until) {
		return
	}
	mh := &mhold{catalog: h.Catalog, dependency: h.Dependency, tenant: h.Tenant, method: h.Method, scope: h.Scope,
		until: until, untilMs: h.Until.GetSeconds()*1000 + int64(h.Until.GetNanos())/1e6,
		probing: h.Probing || ev.Kind == pb.HoldEventKind_HOLD_EVENT_KIND_PROBING, raw: h}
	if h.NextProbeAt != nil {
		mh.nextProbe = h.NextProbeAt.AsTime()
	}
	m.putLocked(s, mh)
}

// putLocked stores mh in s (replacing its id), within the bound.
func (m *mirror) putLocked(s *holdSet, mh *mhold) {
	id := mh.raw.Id
	s.remove(id)
	s.byID[id] = mh
	if s.byDep[mh.dependency] == nil {
		s.byDep[mh.dependency] = map[string]*mhold{}
	}
	s.byDep[mh.dependency][id] = mh
	if len(s.byID) > m.max {
		// Full: drop the hold ending soonest; its dependency goes back to
		// Admit until the next SYNCED, so the drop never lets a call through.
		var soonest string
		var at time.Time
		for id, x := range s.byID {
			if soonest == "" || x.until.Before(at) {
				soonest, at = id, x.until
			}
		}
		s.dropped[s.byID[soonest].dependency] = true
		s.remove(soonest)
	}
}
