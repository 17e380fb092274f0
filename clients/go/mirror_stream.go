package retryd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

// The mirror's stream: one live WatchHolds stream, a wider one opened when
// the watched sets grow, jittered reconnects; Watch and Stats.

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
			// No stream is opened while retryd advises waiting (it would be shed too).
			if d := m.c.busyFor(); d > 0 {
				retry = time.After(d)
			} else {
				pending = m.maybeOpen(live)
			}
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
			retry = time.After(max(backoff(failures), m.c.busyFor()))
			if live == nil {
				m.setStale(err)
			}
		case err := <-liveDone:
			live = nil
			m.setStale(err)
			failures++
			retry = time.After(max(backoff(failures), m.c.busyFor()))
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
	req := &pb.WatchHoldsRequest{Dependencies: s.deps, Tenants: s.tenants}
	m.mu.RLock()
	req.ResumeDigests = resumeDigestsLocked(m.live) // resume from the holds the mirror has
	m.mu.RUnlock()
	st, err := m.c.stub.WatchHolds(ctx, req)
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
			// The new snapshot is the truth: it replaces the mirror whole,
			// or, resumed, the buckets it resent.
			synced = true
			if len(req.ResumeDigests) > 0 && ev.Resumed {
				snap = m.mergeResumedLocked(m.live, snap, ev.ResentBuckets)
				m.c.counters.resumedSyncs.Add(1)
				m.c.counters.resentBuckets.Add(uint64(len(ev.ResentBuckets)))
			}
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
		LocalRefusals: k.localRefusals.Load(), ReportRPCs: k.reportRPCs.Load(), ReportedRequests: k.reportedRequests.Load(),
		ShedAnswers: c.busy.answers.Load(), BusySkips: c.busy.skips.Load(),
		ResumedSyncs: k.resumedSyncs.Load(), ResentBuckets: k.resentBuckets.Load()}
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
