package dev.retryd.client;

import com.google.protobuf.Timestamp;
import dev.retryd.v1.ClassifyRequest;
import dev.retryd.v1.Hold;
import dev.retryd.v1.HoldEventKind;
import dev.retryd.v1.OperationKind;
import dev.retryd.v1.Scope;
import dev.retryd.v1.WatchHoldsResponse;
import java.net.Socket;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The holds mirror: its rules on events built here (idempotent apply, tombstones, the bound on holds, clock skew,
 * covering, probe points), then against real retryd servers (callAsync admits from it; a retryd stopped and
 * restarted makes it stale and synced again; widening). Run by Conformance after the scenarios.
 */
final class MirrorChecks {
  private MirrorChecks() {}

  static Timestamp ts(long ms) {
    return Timestamp.newBuilder().setSeconds(Math.floorDiv(ms, 1000)).setNanos((int) Math.floorMod(ms, 1000) * 1_000_000).build();
  }

  static Hold hold(String id, Scope scope, String tenant, long untilMs, Long nextProbeMs) {
    Hold.Builder h = Hold.newBuilder().setId(id).setCatalog("frontspin").setDependency("d").setScope(scope)
        .setTenant(tenant).setMethod(scope == Scope.SCOPE_METHOD ? "m" : "").setUntil(ts(untilMs)).setReason("r-" + id);
    if (nextProbeMs != null) h.setNextProbeAt(ts(nextProbeMs));
    return h.build();
  }

  static WatchHoldsResponse ev(HoldEventKind k, Hold h, long serverMs) {
    WatchHoldsResponse.Builder b = WatchHoldsResponse.newBuilder().setKind(k).setServerTime(ts(serverMs));
    if (h != null) b.setHold(h);
    return b.build();
  }

  static String kind(HoldsMirror.Admission a) {
    return a instanceof HoldsMirror.Refuse r ? "refuse:" + r.hold().getId() : a == HoldsMirror.ADMIT ? "admit" : "ask";
  }

