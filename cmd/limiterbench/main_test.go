package main

import (
	"math/rand/v2"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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
