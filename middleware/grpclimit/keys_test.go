package grpclimit_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/grpclimit"
)

// authTenant stands for an authentication interceptor: it puts the
// "tenant" metadata entry, if any, in the context under tenantKey{}.
func authTenant(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("tenant"); len(v) > 0 {
		ctx = context.WithValue(ctx, tenantKey{}, v[0])
	}
	return handler(ctx, req)
}

// serveChained serves the health service on loopback behind authTenant and
// then the interceptor of opts.
func serveChained(t *testing.T, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	it, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authTenant, it.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// A policy keyed by tenant and method, behind an authentication
// interceptor: one budget per combination, and calls without a tenant
// exempt.
func TestKeyJoinOfContextAndMethod(t *testing.T) {
	clk := newFakeClock()
	c := serveChained(t, grpclimit.Options{Store: memStore(t, clk), Now: clk.Now, Policies: []grpclimit.Policy{{
		Name: "tenant-method", Limit: limit.FixedWindow(1, time.Hour),
		Key: grpclimit.KeyJoin(grpclimit.KeyContext(tenantKey{}), grpclimit.KeyMethod),
	}}})
	call := func(tenant string, list bool) (metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", tenant)
		}
		var hdr metadata.MD
		var err error
		if list {
			_, err = c.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&hdr))
		} else {
			_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		}
		return hdr, err
	}
	for i, tc := range []struct {
		tenant string
		list   bool
		want   codes.Code
	}{
		{"acme", false, codes.OK}, {"acme", false, codes.ResourceExhausted}, // acme|Check spent
		{"acme", true, codes.OK},    // another method
		{"globex", false, codes.OK}, // another tenant
	} {
		if _, err := call(tc.tenant, tc.list); status.Code(err) != tc.want {
			t.Errorf("call %d (%s, list %v): %v, want %v", i, tc.tenant, tc.list, err, tc.want)
		}
	}
	for i := range 3 {
		md, err := call("", false)
		if err != nil || len(md.Get("ratelimit")) != 0 {
			t.Errorf("call %d without a tenant: %v, ratelimit %v; want exempt: OK without the entry", i, err, md.Get("ratelimit"))
		}
	}
}

type tenantID int

func (t tenantID) String() string { return "tenant-" + string(rune('0'+t)) }

func TestKeyContextAndJoinValues(t *testing.T) {
	key := grpclimit.KeyContext(tenantKey{})
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, ""}, {"acme", "acme"}, {tenantID(3), "tenant-3"}, {42, "42"}, {int64(-7), "-7"},
		{uint64(1 << 63), "9223372036854775808"}, {3.5, ""}, {[]byte("x"), ""},
	} {
		ctx := context.Background()
		if c.v != nil {
			ctx = context.WithValue(ctx, tenantKey{}, c.v)
		}
		if got := key(ctx, "/m"); got != c.want {
			t.Errorf("KeyContext of %#v = %q, want %q", c.v, got, c.want)
		}
	}
	ctx := context.Background()
	if got := grpclimit.KeyJoin(grpclimit.KeyConst("a"), grpclimit.KeyMethod, grpclimit.KeyConst("c"))(ctx, "/s/M"); got != "a|/s/M|c" {
		t.Errorf("KeyJoin = %q", got)
	}
	if got := grpclimit.KeyJoin(grpclimit.KeyConst("a"), grpclimit.KeyConst(""))(ctx, "/s/M"); got != "" {
		t.Errorf("KeyJoin with an empty part = %q, want \"\"", got)
	}
}

// KeyMetadata cuts a value at 512 bytes: two API keys that differ only
// past byte 512 share one counter.
func TestKeyMetadataCutAt512Bytes(t *testing.T) {
	long := strings.Repeat("k", 512)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", long+"-first"))
	if got := grpclimit.KeyMetadata("X-API-Key")(ctx, "/pkg.S/M"); got != long {
		t.Fatalf("a %d-byte value keyed as %d bytes, want its first 512", len(long)+6, len(got))
	}
	c := serveHealth(t, grpclimit.Options{Store: memStore(t, nil),
		Policies: []grpclimit.Policy{{Name: "per-key", Limit: limit.FixedWindow(1, time.Hour), Key: grpclimit.KeyMetadata("x-api-key")}}})
	if _, err := check(t, c, "x-api-key", long+"-first"); err != nil {
		t.Fatalf("first key: %v", err)
	}
	if _, err := check(t, c, "x-api-key", long+"-second"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a key equal to the first over 512 bytes: %v, want ResourceExhausted (one counter)", err)
	}
}

// A cost function that returns a negative cost counts as 0: calls spend
// nothing, and all pass a limit of 1.
func TestNegativeCostCountsAsZero(t *testing.T) {
	c := serveHealth(t, grpclimit.Options{Store: memStore(t, nil),
		Cost:     func(context.Context, string) int64 { return -5 },
		Policies: []grpclimit.Policy{{Name: "all", Limit: limit.FixedWindow(1, time.Hour), Key: grpclimit.KeyConst("all")}}})
	for i := range 3 {
		md, err := check(t, c)
		if err != nil || !strings.HasPrefix(first(md, "ratelimit"), `"all";r=1;`) {
			t.Fatalf("call %d with cost -5: %v, ratelimit %q; want OK with 1 remaining (a store error would fail open without it)", i, err, first(md, "ratelimit"))
		}
	}
}
