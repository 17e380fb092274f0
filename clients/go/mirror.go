package retryd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
}

type mhold struct {
	catalog, dependency, tenant, method string
	scope                               pb.Scope
	until, nextProbe                    time.Time // server clock; nextProbe zero: none
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
		until: until, probing: h.Probing || ev.Kind == pb.HoldEventKind_HOLD_EVENT_KIND_PROBING, raw: h}
	if h.NextProbeAt != nil {
		mh.nextProbe = h.NextProbeAt.AsTime()
	}
	s.remove(h.Id)
	s.byID[h.Id] = mh
	if s.byDep[mh.dependency] == nil {
		s.byDep[mh.dependency] = map[string]*mhold{}
	}
	s.byDep[mh.dependency][h.Id] = mh
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

func (m *mirror) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *mirror) setStale(err error) {
	m.mu.Lock()
	was := m.stale
	m.stale = true
	m.notifyLocked()
	m.mu.Unlock()
	if !was {
		m.c.event(Event{Kind: "mirror_stale", Detail: fmt.Sprint(err)})
	}
}

// run keeps one live stream, opens a wider one when the watched sets grow
// (the live one serves until the new one's SYNCED), and reconnects with
// jittered backoff.
func (m *mirror) run() {
	defer close(m.done)
	var live, pending *watchStream
	failures := 0
	var retry <-chan time.Time
	defer func() {
		for _, s := range []*watchStream{live, pending} {
			if s != nil {
				s.cancel()
			}
		}
	}()
	for {
		if pending == nil && retry == nil {
			pending = m.maybeOpen(live)
		}
		var liveDone, pendDone <-chan error
		var pendSynced <-chan struct{}
		if live != nil {
			liveDone = live.done
		}
		if pending != nil {
			pendDone, pendSynced = pending.done, pending.synced
		}
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-retry:
			retry = nil
		case <-pendSynced:
			if live != nil {
				live.cancel()
			}
			live, pending, failures = pending, nil, 0
		case err := <-pendDone:
			pending = nil
			failures++
			retry = time.After(backoff(failures))
			if live == nil {
				m.setStale(err)
			}
		case err := <-liveDone:
			live = nil
			m.setStale(err)
			failures++
			retry = time.After(backoff(failures))
		}
	}
}

func backoff(failures int) time.Duration {
	top := backoffBase << min(failures-1, 10)
	if top > backoffCap || top <= 0 {
		top = backoffCap
	}
	return time.Duration(rand.Int64N(int64(top) + 1))
}

// maybeOpen opens a stream when none is live or the watched sets outgrew the live one's.
func (m *mirror) maybeOpen(live *watchStream) *watchStream {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.wantDeps) == 0 {
		return nil
	}
	if live != nil {
		grew := false
		for d := range m.wantDeps {
			grew = grew || !live.depSet[d]
		}
		for t := range m.wantTenants {
			grew = grew || !live.tenantSet[t]
		}
		if !grew {
			return nil
		}
	}
	m.nextGen++
	s := &watchStream{gen: m.nextGen, synced: make(chan struct{}), done: make(chan error, 1),
		depSet: map[string]bool{}, tenantSet: map[string]bool{}}
	for d := range m.wantDeps {
		s.deps = append(s.deps, d)
		s.depSet[d] = true
	}
	for t := range m.wantTenants {
		s.tenants = append(s.tenants, t)
		s.tenantSet[t] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go m.stream(ctx, s)
	return s
}

func (m *mirror) stream(ctx context.Context, s *watchStream) {
	st, err := m.c.stub.WatchHolds(ctx, &pb.WatchHoldsRequest{Dependencies: s.deps, Tenants: s.tenants})
	if err != nil {
		s.done <- err
		return
	}
	snap := newHoldSet()
	synced := false
	for {
		ev, err := st.Recv()
		if err != nil {
			s.done <- err
			return
		}
		if ev.ServerTime != nil {
			m.offset.Store(int64(time.Until(ev.ServerTime.AsTime())))
		}
		m.mu.Lock()
		switch {
		case !synced && ev.Kind == pb.HoldEventKind_HOLD_EVENT_KIND_SYNCED:
			// The new snapshot is the truth: it replaces the mirror whole.
			synced = true
			m.live, m.liveGen = snap, s.gen
			m.syncDeps, m.syncTenants = s.depSet, s.tenantSet
			wasStale := m.stale
			m.stale, m.everSynced = false, true
			m.notifyLocked()
			m.mu.Unlock()
			close(s.synced)
			m.c.event(Event{Kind: "mirror_synced", Detail: fmt.Sprintf("%d holds; was stale: %v", len(snap.byID), wasStale)})
			continue
		case !synced:
			m.applyLocked(snap, ev)
		case m.liveGen == s.gen:
			m.applyLocked(m.live, ev)
		}
		m.mu.Unlock()
	}
}

func (m *mirror) close() {
	close(m.stop)
	<-m.done
}

// Watch declares dependencies and tenants the client will call (startup)
// and waits until the mirror's snapshot covers them (SYNCED). An error when
// the mirror is off, past MaxWatched (those calls use Admit), or when ctx
// ends first (calls use Admit until the snapshot arrives).
func (c *Client) Watch(ctx context.Context, deps, tenants []string) error {
	if c.mirror == nil {
		return fmt.Errorf("%w: the mirror is off (WithMirror(false))", ErrNotWatched)
	}
	if !c.mirror.want(deps, tenants) {
		return fmt.Errorf("%w: at most %d dependencies and %d tenants per client", ErrNotWatched, MaxWatched, MaxWatched)
	}
	return c.mirror.wait(ctx, deps, tenants)
}

// Stats: the mirror's state (zero with the mirror off) and the client's counters.
func (c *Client) Stats() MirrorStats {
	k := &c.counters
	s := MirrorStats{AdmitRPCs: k.admitRPCs.Load(), LocalAdmissions: k.localAdmits.Load(),
		LocalRefusals: k.localRefusals.Load(), ReportRPCs: k.reportRPCs.Load(), ReportedRequests: k.reportedRequests.Load()}
	m := c.mirror
	if m == nil {
		return s
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	s.Stale, s.Holds = m.stale, len(m.live.byID)
	deps := make([]string, 0, len(m.wantDeps))
	for d := range m.wantDeps {
		deps = append(deps, d)
	}
	tenants := make([]string, 0, len(m.wantTenants))
	for t := range m.wantTenants {
		tenants = append(tenants, t)
	}
	s.Synced = m.everSynced && !m.stale && m.coveredLocked(deps, tenants)
	return s
}
