// Create a Bitrix24 deal under retryd's loop: a timeout after the write went
// through is settled by a read-back by business key, never by a blind resend.
//
//	RETRYD_ADDR=localhost:50051 go run .
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
)

// crm stands in for a Bitrix24 REST client: the first add is applied, then its answer is lost.
type crm struct {
	deals map[string]string
	calls int
}

func (c *crm) addDeal(_ context.Context, originID string) (string, error) {
	c.calls++
	if _, ok := c.deals[originID]; !ok {
		c.deals[originID] = fmt.Sprintf("deal-%d", len(c.deals)+1)
	}
	if c.calls == 1 {
		return "", &retryd.DependencyError{Code: "BITRIX_TIMEOUT"}
	}
	return c.deals[originID], nil
}

func main() {
	addr := os.Getenv("RETRYD_ADDR")
	if addr == "" {
		addr = "localhost:50051"
	}
	client, err := retryd.New(addr, retryd.WithCatalog("vibecode"), retryd.WithDependency("portal-7.bitrix24.eu"), retryd.WithTenant("acme"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	b24 := &crm{deals: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := retryd.Do(ctx, client, func(ctx context.Context) (string, error) { return b24.addDeal(ctx, "order-1042") },
		retryd.Call[string]{Operation: retryd.Write, Method: "crm.deal.add",
			ReadBack: func(context.Context) (string, bool, error) { id, ok := b24.deals["order-1042"]; return id, ok, nil }})
	if err != nil || len(b24.deals) != 1 || b24.calls != 1 {
		log.Fatalf("deal: %v (deals %d, calls %d)", err, len(b24.deals), b24.calls)
	}
	fmt.Printf("go: %s created once, found by its read-back\n", id)
}
