package envoyrl

import (
	"math"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Codec is gRPC's protobuf codec with a faster path for the rate limit
// service's own messages: it reads a RateLimitRequest and writes a
// RateLimitResponse in the forms they usually take by hand, producing the
// same message and the same bytes as the protobuf library, and leaves
// every other message, and every other form, to gRPC's default codec.
// Install it on a server with grpc.ForceServerCodecV2(envoyrl.Codec{});
// the server's other services are unaffected.
type Codec struct{}

// Name implements encoding.CodecV2: the codec stands for "proto".
func (Codec) Name() string { return grpcproto.Name }

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlsv3.RateLimitResponse); ok {
		if b, ok := appendResponseProto(make([]byte, 0, 8+48*len(r.Statuses)), r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		b := buf.ReadOnlyData()
		if fastDecodeRequestProto(b, r) {
			return nil
		}
		r.Reset()
		return proto.Unmarshal(b, r)
	}
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}

// appendResponseProto appends r in the protobuf wire format, byte for byte
// as proto.Marshal writes it (fields in number order, zero scalars left
// out, messages present when not nil), for the responses the Service
// builds. It reports false for a response holding anything else (headers,
// metadata, a body, quotas, unit multipliers, unknown fields).
func appendResponseProto(b []byte, r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.ResponseHeadersToAdd) > 0 || len(r.RequestHeadersToAdd) > 0 || len(r.RawBody) > 0 ||
		r.DynamicMetadata != nil || r.Quota != nil || len(r.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	if r.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(r.OverallCode)))
	}
	for _, st := range r.Statuses {
		size, ok := statusSize(st)
		if !ok {
			return b, false
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		b = appendStatusProto(b, st)
	}
	return b, true
}

// statusSize is the encoded size of st, false when appendResponseProto
// does not write it.
func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) (int, bool) {
	if st == nil || st.Quota != nil || len(st.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	n := 0
	if st.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(st.Code)))
	}
	if l := st.CurrentLimit; l != nil {
		ln, ok := limitSize(l)
		if !ok {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(ln)
	}
	if st.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		if len(d.ProtoReflect().GetUnknown()) > 0 {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(durationSize(d.Seconds, d.Nanos))
	}
	return n, true
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) (int, bool) {
	if l.UnitMultiplier != nil || len(l.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(l.Unit)))
	}
	if l.Name != "" {
		n += 1 + protowire.SizeBytes(len(l.Name))
	}
	return n, true
}

func durationSize(seconds int64, nanos int32) int {
	n := 0
	if seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(seconds))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

// appendStatusProto appends st's fields; statusSize must have accepted it.
func appendStatusProto(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	if st.Code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(st.Code)))
	}
	if l := st.CurrentLimit; l != nil {
		ln, _ := limitSize(l)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(ln))
		if l.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
		}
		if l.Unit != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(l.Unit)))
		}
		if l.Name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
		}
	}
	if st.LimitRemaining != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d.Seconds, d.Nanos)))
		if d.Seconds != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Seconds))
		}
		if d.Nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
		}
	}
	return b
}

// fastDecodeRequestProto reads b, a RateLimitRequest in the wire format,
// into r, which must be empty, when it has only the forms this decoder
// knows, and reports whether it did; on false r holds a partial request
// and the caller starts again with proto.Unmarshal. The forms known: the
// fields Envoy sends (domain, descriptors with entries, hits_addend on the
// request and on a descriptor, is_negative_hits), each with its own wire
// type, valid UTF-8 strings, integers in range, and no message field given
// twice. Anything else (a limit override, unknown fields, a repeated
// singular message, bad input) is left to the protobuf library.
//
// It allocates little: the strings are all cut from one copy of b, and the
// descriptors and the entries of each descriptor are allocated together.
func fastDecodeRequestProto(b []byte, r *rlsv3.RateLimitRequest) bool {
	d := wireDecoder{b: b}
	n, ok := d.count(0, len(b), 2)
	if !ok {
		return false
	}
	if n > 0 {
		r.Descriptors = block[rlv3.RateLimitDescriptor](n)
	}
	next := 0
	for i := 0; i < len(b); {
		num, typ, start, end, ok := d.field(i, len(b))
		if !ok {
			return false
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			if r.Domain, ok = d.str(start, end); !ok {
				return false
			}
		case num == 2 && typ == protowire.BytesType:
			if !d.descriptor(start, end, r.Descriptors[next]) {
				return false
			}
			next++
		case num == 3 && typ == protowire.VarintType:
			v, ok := d.varint(start, end)
			if !ok || v > math.MaxUint32 {
				return false
			}
			r.HitsAddend = uint32(v)
		default:
			return false
		}
		i = end
	}
	return true
}

