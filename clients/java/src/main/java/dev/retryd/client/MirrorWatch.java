package dev.retryd.client;

import dev.retryd.v1.RetryDecisionServiceGrpc;
import dev.retryd.v1.WatchHoldsRequest;
import dev.retryd.v1.WatchHoldsResponse;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.Collection;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Feeds a {@link HoldsMirror} from one {@code WatchHolds} stream at a time: widened by opening a stream with the
 * larger sets (the old one serves until the new one's snapshot), reopened after an error with full-jitter
 * exponential backoff (100 ms base, ×2, 5 s cap) so a restart of retryd is no stampede, and never while retryd's own
 * shed advice is in force. Every stream it opens with holds in the mirror resumes from their bucket digests.
 */
final class MirrorWatch {
  /** Most dependencies, and most tenants, one stream watches (WatchHoldsRequest's limit). */
  static final int MAX_NAMES = 256;
  static final long BACKOFF_BASE_MS = 100, BACKOFF_CAP_MS = 5_000;
  private static final Logger LOG = Logger.getLogger("dev.retryd.client");

  private final HoldsMirror mirror;
  private final RetryDecisionServiceGrpc.RetryDecisionServiceStub async;
  private final List<MirrorListener> listeners = new CopyOnWriteArrayList<>();
  private final ScheduledExecutorService timer;
  private final Object lock = new Object();
  private final Set<String> deps = new LinkedHashSet<>(), tenants = new LinkedHashSet<>();
  private Stream current;
  private volatile Stream pending;
  private int failures;
  private boolean reconnecting, closed;
  /** retryd's advice to wait, from a shed stream or a shed answer to one of the clients' RPCs. */
  private final Busy busy = new Busy();
  private final LongAdder shedAnswers = new LongAdder();

  /** One WatchHolds stream and the store it fills. */
  private final class Stream implements ClientResponseObserver<WatchHoldsRequest, WatchHoldsResponse> {
    final HoldsMirror.Store store;
    private ClientCallStreamObserver<WatchHoldsRequest> call;
    private volatile boolean cancelled;

    Stream(HoldsMirror.Store store) { this.store = store; }

    @Override
    public void beforeStart(ClientCallStreamObserver<WatchHoldsRequest> requestStream) { call = requestStream; }

    @Override
    public void onNext(WatchHoldsResponse ev) {
      if (!cancelled && mirror.apply(store, ev)) {
        synced(this);
      }
    }

    @Override
    public void onError(Throwable t) { ended(this, t); }

    @Override
    public void onCompleted() { ended(this, new IllegalStateException("retryd ended the watch stream")); }

    void cancel() {
      cancelled = true;
      if (call != null) {
        call.cancel("replaced or closed", null);
      }
    }
  }

  MirrorWatch(HoldsMirror mirror, RetryDecisionServiceGrpc.RetryDecisionServiceStub async) {
    this.mirror = mirror;
    this.async = async;
    ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
      Thread th = new Thread(r, "retryd-mirror");
      th.setDaemon(true);
      return th;
    });
    t.setRemoveOnCancelPolicy(true);
    this.timer = t;
  }

  void addListener(MirrorListener l) { listeners.add(l); }

  /** A shed answer's advice (ms, null: none) to one of the clients sharing this watch: no stream opens before it. */
  void advise(Long ms) { busy.advise(ms); }

  /** Shed answers to this watch's streams. */
  long shedAnswers() { return shedAnswers.sum(); }

  void removeListener(MirrorListener l) { listeners.remove(l); }

  /** The store of the stream opening (widening or reconnecting), if any: holds learned from answers go there too. */
  HoldsMirror.Store pendingStore() {
    Stream p = pending;
    return p == null ? null : p.store;
  }

  /**
   * Watches these too (empty names are skipped); names beyond {@link #MAX_NAMES} are not watched (their calls ask
   * Admit). Returns the names that are watched of those given.
   */
  Watched want(Collection<String> moreDeps, Collection<String> moreTenants) {
    Set<String> d = new LinkedHashSet<>(), t = new LinkedHashSet<>();
    synchronized (lock) {
      boolean grew = add(deps, moreDeps, d) | add(tenants, moreTenants, t);
      if (grew && pending == null && !reconnecting && !closed) {
        openOrWait(0); // at most one reopen in flight: a later addition waits for its snapshot
      }
    }
    return new Watched(d, t, d.size() == count(moreDeps) && t.size() == count(moreTenants));
  }

  /** The names of a {@link #want} that are watched, and whether that is all of them. */
  record Watched(Set<String> deps, Set<String> tenants, boolean all) {}

  private static long count(Collection<String> names) {
    return names.stream().filter(n -> n != null && !n.isEmpty()).distinct().count();
  }

  private static boolean add(Set<String> into, Collection<String> names, Set<String> watched) {
    boolean grew = false;
    for (String n : names) {
      if (n == null || n.isEmpty()) {
        continue;
      }
      if (into.contains(n)) {
        watched.add(n);
      } else if (into.size() < MAX_NAMES) {
        into.add(n);
        watched.add(n);
        grew = true;
      }
    }
    return grew;
  }

  /** Waits until a snapshot covering these names has arrived, at most {@code timeout}. */
  boolean awaitSynced(Set<String> d, Set<String> t, Duration timeout) throws InterruptedException {
    long until = System.nanoTime() + timeout.toNanos();
    synchronized (lock) {
      while (!mirror.syncedFor(d, t)) {
        long left = until - System.nanoTime();
        if (left <= 0 || closed) {
          return false;
        }
        TimeUnit.NANOSECONDS.timedWait(lock, left);
      }
      return true;
    }
  }

  void close() {
    Stream c, p;
    synchronized (lock) {
      closed = true;
      c = current;
      p = pending;
      current = null;
      pending = null;
      lock.notifyAll();
    }
    if (c != null) {
      c.cancel();
    }
    if (p != null) {
      p.cancel();
    }
    timer.shutdownNow();
  }

  /**
   * Opens the next stream after {@code delayMs}, and not before retryd's advice to wait has passed (a stream opened
   * meanwhile would be shed too). Called with lock held, with no stream pending or scheduled.
   */
  private void openOrWait(long delayMs) {
    long wait = Math.max(delayMs, busy.remainingMillis());
    if (wait <= 0) {
      pending = open();
      return;
    }
    reconnecting = true;
    timer.schedule(this::reconnect, wait, TimeUnit.MILLISECONDS);
  }

  // Called with lock held. With holds in the mirror the stream resumes: it sends their 256 bucket digests, and the
  // snapshot resends only the buckets that differ (a reconnect storm after a restart costs a message per stream).
  private Stream open() {
    long[] digests = mirror.resumeDigests();
    Stream s = new Stream(new HoldsMirror.Store(deps, tenants, digests != null));
    WatchHoldsRequest.Builder req = WatchHoldsRequest.newBuilder().addAllDependencies(deps).addAllTenants(tenants);
    if (digests != null) {
      for (long d : digests) {
        req.addResumeDigests(d);
      }
    }
    async.watchHolds(req.build(), s);
    return s;
  }

  private void synced(Stream s) {
    Stream old;
    synchronized (lock) {
      if (closed || s != pending) {
        return;
      }
      old = current;
      current = s;
      pending = null;
      failures = 0;
      if ((!s.store.deps.containsAll(deps) || !s.store.tenants.containsAll(tenants)) && !reconnecting) {
        openOrWait(0); // names added while this one opened
      }
      lock.notifyAll();
    }
    if (old != null) {
      old.cancel();
    }
    int holds = mirror.holds();
    for (MirrorListener l : listeners) {
      l.synced(holds);
    }
  }

  private void ended(Stream s, Throwable cause) {
    boolean wentStale = false;
    synchronized (lock) {
      if (s.cancelled || closed) {
        return;
      }
      if (Busy.shed(cause)) {
        shedAnswers.increment();
        busy.advise(Busy.adviceMillis(cause));
      }
      if (s == current) {
        current = null;
        wentStale = !mirror.stale();
        mirror.markStale();
      } else if (s == pending) {
        pending = null;
      } else {
        return;
      }
      if (pending == null && !reconnecting) {
        long top = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS << Math.min(failures, 16));
        failures++;
        // Full jitter, and no earlier than retryd's advice: max of the two.
        openOrWait(Math.max(1, ThreadLocalRandom.current().nextLong(top + 1)));
      }
    }
    if (wentStale) {
      LOG.log(Level.WARNING, "retryd: holds mirror stale (known holds still refuse; other calls ask Admit): {0}",
          String.valueOf(cause));
      for (MirrorListener l : listeners) {
        l.stale(cause);
      }
    }
  }

  private void reconnect() {
    synchronized (lock) {
      reconnecting = false;
      if (!closed && pending == null) {
        openOrWait(0); // advice that came meanwhile still holds it back
      }
    }
  }
}
