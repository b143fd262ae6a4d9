package grpclimit_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/grpclimit"
	"github.com/costwise/batcher/middleware/internal/sftest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func memStore(t testing.TB, clock limit.Clock) *limit.Memory {
	t.Helper()
	s, err := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveHealth starts a real gRPC server on loopback with the health
// service (unary Check, streaming Watch) behind the interceptor of opts,
// and returns a client connection to it.
func serveHealth(t testing.TB, opts grpclimit.Options, dial ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	it, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(it.Unary()), grpc.StreamInterceptor(it.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

// check calls Check and returns its error and the response metadata
// (headers and trailers merged).
func check(t testing.TB, c healthpb.HealthClient, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var hdr, trl metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	return metadata.Join(hdr, trl), err
}

func TestUnaryDeniedWithRetryInfoAndMetadata(t *testing.T) {
	clk := newFakeClock()
	c := serveHealth(t, grpclimit.Options{
		Policies: []grpclimit.Policy{{Name: "per-peer", Limit: limit.FixedWindow(2, time.Minute)}},
		Store:    memStore(t, clk), Now: clk.Now,
	})
	for i := 0; i < 2; i++ {
		md, err := check(t, c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		rl, perr := sftest.ParseList(first(md, "ratelimit"))
		if perr != nil || rl[0].Value != "per-peer" || rl[0].Param("r") != int64(1-i) {
			t.Errorf("call %d: ratelimit metadata %q (%v)", i, first(md, "ratelimit"), perr)
		}
		if _, perr := sftest.ParseList(first(md, "ratelimit-policy")); perr != nil {
			t.Errorf("ratelimit-policy %q: %v", first(md, "ratelimit-policy"), perr)
		}
	}
	md, err := check(t, c)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("3rd call: %v, want ResourceExhausted", err)
	}
	delay, ok := grpclimit.RetryDelay(err)
	if !ok || delay <= 0 || delay > time.Minute || delay%time.Second != 0 {
		t.Fatalf("RetryInfo delay %v (%v), want whole seconds up to a minute", delay, ok)
	}
	if first(md, "retry-after") == "" || first(md, "ratelimit") == "" {
		t.Errorf("denied call's metadata lacks retry-after or ratelimit: %v", md)
	}
	// A client that obeys RetryInfo is admitted.
	clk.Advance(delay)
	if _, err := check(t, c); err != nil {
		t.Errorf("after the retry delay: %v", err)
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func TestStreamAndMetadataKeyAndCostTable(t *testing.T) {
	clk := newFakeClock()
	c := serveHealth(t, grpclimit.Options{
		Policies: []grpclimit.Policy{{Name: "per-key", Limit: limit.TokenBucket(10, limit.PerMinute(10)),
			Key: grpclimit.KeyMetadata("x-api-key")}},
		Store: memStore(t, clk), Now: clk.Now,
		Costs: map[string]int64{"/grpc.health.v1.Health/Watch": 6},
	})
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1"), 10*time.Second)
	defer cancel()
	open := func() error {
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("first stream (cost 6 of 10): %v", err)
	}
	if err := open(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream (cost 6, 4 left): %v, want ResourceExhausted", err)
	}
	// The unary call costs 1: 4 are left for k1.
	for i := 0; i < 4; i++ {
		if _, err := check(t, c, "x-api-key", "k1"); err != nil {
			t.Fatalf("unary %d: %v", i, err)
		}
	}
	if _, err := check(t, c, "x-api-key", "k1"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("5th unary: %v", err)
	}
	// Another key, and a call without a key (the policy does not apply).
	if _, err := check(t, c, "x-api-key", "k2"); err != nil {
		t.Errorf("k2: %v", err)
	}
	if md, err := check(t, c); err != nil || first(md, "ratelimit") != "" {
		t.Errorf("no key: %v, metadata %v", err, md)
	}
}

func TestCostAboveLimitHasNoRetryInfo(t *testing.T) {
	clk := newFakeClock()
	c := serveHealth(t, grpclimit.Options{
		Policies: []grpclimit.Policy{{Name: "p", Limit: limit.GCRA(limit.PerSecond(1), 3)}},
		Store:    memStore(t, clk), Now: clk.Now, Costs: map[string]int64{"/grpc.health.v1.Health/": 4},
	})
	_, err := check(t, c)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("cost 4 over burst 3: %v", err)
	}
	if d, ok := grpclimit.RetryDelay(err); ok {
		t.Errorf("RetryInfo %v for a call no wait can admit", d)
	}
}
