// Command grpchealth asks a gRPC server's health service
// (grpc.health.v1.Health/Check) about a service, as the kubelet's gRPC
// probe does, and exits 0 when it answers SERVING. scripts/test-image uses
// it against limiterd's image, which has no shell to run a probe in.
//
//	go run ./internal/grpchealth [-service NAME] [-timeout 5s] HOST:PORT
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	service := flag.String("service", "", "the service to ask about; empty asks about the server as a whole")
	timeout := flag.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: grpchealth [-service NAME] [-timeout 5s] HOST:PORT")
		os.Exit(2)
	}
	status, err := check(flag.Arg(0), *service, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(1)
	}
	fmt.Println(status)
	if status != healthpb.HealthCheckResponse_SERVING {
		os.Exit(1)
	}
}

func check(addr, service string, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}
