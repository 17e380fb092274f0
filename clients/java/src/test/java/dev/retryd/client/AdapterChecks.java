package dev.retryd.client;

import io.github.resilience4j.retry.Retry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/** Resilience4jAdvisor and callAsync against the real server (run by Conformance after the scenarios). */
final class AdapterChecks {
  private AdapterChecks() {}

  private static RetrydClient client(String addr, String catalog) {
    return RetrydClient.builder(addr).catalog(catalog).dependency("d-r4j-" + System.nanoTime()).tenant("t-r4j")
        .timeout(Duration.ofSeconds(2)).build();
  }

  /** fn fails with each exception in turn, then returns ok; calls[0] counts. */
  private static Callable<String> script(int[] calls, String ok, Exception... errs) {
    return () -> {
      calls[0]++;
      if (calls[0] <= errs.length) {
        throw errs[calls[0] - 1];
      }
      return ok;
    };
  }

  static List<String> run(String addr) throws Exception {
    List<String> bad = new ArrayList<>();
    try (RetrydClient c = client(addr, "vibecode")) {
      Resilience4jAdvisor adv = new Resilience4jAdvisor(c, RetrydClient.Call.read("crm.deal.get"));
      int[] calls = {0};
      Exception down = new Mappers.DependencyException("BITRIX_UNAVAILABLE", "", null);
      String v = adv.call(Retry.of("read", adv.retryConfig(4)), script(calls, "deal-1", down, down));
      if (!"deal-1".equals(v) || calls[0] != 3) bad.add("transient read: " + v + " after " + calls[0]);
    }
    try (RetrydClient c = client(addr, "grpc")) {
      Resilience4jAdvisor adv = new Resilience4jAdvisor(c, RetrydClient.Call.read("inventory.Get"));
      int[] calls = {0};
      Exception fix = new Mappers.DependencyException("INVALID_ARGUMENT", "", null);
      try {
        adv.call(Retry.of("fix", adv.retryConfig(4)), script(calls, "never", fix));
        bad.add("fix_before_retry: no exception");
      } catch (Exception e) {
        if (e != fix || calls[0] != 1) bad.add("fix_before_retry: " + e + " after " + calls[0]);
      }
    }
    try (RetrydClient c = client(addr, "vibecod")) {
      Resilience4jAdvisor adv = new Resilience4jAdvisor(c, RetrydClient.Call.read("crm.deal.get"));
      int[] calls = {0};
      try {
        adv.call(Retry.of("typo", adv.retryConfig(4)), script(calls, "deal-1"));
        bad.add("unknown catalog: no exception");
      } catch (RejectedException e) {
        if (!"catalog".equals(e.field()) || calls[0] != 0) bad.add("unknown catalog: field " + e.field() + ", " + calls[0] + " calls");
      }
    }
    try (RetrydClient c = client(addr, "vibecode")) {
      for (RetrydClient.Call<Object> w : List.of(RetrydClient.Call.write("crm.deal.add"),
          RetrydClient.Call.write("crm.deal.add").idempotencyKey("k", false))) {
        try {
          new Resilience4jAdvisor(c, w);
          bad.add("a write of unknown outcome was accepted");
        } catch (IllegalArgumentException expected) {
          // refused, never retried blindly
        }
      }
      Resilience4jAdvisor adv = new Resilience4jAdvisor(c, RetrydClient.Call.write("crm.deal.add").idempotencyKey("k-1", true));
      int[] calls = {0};
      String v = adv.call(Retry.of("write", adv.retryConfig(4)),
          script(calls, "deal-2", new Mappers.DependencyException("BITRIX_TIMEOUT", "", null)));
      if (!"deal-2".equals(v) || calls[0] != 2) bad.add("enforced-key write: " + v + " after " + calls[0]);
    }
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (RetrydClient c = client(addr, "vibecode")) {
      int[] calls = {0};
      Exception down = new Mappers.DependencyException("BITRIX_UNAVAILABLE", "", null);
      CompletableFuture<String> f = c.callAsync(RetrydClient.Call.read("crm.deal.get"), script(calls, "deal-3", down), pool);
      if (!"deal-3".equals(f.get(30, TimeUnit.SECONDS))) bad.add("callAsync: wrong result");
      CompletableFuture<String> typo;
      try (RetrydClient t = client(addr, "vibecod")) {
        typo = t.callAsync(RetrydClient.Call.read("crm.deal.get"), () -> "x", pool);
        try {
          typo.get(30, TimeUnit.SECONDS);
          bad.add("callAsync: unknown catalog completed normally");
        } catch (ExecutionException e) {
          if (!(e.getCause() instanceof RejectedException)) bad.add("callAsync: " + e.getCause());
        }
      }
    } finally {
      pool.shutdownNow();
    }
    return bad;
  }
}
