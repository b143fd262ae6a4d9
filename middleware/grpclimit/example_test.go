package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/grpclimit"
)

// A gRPC server limited per API key (from metadata), with a method costing
// more than the others.
func ExampleNew() {
	store, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rl, err := grpclimit.New(grpclimit.Options{
		Store:    store,
		Policies: []grpclimit.Policy{{Name: "per-key", Limit: limit.GCRA(limit.PerMinute(60), 3), Key: grpclimit.KeyMetadata("x-api-key")}},
		Costs:    map[string]int64{"/grpc.health.v1.Health/Check": 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(rl.Unary()), grpc.StreamInterceptor(rl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for i := 0; i < 2; i++ {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		delay, _ := grpclimit.RetryDelay(err)
		fmt.Println(status.Code(err), delay)
	}
	// Output:
	// OK 0s
	// ResourceExhausted 1s
}
