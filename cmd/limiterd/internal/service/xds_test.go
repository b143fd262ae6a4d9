package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/costwise/batcher/internal/redistest"
)

const xdsNode = "limiterd-test"

// xdsServer is go-control-plane's xDS server with a snapshot cache,
// recording the requests it receives.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	gs    *grpc.Server
	done  chan struct{}

	mu   sync.Mutex
	reqs []*discoveryv3.DiscoveryRequest
}

// startXDSServer serves the cache's snapshots on addr until stop or the
// test's end.
func startXDSServer(t *testing.T, addr string, cache cachev3.SnapshotCache, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{addr: addr, cache: cache, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		x.mu.Lock()
		x.reqs = append(x.reqs, r)
		x.mu.Unlock()
		return nil
	}}
	x.gs = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(x.gs, serverv3.NewServer(ctx, cache, cb))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { defer close(x.done); _ = x.gs.Serve(ln) }()
	t.Cleanup(func() { x.stop(); cancel() })
	return x
}

// stop ends the server and its streams at once.
func (x *xdsServer) stop() {
	x.gs.Stop()
	<-x.done
}

// requests returns the requests received so far.
func (x *xdsServer) requests() []*discoveryv3.DiscoveryRequest {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), x.reqs...)
}

// push sets the node's snapshot: version, and the gw domain's limit per
// remote address (a policy without a unit when perHour is 0, which
// limiterd refuses).
func push(t *testing.T, cache cachev3.SnapshotCache, version string, perHour uint32) {
	t.Helper()
	if err := pushRules(cache, version, perHour); err != nil {
		t.Fatal(err)
	}
}

func pushRules(cache cachev3.SnapshotCache, version string, perHour uint32) error {
	policy := &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: perHour}
	if perHour == 0 {
		policy = &rlconfv3.RateLimitPolicy{RequestsPerUnit: 1}
	}
	rc := &rlconfv3.RateLimitConfig{
		Name: "gw", Domain: "gw",
		Descriptors: []*rlconfv3.RateLimitDescriptor{
			{Key: "remote_address", RateLimit: policy},
			{Key: "api_key", Value: "premium", RateLimit: &rlconfv3.RateLimitPolicy{Unlimited: true}},
		},
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {rc}})
	if err != nil {
		return err
	}
	return cache.SetSnapshot(context.Background(), xdsNode, snap)
}

// waitUntil polls cond until it holds, failing the test after 20 s.
func waitUntil(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s; log: %s", what, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRulesFromXDS runs limiterd configured by envoyproxy/ratelimit's
// variables against go-control-plane's xDS server: it waits for the first
// rules, answers by them, follows updates, refuses bad rules keeping the
// last good ones (and says so to the server), keeps them while the server
// is down, and takes the rules of the server when it is back.
func TestRulesFromXDS(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	xs := startXDSServer(t, addr, cache)
	setRatelimitEnv(t)
	t.Setenv("CONFIG_TYPE", "GRPC_XDS_SOTW")
	t.Setenv("CONFIG_GRPC_XDS_SERVER_URL", addr)
	t.Setenv("CONFIG_GRPC_XDS_NODE_ID", xdsNode)
	t.Setenv("CONFIG_GRPC_XDS_NODE_METADATA", "zone=test")
	t.Setenv("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "20ms")
	t.Setenv("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "100ms")

	// The first rules are pushed only once limiterd has asked for them:
	// it must wait for them before it serves.
	pushed := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); len(xs.requests()) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		pushed <- pushRules(cache, "1", 3)
	}()
	p := start(t, "")
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	log := p.stderr.String()
	if i, j := strings.Index(log, "waiting for the first rules"), strings.Index(log, "limiterd started"); i < 0 || j < i {
		t.Fatalf("limiterd did not wait for the first rules: %s", log)
	}
	if md := xs.requests()[0].GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); md != "test" {
		t.Errorf("node metadata zone %q, want test", md)
	}

	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	limitOf := func() uint32 {
		resp, err := c.ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString()))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf(); got != 3 {
		t.Fatalf("limit %d, want 3 from the xDS server", got)
	}
	one := envoyReq("remote_address", "10.0.0.1")
	for i := range 4 {
		resp, err := c.ShouldRateLimit(ctx, one)
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("call %d: %v %v, want %v", i, resp, err, want)
		}
	}

	push(t, cache, "2", 7)
	waitUntil(t, p, "the updated limit", func() bool { return limitOf() == 7 })
	waitUntil(t, p, "the acknowledgement of version 2", func() bool { return acked(xs.requests(), "2") })

	push(t, cache, "3", 0)
	waitUntil(t, p, "the refusal of version 3", func() bool {
		for _, r := range xs.requests() {
			if r.GetErrorDetail() != nil && r.GetVersionInfo() == "2" && strings.Contains(r.GetErrorDetail().GetMessage(), "unit") {
				return true
			}
		}
		return false
	})
	if got := limitOf(); got != 7 {
		t.Fatalf("after refused rules the limit is %d, want the last good 7", got)
	}

	xs.stop()
	waitUntil(t, p, "the lost stream in the log", func() bool { return strings.Contains(p.stderr.String(), "xDS stream ended") })
	for range 3 {
		if got := limitOf(); got != 7 {
			t.Fatalf("with the xDS server down the limit is %d, want the last good 7", got)
		}
	}
	_, m := p.get("http://" + p.metrics + "/metrics")
	if !strings.Contains(m, `limiterd_rule_reloads_total{result="failure"} 1`) || !strings.Contains(m, `limiterd_rule_reloads_total{result="success"} 2`) {
		t.Fatalf("reload metrics:\n%s", grepLines(m, "reloads"))
	}
	// The domain of rules from xDS is a label of its own, as a rule
	// file's is.
	for _, want := range []string{
		`limiterd_decisions_total{api="envoy",domain="gw",result="over_limit",rule="gw.remote_address"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="gw",key1="remote_address"} 1`,
		"ratelimit_service_config_load_success 2", "ratelimit_service_config_load_error 1",
	} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("no %s in:\n%s", want, grepLines(m, `"gw"`)+"\n"+grepLines(m, "config_load"))
		}
	}

	cache2 := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	push(t, cache2, "4", 11)
	startXDSServer(t, addr, cache2)
	waitUntil(t, p, "the rules of the restarted server", func() bool { return limitOf() == 11 })
}

