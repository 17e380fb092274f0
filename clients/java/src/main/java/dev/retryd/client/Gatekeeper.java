package dev.retryd.client;

import dev.retryd.v1.AdmitRequest;
import dev.retryd.v1.AdmitResponse;
import dev.retryd.v1.ClassifyRequest;
import dev.retryd.v1.Hold;
import dev.retryd.v1.OperationKind;
import dev.retryd.v1.OutcomeCount;
import dev.retryd.v1.ReportOutcomesRequest;
import dev.retryd.v1.ReportOutcomesResponse;
import dev.retryd.v1.RetryDecisionServiceGrpc;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.LongConsumer;

/**
 * A client's RPCs to retryd but the watch: each attempt admitted from the holds mirror (no RPC) or by Admit, Classify,
 * holds in answers put into the mirror, outcome counts batched into ReportOutcomes, retryd's own shed advice kept
 * ({@link Busy}: none of these RPCs is sent while it is in force), and the counters of {@link MirrorStats}.
 */
final class Gatekeeper {
  static final int REQUESTS = 0, SUCCESSES = 1, FAILURES = 2;
  /** Entries per ReportOutcomes (retryd's limit): more methods go in several. */
  private static final int MAX_COUNTS_PER_REPORT = 1_000;

  /**
   * Whether an attempt may go: admitted (with Admit's probe token, if any), or refused by a hold until retryAt.
   * {@code failed}: Admit's status when retryd was unreachable or slow and the attempt goes ahead (fail open).
   */
  record Gate(boolean admitted, String probe, Hold hold, Instant retryAt, boolean local, Status failed) {
    static final Gate LOCAL = new Gate(true, "", null, null, true, null);
  }

  /**
   * The status of an RPC not sent because retryd advised waiting: the call takes the path it takes when retryd is
   * unavailable (Admit fails open, Classify's conservative fallback).
   */
  static final Status NOT_SENT = Status.RESOURCE_EXHAUSTED.withDescription("not sent: retryd advised waiting");

  private final RetryDecisionServiceGrpc.RetryDecisionServiceBlockingStub stub;
  private final String catalog, dependency, tenant;
  private final SharedMirror shared;
  private final HoldsMirror mirror;
  private final MirrorWatch watch;
  private final MirrorListener listener;
  /** Outcome counts per method (catalog, dependency and tenant are the client's): requests, successes, failures. */
  private final Map<String, long[]> counts = new HashMap<>();
  private final LongAdder admitRpcs = new LongAdder(), localAdmissions = new LongAdder(),
      localRefusals = new LongAdder(), reportRpcs = new LongAdder(), reportedRequests = new LongAdder(),
      shedAnswers = new LongAdder(), busySkips = new LongAdder();
  /** This client's busy period (its own RPCs' shed answers). */
  private final Busy busy = new Busy();
  /** Told the advice (ms) when a busy period begins: logged and hooked once per period, not per call. */
  private final LongConsumer busyBegan;
  /**
   * retryd answered an Admit naming this client's catalog: the mirror admits locally only then, so a mistaken
   * catalog stays a {@link RejectedException} on every call rather than going unnoticed (WatchHolds does not check it).
   */
  private volatile boolean catalogKnown;

  /** {@code shared}: the address's mirror (null: no mirror, every attempt asks Admit). */
  Gatekeeper(RetryDecisionServiceGrpc.RetryDecisionServiceBlockingStub stub, SharedMirror shared, String catalog,
      String dependency, String tenant, MirrorListener listener, LongConsumer busyBegan) {
    this.stub = stub;
    this.busyBegan = busyBegan;
    this.catalog = catalog;
    this.dependency = dependency;
    this.tenant = tenant;
    this.shared = shared;
    this.mirror = shared == null ? null : shared.mirror;
    this.watch = shared == null ? null : shared.watch;
    this.listener = listener;
    if (watch != null) {
      watch.addListener(listener);
    }
  }

  private java.util.Set<String> ownDeps() { return java.util.Set.of(dependency); }

  private java.util.Set<String> ownTenants() { return tenant.isEmpty() ? java.util.Set.of() : java.util.Set.of(tenant); }

  /** Adds the client's own dependency and tenant to the watch (a wider stream if they are new to it). */
  void startWatch() {
    if (watch != null) {
      watch.want(ownDeps(), ownTenants());
    }
  }

