package service

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/costwise/batcher/envoyrl"
)

// RateLimitConfigType is the type URL of the rule resources limiterd asks
// an xDS server for: go-control-plane's RateLimitConfig.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// XDS configures rules from an xDS management server (envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW): limiterd opens an aggregated discovery
// stream (state of the world) for RateLimitConfig resources, uses every
// set of resources it receives as the whole rule set, and keeps the last
// good rules while the server is unreachable or sends rules it refuses.
type XDS struct {
	// ServerURL is the server's gRPC target, such as localhost:18000; set,
	// the rules come from it (CONFIG_GRPC_XDS_SERVER_URL).
	ServerURL string `yaml:"server_url"`
	// NodeID is the node limiterd names itself; the server's snapshots are
	// set for it. Default "default" (CONFIG_GRPC_XDS_NODE_ID).
	NodeID string `yaml:"node_id"`
	// NodeMetadata is the node's metadata, "k1=v1,k2=v2"
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeMetadata string `yaml:"node_metadata"`
	// Headers are sent with the stream, "k1:v1,k2:v2"
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers string `yaml:"headers"`
	// UseTLS connects over TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS), checking
	// the server against CAFile (system roots when empty) and ServerSAN
	// (the target's host when empty), showing CertFile and KeyFile when set.
	UseTLS    bool   `yaml:"use_tls"`
	CAFile    string `yaml:"ca_file"`
	CertFile  string `yaml:"cert_file"`
	KeyFile   string `yaml:"key_file"`
	ServerSAN string `yaml:"server_san"`
	// BackoffInitial, BackoffMax, BackoffFactor and BackoffJitter space
	// the reconnections: the n-th wait in a row is BackoffInitial times
	// BackoffFactor to the n, kept within [BackoffInitial, BackoffMax],
	// drawn at random from [BackoffInitial, that] with jitter. Defaults
	// 10 s, 60 s, 0.5 and true, envoyproxy/ratelimit's (which makes every
	// wait 10 s).
	BackoffInitial time.Duration `yaml:"backoff_initial"`
	BackoffMax     time.Duration `yaml:"backoff_max"`
	BackoffFactor  float64       `yaml:"backoff_factor"`
	BackoffJitter  *bool         `yaml:"backoff_jitter"`
	// MaxMsgSize is the largest response accepted, in bytes; 0 means
	// gRPC's 4 MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxMsgSize int64 `yaml:"max_msg_size"`
	// StartWithoutRules starts serving before the first rules arrive
	// (FORCE_START_WITHOUT_INITIAL_CONFIG); by default limiterd waits for
	// them before it listens to calls.
	StartWithoutRules bool `yaml:"start_without_rules"`
}

func defaultXDS() XDS {
	return XDS{NodeID: "default", BackoffInitial: 10 * time.Second, BackoffMax: time.Minute, BackoffFactor: 0.5}
}

func (c *Config) validateXDS() error {
	x := &c.Envoy.XDS
	// The numbers are range-checked whether or not xDS is used, as every
	// numeric field of the file is.
	switch {
	case !(x.BackoffFactor > 0) || math.IsInf(x.BackoffFactor, 0) || x.BackoffFactor > 1e6:
		return c.errField("envoy.xds.backoff_factor", "must be positive and at most 1e6, not %v", x.BackoffFactor)
	case x.MaxMsgSize < 0 || x.MaxMsgSize > math.MaxInt32:
		return c.errField("envoy.xds.max_msg_size", "must be 0 to 2147483647, not %d", x.MaxMsgSize)
	}
	if x.ServerURL == "" {
		return nil
	}
	switch {
	case c.Envoy.RulesDir != "":
		return c.errField("envoy.xds.server_url", "set with rules_dir (or --rules): the rules come from one source")
	case x.BackoffInitial <= 0 || x.BackoffMax < x.BackoffInitial:
		return c.errField("envoy.xds.backoff_initial", "must be positive and at most backoff_max, not %v (max %v)", x.BackoffInitial, x.BackoffMax)
	case (x.CertFile == "") != (x.KeyFile == ""):
		return c.errField("envoy.xds.cert_file", "cert_file and key_file go together")
	case !x.UseTLS && (x.CAFile != "" || x.CertFile != "" || x.ServerSAN != ""):
		return c.errField("envoy.xds.use_tls", "must be true with ca_file, cert_file or server_san")
	}
	if _, err := pairs(x.NodeMetadata, "="); err != nil {
		return c.errField("envoy.xds.node_metadata", "%v", err)
	}
	if _, err := pairs(x.Headers, ":"); err != nil {
		return c.errField("envoy.xds.headers", "%v", err)
	}
	return nil
}

