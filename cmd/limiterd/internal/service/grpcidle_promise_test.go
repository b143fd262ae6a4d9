package service

import (
	"io"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/costwise/batcher/cmd/limiterd/internal/unarygrpc"
)

// TestPromiseGRPCIdleDefault: docs/limiterd.md's "gRPC idle connection |
// 10 min | --grpc-max-connection-idle / servers.grpc_max_connection_idle".
// With no file, and with a file whose servers section leaves the field
// out, both gRPC servers limiterd builds close a connection idle for 10 min,
// read from the servers themselves: no test waits 10 min. What the lean
// server does with IdleTimeout (GOAWAY, then close) is tested in unarygrpc
// (TestIdleTimeout); grpc-go's MaxConnectionIdle is grpc-go's.
func TestPromiseGRPCIdleDefault(t *testing.T) {
	const want = 10 * time.Minute
	file := writeFile(t, t.TempDir(), "limiterd.yaml", "servers: {grpc_max_concurrent_streams: 1000, grpc_keepalive_min_time: 10s}\n")
	for _, src := range []struct {
		name string
		args []string
	}{
		{"no file", nil},
		{"file without the field", []string{"--config", file}},
	} {
		for _, gs := range grpcServers {
			t.Run(src.name+"/"+gs, func(t *testing.T) {
				args := append([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
					"--metrics-addr", "127.0.0.1:0", "--grpc-server", gs}, src.args...)
				cfg, err := parseFlags(args, io.Discard, func(string) (string, bool) { return "", false })
				if err != nil {
					t.Fatal(err)
				}
				s, err := newServer(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer s.close()
				g := s.grpcServer()
				defer g.Stop()
				if got := idleTimeoutOf(t, g); got != want {
					t.Errorf("%s server: idle connections closed after %v, want %v", gs, got, want)
				}
			})
		}
	}
}

// idleTimeoutOf is how long g lets a connection without calls live.
// grpc-go keeps its options unexported, so its MaxConnectionIdle is read
// by reflection; a grpc-go that moved it fails here, saying so.
func idleTimeoutOf(t *testing.T, g grpcServer) time.Duration {
	t.Helper()
	switch g := g.(type) {
	case *unarygrpc.Server:
		return g.IdleTimeout
	case *grpc.Server:
		v := reflect.ValueOf(g).Elem()
		for _, name := range []string{"opts", "keepaliveParams", "MaxConnectionIdle"} {
			if v = v.FieldByName(name); !v.IsValid() {
				t.Fatalf("grpc.Server has no opts.keepaliveParams.MaxConnectionIdle (field %s) in this grpc-go: read the option elsewhere", name)
			}
		}
		if v.Kind() != reflect.Int64 {
			t.Fatalf("grpc.Server's opts.keepaliveParams.MaxConnectionIdle is a %v, want a time.Duration", v.Type())
		}
		return time.Duration(v.Int())
	}
	t.Fatalf("unknown gRPC server %T", g)
	return 0
}
