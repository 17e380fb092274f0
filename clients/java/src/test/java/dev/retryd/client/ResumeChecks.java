package dev.retryd.client;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.retryd.v1.Hold;
import dev.retryd.v1.HoldEventKind;
import dev.retryd.v1.Scope;
import dev.retryd.v1.WatchHoldsResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Resuming the mirror by bucket digests: the shared vectors (clients/conformance/resume_vectors.json; digests are
 * unsigned 64-bit, most of them above 2^63), the sweep of a resumed SYNCED on events built here (restricted to the
 * resent buckets; a full sweep when the server did not resume), then a real retryd: a widened watch resumes and the
 * stop it had is still refused locally. Run by Conformance after the scenarios.
 */
final class ResumeChecks {
  private ResumeChecks() {}

  static List<String> vectors(Path root) throws Exception {
    List<String> bad = new ArrayList<>();
    JsonObject v = JsonParser.parseString(Files.readString(root.resolve("clients/conformance/resume_vectors.json")))
        .getAsJsonObject();
    List<HoldsMirror.Entry> entries = new ArrayList<>();
    boolean above = false;
    for (JsonElement x : v.getAsJsonArray("holds")) {
      JsonObject h = x.getAsJsonObject();
      String id = h.get("id").getAsString();
      long until = h.get("until_ms").getAsLong();
      long got = HoldsMirror.digest(id, until);
      long want = Long.parseUnsignedLong(h.get("digest").getAsString());
      if (got != want) bad.add("digest of " + id + ": " + Long.toUnsignedString(got) + " != " + Long.toUnsignedString(want));
      if (!String.format("%016x", got).equals(h.get("digest_hex").getAsString())) bad.add("hex digest of " + id);
      if (HoldsMirror.bucket(got) != h.get("bucket").getAsInt()) bad.add("bucket of " + id + ": " + HoldsMirror.bucket(got));
      above |= Long.compareUnsigned(got, Long.MAX_VALUE) > 0;
      entries.add(HoldsMirror.Entry.of(Hold.newBuilder().setId(id).setUntil(MirrorChecks.ts(until)).build(), false));
    }
    if (!above) bad.add("the vectors have no digest above 2^63: the unsigned reading is not checked");
    long[] buckets = HoldsMirror.bucketDigests(entries);
    JsonObject named = v.getAsJsonObject("buckets");
    if (buckets.length != HoldsMirror.RESUME_BUCKETS) bad.add("bucket digests: " + buckets.length);
    for (int b = 0; b < buckets.length; b++) {
      long want = named.has(Integer.toString(b))
          ? Long.parseUnsignedLong(named.getAsJsonObject(Integer.toString(b)).get("digest").getAsString()) : 0;
      if (buckets[b] != want) bad.add("bucket " + b + ": " + Long.toUnsignedString(buckets[b]) + " != " + Long.toUnsignedString(want));
    }
    if (named.size() >= entries.size()) bad.add("the vectors put no two holds in one bucket");
    return bad;
  }

  static Hold hold(String id, long untilMs) {
    return MirrorChecks.hold(id, Scope.SCOPE_DEPENDENCY, "", untilMs, null);
  }

  static WatchHoldsResponse synced(boolean resumed, Integer... resent) {
    return WatchHoldsResponse.newBuilder().setKind(HoldEventKind.HOLD_EVENT_KIND_SYNCED).setResumed(resumed)
        .addAllResentBuckets(List.of(resent)).setServerTime(MirrorChecks.ts(System.currentTimeMillis())).build();
  }

  static int bucketOf(String id, long until) { return HoldsMirror.bucket(HoldsMirror.digest(id, until)); }

