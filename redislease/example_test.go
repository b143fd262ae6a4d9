package redislease_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/costwise/batcher/sharing"

	"github.com/costwise/batcher/redislease"
	"github.com/redis/go-redis/v9"
)

// This example shares 10,000 units of capacity, in partitions of 1,000,
// between the replicas of a service through one Redis server; each replica
// also keeps 1,000 units of its own. It needs a Redis server, so it is
// compiled but not run by go test; TestSharingCapacity runs the same steps
// with two instances and checks the result.
func ExampleNewSharedResource() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	res := redislease.NewSharedResource(client, "orders-db", 10000).
		WithFactor(1000).
		WithReservedCapacity(1000)
	res.AddListener(func(event string, val int, msg string, _ interface{}) {
		if event == sharing.ErrorEvent {
			log.Printf("capacity sharing: %s", msg)
		}
	})
	ctx := context.Background()
	if err := res.Provision(ctx); err != nil {
		log.Fatal(err)
	}
	if err := res.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer res.Stop()

	// A Batcher calls GiveMe with its target; here we ask for everything.
	res.GiveMe(res.MaxCapacity())
	for deadline := time.Now().Add(5 * time.Second); res.Capacity() < res.MaxCapacity() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("max capacity:", res.MaxCapacity())
	fmt.Println("capacity:", res.Capacity())
}

// TestSharingCapacity runs the example's steps with two instances on the
// shared test server: alone, the first gets everything; once the second
// asks for everything too, each settles on half the shared capacity.
func TestSharingCapacity(t *testing.T) {
	c := sharedClient(t)
	prefix := testPrefix(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() *sharing.Resource {
		res := redislease.NewSharedResource(c, prefix, 10000).WithFactor(1000).WithReservedCapacity(1000)
		mustNil(t, res.Provision(ctx))
		mustNil(t, res.Start(ctx))
		t.Cleanup(res.Stop)
		res.GiveMe(res.MaxCapacity())
		return res
	}
	a := start()
	if a.MaxCapacity() != 11000 {
		t.Fatalf("MaxCapacity = %d, want 11000", a.MaxCapacity())
	}
	eventually(t, 5*time.Second, "a alone gets all 11000", func() bool { return a.Capacity() == 11000 })
	b := start()
	eventually(t, 10*time.Second, "a and b settle on 6000 each", func() bool {
		ca, cb := a.Capacity(), b.Capacity()
		if ca+cb > 12000 {
			t.Fatalf("a has %d and b %d: more than the shared 10000 plus two reserved 1000", ca, cb)
		}
		return ca == 6000 && cb == 6000
	})
	b.Stop()
	eventually(t, 5*time.Second, "a gets b's half back after b stops", func() bool { return a.Capacity() == 11000 })
}
