package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// This example limits a user to a burst of 3 and 1 request per second,
// shared by every replica that uses the same Redis. It needs a Redis
// server, so it is compiled but not run by go test; TestExampleSteps runs
// the same steps and checks them.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := redislimit.New(client, redislimit.Options{})
	if err != nil {
		log.Fatal(err)
	}
	perUser := limit.GCRA(limit.PerSecond(1), 3).Named("per-user")
	for i := 0; i < 4; i++ {
		d, err := store.AllowN(context.Background(), "alice", perUser, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
}

func TestExampleSteps(t *testing.T) {
	c := connect(t)
	store := serverStore(t, c)
	perUser := limit.GCRA(limit.PerSecond(1), 3).Named("per-user")
	var got []limit.Decision
	for i := 0; i < 4; i++ {
		d, err := store.AllowN(context.Background(), "alice", perUser, 1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	for i, want := range []int64{2, 1, 0, 0} {
		if got[i].Remaining != want || got[i].Allowed != (i < 3) {
			t.Fatalf("decision %d: %+v", i, got[i])
		}
	}
	if got[3].RetryAfter <= 0 || got[3].RetryAfter > 1e9 {
		t.Fatalf("fourth decision: RetryAfter %v", got[3].RetryAfter)
	}
}
