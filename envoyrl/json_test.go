package envoyrl

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestResponseJSON checks that the endpoint's own encoder writes what
// protojson reads back as the same response, and leaves to protojson what
// it does not handle.
func TestResponseJSON(t *testing.T) {
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 50, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	written := []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 49, DurationUntilReset: durationpb.New(40e9)},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1}},
			{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 1<<32 - 1},
			{},
			{DurationUntilReset: &durationpb.Duration{}},
			{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Unit: rlsv3.RateLimitResponse_RateLimit_DAY}},
		}},
	}
	for i, r := range written {
		b, ok := appendResponseJSON(nil, r)
		if !ok {
			t.Fatalf("response %d left to protojson", i)
		}
		var back rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(b, &back); err != nil {
			t.Fatalf("response %d: %s: %v", i, b, err)
		}
		if !proto.Equal(&back, r) {
			t.Errorf("response %d: %s reads back as %v, want %v", i, b, &back, r)
		}
		want, _ := protojson.Marshal(r)
		var w rlsv3.RateLimitResponse
		_ = protojson.Unmarshal(want, &w)
		if !proto.Equal(&w, &back) {
			t.Errorf("response %d: %s differs from protojson's %s", i, b, want)
		}
	}
	left := []*rlsv3.RateLimitResponse{
		{RawBody: []byte("x")},
		{Quota: &rlsv3.RateLimitResponse_Quota{}},
		{OverallCode: 7},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{DurationUntilReset: &durationpb.Duration{Nanos: 5}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: `a"b`}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}},
	}
	for i, r := range left {
		if b, ok := appendResponseJSON([]byte("x"), r); ok || string(b) != "x" {
			t.Errorf("response %d: written as %q, want it left to protojson", i, b)
		}
	}
}
