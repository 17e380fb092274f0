package failsafe

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
	"github.com/retryd/retryd/clients/go/internal/retrydtest"
)

func client(t *testing.T, addr, catalog string) *retryd.Client {
	c, err := retryd.New(addr, retryd.WithCatalog(catalog), retryd.WithTenant("t-failsafe"),
		retryd.WithDependency(fmt.Sprintf("d-failsafe-%d", time.Now().UnixNano())), retryd.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fn fails with each error in turn, then returns ok.
func script(calls *int, ok string, errs ...error) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		*calls++
		if *calls <= len(errs) {
			return "", errs[*calls-1]
		}
		return ok, nil
	}
}

func TestAdvisor(t *testing.T) {
	addr := retrydtest.Serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("a transient read failure is retried with retryd's wait", func(t *testing.T) {
		adv, err := NewAdvisor[string](client(t, addr, "vibecode"), retryd.Call[any]{Operation: retryd.Read, Method: "crm.deal.get"})
		if err != nil {
			t.Fatal(err)
		}
		calls, down := 0, &retryd.DependencyError{Code: "BITRIX_UNAVAILABLE"}
		v, err := adv.Get(ctx, 4, script(&calls, "deal-1", down, down))
		if v != "deal-1" || err != nil || calls != 3 {
			t.Fatalf("got %q, %v after %d calls", v, err, calls)
		}
	})
	t.Run("a failure retryd says not to retry stops at once, as the dependency's own error", func(t *testing.T) {
		adv, _ := NewAdvisor[string](client(t, addr, "grpc"), retryd.Call[any]{Operation: retryd.Read, Method: "inventory.Get"})
		calls, bad := 0, &retryd.DependencyError{Code: "INVALID_ARGUMENT"}
		_, err := adv.Get(ctx, 4, script(&calls, "never", bad))
		if !errors.Is(err, bad) || calls != 1 {
			t.Fatalf("got %v after %d calls", err, calls)
		}
	})
	t.Run("an unknown catalog is a rejection, not a retry", func(t *testing.T) {
		adv, _ := NewAdvisor[string](client(t, addr, "vibecod"), retryd.Call[any]{Operation: retryd.Read, Method: "crm.deal.get"})
		calls := 0
		_, err := adv.Get(ctx, 4, script(&calls, "deal-1"))
		var rej *retryd.RejectedError
		if !errors.As(err, &rej) || rej.Field != "catalog" || calls != 0 {
			t.Fatalf("got %v after %d calls", err, calls)
		}
	})
	t.Run("a write of unknown outcome is refused; with an enforced key it is retried", func(t *testing.T) {
		c := client(t, addr, "vibecode")
		if _, err := NewAdvisor[string](c, retryd.Call[any]{Operation: retryd.Write, Method: "crm.deal.add"}); !errors.Is(err, ErrUnknownOutcomeWrite) {
			t.Fatalf("no key: %v", err)
		}
		if _, err := NewAdvisor[string](c, retryd.Call[any]{Operation: retryd.Write, Method: "crm.deal.add", IdempotencyKey: "k"}); !errors.Is(err, ErrUnknownOutcomeWrite) {
			t.Fatalf("key not enforced: %v", err)
		}
		adv, err := NewAdvisor[string](c, retryd.Call[any]{Operation: retryd.Write, Method: "crm.deal.add",
			IdempotencyKey: "k-1", IdempotencyKeyEnforced: true})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		v, err := adv.Get(ctx, 4, script(&calls, "deal-2", &retryd.DependencyError{Code: "BITRIX_TIMEOUT"}))
		if v != "deal-2" || err != nil || calls != 2 {
			t.Fatalf("got %q, %v after %d calls", v, err, calls)
		}
	})
}
