package retryd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/retryd/retryd/clients/go/internal/retrydtest"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type vectors struct {
	Holds []struct {
		ID      string `json:"id"`
		UntilMs int64  `json:"until_ms"`
		Digest  string `json:"digest"`
		Bucket  int    `json:"bucket"`
	} `json:"holds"`
	Buckets map[string]struct {
		Digest string `json:"digest"`
	} `json:"buckets"`
}

func readVectors(t *testing.T) vectors {
	b, err := os.ReadFile("../conformance/resume_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func placed(id string, untilMs int64) *pb.WatchHoldsResponse {
	return &pb.WatchHoldsResponse{Kind: pb.HoldEventKind_HOLD_EVENT_KIND_PLACED, Hold: &pb.Hold{Id: id, Catalog: "frontspin",
		Dependency: "d", Scope: pb.Scope_SCOPE_DEPENDENCY, Until: timestamppb.New(time.UnixMilli(untilMs))}}
}

// The shared vectors, through the mirror's own path: events in, digests out.
func TestResumeDigestsMatchTheSharedVectors(t *testing.T) {
	v := readVectors(t)
	m := syncedMirror(100)
	if resumeDigestsLocked(m.live) != nil {
		t.Fatal("an empty mirror sends no digests")
	}
	for _, h := range v.Holds {
		want, _ := strconv.ParseUint(h.Digest, 10, 64)
		if got := holdDigest(h.ID, h.UntilMs); got != want || digestBucket(got) != h.Bucket {
			t.Errorf("%s: %d (bucket %d), want %d (bucket %d)", h.ID, got, digestBucket(got), want, h.Bucket)
		}
		m.applyLocked(m.live, placed(h.ID, h.UntilMs))
	}
	got := resumeDigestsLocked(m.live)
	if len(got) != resumeBuckets {
		t.Fatalf("%d digests, want %d", len(got), resumeBuckets)
	}
	for b, d := range got {
		want := uint64(0)
		if x, ok := v.Buckets[strconv.Itoa(b)]; ok {
			want, _ = strconv.ParseUint(x.Digest, 10, 64)
		}
		if d != want {
			t.Errorf("bucket %d: %d, want %d", b, d, want)
		}
	}
	if len(v.Buckets) >= len(v.Holds) {
		t.Fatal("the vectors should put two holds in one bucket")
	}
}

// A resumed SYNCED: resent buckets are what the stream sent; the others
// are kept, unless the stream lifted a hold before its SYNCED.
func TestResumedSyncReplacesOnlyTheResentBuckets(t *testing.T) {
	m := syncedMirror(100)
	for _, h := range []struct {
		id string
		ms int64
	}{{"h-1", 1700000000000}, {"c-1365", 1700000000000}, {"h-2", 1700000000001}, {"x", 253402300799999}} {
		m.applyLocked(m.live, placed(h.id, h.ms)) // buckets 136, 136, 174, 134
	}
	snap := newHoldSet()
	m.applyLocked(snap, placed("h-1", 1700000000000))                                         // bucket 136 resent: h-1 in it, c-1365 lifted meanwhile
	m.applyLocked(snap, &pb.WatchHoldsResponse{Kind: pb.HoldEventKind_HOLD_EVENT_KIND_LIFTED, // lifted while syncing
		Hold: &pb.Hold{Id: "x", Until: timestamppb.New(time.UnixMilli(253402300799999))}})
	got := m.mergeResumedLocked(m.live, snap, []uint32{136, 999})
	ids := map[string]bool{}
	for id := range got.byID {
		ids[id] = true
	}
	if fmt.Sprint(ids) != fmt.Sprint(map[string]bool{"h-1": true, "h-2": true}) {
		t.Fatalf("merged %v, want h-1 (resent) and h-2 (kept)", ids)
	}
}

// A real retryd: a hold synced into the mirror, a reopen (widening) sends
// the digests, the new SYNCED is resumed with nothing resent, and the hold
// still refuses locally.
func TestMirrorResumesAfterWideningAgainstRetryd(t *testing.T) {
	addr := retrydtest.Serve(t)
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	dep, tenant := "d-resume-go-"+run, "t-resume-go-"+run
	c, err := New(addr, WithCatalog("frontspin"), WithDependency(dep), WithTenant(tenant), WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := &pb.Failure{Catalog: "frontspin", Code: "RATE_LIMITED", Operation: pb.OperationKind_OPERATION_KIND_WRITE,
		Attempt: 1, Tenant: tenant, Dependency: dep, QuotaResetsAt: timestamppb.New(time.Now().Add(10 * time.Minute))}
	if r, err := c.Stub().Classify(ctx, &pb.ClassifyRequest{Failure: f}); err != nil || r.Decision.Hold == nil {
		t.Fatalf("no hold placed: %v", err)
	}
	if err := c.Watch(ctx, []string{dep}, []string{tenant}); err != nil {
		t.Fatal(err)
	}
	for c.Stats().Holds == 0 {
		if ctx.Err() != nil {
			t.Fatal("the hold never reached the mirror")
		}
		time.Sleep(2 * time.Millisecond)
	}
	before := c.Stats()
	if err := c.Watch(ctx, []string{dep + "-2"}, nil); err != nil { // widening: a new stream, resumed
		t.Fatal(err)
	}
	s := c.Stats()
	if s.ResumedSyncs != before.ResumedSyncs+1 || s.ResentBuckets != before.ResentBuckets || s.Holds != 1 {
		t.Fatalf("after widening: %+v (before %+v), want one more resumed SYNCED, nothing resent, 1 hold", s, before)
	}
	_, err = c.Admit(ctx, "crm.deal.add", Write, 1)
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != RefusedHeld || c.Stats().LocalRefusals != s.LocalRefusals+1 ||
		c.Stats().AdmitRPCs != s.AdmitRPCs {
		t.Fatalf("after the resume the hold must refuse locally: %v, %+v", err, c.Stats())
	}
}
