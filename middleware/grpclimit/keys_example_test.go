package grpclimit_test

import (
	"context"
	"fmt"

	"github.com/costwise/batcher/middleware/grpclimit"
)

type tenantKey struct{}

// An authentication interceptor earlier in the chain leaves the tenant in
// the call's context; KeyContext keys by it.
func ExampleKeyContext() {
	key := grpclimit.KeyContext(tenantKey{})
	ctx := context.Background()
	fmt.Printf("%q\n", key(ctx, "/shop.Orders/Get")) // no tenant: the policy does not apply
	fmt.Printf("%q\n", key(context.WithValue(ctx, tenantKey{}, "acme"), "/shop.Orders/Get"))
	fmt.Printf("%q\n", key(context.WithValue(ctx, tenantKey{}, 7), "/shop.Orders/Get"))
	// Output:
	// ""
	// "acme"
	// "7"
}

// KeyJoin gives one budget per combination: here per tenant and method. A
// call missing a part is not limited by the policy.
func ExampleKeyJoin() {
	key := grpclimit.KeyJoin(grpclimit.KeyContext(tenantKey{}), grpclimit.KeyMethod)
	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	fmt.Printf("%q\n", key(ctx, "/shop.Orders/Create"))
	fmt.Printf("%q\n", key(context.Background(), "/shop.Orders/Create"))
	// Output:
	// "acme|/shop.Orders/Create"
	// ""
}
