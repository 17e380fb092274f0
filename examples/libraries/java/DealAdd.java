// Create a Bitrix24 deal under retryd's loop: a timeout after the write went
// through is settled by a read-back by business key, never by a blind resend.
//   java -cp "$(cat ../../../clients/java/target/classpath.txt):../../../clients/java/target/classes" DealAdd.java
import dev.retryd.client.Mappers.DependencyException;
import dev.retryd.client.RetrydClient;
import dev.retryd.client.RetrydClient.Call;
import dev.retryd.client.RetrydClient.ReadBackResult;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

public class DealAdd {
  // Stands in for a Bitrix24 REST client: the first add is applied, then its answer is lost.
  static final Map<String, String> deals = new HashMap<>();
  static int calls;

  static String addDeal(String originId) throws DependencyException {
    calls++;
    deals.putIfAbsent(originId, "deal-" + (deals.size() + 1));
    if (calls == 1) throw new DependencyException("BITRIX_TIMEOUT", null, null);
    return deals.get(originId);
  }

  public static void main(String[] args) throws Exception {
    String addr = System.getenv().getOrDefault("RETRYD_ADDR", "localhost:50051");
    try (RetrydClient client = RetrydClient.builder(addr).catalog("vibecode").dependency("portal-7.bitrix24.eu").tenant("acme").build()) {
      String id = client.call(Call.<String>write("crm.deal.add").timeout(Duration.ofSeconds(30))
          .readBack(() -> deals.containsKey("order-1042") ? ReadBackResult.present(deals.get("order-1042")) : ReadBackResult.absent()),
          () -> addDeal("order-1042"));
      if (deals.size() != 1 || calls != 1) throw new IllegalStateException("applied twice");
      System.out.println("java: " + id + " created once, found by its read-back");
    }
  }
}
