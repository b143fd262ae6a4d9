package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/grpclimit"
)

// The client interceptor waits for its local limit instead of sending
// calls the server would refuse: the server's limit equals the client's,
// and no call is refused. Waiting moves the shared fake clock.
func TestClientWaitsWithinDeadline(t *testing.T) {
	clk := newFakeClock()
	pol := limit.GCRA(limit.Rate{Count: 1, Period: 200 * time.Millisecond}, 2)
	var waited time.Duration
	ci, err := grpclimit.NewClient(grpclimit.ClientOptions{
		Policies: []grpclimit.Policy{{Name: "upstream", Limit: pol, Key: grpclimit.KeyConst("api")}},
		Store:    memStore(t, clk), // Now stays real: it is compared with the calls' real deadlines
		Wait: func(ctx context.Context, d time.Duration) error {
			waited += d
			clk.Advance(d)
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := serveHealth(t, grpclimit.Options{
		Policies: []grpclimit.Policy{{Name: "server", Limit: pol}},
		Store:    memStore(t, clk), Now: clk.Now,
	}, grpc.WithUnaryInterceptor(ci.Unary()))
	for i := 0; i < 10; i++ {
		if _, err := check(t, c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// 2 at once, then one per 200 ms: 8 × 200 ms of waiting.
	if waited != 1600*time.Millisecond {
		t.Errorf("waited %v, want 1.6 s", waited)
	}
}

func TestClientFailsFastPastDeadline(t *testing.T) {
	clk := newFakeClock()
	ci, err := grpclimit.NewClient(grpclimit.ClientOptions{
		Policies: []grpclimit.Policy{{Name: "upstream", Limit: limit.FixedWindow(1, time.Hour)}},
		Store:    memStore(t, clk), Now: clk.Now,
		Wait: func(context.Context, time.Duration) error {
			t.Error("waited although the deadline is too close")
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Minute))
	defer cancel()
	if err := ci.Acquire(ctx, "/svc/M"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	err = ci.Acquire(ctx, "/svc/M")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted at once", err)
	}
	if d, ok := grpclimit.RetryDelay(err); !ok || d <= 0 {
		t.Errorf("RetryInfo %v %v", d, ok)
	}
	// Without a deadline it waits; a cancelled context ends the wait.
	cctx, ccancel := context.WithCancel(context.Background())
	ci2, _ := grpclimit.NewClient(grpclimit.ClientOptions{
		Policies: []grpclimit.Policy{{Name: "upstream", Limit: limit.FixedWindow(1, time.Hour)}},
		Store:    memStore(t, clk), Now: clk.Now,
		Wait: func(ctx context.Context, d time.Duration) error {
			ccancel()
			return ctx.Err()
		},
	})
	_ = ci2.Acquire(cctx, "/svc/M")
	if err := ci2.Acquire(cctx, "/svc/M"); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled wait: %v, want Canceled", err)
	}
}

// Streams are paced when they open.
func TestClientStreamPaced(t *testing.T) {
	clk := newFakeClock()
	var waited time.Duration
	ci, err := grpclimit.NewClient(grpclimit.ClientOptions{
		Policies: []grpclimit.Policy{{Name: "streams", Limit: limit.GCRA(limit.PerSecond(1), 1)}},
		Store:    memStore(t, clk),
		Wait: func(ctx context.Context, d time.Duration) error {
			waited += d
			clk.Advance(d)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := serveHealth(t, grpclimit.Options{
		Policies: []grpclimit.Policy{{Name: "server", Limit: limit.GCRA(limit.PerSecond(1), 1)}},
		Store:    memStore(t, clk), Now: clk.Now,
	}, grpc.WithStreamInterceptor(ci.Stream()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if waited != 2*time.Second {
		t.Errorf("waited %v for 3 streams at 1/s with a burst of 1, want 2 s", waited)
	}
}