// wireDecoder reads a message in b by offsets; s is b as a string, made at
// the first string field read, for the strings to be cut from.
type wireDecoder struct {
	b []byte
	s string
}

// field reads the field at b[i:limit]: its number, wire type and the
// bounds of its value (a length-delimited value without its length). Only
// varint and length-delimited fields are read.
func (d *wireDecoder) field(i, limit int) (num protowire.Number, typ protowire.Type, start, end int, ok bool) {
	num, typ, n := protowire.ConsumeTag(d.b[i:limit])
	if n < 0 {
		return 0, 0, 0, 0, false
	}
	i += n
	switch typ {
	case protowire.VarintType:
		_, m := protowire.ConsumeVarint(d.b[i:limit])
		if m < 0 {
			return 0, 0, 0, 0, false
		}
		return num, typ, i, i + m, true
	case protowire.BytesType:
		v, m := protowire.ConsumeBytes(d.b[i:limit])
		if m < 0 {
			return 0, 0, 0, 0, false
		}
		return num, typ, i + m - len(v), i + m, true
	}
	return 0, 0, 0, 0, false
}

// count returns how many length-delimited fields numbered num the message
// in b[start:end] holds.
func (d *wireDecoder) count(start, end int, num protowire.Number) (int, bool) {
	n := 0
	for i := start; i < end; {
		f, typ, _, next, ok := d.field(i, end)
		if !ok {
			return 0, false
		}
		if f == num && typ == protowire.BytesType {
			n++
		}
		i = next
	}
	return n, true
}

func (d *wireDecoder) varint(start, end int) (uint64, bool) {
	v, n := protowire.ConsumeVarint(d.b[start:end])
	return v, n == end-start
}

// str returns b[start:end] as a string, refusing invalid UTF-8.
func (d *wireDecoder) str(start, end int) (string, bool) {
	if !utf8.Valid(d.b[start:end]) {
		return "", false
	}
	if start == end {
		return "", true
	}
	if d.s == "" {
		d.s = string(d.b)
	}
	return d.s[start:end], true
}

func (d *wireDecoder) descriptor(start, end int, ds *rlv3.RateLimitDescriptor) bool {
	n, ok := d.count(start, end, 1)
	if !ok {
		return false
	}
	if n > 0 {
		ds.Entries = block[rlv3.RateLimitDescriptor_Entry](n)
	}
	next := 0
	for i := start; i < end; {
		num, typ, vs, ve, ok := d.field(i, end)
		if !ok {
			return false
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !d.entry(vs, ve, ds.Entries[next]) {
				return false
			}
			next++
		case num == 3 && typ == protowire.BytesType && ds.HitsAddend == nil:
			v, ok := d.uint64Value(vs, ve)
			if !ok {
				return false
			}
			ds.HitsAddend = wrapperspb.UInt64(v)
		case num == 4 && typ == protowire.VarintType:
			v, ok := d.varint(vs, ve)
			if !ok || v > 1 {
				return false
			}
			ds.IsNegativeHits = v == 1
		default:
			return false
		}
		i = ve
	}
	return true
}

func (d *wireDecoder) entry(start, end int, e *rlv3.RateLimitDescriptor_Entry) bool {
	for i := start; i < end; {
		num, typ, vs, ve, ok := d.field(i, end)
		if !ok || typ != protowire.BytesType {
			return false
		}
		switch num {
		case 1:
			e.Key, ok = d.str(vs, ve)
		case 2:
			e.Value, ok = d.str(vs, ve)
		default:
			return false
		}
		if !ok {
			return false
		}
		i = ve
	}
	return true
}

// uint64Value reads a google.protobuf.UInt64Value of one value field at
// most.
func (d *wireDecoder) uint64Value(start, end int) (uint64, bool) {
	if start == end {
		return 0, true
	}
	num, typ, vs, ve, ok := d.field(start, end)
	if !ok || num != 1 || typ != protowire.VarintType || ve != end {
		return 0, false
	}
	return d.varint(vs, ve)
}

// block returns pointers to n zero values of T allocated together, one
// allocation for the values instead of one each.
func block[T any](n int) []*T {
	all := make([]T, n)
	out := make([]*T, n)
	for i := range all {
		out[i] = &all[i]
	}
	return out
}
