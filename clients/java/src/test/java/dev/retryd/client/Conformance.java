package dev.retryd.client;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Any;
import com.google.rpc.RetryInfo;
import dev.retryd.v1.ClassifyRequest;
import dev.retryd.v1.Hold;
import dev.retryd.v1.ListHoldsRequest;
import dev.retryd.v1.OperationKind;
import dev.retryd.v1.ReleaseHoldRequest;
import dev.retryd.v1.RetryDecisionServiceGrpc;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.MetadataUtils;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Stream;

/** Runs every scenario of clients/conformance/scenarios against the real retryd (RETRYD_BIN), concurrently. */
public final class Conformance {
  static final String TOKEN = "conformance-operator-token-0123456789";

  static final class EnvelopeError extends Exception {
    final String body;
    final Map<String, String> headers;
    EnvelopeError(String body, Map<String, String> headers) { super("envelope"); this.body = body; this.headers = headers; }
  }

  static final class Dep {
    final JsonObject sc;
    int runs, effects, readBacks;
    final Set<String> keys = new HashSet<>();
    Dep(JsonObject sc) { this.sc = sc; }

    void apply() {
      JsonObject c = sc.getAsJsonObject("call");
      if (!str(c, "operation").equals("write")) return;
      String k = str(c, "idempotency_key");
      if (bool(sc.getAsJsonObject("dependency"), "dedupe_by_key") && !k.isEmpty()) {
        if (!keys.add(k)) return;
      }
      effects++;
    }

    synchronized String run() throws Exception {
      JsonArray outs = sc.getAsJsonObject("dependency").getAsJsonArray("outcomes");
      JsonObject o = outs.get(Math.min(runs, outs.size() - 1)).getAsJsonObject();
      runs++;
      if (o.has("ok")) { apply(); return o.get("ok").getAsString(); }
      if (bool(o, "applied")) apply();
      throw error(o.getAsJsonObject("error"));
    }
  }

  static String str(JsonObject o, String k) { return o.has(k) && !o.get(k).isJsonNull() ? o.get(k).getAsString() : ""; }
  static boolean bool(JsonObject o, String k) { return o.has(k) && o.get(k).getAsBoolean(); }

