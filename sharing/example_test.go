package sharing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costwise/batcher/sharing"
)

// Two instances share a capacity of 10 (ten partitions of 1) through one
// memory lease manager, as two processes would through Azure or Redis. An
// instance alone gets all it asks for; once both want everything, each
// gets its max-min fair share, half.
func Example() {
	store := sharing.NewMemoryLeaseManager()
	a := sharing.New(store, 10).WithOwner("a").WithMaxInterval(20)
	b := sharing.New(store, 10).WithOwner("b").WithMaxInterval(20)
	ctx := context.Background()
	for _, r := range []*sharing.Resource{a, b} {
		if err := r.Provision(ctx); err != nil {
			panic(err)
		}
		if err := r.Start(ctx); err != nil {
			panic(err)
		}
		defer r.Stop()
	}

	a.GiveMe(10)
	waitUntil(func() bool { return a.Capacity() == 10 })
	fmt.Println("a alone:", a.Capacity())

	b.GiveMe(10)
	waitUntil(func() bool { return a.Capacity() == 5 && b.Capacity() == 5 })
	fmt.Println("a and b:", a.Capacity(), b.Capacity())
	// Output:
	// a alone: 10
	// a and b: 5 5
}

// waitUntil polls cond for up to 10 s; the instances settle in well under a
// second.
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(10 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