  MirrorStats stats() {
    return new MirrorStats(mirror != null && mirror.syncedFor(ownDeps(), ownTenants()), mirror != null && mirror.stale(),
        mirror == null ? 0 : mirror.holds(), admitRpcs.sum(), localAdmissions.sum(), localRefusals.sum(),
        reportRpcs.sum(), reportedRequests.sum(), shedAnswers.sum() + (watch == null ? 0 : watch.shedAnswers()),
        busySkips.sum(), mirror == null ? 0 : mirror.resumedSyncs(), mirror == null ? 0 : mirror.resentBuckets());
  }

  /**
   * Whether retryd advised waiting (then the RPC is not sent and counted as a busy skip). Only asked before an RPC:
   * an attempt the mirror admits never reads it.
   */
  private boolean skip() {
    if (!busy.busy()) {
      return false;
    }
    busySkips.increment();
    return true;
  }

  /**
   * Keeps the advice of a shed answer (counted): this client sends nothing until it passes, and the watch does not
   * reopen before. False for any other error.
   */
  boolean shed(StatusRuntimeException e) {
    if (!Busy.shed(e)) {
      return false;
    }
    shedAnswers.increment();
    Long ms = Busy.adviceMillis(e);
    if (busy.advise(ms)) {
      busyBegan.accept(ms);
    }
    if (watch != null) {
      watch.advise(ms);
    }
    return true;
  }

  /** Classify, unless retryd advised waiting ({@link #NOT_SENT}, thrown: the caller's fallback runs). */
  dev.retryd.v1.Decision classify(ClassifyRequest request, long rpcMillis) {
    if (skip()) {
      throw NOT_SENT.asRuntimeException();
    }
    try {
      return stub.withDeadlineAfter(rpcMillis, TimeUnit.MILLISECONDS).classify(request).getDecision();
    } catch (StatusRuntimeException e) {
      shed(e);
      throw e;
    }
  }

  /** See {@link RetrydClient#watch}. */
  boolean watch(Collection<String> deps, Collection<String> tenants, Duration timeout)
      throws InterruptedException, RejectedException {
    if (watch == null) {
      return false;
    }
    if (!catalogKnown) {
      try {
        checkCatalog(timeout);
      } catch (StatusRuntimeException e) {
        RejectedException rejected = RejectedException.of(e, null);
        if (rejected != null) {
          throw rejected;
        }
        return false;
      }
    }
    MirrorWatch.Watched w = watch.want(deps, tenants);
    return watch.awaitSynced(w.deps(), w.tenants(), timeout) && w.all();
  }

  /** An Admit naming only the catalog: loads grpc's classes (a warm-up) and tells whether retryd knows the catalog. */
  void checkCatalog(Duration timeout) {
    if (skip()) {
      throw NOT_SENT.asRuntimeException();
    }
    admitRpcs.increment();
    try {
      stub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
          .admit(AdmitRequest.newBuilder().setCatalog(catalog).build());
    } catch (StatusRuntimeException e) {
      shed(e);
      throw e;
    }
    catalogKnown = true;
  }

  int mirrorHoldsFor(String dep) {
    return mirror == null ? 0 : mirror.holdsFor(dep);
  }

  void prune() {
    if (mirror != null) {
      mirror.prune();
    }
  }

  /** Closes the watch and sends the counts not yet reported. */
  void close() {
    if (shared != null) {
      watch.removeListener(listener);
      shared.release();
    }
    flush(Duration.ofSeconds(1));
  }

  /**
   * One attempt's admission: the mirror's when it knows (no RPC; a first attempt counted as the deposit Admit would
   * have made), else Admit, failing open when retryd is unreachable or slow, or advised waiting (Admit not sent).
   * Holds in Admit's answers go into the mirror at once.
   */
  Gate gate(String method, OperationKind operation, int attempt, long rpcMillis) throws RejectedException {
    if (mirror != null && catalogKnown) {
      HoldsMirror.Admission a = mirror.admission(catalog, dependency, tenant, method);
      if (a == HoldsMirror.ADMIT) {
        localAdmissions.increment();
        if (attempt <= 1) {
          count(method, REQUESTS);
        }
        return Gate.LOCAL;
      }
      if (a instanceof HoldsMirror.Refuse r) {
        localRefusals.increment();
        return new Gate(false, "", r.hold(), Instant.ofEpochMilli(r.retryAtMillis()), true, null);
      }
    }
    if (skip()) {
      if (attempt <= 1) {
        count(method, REQUESTS);
      }
      return new Gate(true, "", null, null, false, NOT_SENT);
    }
    AdmitResponse r;
    try {
      admitRpcs.increment();
      r = stub.withDeadlineAfter(rpcMillis, TimeUnit.MILLISECONDS).admit(AdmitRequest.newBuilder()
          .setCatalog(catalog).setDependency(dependency).setTenant(tenant).setMethod(method)
          .setOperation(operation).setAttempt(attempt).build());
    } catch (StatusRuntimeException e) {
      RejectedException rejected = RejectedException.of(e, null);
      if (rejected != null) {
        throw rejected;
      }
      shed(e);
      if (attempt <= 1) {
        count(method, REQUESTS); // a first attempt retryd's budget did not see
      }
      return new Gate(true, "", null, null, false, e.getStatus());
    }
    catalogKnown = true;
    Hold hold = r.hasHold() ? r.getHold() : null;
    learn(hold);
    if (r.getAdmitted()) {
      return new Gate(true, r.getProbeToken(), hold, null, false, null);
    }
    Instant retryAt = r.hasRetryAt()
        ? Instant.ofEpochSecond(r.getRetryAt().getSeconds(), r.getRetryAt().getNanos()) : Instant.now().plusSeconds(1);
    return new Gate(false, "", hold, retryAt, false, null);
  }