  static List<String> rules() {
    List<String> bad = new ArrayList<>();
    long now = System.currentTimeMillis();
    HoldsMirror m = new HoldsMirror(3);
    HoldsMirror.Store s = new HoldsMirror.Store(Set.of("d"), Set.of("t"));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("before SYNCED: not ask");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("a", Scope.SCOPE_TENANT, "t", now + 60_000, null), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("snapshot in progress: not ask");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_SYNCED, null, now));
    String k = kind(m.admission("frontspin", "d", "t", "m"));
    if (!k.equals("refuse:a")) bad.add("tenant hold: " + k);
    if (!kind(m.admission("frontspin", "d", "other", "m")).equals("ask")) bad.add("an unwatched tenant: not ask");
    if (!kind(m.admission("vibecode", "d", "t", "m")).equals("admit")) bad.add("another catalog's hold refused");
    if (!kind(m.admission("", "d", "t", "m")).equals("refuse:a")) bad.add("no catalog: not the conservative refusal");
    if (!kind(m.admission("frontspin", "d", "", "m")).equals("admit")) bad.add("no tenant: a tenant hold refused");
    // Idempotent by id and until: an older PLACED does not shorten; LIFTED then a racing PLACED stays lifted.
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("a", Scope.SCOPE_TENANT, "t", now + 1_000, null), now));
    if (m.admission("frontspin", "d", "t", "m") instanceof HoldsMirror.Refuse r && r.retryAtMillis() < now + 59_000) {
      bad.add("an older PLACED shortened the hold");
    }
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("a", Scope.SCOPE_TENANT, "t", now + 60_000, null), now));
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("a", Scope.SCOPE_TENANT, "t", now + 60_000, null), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("admit")) bad.add("a lifted hold came back");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("a", Scope.SCOPE_TENANT, "t", now + 90_000, null), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("refuse:a")) bad.add("a later placement of a lifted id ignored");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("a", Scope.SCOPE_TENANT, "t", now + 90_000, null), now));
    // Method scope, and the probe points: probing, a due next probe, a stop past its end not yet told probing.
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("m1", Scope.SCOPE_METHOD, "", now + 60_000, now + 30_000), now));
    if (m.admission("frontspin", "d", "t", "m") instanceof HoldsMirror.Refuse r) {
      if (Math.abs(r.retryAtMillis() - (now + 30_000)) > 1_000) bad.add("retry_at is not the next probe: " + (r.retryAtMillis() - now));
    } else {
      bad.add("method hold did not refuse");
    }
    if (!kind(m.admission("frontspin", "d", "t", "other")).equals("admit")) bad.add("another method refused");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_EXTENDED, hold("m1", Scope.SCOPE_METHOD, "", now + 60_000, now - 1), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("a due probe slot did not ask");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("m1", Scope.SCOPE_METHOD, "", now + 60_000, null), now));
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("q", Scope.SCOPE_DEPENDENCY, "", now - 10, now - 10), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("a stop past its end, phase unannounced: not ask");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PROBING, hold("q", Scope.SCOPE_DEPENDENCY, "", now + 30_000, now - 10), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("probing: not ask");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("q", Scope.SCOPE_DEPENDENCY, "", now + 30_000, null), now));
    // A pause past its end (no probe) lets calls go.
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("p", Scope.SCOPE_DEPENDENCY, "", now - 10, null), now));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("admit")) bad.add("an ended pause refused");
    m.prune();
    if (m.holds() != 0) bad.add("prune kept " + m.holds() + " ended holds");
    // Clock skew: the server is 1 h ahead. A hold ending 30 min after the server's now is in force, though past by
    // the local clock; retry_at comes back on the local clock.
    long server = now + 3_600_000;
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("s", Scope.SCOPE_DEPENDENCY, "", server + 1_800_000, null), server));
    if (m.admission("frontspin", "d", "t", "m") instanceof HoldsMirror.Refuse r) {
      if (Math.abs(r.retryAtMillis() - (now + 1_800_000)) > 1_000) bad.add("skewed retry_at: " + (r.retryAtMillis() - now));
    } else {
      bad.add("skew: a hold in force by the server's clock did not refuse");
    }
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("s", Scope.SCOPE_DEPENDENCY, "", server + 1_800_000, null), server));
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("s2", Scope.SCOPE_DEPENDENCY, "", now + 60_000, null), server));
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("admit")) bad.add("skew: a hold ended by the server's clock refused");
    m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("s2", Scope.SCOPE_DEPENDENCY, "", now + 60_000, null), now));
    // Past maxHolds (3): the soonest-ending goes and its dependency asks Admit (never a silent admit).
    for (int i = 0; i < 4; i++) {
      m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold("x" + i, Scope.SCOPE_TENANT, "t" + i, now + 60_000 + i, null), now));
    }
    if (m.holds() != 3) bad.add("maxHolds 3 holds " + m.holds());
    if (!kind(m.admission("frontspin", "d", "t", "m")).equals("ask")) bad.add("a dependency that lost a hold at maxHolds did not ask");
    // Tombstones are bounded.
    for (int i = 0; i < HoldsMirror.TOMBSTONES * 3; i++) {
      m.apply(s, ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold("l" + i, Scope.SCOPE_TENANT, "t", now, null), now));
    }
    if (s.lifted.size() != HoldsMirror.TOMBSTONES) bad.add("tombstones " + s.lifted.size());
    // A hold learned from an answer refuses at once; a wider snapshot replaces the store (what it lacks is gone).
    HoldsMirror w = new HoldsMirror(100);
    HoldsMirror.Store s1 = new HoldsMirror.Store(Set.of("d"), Set.of());
    w.apply(s1, ev(HoldEventKind.HOLD_EVENT_KIND_SYNCED, null, now));
    w.learn(hold("L", Scope.SCOPE_DEPENDENCY, "", now + 60_000, null), null);
    if (!kind(w.admission("frontspin", "d", "", "m")).equals("refuse:L")) bad.add("a learned hold did not refuse");
    HoldsMirror.Store s2 = new HoldsMirror.Store(Set.of("d", "e"), Set.of("t"));
    w.apply(s2, ev(HoldEventKind.HOLD_EVENT_KIND_SYNCED, null, now));
    if (!kind(w.admission("frontspin", "e", "t", "m")).equals("admit")) bad.add("the wider snapshot did not cover e");
    if (!kind(w.admission("frontspin", "d", "", "m")).equals("admit")) bad.add("a hold the new snapshot lacks survived");
    w.markStale();
    if (!kind(w.admission("frontspin", "d", "", "m")).equals("ask")) bad.add("stale with no known hold: not ask");
    return bad;
  }

  static Process serve(String bin, int port) throws Exception {
    Process p = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:" + port, "--metrics-listen", "off",
        "--log-level", "error").inheritIO().start();
    for (int i = 0; ; i++) {
      try (Socket ignored = new Socket("127.0.0.1", port)) {
        return p;
      } catch (Exception e) {
        if (i > 200) throw new IllegalStateException("retryd did not start");
        Thread.sleep(50);
      }
    }
  }

  /** A FrontSpin quota stop on (dep, tenant) through Classify; whether retryd placed a hold. */
  static boolean placeStop(RetrydClient c, String dep, String tenant, long resetsInMs) {
    Instant at = Instant.now().plusMillis(resetsInMs);
    return c.stub().withDeadlineAfter(5, TimeUnit.SECONDS).classify(ClassifyRequest.newBuilder().setFailure(
        dev.retryd.v1.Failure.newBuilder().setCatalog("frontspin").setCode("RATE_LIMITED")
            .setOperation(OperationKind.OPERATION_KIND_WRITE).setAttempt(1).setTenant(tenant).setDependency(dep)
            .setQuotaResetsAt(Timestamp.newBuilder().setSeconds(at.getEpochSecond()).setNanos(at.getNano()))).build())
        .getDecision().hasHold();
  }

  /** A call on {@code c}'s stopped scope is refused from the mirror: HELD, no Admit RPC, the function never called. */
  static void refusedLocally(RetrydClient c, String what, List<String> bad) throws Exception {
    long admits = c.stats().admitRpcs();
    try {
      c.call(RetrydClient.Call.<String>write("record.sync").timeout(Duration.ofSeconds(1)), () -> "called");
      bad.add(what + " let a call through its known stop");
    } catch (RetryRefusedException e) {
      if (e.kind() != RetryRefusedException.Kind.HELD) bad.add(what + ": " + e.kind());
    }
    if (c.stats().admitRpcs() != admits) bad.add(what + ": the known stop asked Admit");
  }

  /** Against real servers: callAsync from the mirror, widening, stale and synced again across a restart. */
  static List<String> live(String addr, String bin) throws Exception {
    List<String> bad = new ArrayList<>();
    String run = Long.toString(System.nanoTime() % 1_000_000_000L);
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try (RetrydClient c = RetrydClient.builder(addr).catalog("vibecode").dependency("d-async-" + run).tenant("t-async-" + run)
        .timeout(Duration.ofSeconds(2)).build()) {
      if (!c.watch(List.of("d-async-" + run), List.of("t-async-" + run), Duration.ofSeconds(3))) bad.add("callAsync: not synced");
      long admits = c.stats().admitRpcs();
      List<CompletableFuture<String>> fs = new ArrayList<>();
      for (int i = 0; i < 100; i++) fs.add(c.callAsync(RetrydClient.Call.read("crm.deal.get"), () -> "ok", pool));
      for (CompletableFuture<String> f : fs) if (!"ok".equals(f.get(10, TimeUnit.SECONDS))) bad.add("callAsync: wrong result");
      if (c.stats().admitRpcs() != admits) bad.add("callAsync: " + (c.stats().admitRpcs() - admits) + " Admit RPCs once synced");
      if (c.stats().localAdmissions() < 100) bad.add("callAsync: local admissions " + c.stats().localAdmissions());
      // Widening: a declared dependency gets its own snapshot; the first keeps serving meanwhile.
      if (!c.watch(List.of("d-wide-" + run), List.of(), Duration.ofSeconds(3))) bad.add("widening: not synced");
      if (!c.stats().synced()) bad.add("widening: not synced after");
      // Clients of one address share one mirror (one stream): a stop on the second's scope is in the first's.
      try (RetrydClient c2 = RetrydClient.builder(addr).catalog("frontspin").dependency("d-second-" + run)
          .tenant("t-second-" + run).timeout(Duration.ofSeconds(2)).build()) {
        if (!c2.watch(List.of("d-second-" + run), List.of("t-second-" + run), Duration.ofSeconds(3))) bad.add("shared: not synced");
        if (!placeStop(c2, "d-second-" + run, "t-second-" + run, 600_000)) bad.add("shared: no stop placed");
        if (!Conformance.waitFor(() -> c.mirrorHoldsFor("d-second-" + run) == 1)) bad.add("shared: the first client's mirror lacks the second's stop");
      }
      if (!c.stats().synced()) bad.add("shared: the first client's mirror closed with the second client");
    } finally {
      pool.shutdownNow();
    }
    // A retryd of its own, stopped and restarted: stale, known holds still refuse, then synced again.
    int port = Conformance.freePort();
    Process p = serve(bin, port);
    AtomicInteger stale = new AtomicInteger(), synced = new AtomicInteger();
    String dep = "d-restart-" + run, tenant = "t-restart-" + run;
    try (RetrydClient c = RetrydClient.builder("127.0.0.1:" + port).catalog("frontspin").dependency(dep).tenant(tenant)
        .timeout(Duration.ofMillis(500)).mirrorListener(new MirrorListener() {
          @Override public void stale(Throwable cause) { stale.incrementAndGet(); }
          @Override public void synced(int holds) { synced.incrementAndGet(); }
        }).build()) {
      if (!c.watch(List.of(dep), List.of(tenant), Duration.ofSeconds(3))) bad.add("restart: not synced");
      placeStop(c, dep, tenant, 600_000);
      if (!Conformance.waitFor(() -> c.mirrorHoldsFor(dep) == 1)) bad.add("restart: the stop never reached the mirror");
      p.destroy();
      p.waitFor(10, TimeUnit.SECONDS);
      if (!Conformance.waitFor(() -> c.stats().stale())) bad.add("restart: not stale after retryd stopped");
      // The hook runs just after the flag is set (outside the watch's lock).
      if (!Conformance.waitFor(() -> stale.get() >= 1) || stale.get() != 1) bad.add("restart: stale hook " + stale.get());
      refusedLocally(c, "restart: a stale mirror", bad);
      MirrorStats down = c.stats();
      p = serve(bin, port); // a fresh retryd (in-process store): its snapshot has no stop
      // The reconnect's backoff is at most 5 s (plus the snapshot).
      if (!Conformance.waitFor(() -> !c.stats().stale() && c.stats().synced(), Duration.ofSeconds(10))) bad.add("restart: not synced again in 10 s");
      if (!Conformance.waitFor(() -> synced.get() >= 2)) bad.add("restart: synced hook " + synced.get());
      if (c.mirrorHoldsFor(dep) != 0) bad.add("restart: the new snapshot did not replace the old holds");
      // The reconnect resumed from the stop's digest: the fresh retryd lacks it, so its bucket was resent (empty).
      long resumed = c.stats().resumedSyncs() - down.resumedSyncs(), resent = c.stats().resentBuckets() - down.resentBuckets();
      if (ResumeChecks.serverResumes() && (resumed < 1 || resent < 1)) {
        bad.add("restart: resumed SYNCEDs " + resumed + ", resent buckets " + resent + " (want >= 1 each)");
      }
    } finally {
      p.destroy();
      p.waitFor(10, TimeUnit.SECONDS);
    }
    return bad;
  }
}