// pairs splits "k1<sep>v1,k2<sep>v2".
func pairs(s, sep string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key%svalue", kv, sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// xdsClient keeps the Envoy service's rules those of the xDS server.
type xdsClient struct {
	cfg     XDS
	svc     *envoyrl.Service
	log     *slog.Logger
	metrics *metrics
	creds   credentials.TransportCredentials
	parse   envoyrl.ParseOptions
	use     func(rules *envoyrl.Rules, files int) // puts loaded rules in force

	firstOnce sync.Once
	first     chan struct{} // closed when the first rules are in use
}

func newXDSClient(cfg XDS, svc *envoyrl.Service, log *slog.Logger, m *metrics) (*xdsClient, error) {
	x := &xdsClient{cfg: cfg, svc: svc, log: log, metrics: m, first: make(chan struct{}), creds: insecure.NewCredentials()}
	if cfg.UseTLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerSAN}
		if cfg.CAFile != "" {
			pool, err := readCAs(cfg.CAFile)
			if err != nil {
				return nil, err
			}
			tc.RootCAs = pool
		}
		if cfg.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("limiterd: xDS client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		x.creds = credentials.NewTLS(tc)
	}
	return x, nil
}

// waitFirst waits for the first rules; false when ctx ended first.
func (x *xdsClient) waitFirst(ctx context.Context) bool {
	select {
	case <-x.first:
		return true
	case <-ctx.Done():
		return false
	}
}

// run follows the server until ctx ends, reconnecting after each failure.
func (x *xdsClient) run(ctx context.Context) {
	attempt := 0
	for {
		got, err := x.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			attempt = 0
		}
		d := x.backoff(attempt, rand.Float64())
		attempt++
		x.log.Warn("xDS stream ended; keeping the last good rules", "server", x.cfg.ServerURL, "err", err.Error(), "retry_in", d.String())
		if !sleep(ctx, d) {
			return
		}
	}
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff is the wait before reconnection attempt n (0 first), with r in
// [0, 1) drawing the jitter.
func (x *xdsClient) backoff(n int, r float64) time.Duration {
	lo, hi := float64(x.cfg.BackoffInitial), float64(x.cfg.BackoffMax)
	d := min(max(lo*math.Pow(x.cfg.BackoffFactor, float64(n)), lo), hi)
	if x.cfg.BackoffJitter == nil || *x.cfg.BackoffJitter {
		d = lo + r*(d-lo)
	}
	return time.Duration(d)
}

// session is one stream: it asks for the rules, and uses and acknowledges
// (or refuses, keeping the last good rules) every response, until the
// stream fails. got reports whether any rules were put in use.
func (x *xdsClient) session(ctx context.Context) (got bool, err error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(x.creds)}
	if x.cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(int(x.cfg.MaxMsgSize))))
	}
	cc, err := grpc.NewClient(x.cfg.ServerURL, opts...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	headers, _ := pairs(x.cfg.Headers, ":")
	ctx = metadata.NewOutgoingContext(ctx, metadata.New(headers))
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	req := &discoveryv3.DiscoveryRequest{Node: x.node(), TypeUrl: RateLimitConfigType}
	if err := stream.Send(req); err != nil {
		return false, err
	}
	version, refused := "", ""
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, err
		}
		req = &discoveryv3.DiscoveryRequest{TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce(), VersionInfo: version}
		if err := x.apply(resp); err != nil {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			if resp.GetVersionInfo() != refused {
				refused = resp.GetVersionInfo()
				x.metrics.reloaded(false)
				x.log.Error("xDS rules refused; keeping the last good rules", "version", refused, "err", err.Error())
			} else if !sleep(ctx, x.cfg.BackoffInitial) {
				// A server that answers a refusal with the same rules
				// (go-control-plane's snapshot cache does) is refused
				// again, at most once per BackoffInitial.
				return got, ctx.Err()
			}
		} else {
			got, version = true, resp.GetVersionInfo()
			req.VersionInfo = version
			x.log.Info("rules from xDS", "version", version, "domains", x.svc.Rules().Domains())
			x.firstOnce.Do(func() { close(x.first) })
		}
		if err := stream.Send(req); err != nil {
			return got, err
		}
	}
}

