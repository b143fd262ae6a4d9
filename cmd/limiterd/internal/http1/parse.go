package http1

import (
	"bytes"
	"net/http"
)

// parseResult is what parse makes of the start of a connection's buffer.
type parseResult int

const (
	// needMore: what is buffered is the beginning of a request this
	// server may serve; the rest has not arrived yet.
	needMore parseResult = iota
	// ready: a whole request, header and body, is buffered, and this
	// server serves it.
	ready
	// handOff: the request is one this server leaves to net/http: another
	// route, method or version, a form it does not read (chunked bodies,
	// Expect, Upgrade, folded or malformed header lines, bare LF line
	// ends), or one too large. net/http answers it, or refuses it in its
	// own words.
	handOff
)

// request is a parsed request. Its byte slices point into the buffer the
// request was parsed from.
type request struct {
	route   *Route
	skip    int // leading CR/LF bytes skipped after a POST
	hdrLen  int // bytes of the request line and header, skipped bytes included
	bodyLen int
	host    []byte
	close   bool // Connection: close
	// fields holds the header lines other than Host, as name, value pairs.
	fields [][2][]byte
}

// limits bound what parse serves itself: a request with more header or
// body bytes is handed off.
type limits struct {
	maxHeader, maxBody int
}

// parse reads the request at the start of b for routes. afterPost reports
// whether the connection's previous request was a POST, after which
// net/http skips up to 4 stray CR or LF bytes (left by old clients that
// end a body with CRLF), and so does parse. On ready, req describes the
// request, whose hdrLen+bodyLen bytes are buffered; req.fields is reused.
func parse(b []byte, routes []Route, lim limits, afterPost bool, req *request) parseResult {
	fields := req.fields[:0]
	*req = request{fields: fields}
	skip := 0
	if afterPost {
		for skip < len(b) && skip < 4 && (b[skip] == '\r' || b[skip] == '\n') {
			skip++
		}
		if skip == len(b) && skip < 4 {
			return needMore
		}
	}
	req.skip = skip
	i := skip
	line, next, res := nextLine(b, i, lim.maxHeader+skip)
	if res != ready {
		return res
	}
	if req.route = matchRequestLine(line, routes); req.route == nil {
		return handOff
	}
	hosts, lengths := 0, 0
	for {
		i = next
		if line, next, res = nextLine(b, i, lim.maxHeader+skip); res != ready {
			req.fields = fields
			return res
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := splitField(line)
		if !ok {
			return handOff
		}
		switch {
		case equalFold(name, "host"):
			if hosts++; hosts > 1 || !plainHost(value) {
				return handOff
			}
			req.host = value
			continue
		case equalFold(name, "content-length"):
			n, ok := parseLength(value, lim.maxBody)
			if lengths++; lengths > 1 || !ok {
				return handOff
			}
			req.bodyLen = n
		case equalFold(name, "connection"):
			c, ok := connectionClose(value)
			if !ok {
				return handOff
			}
			req.close = req.close || c
		case equalFold(name, "transfer-encoding"), equalFold(name, "expect"),
			equalFold(name, "upgrade"), equalFold(name, "pragma"):
			// Chunked bodies, 100-continue, protocol switches and the
			// Pragma to Cache-Control rewrite are net/http's.
			return handOff
		}
		fields = append(fields, [2][]byte{name, value})
	}
	req.fields = fields
	if hosts == 0 {
		return handOff // net/http: "missing required Host header"
	}
	req.hdrLen = next
	if len(b)-next < req.bodyLen {
		return needMore
	}
	return ready
}

// nextLine finds the CRLF-ended line at b[i:]. A line ended by a bare LF,
// or a header reaching max bytes without its end, is handed off.
func nextLine(b []byte, i, max int) (line []byte, next int, res parseResult) {
	end := i + bytes.IndexByte(b[i:], '\n')
	if end < i {
		if len(b) >= max {
			return nil, 0, handOff
		}
		return nil, 0, needMore
	}
	if end+1 > max || end == i || b[end-1] != '\r' {
		return nil, 0, handOff
	}
	return b[i : end-1], end + 1, ready
}

// matchRequestLine returns the route whose method and path are exactly
// those of line, with version HTTP/1.1, or nil. Queries, other targets,
// other versions and extra spaces are left to net/http.
func matchRequestLine(line []byte, routes []Route) *Route {
	const version = " HTTP/1.1"
	if !bytes.HasSuffix(line, []byte(version)) {
		return nil
	}
	line = line[:len(line)-len(version)]
	for i := range routes {
		r := &routes[i]
		if len(line) == len(r.Method)+1+len(r.Path) && string(line[:len(r.Method)]) == r.Method &&
			line[len(r.Method)] == ' ' && string(line[len(r.Method)+1:]) == r.Path {
			return r
		}
	}
	return nil
}

// splitField splits a header line into its name, a token, and its value
// without the spaces and tabs around it. It reports false for a line that
// is not a valid field as net/http reads it (a folded continuation, a
// space before the colon, a name with other bytes, control bytes in the
// value).
func splitField(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, false
	}
	name = line[:colon]
	for _, c := range name {
		if !isToken(c) {
			return nil, nil, false
		}
	}
	value = line[colon+1:]
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, trimSpace(value), true
}

func trimSpace(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// isToken reports whether c may appear in a header field name.
func isToken(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// plainHost reports whether v is a non-empty host, or host and port, of
// letters, digits and ".-_:[]" only: a subset of what net/http accepts.
// Anything else is handed off for net/http to judge.
func plainHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '-', c == '_', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length of decimal digits, at most max.
func parseLength(v []byte, max int) (int, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= max
}

// connectionClose reads a Connection header of the tokens close and
// keep-alive: whether it holds close, and false for any other token
// (upgrade, hop-by-hop header names), left to net/http.
func connectionClose(v []byte) (close, ok bool) {
	for len(v) > 0 {
		tok := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		switch tok = trimSpace(tok); {
		case equalFold(tok, "close"):
			close = true
		case equalFold(tok, "keep-alive"), len(tok) == 0:
		default:
			return false, false
		}
	}
	return close, true
}

// equalFold reports whether b is lower, ASCII letters compared without
// case.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// commonNames are header names whose canonical form is kept as a
// constant, so that reading them allocates nothing.
var commonNames = []string{
	"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "User-Agent",
	"X-Client-Key", "X-Required-Tokens", "Connection", "Traceparent", "X-Request-Id",
}

// canonicalName is http.CanonicalHeaderKey(string(name)), without an
// allocation for the common names.
func canonicalName(name []byte) string {
	for _, c := range commonNames {
		if len(c) == len(name) && bytes.EqualFold(name, []byte(c)) {
			return c
		}
	}
	return http.CanonicalHeaderKey(string(name))
}
