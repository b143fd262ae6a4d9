package examples

import (
	"os"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/costwise/batcher/envoyrl"

	// The other typed extensions the bootstrap names, registered so that
	// its "@type" fields resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// checkEnvoyBootstrap decodes the file into Envoy's Bootstrap message,
// refusing unknown fields and unknown extension types, runs the message's
// own validation rules, and checks that the rate limit filter asks the
// limiterd cluster on limiterd's gRPC port.
func checkEnvoyBootstrap(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var bs bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, &bs); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	checkRateLimitCluster(t, file, &bs)
}

// validator is a go-control-plane message with its validation rules.
type validator interface{ ValidateAll() error }

// unpack decodes a typed config and validates it.
func unpack(t *testing.T, file string, a *anypb.Any) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: %s: %v", file, a.GetTypeUrl(), err)
	}
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Fatalf("%s: %s: %v", file, a.GetTypeUrl(), err)
		}
	}
	return m
}

// checkRateLimitCluster validates every typed config inside the bootstrap
// (Bootstrap.ValidateAll does not look inside them) and checks that each
// rate limit filter asks a defined cluster whose endpoints are on
// limiterd's gRPC port, for a domain of the example rules.
func checkRateLimitCluster(t *testing.T, file string, bs *bootstrapv3.Bootstrap) {
	ports := map[string][]uint32{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		for _, o := range c.GetTypedExtensionProtocolOptions() {
			unpack(t, file, o)
		}
		for _, e := range c.GetLoadAssignment().GetEndpoints() {
			for _, le := range e.GetLbEndpoints() {
				ports[c.GetName()] = append(ports[c.GetName()], le.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			}
		}
	}
	rules, err := envoyrl.LoadDir("rules")
	if err != nil {
		t.Fatal(err)
	}
	filters := 0
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm, ok := unpack(t, file, f.GetTypedConfig()).(*hcmv3.HttpConnectionManager)
				if !ok {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					rl, ok := unpack(t, file, hf.GetTypedConfig()).(*ratelimitv3.RateLimit)
					if !ok {
						continue
					}
					filters++
					cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
					if p := ports[cluster]; len(p) == 0 || p[0] != 8081 {
						t.Errorf("%s: the rate limit filter asks cluster %q, whose ports are %v; want limiterd's gRPC port 8081", file, cluster, p)
					}
					if !slices.Contains(rules.Domains(), rl.GetDomain()) {
						t.Errorf("%s: the rate limit filter's domain %q is not in rules/ (%v)", file, rl.GetDomain(), rules.Domains())
					}
				}
			}
		}
	}
	if filters == 0 {
		t.Errorf("%s: no rate limit filter", file)
	}
}
