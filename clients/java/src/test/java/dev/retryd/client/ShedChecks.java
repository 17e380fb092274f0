package dev.retryd.client;

import com.google.protobuf.Any;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * retryd's own shed advice: the parser on answers built here (RetryInfo, gRFC A6 pushback, the 30 s cap), the busy
 * period's rules, then against a real retryd that sheds every call ({@code --max-buffered-bytes 1}): the advice is
 * kept, Admit and Classify are not sent while it holds, outcome counts are kept (not lost) and a watch stream does not
 * open before it passes. Run by Conformance after the scenarios.
 */
final class ShedChecks {
  private ShedChecks() {}

  private static final Metadata.Key<String> PUSHBACK =
      Metadata.Key.of("grpc-retry-pushback-ms", Metadata.ASCII_STRING_MARSHALLER);

  /** An answer with {@code code}, RetryInfo of {@code seconds}/{@code nanos} (null: none) and these pushback values. */
  static StatusRuntimeException answer(Status.Code code, Long seconds, int nanos, String... pushback) {
    com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("shed");
    if (seconds != null) {
      st.addDetails(Any.pack(RetryInfo.newBuilder()
          .setRetryDelay(com.google.protobuf.Duration.newBuilder().setSeconds(seconds).setNanos(nanos)).build()));
    }
    Metadata trailers = new Metadata();
    for (String v : pushback) {
      trailers.put(PUSHBACK, v);
    }
    return StatusProto.toStatusRuntimeException(st.build(), trailers);
  }

  static StatusRuntimeException exhausted(Long seconds, int nanos, String... pushback) {
    return answer(Status.Code.RESOURCE_EXHAUSTED, seconds, nanos, pushback);
  }

  private static void expect(List<String> bad, String what, Long want, StatusRuntimeException e) {
    Long got = Busy.adviceMillis(e);
    if (!Objects.equals(got, want)) {
      bad.add("advice " + what + ": " + got + " != " + want);
    }
  }

