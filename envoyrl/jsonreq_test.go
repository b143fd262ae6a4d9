package envoyrl

import (
	"math/rand/v2"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sameAsProtojson checks that decodeRequestJSON accepts body exactly when
// protojson does, with the same request or the same error, and that the
// fast decoder never accepts what protojson refuses or reads it otherwise.
// It reports whether the fast decoder read body.
func sameAsProtojson(t testing.TB, body []byte) bool {
	t.Helper()
	var want rlsv3.RateLimitRequest
	wantErr := protojson.Unmarshal(body, &want)
	var fast rlsv3.RateLimitRequest
	ok := fastDecodeRequest(body, &fast)
	if ok && wantErr != nil {
		t.Errorf("%q: the fast decoder accepts it, protojson refuses it: %v", body, wantErr)
	}
	if ok && wantErr == nil && !proto.Equal(&fast, &want) {
		t.Errorf("%q: the fast decoder reads %v, protojson %v", body, &fast, &want)
	}
	var got rlsv3.RateLimitRequest
	err := decodeRequestJSON(body, &got)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("%q: error %v, protojson's %v", body, err, wantErr)
	case err != nil && err.Error() != wantErr.Error():
		t.Errorf("%q: error %q, protojson's %q", body, err, wantErr)
	case err == nil && !proto.Equal(&got, &want):
		t.Errorf("%q: read as %v, protojson reads %v", body, &got, &want)
	}
	return ok
}

