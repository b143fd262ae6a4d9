package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestJSONRequest checks that the /json bodies are the requests the gRPC
// scenarios send, drawn the same way.
func TestJSONRequest(t *testing.T) {
	for n := 1; n <= 3; n++ {
		c := config{descriptors: n, keys: 10000}
		a, b := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
		for range 1000 {
			want := envoyRequest(c, a)
			body := jsonRequest(nil, c, b)
			var got rlsv3.RateLimitRequest
			if err := protojson.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			if !proto.Equal(&got, want) {
				t.Fatalf("%s reads as %v, want %v", body, &got, want)
			}
		}
	}
}

// TestWriteProtoset checks that the written descriptor set stands on its
// own: read back into a fresh registry, with no generated code, it resolves
// both methods the load generators call, with the request types they send.
func TestWriteProtoset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.protoset")
	if err := writeProtoset(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("the set does not stand on its own: %v", err)
	}
	for method, input := range map[string]string{
		"envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit": "envoy.service.ratelimit.v3.RateLimitRequest",
		"ratelimiter.v1.RateLimiter.Allow":                            "ratelimiter.v1.AllowRequest",
	} {
		d, err := files.FindDescriptorByName(protoreflect.FullName(method))
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		m, ok := d.(protoreflect.MethodDescriptor)
		if !ok {
			t.Fatalf("%s is a %T, not a method", method, d)
		}
		if got := m.Input().FullName(); string(got) != input {
			t.Errorf("%s takes %s, want %s", method, got, input)
		}
	}
}

// TestZipfUsers checks --zipf's draw: u0 is drawn about 1/H(n, s) of the
// time and every user stays in range.
func TestZipfUsers(t *testing.T) {
	c := config{keys: 1000, zipf: 1.1}
	c.cdf = zipfCDF(c.keys, c.zipf)
	var h float64
	for k := 1; k <= c.keys; k++ {
		h += math.Pow(float64(k), -c.zipf)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	first := 0
	for range n {
		u := drawUser(c, r)
		if u < 0 || u >= c.keys {
			t.Fatalf("user %d out of range", u)
		}
		if u == 0 {
			first++
		}
	}
	if got, want := float64(first)/n, 1/h; math.Abs(got-want) > 0.01 {
		t.Fatalf("u0 drawn %.4f of the time, want %.4f", got, want)
	}
}