  static List<String> rules() {
    List<String> bad = new ArrayList<>();
    expect(bad, "RetryInfo 300 ms", 300L, exhausted(0L, 300_000_000));
    expect(bad, "RetryInfo 1.5 s", 1_500L, exhausted(1L, 500_000_000));
    expect(bad, "RetryInfo 0 (draining)", 0L, answer(Status.Code.UNAVAILABLE, 0L, 0));
    expect(bad, "RetryInfo a day: capped", Busy.CAP_MS, exhausted(86_400L, 0));
    expect(bad, "RetryInfo Long.MAX_VALUE s: capped, no overflow", Busy.CAP_MS, exhausted(Long.MAX_VALUE, 0));
    expect(bad, "RetryInfo wins over pushback", 300L, exhausted(0L, 300_000_000, "900"));
    expect(bad, "RetryInfo negative: the pushback instead", 250L, exhausted(-1L, 0, "250"));
    expect(bad, "RetryInfo nanos out of range, no pushback", null, exhausted(0L, -5));
    expect(bad, "pushback 250", 250L, exhausted(null, 0, "250"));
    expect(bad, "pushback 250 twice", 250L, exhausted(null, 0, "250", "250"));
    expect(bad, "pushback -1", null, exhausted(null, 0, "-1"));
    expect(bad, "pushback xxx", null, exhausted(null, 0, "xxx"));
    expect(bad, "pushback 100 and 200", null, exhausted(null, 0, "100", "200"));
    expect(bad, "pushback 99999999999999999999", null, exhausted(null, 0, "99999999999999999999"));
    expect(bad, "pushback a day: capped", Busy.CAP_MS, exhausted(null, 0, "86400000"));
    expect(bad, "no advice", null, exhausted(null, 0));
    expect(bad, "another code's RetryInfo", null, answer(Status.Code.INTERNAL, 1L, 0, "1000"));
    // What a shed answer is: RESOURCE_EXHAUSTED or UNAVAILABLE with advice (draining: 0); retryd away is not one.
    if (!Busy.shed(exhausted(0L, 300_000_000))) bad.add("RESOURCE_EXHAUSTED with advice is not shed");
    if (Busy.shed(exhausted(null, 0))) bad.add("RESOURCE_EXHAUSTED without advice counted as shed");
    if (Busy.shed(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException())) bad.add("retryd away counted as shed");
    if (!Busy.shed(answer(Status.Code.UNAVAILABLE, 0L, 0))) bad.add("a draining server's UNAVAILABLE is not shed");
    if (Busy.shed(answer(Status.Code.INTERNAL, 1L, 0))) bad.add("INTERNAL counted as shed");
    // The busy period: advice > 0 begins one (once), 0 or none changes nothing, the later end is kept, 30 s cap.
    Busy b = new Busy();
    if (b.busy() || b.remainingMillis() != 0) bad.add("busy before any advice");
    if (b.advise(null) || b.advise(0L) || b.busy()) bad.add("advice 0 or none made it busy");
    if (!b.advise(200L) || !b.busy()) bad.add("advice 200 ms did not begin a busy period");
    if (b.advise(100L) || b.remainingMillis() < 150) bad.add("a shorter advice shortened the period: " + b.remainingMillis());
    if (b.advise(5_000L) || b.remainingMillis() < 4_000) bad.add("a longer advice did not extend it (or began another): " + b.remainingMillis());
    b.advise(Long.MAX_VALUE);
    if (b.remainingMillis() > Busy.CAP_MS) bad.add("advice past the cap: " + b.remainingMillis());
    Busy over = new Busy();
    over.advise(1L);
    try {
      Thread.sleep(5);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (over.busy()) bad.add("busy after the advice passed");
    if (!over.advise(50L)) bad.add("advice after a period passed did not begin a new one");
    return bad;
  }

  /** Against a real retryd started with {@code --max-buffered-bytes 1}, at {@code shedding}. */
  static List<String> live(String shedding) throws Exception {
    List<String> bad = new ArrayList<>();
    String run = Long.toString(System.nanoTime() % 1_000_000_000L);
    AtomicInteger busyEvents = new AtomicInteger(), fallbacks = new AtomicInteger();
    // Mirror off: the shed answers counted are this client's RPCs' alone (the watch's are checked below).
    try (RetrydClient c = RetrydClient.builder(shedding).catalog("vibecode").dependency("d-shed-" + run)
        .tenant("t-shed-" + run).timeout(Duration.ofSeconds(2)).connectTimeout(Duration.ofSeconds(2)).mirror(false)
        .reportInterval(Duration.ofHours(1)).sleeper(d -> { })
        .hook(e -> {
          if (e.kind().equals("busy")) busyEvents.incrementAndGet();
          if (e.kind().equals("fallback")) fallbacks.incrementAndGet();
        }).build()) {
      // The warm-up Admit in build() is shed: the advice is kept.
      if (c.stats().shedAnswers() < 1) bad.add("the warm-up's shed answer not counted: " + c.stats());
      if (!c.busy()) bad.add("not busy after a shed answer with advice");
      long admits = c.stats().admitRpcs();
      int[] runs = {0};
      String v = c.call(RetrydClient.Call.<String>read("crm.deal.get"), () -> {
        if (++runs[0] == 1) throw new Mappers.DependencyException("BITRIX_UNAVAILABLE", "", null);
        return "ok";
      });
      if (!"ok".equals(v) || runs[0] != 2) bad.add("a read while busy: " + v + " after " + runs[0] + " runs");
      if (c.stats().admitRpcs() != admits) bad.add("Admit sent while busy: " + (c.stats().admitRpcs() - admits));
      // Admit, Classify, Admit: each not sent, each the fallback's path; one busy event for the period.
      if (c.stats().busySkips() < 3) bad.add("busy skips " + c.stats().busySkips() + " < 3");
      if (fallbacks.get() < 3) bad.add("fallbacks " + fallbacks.get() + " < 3");
      if (busyEvents.get() != 1) bad.add("busy events " + busyEvents.get() + " != 1 for one period");
      // Counts are kept while busy (not sent), and a shed batch goes back for the next flush.
      long pending = c.pendingRequests(), reports = c.stats().reportRpcs();
      if (pending != 1) bad.add("first attempts pending " + pending + " != 1");
      c.flush();
      if (c.stats().reportRpcs() != reports || c.pendingRequests() != pending) bad.add("a report sent (or counts lost) while busy");
      if (!Conformance.waitFor(() -> !c.busy(), Duration.ofMillis(Busy.CAP_MS + 1000))) bad.add("busy for more than the cap");
      long shed = c.stats().shedAnswers();
      c.flush();
      if (c.stats().reportRpcs() != reports + 1) bad.add("report not sent after the advice passed");
      if (c.stats().shedAnswers() != shed + 1) bad.add("the shed report not counted");
      if (c.pendingRequests() != pending) bad.add("a shed report's counts lost: pending " + c.pendingRequests());
      if (c.stats().reportedRequests() != 0) bad.add("a shed report counted as reported: " + c.stats().reportedRequests());
      if (!c.busy()) bad.add("the shed report's advice not kept");
    }
    // A watch does not open while retryd's advice holds: none of its streams reaches the server (so none is shed)
    // until the advice passes, then it opens and is shed in turn.
    io.grpc.ManagedChannel ch = NettyChannelBuilder.forTarget(shedding).usePlaintext().build();
    MirrorWatch w = new MirrorWatch(new HoldsMirror(10), dev.retryd.v1.RetryDecisionServiceGrpc.newStub(ch));
    try {
      w.advise(1_500L);
      w.want(List.of("d-shed-watch-" + run), List.of());
      Thread.sleep(1_000);
      if (w.shedAnswers() != 0) bad.add("a watch stream opened during the advice (" + w.shedAnswers() + " shed)");
      if (!Conformance.waitFor(() -> w.shedAnswers() >= 1, Duration.ofSeconds(5))) bad.add("the watch never opened after the advice");
    } finally {
      w.close();
      ch.shutdownNow();
    }
    return bad;
  }
}