// TestRequestJSONForms runs hand-picked bodies: those the fast decoder must
// read itself, and the valid and invalid forms it must leave to protojson.
func TestRequestJSONForms(t *testing.T) {
	fast := []string{
		`{}`,
		` { } `,
		`{"domain":"bench"}`,
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"hitsAddend":1}`,
		`{"domain": "bench", "descriptors": [{"entries": [{"key": "user", "value": "u1"}]}], "hitsAddend": 1}`,
		"{\n  \"domain\":\t\"bench\",\r\n  \"descriptors\": [ ]\n}",
		`{"hits_addend":4294967295,"domain":"d"}`,
		`{"descriptors":[{},{"entries":[]},{"entries":[{}]}]}`,
		`{"descriptors":[{"entries":[{"key":"a","value":"b"},{"key":"c"}],"hitsAddend":0,"isNegativeHits":true}]}`,
		`{"descriptors":[{"hits_addend":18446744073709551615,"is_negative_hits":false}]}`,
		`{"domain":"日本語 é ü","descriptors":[{"entries":[{"key":"path","value":"/api/*?x=1"}]}]}`,
		`{"domain":"` + "\x7f" + `"}`,
		`{"domain":""}`,
		`{"hitsAddend":0}`,
	}
	for _, b := range fast {
		if !sameAsProtojson(t, []byte(b)) {
			t.Errorf("%q: left to protojson, want the fast decoder to read it", b)
		}
	}
	left := []string{
		// Valid, but in forms the fast decoder leaves to protojson.
		`{"domain":"a\"b"}`,
		`{"domain":"\u0062ench"}`,
		`{"dom\u0061in":"bench"}`,
		`{"domain":null}`,
		`{"hitsAddend":"7"}`,
		`{"hitsAddend":7.0}`,
		`{"hitsAddend":7e0}`,
		`{"hitsAddend":null}`,
		`{"descriptors":null}`,
		`{"descriptors":[{"hitsAddend":"5"}]}`,
		`{"descriptors":[{"hitsAddend":null}]}`,
		`{"descriptors":[{"limit":{"requestsPerUnit":5,"unit":"SECOND"}}]}`,
		`{"descriptors":[{"limit":{"requests_per_unit":5,"unit":1}}]}`,
		`{"descriptors":[{"entries":[{"key":null}]}]}`,
		`{"descriptors":[{"isNegativeHits":null}]}`,
		// Invalid: protojson refuses them, and so must the endpoint.
		``,
		`null`,
		`[]`,
		`{`,
		`{"domain":"bench"`,
		`{"domain":"bench"}x`,
		`{"domain":"bench"}{}`,
		`{"domain":"bench",}`,
		`{,}`,
		`{"domain" "bench"}`,
		`{"domain":bench}`,
		`{"domain":"a","domain":"b"}`,
		`{"hitsAddend":1,"hits_addend":2}`,
		`{"descriptors":[],"descriptors":[]}`,
		`{"descriptors":[{"entries":[],"entries":[]}]}`,
		`{"descriptors":[{"entries":[{"key":"a","key":"b"}]}]}`,
		`{"descriptors":[{"isNegativeHits":true,"is_negative_hits":true}]}`,
		`{"Domain":"bench"}`,
		`{"unknown":1}`,
		`{"descriptors":[{"entries":[{"key":"a","other":"b"}]}]}`,
		`{"hitsAddend":-1}`,
		`{"hitsAddend":-0}`,
		`{"hitsAddend":01}`,
		`{"hitsAddend":4294967296}`,
		`{"hitsAddend":1.5}`,
		`{"hitsAddend":1x}`,
		`{"hitsAddend":true}`,
		`{"descriptors":[{"hitsAddend":18446744073709551616}]}`,
		`{"descriptors":[{"hitsAddend":-1}]}`,
		`{"descriptors":[{"isNegativeHits":1}]}`,
		`{"descriptors":[{"isNegativeHits":truex}]}`,
		`{"descriptors":[{"isNegativeHits":"true"}]}`,
		`{"descriptors":[null]}`,
		`{"descriptors":[{}],}`,
		`{"descriptors":[{} {}]}`,
		`{"descriptors":{}}`,
		`{"domain":"` + "\xff" + `"}`,
		`{"domain":"` + "\xed\xa0\x80" + `"}`,
		`{"domain":"a` + "\n" + `b"}`,
		`{"domain":"a` + "\x00" + `"}`,
		`{"domain":1}`,
		"\xef\xbb\xbf{}",
		"{}\x00",
		"{\v}",
	}
	for _, b := range left {
		if sameAsProtojson(t, []byte(b)) {
			t.Errorf("%q: read by the fast decoder, want it left to protojson", b)
		}
	}
}

// randomRequest draws a request with the fields a client may set,
// strings included that need escaping or are not ASCII.
func randomRequest(r *rand.Rand) *rlsv3.RateLimitRequest {
	str := func() string {
		parts := []string{"user", "u1", "/api/orders", "*", "é", "日本", " ", "_", "\"", "\\", "\n", "\t", "\x7f", "\u2028", "\U0001F600", "<>&"}
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		return b.String()
	}
	req := &rlsv3.RateLimitRequest{Domain: str()}
	if r.IntN(2) == 0 {
		req.HitsAddend = []uint32{0, 1, 7, 1<<32 - 1}[r.IntN(4)]
	}
	for range r.IntN(4) {
		d := &rlv3.RateLimitDescriptor{}
		for range r.IntN(4) {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: str(), Value: str()})
		}
		switch r.IntN(4) {
		case 0:
			d.HitsAddend = wrapperspb.UInt64([]uint64{0, 3, 1<<64 - 1}[r.IntN(3)])
		case 1:
			d.IsNegativeHits = true
		case 2:
			if r.IntN(4) == 0 {
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: r.Uint32(), Unit: typev3.RateLimitUnit(r.IntN(8))}
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// mutate changes a few bytes of b, into what is often no longer JSON or no
// longer a request.
func mutate(r *rand.Rand, b []byte) []byte {
	out := append([]byte(nil), b...)
	bits := []string{"", " ", ",", ":", "{", "}", "[", "]", `"`, `\`, "0", "1", "-", ".", "e", "null", "true", "x", "\xff", "\n"}
	for range 1 + r.IntN(3) {
		if len(out) == 0 {
			break
		}
		at := r.IntN(len(out))
		ins := bits[r.IntN(len(bits))]
		switch r.IntN(3) {
		case 0: // replace a byte
			out = append(out[:at], append([]byte(ins), out[at+1:]...)...)
		case 1: // insert
			out = append(out[:at], append([]byte(ins), out[at:]...)...)
		case 2: // cut the rest
			out = out[:at]
		}
	}
	return out
}

// TestRequestJSONRandom compares the endpoint's decoding with protojson's
// on random requests written by protojson in each of its forms, and on
// random mutations of them.
func TestRequestJSONRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 1))
	forms := []protojson.MarshalOptions{
		{},
		{UseProtoNames: true},
		{Multiline: true, Indent: "  "},
		{EmitUnpopulated: true},
		{UseEnumNumbers: true, UseProtoNames: true},
	}
	fast := 0
	const n = 20000
	for i := range n {
		req := randomRequest(r)
		body, err := forms[i%len(forms)].Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if sameAsProtojson(t, body) {
			fast++
		}
		sameAsProtojson(t, mutate(r, body))
		if t.Failed() {
			t.FailNow()
		}
	}
	// Most of these requests are in the fast decoder's forms: it must read
	// a fair share of them, or it would be tested on nothing.
	if fast < n/10 {
		t.Errorf("the fast decoder read %d of %d bodies", fast, n)
	}
}

// FuzzRequestJSON checks on any body that the endpoint decodes as protojson
// does: go test -fuzz FuzzRequestJSON ./envoyrl.
func FuzzRequestJSON(f *testing.F) {
	f.Add([]byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"hitsAddend":1}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"a","value":"b"},{"key":"c"}],"hits_addend":0,"isNegativeHits":true}]}`))
	f.Add([]byte(`{"domain":"a\"b","hitsAddend":"7","descriptors":[{"limit":{"requestsPerUnit":5,"unit":"SECOND"}}]}`))
	f.Add([]byte(`{"hitsAddend":4294967296,"domain":"é"}`))
	f.Fuzz(func(t *testing.T, body []byte) { sameAsProtojson(t, body) })
}

// BenchmarkRequestJSON compares the endpoint's decoding of the benchmark's
// request with protojson's.
func BenchmarkRequestJSON(b *testing.B) {
	body := []byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u1234"}]},{"entries":[{"key":"tenant","value":"t12"}]},{"entries":[{"key":"route","value":"/api/orders"}]}],"hitsAddend":1}`)
	b.Run("endpoint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := decodeRequestJSON(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := protojson.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
