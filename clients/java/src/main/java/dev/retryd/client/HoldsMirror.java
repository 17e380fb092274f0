package dev.retryd.client;

import dev.retryd.v1.Hold;
import dev.retryd.v1.HoldEventKind;
import dev.retryd.v1.Scope;
import dev.retryd.v1.WatchHoldsResponse;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * The holds that can cover this client's calls, as {@code WatchHolds} streams told them (and Admit and Classify
 * answers taught them), and the local admission read from them (clients/java/README.md, "What a call costs").
 * Every store is bounded: at most {@code maxHolds} holds (the one ending soonest is dropped, and its dependency asks
 * Admit until the next snapshot) and {@link #TOMBSTONES} lifted ids. Writers take the mirror's lock; a call reads a
 * published array per dependency without one.
 */
final class HoldsMirror {
  /** Lifted hold ids remembered per store, so a PLACED that raced the snapshot is not resurrected. */
  static final int TOMBSTONES = 1024;
  /**
   * How long past its end a hold with a probe point is still asked about (Admit) when the mirror never heard its
   * probe phase begin or the hold lift: retryd says which it is.
   */
  static final long AWAIT_PROBE_MS = 600_000;
  /** Buckets a resume names: one per value of a hold digest's first byte. */
  static final int RESUME_BUCKETS = 256;
  private static final long NONE = Long.MIN_VALUE;
  private static final Entry[] EMPTY = new Entry[0];

  /** What a call may do, by the mirror. */
  sealed interface Admission permits Ask, Admit, Refuse {}

  /** Ask retryd (Admit): the mirror does not know, or a probe point. */
  record Ask() implements Admission {}

  /** Go ahead, no RPC. */
  record Admit() implements Admission {}

  /** Refused locally until {@code retryAtMillis} (local clock) by {@code hold}. */
  record Refuse(Hold hold, long retryAtMillis) implements Admission {}

  static final Ask ASK = new Ask();
  static final Admit ADMIT = new Admit();

  /**
   * One hold as a call reads it; times on the server's clock. {@code digest}: its resume digest, computed once here
   * (on the stream's thread) so that reopening a stream only XORs them.
   */
  record Entry(String id, String catalog, String dependency, String tenant, String method, Scope scope, long until,
      long nextProbe, boolean probing, Hold hold, long digest) {
    static Entry of(Hold h, boolean probing) {
      long until = h.getUntil().getSeconds() * 1000 + h.getUntil().getNanos() / 1_000_000;
      long next = h.hasNextProbeAt()
          ? h.getNextProbeAt().getSeconds() * 1000 + h.getNextProbeAt().getNanos() / 1_000_000 : NONE;
      return new Entry(h.getId(), h.getCatalog(), h.getDependency(), h.getTenant(), h.getMethod(), h.getScope(), until,
          next, probing || h.getProbing(), h, HoldsMirror.digest(h.getId(), until));
    }

    boolean covers(String catalog, String tenant, String method) {
      // A call naming no catalog matches a hold of any: never fewer refusals than Admit.
      if (!catalog.isEmpty() && !this.catalog.equals(catalog)) {
        return false;
      }
      return switch (scope) {
        case SCOPE_DEPENDENCY -> true;
        case SCOPE_TENANT -> !tenant.isEmpty() && this.tenant.equals(tenant);
        case SCOPE_METHOD -> this.method.equals(method);
        default -> false;
      };
    }

    /** Reached a probe point retryd arbitrates: probing, or its next probe due (a phase not yet announced). */
    boolean probePoint(long now) {
      return probing || (nextProbe != NONE && nextProbe <= now);
    }

    /** In force at {@code now}, or past its end awaiting the word on its probe phase. */
    boolean inForce(long now) {
      if (until > now) {
        return true;
      }
      return !probing && nextProbe != NONE && nextProbe <= now && now < until + AWAIT_PROBE_MS;
    }
  }

  /** The holds one stream told, for the dependencies and tenants it asked for. */
  static final class Store {
    final Set<String> deps, tenants;
    /** Its stream sent resume digests: a resumed SYNCED keeps the mirror's holds of the buckets not resent. */
    final boolean resuming;
    volatile boolean synced;
    final Map<String, Entry> byId = new HashMap<>();
    final Map<String, Map<String, Entry>> perDep = new HashMap<>();
    final ConcurrentHashMap<String, Entry[]> byDep = new ConcurrentHashMap<>();
    /** Dependencies whose hold was dropped at maxHolds: they ask Admit until the next snapshot. */
    final Set<String> unsynced = ConcurrentHashMap.newKeySet();
    final Set<String> dirty = new HashSet<>();
    final LinkedHashMap<String, Long> lifted = new LinkedHashMap<>() {
      @Override
      protected boolean removeEldestEntry(Map.Entry<String, Long> e) { return size() > TOMBSTONES; }
    };

    Store(Set<String> deps, Set<String> tenants) {
      this(deps, tenants, false);
    }

    Store(Set<String> deps, Set<String> tenants, boolean resuming) {
      this.deps = Set.copyOf(deps);
      this.tenants = Set.copyOf(tenants);
      this.resuming = resuming;
    }

    boolean covers(String dep, String tenant) {
      return deps.contains(dep) && (tenant.isEmpty() || tenants.contains(tenant)) && !unsynced.contains(dep);
    }
  }

  private final int maxHolds;
  private volatile Store live;
  private volatile boolean stale;
  /** server clock − local clock, from the latest event's server_time. */
  private volatile long offsetMillis;
  /** SYNCEDs that resumed the mirror, and the buckets they resent. */
  private final LongAdder resumedSyncs = new LongAdder(), resentBuckets = new LongAdder();

  HoldsMirror(int maxHolds) {
    if (maxHolds < 1) {
      throw new IllegalArgumentException("maxHolds: must be at least 1, got " + maxHolds);
    }
    this.maxHolds = maxHolds;
  }

  /** What a call to (catalog, dependency, tenant, method) may do now. */
  Admission admission(String catalog, String dependency, String tenant, String method) {
    Store s = live;
    if (s == null || !s.covers(dependency, tenant)) {
      return ASK;
    }
    long offset = offsetMillis;
    long now = System.currentTimeMillis() + offset;
    Entry best = null;
    for (Entry e : s.byDep.getOrDefault(dependency, EMPTY)) {
      if (e.covers(catalog, tenant, method) && e.inForce(now) && (best == null || e.until > best.until)) {
        best = e;
      }
    }
    if (best == null) {
      // Stale: no known hold is not "no hold": retryd decides.
      return stale ? ASK : ADMIT;
    }
    if (best.probePoint(now)) {
      return ASK;
    }
    long at = best.nextProbe == NONE ? best.until : Math.min(best.until, best.nextProbe);
    return new Refuse(best.hold, at - offset);
  }

  boolean stale() { return stale; }

  /** Whether the live snapshot covers these dependencies and tenants. */
  boolean syncedFor(Set<String> deps, Set<String> tenants) {
    Store s = live;
    return s != null && !stale && s.deps.containsAll(deps) && s.tenants.containsAll(tenants);
  }

  synchronized int holds() {
    Store s = live;
    return s == null ? 0 : s.byId.size();
  }

  /** Holds in force in the live store whose dependency is {@code dep}. */
  int holdsFor(String dep) {
    Store s = live;
    if (s == null) {
      return 0;
    }
    long now = System.currentTimeMillis() + offsetMillis;
    int n = 0;
    for (Entry e : s.byDep.getOrDefault(dep, EMPTY)) {
      n += e.inForce(now) ? 1 : 0;
    }
    return n;
  }

  void markStale() { stale = true; }

  /**
   * Applies one event of the stream whose store is {@code s}; true when it was SYNCED (then {@code s} is live: its
   * snapshot is the truth, holds only the old store had are gone).
   */
  synchronized boolean apply(Store s, WatchHoldsResponse ev) {
    if (ev.hasServerTime()) {
      long server = ev.getServerTime().getSeconds() * 1000 + ev.getServerTime().getNanos() / 1_000_000;
      offsetMillis = server - System.currentTimeMillis();
    }
    HoldEventKind kind = ev.getKind();
    switch (kind) {
      case HOLD_EVENT_KIND_PLACED, HOLD_EVENT_KIND_EXTENDED, HOLD_EVENT_KIND_PROBING ->
          put(s, Entry.of(ev.getHold(), kind == HoldEventKind.HOLD_EVENT_KIND_PROBING));
      case HOLD_EVENT_KIND_LIFTED -> lift(s, Entry.of(ev.getHold(), false));
      case HOLD_EVENT_KIND_SYNCED -> {
        if (s.resuming && ev.getResumed()) {
          resume(s, ev.getResentBucketsList());
        }
        for (String dep : s.dirty) {
          publish(s, dep);
        }
        s.dirty.clear();
        // s.unsynced stays: a hold dropped during this snapshot is still unknown (a new stream starts empty).
        s.synced = true;
        live = s;
        stale = false;
        return true;
      }
      default -> { }
    }
    return false;
  }

  /**
   * A resumed SYNCED: the server sent every hold of the buckets {@code resent} (and only those), so the live store's
   * holds in the other buckets are still right and carry over into {@code s}; those in a resent bucket that {@code s}
   * did not receive are gone. Lifted ids carry over too (a PLACED that races the new stream stays lifted).
   */
  private void resume(Store s, List<Integer> resent) {
    resumedSyncs.increment();
    resentBuckets.add(resent.size());
    Store old = live;
    if (old == null || old == s) {
      return;
    }
    boolean[] sent = new boolean[RESUME_BUCKETS];
    for (int b : resent) {
      if (b >= 0 && b < RESUME_BUCKETS) {
        sent[b] = true;
      }
    }
    for (Map.Entry<String, Long> l : old.lifted.entrySet()) {
      s.lifted.merge(l.getKey(), l.getValue(), Math::max);
    }
    for (Entry e : old.byId.values()) {
      if (!sent[bucket(e.digest())] && !s.byId.containsKey(e.id)) {
        put(s, e);
      }
    }
  }

  /**
   * The 256 bucket digests of the holds in the mirror (lifted ones are not in it), for a stream that resumes; null
   * when it holds none (that stream asks for a full snapshot). Holds past their end are pruned first: the server's
   * digests cover the holds in force.
   */
  synchronized long[] resumeDigests() {
    prune();
    Store s = live;
    return s == null || s.byId.isEmpty() ? null : bucketDigests(s.byId.values());
  }

  /** The 256 bucket digests of {@code holds}: the XOR of their digests in each bucket (0 when empty). */
  static long[] bucketDigests(Iterable<Entry> holds) {
    long[] out = new long[RESUME_BUCKETS];
    for (Entry e : holds) {
      long d = e.digest();
      out[bucket(d)] ^= d;
    }
    return out;
  }

  /**
   * A hold's resume digest: the first 8 bytes, big-endian, of SHA-256(id as UTF-8, 0x00, {@code until} in Unix ms
   * as decimal ASCII), with {@code until} the server's as received. Unsigned 64-bit: Java's long holds the same bits
   * (compare with {@link Long#compareUnsigned}, print with {@link Long#toUnsignedString}).
   */
  static long digest(String id, long untilMillis) {
    MessageDigest sha = SHA256.get();
    sha.update(id.getBytes(StandardCharsets.UTF_8));
    sha.update((byte) 0);
    byte[] h = sha.digest(Long.toString(untilMillis).getBytes(StandardCharsets.US_ASCII));
    long d = 0;
    for (int i = 0; i < 8; i++) {
      d = (d << 8) | (h[i] & 0xff);
    }
    return d;
  }

  /** One SHA-256 per thread (digest() resets it): getInstance per hold would cost as much as the hash. */
  private static final ThreadLocal<MessageDigest> SHA256 = ThreadLocal.withInitial(() -> {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every Java platform has SHA-256", e);
    }
  });

  /** A digest's bucket: its first byte (0..255). */
  static int bucket(long digest) {
    return (int) (digest >>> 56);
  }

  long resumedSyncs() { return resumedSyncs.sum(); }

  long resentBuckets() { return resentBuckets.sum(); }

  /** A hold from an Admit or Classify answer: into the live store (and {@code pending}'s) at once. */
  synchronized void learn(Hold h, Store pending) {
    if (h == null || h.getId().isEmpty()) {
      return;
    }
    Entry e = Entry.of(h, false);
    if (live != null) {
      put(live, e);
    }
    if (pending != null && pending != live) {
      put(pending, e);
    }
  }

  /** A hold an answer says is lifted: out of the live store (and {@code pending}'s), remembered as lifted. */
  synchronized void forget(Hold h, Store pending) {
    Entry e = Entry.of(h, false);
    if (live != null) {
      lift(live, e);
    }
    if (pending != null && pending != live) {
      lift(pending, e);
    }
  }

  /** Drops holds past their end (and past the wait for their probe phase's word). */
  synchronized void prune() {
    Store s = live;
    if (s == null) {
      return;
    }
    long now = System.currentTimeMillis() + offsetMillis;
    List<Entry> gone = new ArrayList<>();
    for (Entry e : s.byId.values()) {
      if (!e.inForce(now)) {
        gone.add(e);
      }
    }
    for (Entry e : gone) {
      remove(s, e);
    }
  }

  private void put(Store s, Entry e) {
    Long liftedUntil = s.lifted.get(e.id);
    if (liftedUntil != null && e.until <= liftedUntil) {
      return; // a PLACED that raced the snapshot, for a hold already lifted
    }
    Entry old = s.byId.get(e.id);
    if (old != null && e.until < old.until) {
      return;
    }
    s.byId.put(e.id, e);
    s.perDep.computeIfAbsent(e.dependency, k -> new HashMap<>()).put(e.id, e);
    changed(s, e.dependency);
    while (s.byId.size() > maxHolds) {
      evictSoonest(s);
    }
  }

  private void lift(Store s, Entry e) {
    s.lifted.put(e.id, Math.max(e.until, s.lifted.getOrDefault(e.id, Long.MIN_VALUE)));
    Entry old = s.byId.get(e.id);
    if (old != null) {
      remove(s, old);
    }
  }

  private void remove(Store s, Entry e) {
    s.byId.remove(e.id);
    Map<String, Entry> dep = s.perDep.get(e.dependency);
    if (dep != null) {
      dep.remove(e.id);
      if (dep.isEmpty()) {
        s.perDep.remove(e.dependency);
      }
    }
    changed(s, e.dependency);
  }

  /** Beyond maxHolds: the hold ending soonest goes, and its dependency asks Admit until the next snapshot. */
  private void evictSoonest(Store s) {
    Entry soonest = null;
    for (Entry e : s.byId.values()) {
      if (soonest == null || e.until < soonest.until) {
        soonest = e;
      }
    }
    s.unsynced.add(soonest.dependency);
    remove(s, soonest);
  }

  private void changed(Store s, String dep) {
    if (s.synced) {
      publish(s, dep);
    } else {
      s.dirty.add(dep); // published at SYNCED: a snapshot of n holds costs n, not n²
    }
  }

  private static void publish(Store s, String dep) {
    Map<String, Entry> m = s.perDep.get(dep);
    if (m == null || m.isEmpty()) {
      s.byDep.remove(dep);
    } else {
      s.byDep.put(dep, m.values().toArray(EMPTY));
    }
  }
}
