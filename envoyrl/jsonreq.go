package envoyrl

import (
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// decodeRequestJSON reads a RateLimitRequest in protobuf JSON into req,
// which must be empty. It accepts and refuses exactly what
// protojson.Unmarshal does, with the same result: the common forms are
// read by a decoder of their own (protojson's decoding was the JSON
// endpoint's largest cost), and anything else is left to protojson, which
// also words every error.
func decodeRequestJSON(body []byte, req *rlsv3.RateLimitRequest) error {
	if fastDecodeRequest(body, req) {
		return nil
	}
	req.Reset()
	return protojson.Unmarshal(body, req)
}

// fastDecodeRequest reads body into req when it has only the forms this
// decoder knows, and reports whether it did; when it reports false, req
// holds a partial request and the caller starts again with protojson.
//
// The forms known are those a client writes for the fields Envoy sends:
// "domain", "descriptors" with "entries" of "key" and "value" strings,
// "hitsAddend" on the request (uint32) and on a descriptor (UInt64Value),
// "isNegativeHits" (true or false), each under its JSON or its proto name,
// once, with JSON whitespace anywhere between tokens. Strings must be valid
// UTF-8 without escapes or control characters, numbers plain decimal
// integers in range. Everything else (a limit override, null, escapes,
// quoted or fractional numbers, unknown or repeated fields, bad JSON) is
// left to protojson.
func fastDecodeRequest(body []byte, req *rlsv3.RateLimitRequest) bool {
	d := jsonDecoder{b: body}
	ok := d.object(func(name []byte) bool {
		switch string(name) {
		case "domain":
			return d.once(0) && d.str(&req.Domain)
		case "descriptors":
			return d.once(1) && d.array(func() bool {
				ds := &rlv3.RateLimitDescriptor{}
				req.Descriptors = append(req.Descriptors, ds)
				return d.descriptor(ds)
			})
		case "hitsAddend", "hits_addend":
			n, ok := d.uint(1<<32 - 1)
			req.HitsAddend = uint32(n)
			return ok && d.once(2)
		}
		return false
	})
	d.space()
	return ok && d.i == len(d.b)
}

// jsonDecoder is fastDecodeRequest's reader: b from i on is what is left.
// seen holds, per object being read, the fields read so far.
type jsonDecoder struct {
	b    []byte
	i    int
	seen uint8
}

// once marks field bit f of the current object as read, reporting false
// when it was already (protojson refuses a field given twice).
func (d *jsonDecoder) once(f uint) bool {
	if d.seen&(1<<f) != 0 {
		return false
	}
	d.seen |= 1 << f
	return true
}

func (d *jsonDecoder) descriptor(ds *rlv3.RateLimitDescriptor) bool {
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "entries":
			return d.once(0) && d.array(func() bool {
				e := &rlv3.RateLimitDescriptor_Entry{}
				ds.Entries = append(ds.Entries, e)
				return d.entry(e)
			})
		case "hitsAddend", "hits_addend":
			n, ok := d.uint(1<<64 - 1)
			ds.HitsAddend = wrapperspb.UInt64(n)
			return ok && d.once(1)
		case "isNegativeHits", "is_negative_hits":
			return d.once(2) && d.boolean(&ds.IsNegativeHits)
		}
		return false
	})
}

func (d *jsonDecoder) entry(e *rlv3.RateLimitDescriptor_Entry) bool {
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			return d.once(0) && d.str(&e.Key)
		case "value":
			return d.once(1) && d.str(&e.Value)
		}
		return false
	})
}

// space skips JSON whitespace.
func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips whitespace and reports whether the next byte is c, taking it
// if so.
func (d *jsonDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling field after each name and its colon to
// read the value; field reports false for a name or value it does not know.
func (d *jsonDecoder) object(field func(name []byte) bool) bool {
	outer := d.seen
	d.seen = 0
	defer func() { d.seen = outer }()
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		d.space()
		start, end, ok := d.rawString()
		if !ok || !d.next(':') {
			return false
		}
		d.space()
		if !field(d.b[start:end]) {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

// array reads an array, calling elem for each element.
func (d *jsonDecoder) array(elem func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next(']')
	}
}

// rawString reads a string without escapes or control characters, in
// valid UTF-8, returning its bounds inside the quotes.
func (d *jsonDecoder) rawString() (start, end int, ok bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return 0, 0, false
	}
	start = d.i + 1
	ascii := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(d.b[start:j]) {
				return 0, 0, false
			}
			d.i = j + 1
			return start, j, true
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false
}

// str reads a string value into s.
func (d *jsonDecoder) str(s *string) bool {
	start, end, ok := d.rawString()
	if ok {
		*s = string(d.b[start:end])
	}
	return ok
}

// uint reads a plain decimal integer no larger than limit: no sign,
// fraction, exponent or leading zero.
func (d *jsonDecoder) uint(limit uint64) (uint64, bool) {
	start := d.i
	var n uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		digit := uint64(d.b[d.i] - '0')
		if n > (limit-digit)/10 {
			return 0, false
		}
		n = n*10 + digit
		d.i++
	}
	switch {
	case d.i == start, d.i-start > 1 && d.b[start] == '0':
		return 0, false
	case d.i < len(d.b):
		// A number must end at a delimiter: "1.5", "1e3" and "12x" are not
		// this decoder's.
		switch d.b[d.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return 0, false
		}
	}
	return n, true
}

// boolean reads true or false into v.
func (d *jsonDecoder) boolean(v *bool) bool {
	rest := d.b[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*v, d.i = true, d.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*v, d.i = false, d.i+5
	default:
		return false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}
