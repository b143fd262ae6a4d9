package envoyrl

import (
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// appendResponseJSON appends r in protobuf JSON, as protojson.Marshal
// writes it (field names in lowerCamelCase, enums by name, zero values left
// out, durations as "Ns"), for the responses the Service builds: it is the
// JSON endpoint's largest cost with protojson. It reports false, having
// appended nothing, for a response holding anything else (headers,
// metadata, a body, fractional durations, names that need escaping,
// unknown enum values); protojson writes those.
func appendResponseJSON(b []byte, r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.ResponseHeadersToAdd) > 0 || len(r.RequestHeadersToAdd) > 0 || len(r.RawBody) > 0 ||
		r.DynamicMetadata != nil || r.Quota != nil {
		return b, false
	}
	start := len(b)
	b = append(b, '{')
	sep := false
	if r.OverallCode != 0 {
		var ok bool
		if b, ok = appendEnum(append(b, `"overallCode":`...), r.OverallCode); !ok {
			return b[:start], false
		}
		sep = true
	}
	if len(r.Statuses) > 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"statuses":[`...)
		for i, st := range r.Statuses {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendStatusJSON(b, st); !ok {
				return b[:start], false
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendStatusJSON appends one descriptor status; see appendResponseJSON.
func appendStatusJSON(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) ([]byte, bool) {
	if st == nil || st.Quota != nil {
		return b, false
	}
	b = append(b, '{')
	sep := false
	ok := true
	if st.Code != 0 {
		b = appendField(b, &sep, "code")
		b, ok = appendEnum(b, st.Code)
	}
	if l := st.CurrentLimit; ok && l != nil {
		if l.UnitMultiplier != nil || !plainString(l.Name) {
			return b, false
		}
		b = appendField(b, &sep, "currentLimit")
		b = append(b, '{')
		inner := false
		if l.Name != "" {
			b = append(append(append(b, `"name":"`...), l.Name...), '"')
			inner = true
		}
		if l.RequestsPerUnit != 0 {
			if inner {
				b = append(b, ',')
			}
			b = strconv.AppendUint(append(b, `"requestsPerUnit":`...), uint64(l.RequestsPerUnit), 10)
			inner = true
		}
		if l.Unit != 0 {
			if inner {
				b = append(b, ',')
			}
			b, ok = appendEnum(append(b, `"unit":`...), l.Unit)
		}
		b = append(b, '}')
	}
	if ok && st.LimitRemaining != 0 {
		b = appendField(b, &sep, "limitRemaining")
		b = strconv.AppendUint(b, uint64(st.LimitRemaining), 10)
	}
	if d := st.DurationUntilReset; ok && d != nil {
		if d.Nanos != 0 {
			return b, false
		}
		b = appendField(b, &sep, "durationUntilReset")
		b = append(strconv.AppendInt(append(b, '"'), d.Seconds, 10), `s"`...)
	}
	return append(b, '}'), ok
}

// appendField appends a field's name, after a comma unless it is the first.
func appendField(b []byte, sep *bool, name string) []byte {
	if *sep {
		b = append(b, ',')
	}
	*sep = true
	return append(append(append(b, '"'), name...), `":`...)
}

// appendEnum appends e's name in quotes; false for a value without a name.
func appendEnum(b []byte, e protoreflect.Enum) ([]byte, bool) {
	v := e.Descriptor().Values().ByNumber(e.Number())
	if v == nil {
		return b, false
	}
	return append(append(append(b, '"'), v.Name()...), '"'), true
}

// plainString reports whether s needs no escaping in JSON.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return false
		}
	}
	return true
}