// TestRulesFromXDSOverMutualTLS checks the xDS client's TLS settings
// against a server that requires a client certificate.
func TestRulesFromXDSOverMutualTLS(t *testing.T) {
	s := newTLSSetup(t)
	clientCert, clientKey := writePair(t, s.dir, "xds-client", s.clientCA.issue(t, true, "limiterd.client"))
	serverCAFile := writeFile(t, s.dir, "server-ca.pem", string(s.serverCA.pem))
	srvCert, err := tls.LoadX509KeyPair(s.serverCert, s.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.clientCA.cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	push(t, cache, "1", 5)
	startXDSServer(t, addr, cache, grpc.Creds(creds))
	p := start(t, fmt.Sprintf(`envoy:
  xds:
    server_url: %q
    node_id: %s
    use_tls: true
    ca_file: %q
    cert_file: %q
    key_file: %q
    server_san: limiterd.test
    backoff_initial: 20ms
    backoff_max: 100ms
`, addr, xdsNode, serverCAFile, clientCert, clientKey))
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	resp, err := c.ShouldRateLimit(context.Background(), envoyReq("remote_address", "a"))
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Fatalf("%v %v: want the limit 5 from the xDS server", resp, err)
	}
}

// acked reports whether a request acknowledged version.
func acked(reqs []*discoveryv3.DiscoveryRequest, version string) bool {
	for _, r := range reqs {
		if r.GetVersionInfo() == version && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
			return true
		}
	}
	return false
}

// TestXDSConfigRefused checks that xDS settings that do not go together
// stop limiterd with one line naming them.
func TestXDSConfigRefused(t *testing.T) {
	addrs := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", ""}
	cases := []struct {
		name, yaml string
		env        map[string]string
		args       []string
		want       string
	}{
		{"rules from two sources", "envoy: {rules_dir: /tmp, xds: {server_url: 'localhost:18000'}}\n", nil, nil, "envoy.xds.server_url: set with rules_dir"},
		{"bad backoff", "envoy: {xds: {server_url: 'localhost:18000', backoff_initial: 1m, backoff_max: 1s}}\n", nil, nil, "envoy.xds.backoff_initial"},
		{"CA without TLS", "envoy: {xds: {server_url: 'localhost:18000', ca_file: ca.pem}}\n", nil, nil, "envoy.xds.use_tls"},
		{"bad metadata", "envoy: {xds: {server_url: 'localhost:18000', node_metadata: novalue}}\n", nil, nil, "envoy.xds.node_metadata"},
		{"unknown config type", "", map[string]string{"CONFIG_TYPE": "CONSUL"}, nil, "CONFIG_TYPE: must be FILE or GRPC_XDS_SOTW"},
		{"xDS and --rules", "", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "USE_STATSD": "false"}, []string{"--rules", "/tmp"}, "set with rules_dir"},
		{"bad interval", "", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "soon"}, nil, "XDS_CLIENT_BACKOFF_MAX_INTERVAL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append(addrs, c.args...)
			if c.yaml != "" {
				args = append(args, "--config", writeFile(t, t.TempDir(), "limiterd.yaml", c.yaml))
			}
			code, stderr := runOnce(t, args...)
			if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q: want 2 and one line with %q", code, stderr, c.want)
			}
		})
	}
}

// TestXDSBackoff checks the reconnection waits: envoyproxy/ratelimit's
// defaults give 10 s every time; a factor above 1 grows them up to the
// maximum, jitter drawing within [initial, that].
func TestXDSBackoff(t *testing.T) {
	no := false
	cases := []struct {
		x    XDS
		n    int
		r    float64
		want time.Duration
	}{
		{defaultXDS(), 0, 0.9, 10 * time.Second},
		{defaultXDS(), 5, 0.3, 10 * time.Second},
		{XDS{BackoffInitial: time.Second, BackoffMax: 30 * time.Second, BackoffFactor: 2, BackoffJitter: &no}, 3, 0.5, 8 * time.Second},
		{XDS{BackoffInitial: time.Second, BackoffMax: 30 * time.Second, BackoffFactor: 2, BackoffJitter: &no}, 10, 0.5, 30 * time.Second},
		{XDS{BackoffInitial: time.Second, BackoffMax: 30 * time.Second, BackoffFactor: 2}, 3, 0.5, 4500 * time.Millisecond},
	}
	for _, c := range cases {
		x := &xdsClient{cfg: c.x}
		if got := x.backoff(c.n, c.r); got != c.want {
			t.Errorf("%+v attempt %d r %v: %v, want %v", c.x, c.n, c.r, got, c.want)
		}
	}
}