  /** A hold from an answer goes into the mirror at once, so a retry right after a failure does not slip through. */
  void learn(Hold hold) {
    if (mirror != null && hold != null) {
      mirror.learn(hold, watch.pendingStore());
    }
  }

  /**
   * Reports a probe's success with its token from Admit (nothing without one; nothing while retryd advises waiting:
   * the hold then re-probes, as when the report fails).
   */
  void probeSucceeded(String probe, Duration timeout) {
    if (probe.isEmpty() || skip()) {
      return;
    }
    try {
      reportRpcs.increment();
      ReportOutcomesResponse r = stub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS).reportOutcomes(
          ReportOutcomesRequest.newBuilder().setProbeToken(probe).setProbeSucceeded(true).build());
      if (mirror != null && r.getProbeAccepted() && r.hasHold()) {
        mirror.forget(r.getHold(), watch.pendingStore()); // the probe's success lifted it
      }
    } catch (StatusRuntimeException e) {
      shed(e); // the probe's hold re-probes
    }
  }

  void count(String method, int which) {
    synchronized (counts) {
      counts.computeIfAbsent(method, k -> new long[3])[which]++;
    }
  }

  /**
   * Sends the counts not yet reported, at most {@link #MAX_COUNTS_PER_REPORT} entries per RPC. While retryd advises
   * waiting nothing is sent and the counts stay; a batch retryd sheds goes back into them (with those not yet sent)
   * for the next flush: one entry per method, as before.
   */
  void flush(Duration timeout) {
    List<OutcomeCount> all = new ArrayList<>();
    synchronized (counts) {
      if (counts.isEmpty() || skip()) {
        return;
      }
      for (Map.Entry<String, long[]> e : counts.entrySet()) {
        long[] c = e.getValue();
        all.add(OutcomeCount.newBuilder().setCatalog(catalog).setDependency(dependency).setTenant(tenant)
            .setMethod(e.getKey()).setRequests(c[REQUESTS]).setSuccesses(c[SUCCESSES]).setFailures(c[FAILURES])
            .build());
      }
      counts.clear();
    }
    for (int i = 0; i < all.size(); i += MAX_COUNTS_PER_REPORT) {
      List<OutcomeCount> batch = all.subList(i, Math.min(all.size(), i + MAX_COUNTS_PER_REPORT));
      reportRpcs.increment();
      try {
        stub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
            .reportOutcomes(ReportOutcomesRequest.newBuilder().addAllCounts(batch).build());
      } catch (StatusRuntimeException e) {
        if (shed(e)) {
          putBack(all.subList(i, all.size()));
          return;
        }
        // otherwise counts are advisory: dropped
      }
      reportedRequests.add(batch.stream().mapToLong(OutcomeCount::getRequests).sum());
    }
  }

  /** Counts not sent go back, merged with those counted meanwhile. */
  private void putBack(List<OutcomeCount> unsent) {
    synchronized (counts) {
      for (OutcomeCount c : unsent) {
        long[] into = counts.computeIfAbsent(c.getMethod(), k -> new long[3]);
        into[REQUESTS] += c.getRequests();
        into[SUCCESSES] += c.getSuccesses();
        into[FAILURES] += c.getFailures();
      }
    }
  }

  /** Whether retryd's advice to wait is in force for this client. */
  boolean busy() { return busy.busy(); }

  /** First attempts counted and not yet reported (checks of the put-back). */
  long pendingRequests() {
    synchronized (counts) {
      return counts.values().stream().mapToLong(c -> c[REQUESTS]).sum();
    }
  }
}