  /** A mirror (maxHolds {@code max}) synced with holds {@code a} and {@code b} on dependency d. */
  static HoldsMirror seeded(int max, String a, String b, long until) {
    HoldsMirror m = new HoldsMirror(max);
    HoldsMirror.Store s = new HoldsMirror.Store(Set.of("d"), Set.of("t"));
    long now = System.currentTimeMillis();
    m.apply(s, MirrorChecks.ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold(a, until), now));
    m.apply(s, MirrorChecks.ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold(b, until), now));
    m.apply(s, synced(false));
    return m;
  }

  static String refusal(HoldsMirror m) {
    HoldsMirror.Admission a = m.admission("frontspin", "d", "t", "m");
    return a instanceof HoldsMirror.Refuse r ? r.hold().getId() : a == HoldsMirror.ADMIT ? "admit" : "ask";
  }

  static List<String> rules() {
    List<String> bad = new ArrayList<>();
    long now = System.currentTimeMillis(), until = now + 600_000;
    String a = "resume-a";
    String b = "resume-b";
    for (int i = 0; bucketOf(b, until) == bucketOf(a, until); i++) b = "resume-b" + i;
    int ba = bucketOf(a, until), bb = bucketOf(b, until);
    Set<String> d = Set.of("d"), t = Set.of("t");
    if (new HoldsMirror(10).resumeDigests() != null) bad.add("an empty mirror sends digests (it asks for a full snapshot)");

    HoldsMirror m = seeded(10, a, b, until);
    long[] dg = m.resumeDigests();
    if (dg == null || dg.length != 256) {
      bad.add("digests of a mirror with holds: " + (dg == null ? "none" : dg.length));
      return bad;
    }
    for (int i = 0; i < 256; i++) {
      long want = i == ba ? HoldsMirror.digest(a, until) : i == bb ? HoldsMirror.digest(b, until) : 0;
      if (dg[i] != want) bad.add("bucket digest " + i);
    }
    // Resumed, a's bucket resent, a not received: a is gone, b (its bucket matched) kept.
    HoldsMirror.Store s = new HoldsMirror.Store(d, t, true);
    m.apply(s, synced(true, ba));
    if (m.holds() != 1 || !refusal(m).equals(b)) bad.add("resumed, a's bucket resent: holds " + m.holds() + ", " + refusal(m));
    if (m.resumedSyncs() != 1 || m.resentBuckets() != 1) bad.add("resume stats " + m.resumedSyncs() + "/" + m.resentBuckets());

    // Resumed, nothing resent: both kept; a hold received in a resent bucket is the stream's (a later until).
    m = seeded(10, a, b, until);
    s = new HoldsMirror.Store(d, t, true);
    m.apply(s, MirrorChecks.ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold(a, until + 60_000), now));
    m.apply(s, synced(true, ba));
    if (m.holds() != 2 || !refusal(m).equals(a)) bad.add("resumed, a resent with a later until: holds " + m.holds() + ", " + refusal(m));
    m = seeded(10, a, b, until);
    m.apply(new HoldsMirror.Store(d, t, true), synced(true));
    if (m.holds() != 2) bad.add("resumed, nothing resent: holds " + m.holds());

    // A LIFTED on the new stream before SYNCED: that hold does not carry over, though its bucket was not resent.
    m = seeded(10, a, b, until);
    s = new HoldsMirror.Store(d, t, true);
    m.apply(s, MirrorChecks.ev(HoldEventKind.HOLD_EVENT_KIND_LIFTED, hold(b, until), now));
    m.apply(s, synced(true));
    if (m.holds() != 1 || !refusal(m).equals(a)) bad.add("resumed, b lifted on the new stream: holds " + m.holds() + ", " + refusal(m));

    // The server did not resume (older server): the snapshot is the whole truth, holds it lacks are gone.
    m = seeded(10, a, b, until);
    m.apply(new HoldsMirror.Store(d, t, true), synced(false));
    if (m.holds() != 0 || !refusal(m).equals("admit")) bad.add("not resumed: holds " + m.holds() + " kept");
    if (m.resumedSyncs() != 0) bad.add("not resumed, counted as resumed");
    // A stream that sent no digests sweeps whatever its SYNCED says.
    m = seeded(10, a, b, until);
    m.apply(new HoldsMirror.Store(d, t, false), synced(true));
    if (m.holds() != 0) bad.add("no digests sent, SYNCED resumed: holds " + m.holds() + " kept");

    // Carried-over holds stay within maxHolds: the soonest-ending goes and its dependency asks Admit.
    String c = "resume-c";
    for (int i = 0; bucketOf(c, until + 1) == ba || bucketOf(c, until + 1) == bb; i++) c = "resume-c" + i;
    m = seeded(2, a, b, until);
    s = new HoldsMirror.Store(d, t, true);
    m.apply(s, MirrorChecks.ev(HoldEventKind.HOLD_EVENT_KIND_PLACED, hold(c, until + 1), now));
    m.apply(s, synced(true, bucketOf(c, until + 1)));
    if (m.holds() != 2 || !refusal(m).equals("ask")) bad.add("maxHolds 2 after a resume: holds " + m.holds() + ", " + refusal(m));
    return bad;
  }

  /**
   * Against the real retryd at {@code addr}: a stop in the synced mirror, then a widened watch (a new stream, resuming
   * from the mirror's digests; its names are this check's own, so no other hold can differ). {@code resumes}: the server resumes (SYNCED resumed, nothing resent: the mirror was right);
   * else (an older server, RETRYD_RESUMES=0) the full snapshot replaces the mirror. Either way the stop still refuses
   * locally.
   */
  static List<String> live(String addr, boolean resumes) throws Exception {
    List<String> bad = new ArrayList<>();
    String run = Long.toString(System.nanoTime() % 1_000_000_000L);
    String dep = "d-resume-" + run, tenant = "t-resume-" + run;
    try (RetrydClient c = RetrydClient.builder(addr).catalog("frontspin").dependency(dep).tenant(tenant)
        .timeout(Duration.ofSeconds(2)).build()) {
      if (!c.watch(List.of(dep), List.of(tenant), Duration.ofSeconds(3))) bad.add("resume: not synced");
      if (!MirrorChecks.placeStop(c, dep, tenant, 600_000)) bad.add("resume: no stop placed");
      if (!Conformance.waitFor(() -> c.mirrorHoldsFor(dep) == 1)) bad.add("resume: the stop never reached the mirror");
      MirrorStats before = c.stats();
      if (!c.watch(List.of("d-resume-wide-" + run), List.of(), Duration.ofSeconds(3))) bad.add("resume: the wider watch not synced");
      MirrorStats after = c.stats();
      long resumed = after.resumedSyncs() - before.resumedSyncs(), resent = after.resentBuckets() - before.resentBuckets();
      if (resumes && (resumed != 1 || resent != 0)) bad.add("resume: resumed SYNCEDs " + resumed + ", resent buckets " + resent + " (want 1, 0)");
      if (!resumes && resumed != 0) bad.add("resume: an older server's SYNCED counted as resumed");
      if (c.mirrorHoldsFor(dep) != 1) bad.add("resume: the stop left the mirror at the new stream's SYNCED");
      MirrorChecks.refusedLocally(c, "resume: the resumed mirror", bad);
    }
    return bad;
  }

  /** Whether the server under test resumes (RETRYD_RESUMES=0: an older one, whose fallback is checked instead). */
  static boolean serverResumes() {
    return !"0".equals(System.getenv().getOrDefault("RETRYD_RESUMES", "1"));
  }
}