  static Exception error(JsonObject e) {
    Map<String, String> headers = new java.util.HashMap<>();
    if (e.has("retry_after")) headers.put("Retry-After", e.get("retry_after").getAsString());
    if (e.has("retry_after_date_in_s")) {
      headers.put("Retry-After", DateTimeFormatter.RFC_1123_DATE_TIME.format(
          Instant.now().plusSeconds(e.get("retry_after_date_in_s").getAsLong()).atZone(ZoneOffset.UTC)));
    }
    switch (str(e, "kind")) {
      case "code":
        return new Mappers.DependencyException(str(e, "code"), str(e, "retry_after"),
            e.has("retry_after_ms") ? e.get("retry_after_ms").getAsLong() : null, str(e, "catalog"));
      case "http":
        return new Mappers.HttpStatusException(e.get("status").getAsInt(), headers);
      case "grpc": {
        Status.Code code = Status.Code.valueOf(str(e, "status"));
        com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("scripted");
        if (e.has("retry_delay_ms")) {
          long ms = e.get("retry_delay_ms").getAsLong();
          st.addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder()
              .setSeconds(ms / 1000).setNanos((int) (ms % 1000) * 1_000_000)).build()));
        }
        Metadata trailers = new Metadata();
        if (e.has("pushback")) {
          for (JsonElement v : e.getAsJsonArray("pushback")) {
            trailers.put(Metadata.Key.of("grpc-retry-pushback-ms", Metadata.ASCII_STRING_MARSHALLER), v.getAsString());
          }
        }
        return StatusProto.toStatusRuntimeException(st.build(), trailers);
      }
      case "envelope":
        return new EnvelopeError(e.get("body").toString(), headers);
      default:
        return new IllegalStateException(str(e, "message"));
    }
  }

  /**
   * The second retryd of {@code "retryd": "shedding"} scenarios: started once, before the scenarios if one needs it, with
   * {@code --max-buffered-bytes 1} (it sheds every call but health checks, with retry advice), the same operator token
   * and RETRYD_POLICY as the first.
   */
  static final class Shedding {
    private final String bin;
    private final Path tok;
    private Process server;
    private String addr;

    Shedding(String bin, Path tok) { this.bin = bin; this.tok = tok; }

    synchronized String addr() throws Exception {
      if (server == null) {
        int port = freePort();
        server = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:" + port, "--metrics-listen", "off",
            "--log-level", "error", "--operator-token-file", tok.toString(), "--max-buffered-bytes", "1")
            .inheritIO().start();
        awaitPort(port);
        addr = "127.0.0.1:" + port;
      }
      return addr;
    }

    /** Asks it to stop (retryd drains for a few seconds: the caller waits for it with the first server). */
    synchronized Process stop() {
      if (server != null) {
        server.destroy();
      }
      return server;
    }
  }

  static void awaitPort(int port) throws InterruptedException {
    for (int i = 0; ; i++) {
      try (Socket s = new Socket("127.0.0.1", port)) {
        return;
      } catch (Exception e) {
        if (i > 200) throw new IllegalStateException("retryd did not start");
        Thread.sleep(50);
      }
    }
  }

  static List<String> runOne(String addr, String down, String slow, Shedding shedding, JsonObject sc) throws Exception {
    String name = str(sc, "name");
    String run = Long.toString(System.nanoTime() % 1_000_000_000L);
    String tenant = "t-" + name + "-java-" + run, depName = "d-" + name + "-java-" + run;
    String mode = str(sc, "retryd").isEmpty() ? "up" : str(sc, "retryd");
    boolean up = mode.equals("up");
    boolean real = !str(sc, "sleep").equals("record");
    List<Duration> waits = java.util.Collections.synchronizedList(new ArrayList<>());
    AtomicInteger refusals = new AtomicInteger();
    JsonObject c = sc.getAsJsonObject("call");
    String target = switch (mode) {
      case "up" -> addr;
      case "slow" -> slow;
      case "shedding" -> shedding.addr();
      default -> down;
    };
    RetrydClient client = RetrydClient.builder(target).catalog(str(c, "catalog")).dependency(depName).tenant(tenant)
        .connectTimeout(Duration.ofMillis(500))
        // Scenarios test the loop, not the 50 ms default (the retryd-down scenarios test the fallback).
        .timeout(Duration.ofSeconds(2))
        .sleeper(d -> { waits.add(d); if (real) Thread.sleep(d.toMillis()); })
        .hook(ev -> { if (ev.kind().equals("admit_refused")) refusals.incrementAndGet(); })
        .build();
    if (up && sc.has("setup")) {
      Metadata md = new Metadata();
      md.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + TOKEN);
      RetryDecisionServiceGrpc.RetryDecisionServiceBlockingStub s = client.stub().withDeadlineAfter(5, TimeUnit.SECONDS)
          .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md));
      for (JsonElement step : sc.getAsJsonArray("setup")) {
        JsonObject st = step.getAsJsonObject();
        if (st.has("place_quota_stop")) {
          Instant at = Instant.now().plusMillis(st.getAsJsonObject("place_quota_stop").get("resets_in_ms").getAsLong());
          var d = s.classify(ClassifyRequest.newBuilder().setFailure(dev.retryd.v1.Failure.newBuilder().setCatalog("frontspin")
              .setCode("RATE_LIMITED").setOperation(OperationKind.OPERATION_KIND_WRITE).setAttempt(1).setTenant(tenant)
              .setDependency(depName).setQuotaResetsAt(com.google.protobuf.Timestamp.newBuilder()
                  .setSeconds(at.getEpochSecond()).setNanos(at.getNano()))).build()).getDecision();
          if (!d.hasHold()) return List.of("setup placed no hold");
          // A hold placed elsewhere reaches the mirror as a PLACED event a moment later (or in its snapshot); a call
          // made in that window goes ahead (clients/java/README.md). The scenario tests a call after the stop, so
          // it waits (<= 3 s) for the mirror to know it, as it does after a release.
          if (!waitFor(() -> client.mirrorHoldsFor(depName) >= 1)) return List.of("setup: the stop never reached the mirror");
        }
        if (st.has("release_holds")) {
          var holds = s.listHolds(ListHoldsRequest.newBuilder().setTenant(tenant).setDependency(depName).build()).getHoldsList();
          if (holds.isEmpty()) return List.of("setup: no hold to release");
          for (Hold h : holds) s.releaseHold(ReleaseHoldRequest.newBuilder().setId(h.getId()).build());
          // The release reaches the mirror as a LIFTED event a moment after ReleaseHold answers; a call made in
          // that window is refused by the mirror as it would have been a moment before. The scenario tests the
          // call after the release, so it waits (<= 3 s) for the mirror to see it.
          if (!waitFor(() -> client.mirrorHoldsFor(depName) == 0)) return List.of("setup: the release never reached the mirror");
        }
        if (st.has("mirror_sync")) {
          if (!client.watch(List.of(depName), List.of(tenant), Duration.ofSeconds(3))) return List.of("setup: mirror not synced in 3 s");
        }
        if (st.has("wait_mirror_holds")) {
          int min = st.getAsJsonObject("wait_mirror_holds").get("min").getAsInt();
          if (!waitFor(() -> client.mirrorHoldsFor(depName) >= min)) {
            return List.of("setup: mirror holds " + client.mirrorHoldsFor(depName) + " < " + min + " after 3 s");
          }
        }
      }
    }
    Dep dep = new Dep(sc);
    java.util.function.Supplier<RetrydClient.Call<String>> makeCall = () -> {
      RetrydClient.Call<String> call = switch (str(c, "operation")) {
        case "read" -> RetrydClient.Call.read(str(c, "method"));
        default -> RetrydClient.Call.write(str(c, "method"));
      };
      if (c.has("idempotency_key")) call.idempotencyKey(str(c, "idempotency_key"), bool(c, "idempotency_key_enforced"));
      if (c.has("read_back")) {
        call.readBack(() -> {
          synchronized (dep) {
            dep.readBacks++;
            if (str(c, "read_back").equals("inconclusive")) return RetrydClient.ReadBackResult.inconclusive();
            return dep.effects > 0 ? RetrydClient.ReadBackResult.present("found") : RetrydClient.ReadBackResult.absent();
          }
        });
      }
      call.toFailure(t -> t instanceof EnvelopeError env ? Mappers.fromEnvelope(env.body, env.headers) : Mappers.defaultMapper(t));
      if (c.has("deadline_ms")) call.timeout(Duration.ofMillis(c.get("deadline_ms").getAsLong()));
      return call;
    };
    int repeat = c.has("repeat") ? c.get("repeat").getAsInt() : 1;
    MirrorStats before = client.stats();
    String result = null, error = null, verdict = "", terminal = "", field = null;
    long t0 = System.nanoTime();
    Thread caller = Thread.currentThread();
    Thread canceller = null;
    if (c.has("cancel_after_ms")) {
      long ms = c.get("cancel_after_ms").getAsLong();
      canceller = new Thread(() -> { try { Thread.sleep(ms); caller.interrupt(); } catch (InterruptedException ignored) { } });
      canceller.start();
    }
    for (int i = 0; i < repeat; i++) {
      result = null;
      error = null;
      try {
        result = client.call(makeCall.get(), dep::run);
      } catch (RejectedException e) {
        error = "rejected";
        field = e.field();
      } catch (RetryRefusedException e) {
        switch (e.kind()) {
          case HELD -> error = "held";
          case DEADLINE -> error = "deadline_exceeded";
          case FALLBACK -> error = "fallback";
          default -> { error = "retry_refused"; verdict = e.decision().verdict().name(); terminal = e.decision().terminalState(); }
        }
      } catch (InterruptedException e) {
        error = "cancelled";
      } catch (Exception e) {
        error = "unmapped";
      }
    }
    long elapsedMs = (System.nanoTime() - t0) / 1_000_000;
    if (canceller != null) canceller.join();
    Thread.interrupted();
    client.close();
    MirrorStats after = client.stats();
    JsonObject e = sc.getAsJsonObject("expect");
    List<String> bad = new ArrayList<>();
    long admits = after.admitRpcs() - before.admitRpcs(), localRefusals = after.localRefusals() - before.localRefusals();
    long reports = after.reportRpcs() - before.reportRpcs(), reported = after.reportedRequests() - before.reportedRequests();
    if (e.has("admit_rpcs_max") && admits > e.get("admit_rpcs_max").getAsLong()) bad.add("admit RPCs " + admits + " > " + e.get("admit_rpcs_max"));
    if (e.has("admit_rpcs_min") && admits < e.get("admit_rpcs_min").getAsLong()) bad.add("admit RPCs " + admits + " < " + e.get("admit_rpcs_min"));
    if (e.has("local_refusals_min") && localRefusals < e.get("local_refusals_min").getAsLong()) bad.add("local refusals " + localRefusals + " < " + e.get("local_refusals_min"));
    if (e.has("report_rpcs_max") && reports > e.get("report_rpcs_max").getAsLong()) bad.add("report RPCs " + reports + " > " + e.get("report_rpcs_max"));
    if (e.has("reported_requests") && reported != e.get("reported_requests").getAsLong()) bad.add("reported requests " + reported + " != " + e.get("reported_requests"));
    // Shed answers and busy skips count from the client's build: shedding scenarios have no setup, and build() makes
    // this library's warm-up Admit, which a shedding retryd answers first (its advice then holds the call's RPCs back).
    if (e.has("shed_answers_min") && after.shedAnswers() < e.get("shed_answers_min").getAsLong()) bad.add("shed answers " + after.shedAnswers() + " < " + e.get("shed_answers_min"));
    if (e.has("busy_skips_min") && after.busySkips() < e.get("busy_skips_min").getAsLong()) bad.add("busy skips " + after.busySkips() + " < " + e.get("busy_skips_min"));
    double waitMs = waits.stream().mapToDouble(d -> d.toNanos() / 1e6).sum();
    if (e.has("runs") && dep.runs != e.get("runs").getAsInt()) bad.add("runs " + dep.runs + " != " + e.get("runs"));
    if (e.has("runs_min") && dep.runs < e.get("runs_min").getAsInt()) bad.add("runs " + dep.runs + " < " + e.get("runs_min"));
    if (e.has("runs_max") && dep.runs > e.get("runs_max").getAsInt()) bad.add("runs " + dep.runs + " > " + e.get("runs_max"));
    if (e.has("effects") && dep.effects != e.get("effects").getAsInt()) bad.add("effects " + dep.effects + " != " + e.get("effects"));
    if (e.has("read_backs") && dep.readBacks != e.get("read_backs").getAsInt()) bad.add("read_backs " + dep.readBacks + " != " + e.get("read_backs"));
    if (e.has("wait_ms_min") && waitMs < e.get("wait_ms_min").getAsDouble()) bad.add("waited " + waitMs + " ms < " + e.get("wait_ms_min"));
    if (e.has("wait_ms_max") && waitMs > e.get("wait_ms_max").getAsDouble()) bad.add("waited " + waitMs + " ms > " + e.get("wait_ms_max"));
    if (e.has("waits_ms")) {
      List<Long> got = waits.stream().map(Duration::toMillis).toList();
      List<Long> want = new ArrayList<>();
      e.getAsJsonArray("waits_ms").forEach(x -> want.add(x.getAsLong()));
      if (!got.equals(want)) bad.add("waits " + got + " != " + want);
    }
    if (e.has("elapsed_ms_max") && elapsedMs > e.get("elapsed_ms_max").getAsLong()) bad.add("took " + elapsedMs + " ms");
    if (e.has("admit_refusals_min") && refusals.get() < e.get("admit_refusals_min").getAsInt()) bad.add("admit refusals " + refusals.get());
    if (e.has("fallbacks_min") && client.fallbacks() < e.get("fallbacks_min").getAsLong()) bad.add("fallbacks " + client.fallbacks());
    List<String> errs = new ArrayList<>();
    if (e.has("error")) errs.add(e.get("error").getAsString());
    else if (e.has("error_any")) e.getAsJsonArray("error_any").forEach(x -> errs.add(x.getAsString()));
    if (errs.isEmpty() ? error != null : !errs.contains(error)) bad.add("error " + error + " " + verdict + " not in " + errs);
    if (e.has("result") && !e.get("result").getAsString().equals(result)) bad.add("result " + result + " != " + e.get("result"));
    if (e.has("verdict") && !e.get("verdict").getAsString().equals(verdict)) bad.add("verdict " + verdict + " != " + e.get("verdict"));
    if (e.has("verdict_any")) {
      boolean any = false;
      for (JsonElement x : e.getAsJsonArray("verdict_any")) any |= x.getAsString().equals(verdict);
      if (!any) bad.add("verdict " + verdict + " not in " + e.get("verdict_any"));
    }
    if (e.has("rejected_field") && !e.get("rejected_field").getAsString().equals(field)) bad.add("rejected field " + field);
    if (e.has("terminal_state") && !e.get("terminal_state").getAsString().equals(terminal)) bad.add("terminal_state " + terminal);
    if (!bad.isEmpty()) bad.add("(client " + after + ", fallbacks " + client.fallbacks() + ")"); // what the client saw
    return bad;
  }

  /** Polls {@code cond} every 5 ms for at most 3 s. */
  static boolean waitFor(java.util.function.BooleanSupplier cond) throws InterruptedException {
    return waitFor(cond, Duration.ofSeconds(3));
  }

  static boolean waitFor(java.util.function.BooleanSupplier cond, Duration limit) throws InterruptedException {
    long until = System.nanoTime() + limit.toNanos();
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > until) return false;
      Thread.sleep(5);
    }
    return true;
  }

  static int freePort() throws Exception {
    try (ServerSocket s = new ServerSocket(0)) { return s.getLocalPort(); }
  }

  /** Held: java.util.logging keeps loggers weakly, and a collected one comes back at the default level. */
  static final Logger CLIENT_LOG = Logger.getLogger("dev.retryd.client");

  public static void main(String[] args) throws Exception {
    CLIENT_LOG.setLevel(Level.SEVERE);
    Path root = Path.of(System.getProperty("user.dir")).resolve("../..").normalize();
    String bin = System.getenv().getOrDefault("RETRYD_BIN", root.resolve("target/debug/retryd").toString());
    Path dir = args.length > 0 ? Path.of(args[0]) : root.resolve("clients/conformance/scenarios");
    List<Path> files;
    try (Stream<Path> s = Files.list(dir)) { files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList(); }
    Path tmp = Files.createTempDirectory("retryd-conf-java-");
    Path tok = tmp.resolve("operator.token");
    Files.writeString(tok, TOKEN + "\n");
    int port = freePort();
    String addr = "127.0.0.1:" + port;
    Process server = new ProcessBuilder(bin, "serve", "--listen", addr, "--metrics-listen", "off", "--log-level", "warn",
        "--operator-token-file", tok.toString()).inheritIO().start();
    Shedding shedding = new Shedding(bin, tok);
    int failed = 0;
    try {
      awaitPort(port);
      String down = "127.0.0.1:" + freePort();
      // A retryd slower than any timeout: it accepts connections (the kernel does, from the backlog) and never answers.
      ServerSocket slowSocket = new ServerSocket(0, 64, java.net.InetAddress.getLoopbackAddress());
      String slow = "127.0.0.1:" + slowSocket.getLocalPort();
      long t0 = System.nanoTime();
      ExecutorService pool = Executors.newFixedThreadPool(files.size());
      List<Future<List<String>>> res = new ArrayList<>();
      List<String> names = new ArrayList<>();
      List<JsonObject> scs = new ArrayList<>();
      for (Path f : files) scs.add(JsonParser.parseString(Files.readString(f)).getAsJsonObject());
      // The shedding retryd, if a scenario needs it, starts before the scenarios start together (a debug server
      // booting beside their first calls would compete with them).
      if (scs.stream().anyMatch(sc -> str(sc, "retryd").equals("shedding"))) shedding.addr();
      for (JsonObject sc : scs) {
        names.add(str(sc, "name"));
        res.add(pool.submit(() -> runOne(addr, down, slow, shedding, sc)));
      }
      for (int i = 0; i < files.size(); i++) {
        List<String> bad;
        try { bad = res.get(i).get(); } catch (Exception e) { bad = List.of("threw: " + e); }
        if (bad.isEmpty()) System.out.println("conformance java: PASS " + names.get(i));
        else { failed++; System.out.println("conformance java: FAIL " + names.get(i) + ": " + String.join("; ", bad)); }
      }
      pool.shutdown();
      System.out.printf("conformance java: %d passed, %d failed (%.1f s)%n", files.size() - failed, failed, (System.nanoTime() - t0) / 1e9);
      List<String> adapters = AdapterChecks.run(addr);
      for (String b : adapters) System.out.println("adapters java: FAIL " + b);
      System.out.println("adapters java (resilience4j, callAsync): " + (adapters.isEmpty() ? "passed" : "FAILED"));
      failed += adapters.size();
      List<String> words = VocabularyChecks.run(root);
      for (String b : words) System.out.println("vocabulary java: FAIL " + b);
      System.out.println("vocabulary java (Verdict, Strategy, Kind words): " + (words.isEmpty() ? "passed" : "FAILED"));
      failed += words.size();
      long m0 = System.nanoTime();
      List<String> mirror = new ArrayList<>(MirrorChecks.rules());
      mirror.addAll(MirrorChecks.live(addr, bin));
      for (String b : mirror) System.out.println("mirror java: FAIL " + b);
      System.out.printf("mirror java (rules, callAsync, widening, stale and synced across a restart): %s (%.1f s)%n",
          mirror.isEmpty() ? "passed" : "FAILED", (System.nanoTime() - m0) / 1e9);
      failed += mirror.size();
      long s0 = System.nanoTime();
      List<String> shed = new ArrayList<>(ShedChecks.rules());
      shed.addAll(ShedChecks.live(shedding.addr()));
      for (String b : shed) System.out.println("shed java: FAIL " + b);
      System.out.printf("shed java (advice parser, busy period, a shedding retryd: no Admit/Classify, counts kept, watch waits): %s (%.1f s)%n",
          shed.isEmpty() ? "passed" : "FAILED", (System.nanoTime() - s0) / 1e9);
      failed += shed.size();
      long r0 = System.nanoTime();
      boolean resumes = ResumeChecks.serverResumes();
      List<String> resume = new ArrayList<>(ResumeChecks.vectors(root));
      resume.addAll(ResumeChecks.rules());
      resume.addAll(ResumeChecks.live(addr, resumes));
      for (String b : resume) System.out.println("resume java: FAIL " + b);
      System.out.printf("resume java (vectors, resumed sweep, a widened watch %s): %s (%.1f s)%n",
          resumes ? "resumes" : "on an older server: full snapshot", resume.isEmpty() ? "passed" : "FAILED", (System.nanoTime() - r0) / 1e9);
      failed += resume.size();
    } finally {
      Process shed = shedding.stop();
      server.destroy();
      server.waitFor(10, TimeUnit.SECONDS);
      if (shed != null) shed.waitFor(10, TimeUnit.SECONDS);
      Files.deleteIfExists(tok);
      Files.deleteIfExists(tmp);
    }
    System.exit(failed == 0 ? 0 : 1);
  }
}