func (x *xdsClient) node() *corev3.Node {
	md, _ := pairs(x.cfg.NodeMetadata, "=")
	fields := make(map[string]*structpb.Value, len(md))
	for k, v := range md {
		fields[k] = structpb.NewStringValue(v)
	}
	return &corev3.Node{Id: x.cfg.NodeID, Metadata: &structpb.Struct{Fields: fields}}
}

// apply puts a response's resources in use as the whole rule set.
func (x *xdsClient) apply(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != RateLimitConfigType {
		return fmt.Errorf("limiterd: xDS response of type %q, want %s", resp.GetTypeUrl(), RateLimitConfigType)
	}
	files := make([]envoyrl.File, 0, len(resp.GetResources()))
	for i, res := range resp.GetResources() {
		var rc rlconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&rc); err != nil {
			return fmt.Errorf("limiterd: xDS resource %d: %w", i, err)
		}
		f, err := ruleFile(&rc)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	rules, err := envoyrl.ParseWith(files, x.parse)
	if err != nil {
		return err
	}
	x.use(rules, len(files))
	return nil
}

// The rule file format, for turning a RateLimitConfig into the file it
// stands for, so that it is checked and loaded as a file is.
type (
	xdsRoot struct {
		Domain      string          `yaml:"domain"`
		Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
	}
	xdsDescriptor struct {
		Key            string          `yaml:"key"`
		Value          string          `yaml:"value,omitempty"`
		RateLimit      *xdsRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []xdsDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
	}
	xdsRateLimit struct {
		RequestsPerUnit uint32       `yaml:"requests_per_unit,omitempty"`
		Unit            string       `yaml:"unit,omitempty"`
		Unlimited       bool         `yaml:"unlimited,omitempty"`
		Name            string       `yaml:"name,omitempty"`
		Replaces        []xdsReplace `yaml:"replaces,omitempty"`
	}
	xdsReplace struct {
		Name string `yaml:"name"`
	}
)

// ruleFile is the rule file a RateLimitConfig stands for, named
// "xds:" and the resource's name.
func ruleFile(rc *rlconfv3.RateLimitConfig) (envoyrl.File, error) {
	b, err := yaml.Marshal(xdsRoot{Domain: rc.GetDomain(), Descriptors: xdsDescriptors(rc.GetDescriptors())})
	if err != nil {
		return envoyrl.File{}, fmt.Errorf("limiterd: xDS resource %s: %w", rc.GetName(), err)
	}
	return envoyrl.File{Name: "xds:" + rc.GetName(), Content: b}, nil
}

func xdsDescriptors(ds []*rlconfv3.RateLimitDescriptor) []xdsDescriptor {
	out := make([]xdsDescriptor, 0, len(ds))
	for _, d := range ds {
		out = append(out, xdsDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), RateLimit: xdsPolicy(d.GetRateLimit()),
			Descriptors: xdsDescriptors(d.GetDescriptors()), ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
		})
	}
	return out
}

func xdsPolicy(p *rlconfv3.RateLimitPolicy) *xdsRateLimit {
	if p == nil {
		return nil
	}
	rl := &xdsRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if p.GetUnit() != rlconfv3.RateLimitUnit_UNKNOWN {
		rl.Unit = p.GetUnit().String()
	}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, xdsReplace{Name: r.GetName()})
	}
	return rl
}
