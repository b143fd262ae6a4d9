package envoyrl

import (
	"bytes"
	"math/rand/v2"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomResponse draws a response of the shapes the Service builds, with
// values at the edges of their types.
func randomResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	pick32 := func() uint32 { return []uint32{0, 1, 127, 128, 1<<32 - 1, r.Uint32()}[r.IntN(6)] }
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code([]int32{0, 1, 2, 9, -1}[r.IntN(5)])}
	for range r.IntN(5) {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_Code([]int32{0, 1, 2, -3}[r.IntN(4)]),
			LimitRemaining: pick32(),
		}
		if r.IntN(3) > 0 {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            []string{"", "per-user", "日本", "a\x00b"}[r.IntN(4)],
				RequestsPerUnit: pick32(),
				Unit:            rlsv3.RateLimitResponse_RateLimit_Unit([]int32{0, 1, 4, 7, -2}[r.IntN(5)]),
			}
		}
		if r.IntN(3) > 0 {
			st.DurationUntilReset = &durationpb.Duration{
				Seconds: []int64{0, 1, 59, 1 << 40, -5}[r.IntN(5)],
				Nanos:   []int32{0, 0, 5, -7}[r.IntN(4)],
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp
}

// TestResponseProto checks that the codec writes the service's responses
// byte for byte as the protobuf library does, and leaves the rest to it.
func TestResponseProto(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 2))
	for range 20000 {
		resp := randomResponse(r)
		got, ok := appendResponseProto(nil, resp)
		if !ok {
			t.Fatalf("%v left to the protobuf library", resp)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: wrote %x, the protobuf library %x", resp, got, want)
		}
		out, err := Codec{}.Marshal(resp)
		if err != nil || !bytes.Equal(out.Materialize(), want) {
			t.Fatalf("%v: the codec wrote %x, %v; want %x", resp, out.Materialize(), err, want)
		}
	}
	unknown := &rlsv3.RateLimitResponse{}
	unknown.ProtoReflect().SetUnknown([]byte{0xf8, 0x01, 0x01})
	left := []*rlsv3.RateLimitResponse{
		{RawBody: []byte("x")},
		{Quota: &rlsv3.RateLimitResponse_Quota{}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
		unknown,
	}
	for i, resp := range left {
		if b, ok := appendResponseProto([]byte("x"), resp); ok || string(b) != "x" {
			t.Errorf("response %d: written as %x, want it left to the protobuf library", i, b)
		}
		out, err := Codec{}.Marshal(resp)
		want, _ := proto.Marshal(resp)
		if resp.Statuses != nil && resp.Statuses[0] == nil {
			continue // the library's own answer, whatever it is
		}
		if err != nil || !bytes.Equal(out.Materialize(), want) {
			t.Errorf("response %d: the codec wrote %x, %v; want %x", i, out.Materialize(), err, want)
		}
	}
}

// sameAsProto checks that the codec reads body as proto.Unmarshal does
// (the same request, or an error when it fails), and that the fast decoder
// never accepts what the library refuses or reads it otherwise. It reports
// whether the fast decoder read body.
func sameAsProto(t testing.TB, body []byte) bool {
	t.Helper()
	var want rlsv3.RateLimitRequest
	wantErr := proto.Unmarshal(body, &want)
	var fast rlsv3.RateLimitRequest
	ok := fastDecodeRequestProto(body, &fast)
	if ok && wantErr != nil {
		t.Errorf("%x: the fast decoder accepts it, the library refuses it: %v", body, wantErr)
	}
	if ok && wantErr == nil && !proto.Equal(&fast, &want) {
		t.Errorf("%x: the fast decoder reads %v, the library %v", body, &fast, &want)
	}
	var got rlsv3.RateLimitRequest
	err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, &got)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("%x: error %v, the library's %v", body, err, wantErr)
	case err == nil && !proto.Equal(&got, &want):
		t.Errorf("%x: read as %v, the library reads %v", body, &got, &want)
	}
	return ok
}

// TestRequestProtoRandom compares the codec's decoding with the protobuf
// library's on random requests and on random mutations of them.
func TestRequestProtoRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 3))
	fast := 0
	const n = 20000
	for range n {
		body, err := proto.Marshal(randomRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		if sameAsProto(t, body) {
			fast++
		}
		sameAsProto(t, mutateWire(r, body))
		if t.Failed() {
			t.FailNow()
		}
	}
	if fast < n/2 {
		t.Errorf("the fast decoder read %d of %d requests", fast, n)
	}
	// Forms the fast decoder leaves to the library, valid or not.
	for _, body := range [][]byte{
		{0x12, 0x04, 0x1a, 0x00, 0x1a, 0x00}, // a descriptor's hits_addend twice
		{0x18, 0x80, 0x80, 0x80, 0x80, 0x10}, // hits_addend past 32 bits
		{0x0a, 0x01, 0xff},                   // a domain not in UTF-8
		{0xf8, 0x01, 0x01},                   // an unknown field
		{0x08, 0x01},                         // domain with the wrong wire type
		{0x12, 0x02, 0x20, 0x02},             // is_negative_hits 2
		{0x0a, 0x05, 'a'},                    // cut short
	} {
		if sameAsProto(t, body) {
			t.Errorf("%x: read by the fast decoder, want it left to the library", body)
		}
	}
}

// mutateWire changes a few bytes of b.
func mutateWire(r *rand.Rand, b []byte) []byte {
	out := append([]byte(nil), b...)
	for range 1 + r.IntN(3) {
		if len(out) == 0 {
			break
		}
		at := r.IntN(len(out))
		switch r.IntN(3) {
		case 0:
			out[at] = byte(r.Uint32())
		case 1:
			out = append(out[:at], append([]byte{byte(r.Uint32())}, out[at:]...)...)
		case 2:
			out = out[:at]
		}
	}
	return out
}

// FuzzRequestProto checks on any input that the codec decodes a request as
// the protobuf library does: go test -fuzz FuzzRequestProto ./envoyrl.
func FuzzRequestProto(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for range 8 {
		b, _ := proto.Marshal(randomRequest(r))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameAsProto(t, body) })
}

// BenchmarkCodec compares the codec with gRPC's default on the benchmark's
// 3-descriptor request and its response.
func BenchmarkCodec(b *testing.B) {
	req := request(1, desc("user", "u1234"), desc("tenant", "t12"), desc("route", "/api/orders"))
	body, _ := proto.Marshal(req)
	limit := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 50, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range 3 {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 42, DurationUntilReset: durationpb.New(1e9)})
	}
	for _, c := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"envoyrl", Codec{}}, {"grpc", grpcDefault{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r rlsv3.RateLimitRequest
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, &r); err != nil {
					b.Fatal(err)
				}
				out, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}

// grpcDefault is gRPC's default protobuf codec.
type grpcDefault struct{}

func (grpcDefault) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}

func (grpcDefault) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}
