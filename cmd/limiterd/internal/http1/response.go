package http1

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of the fast path: it keeps the
// answer until the handler returns, then writes it with its length.
type response struct {
	c       *conn
	header  http.Header
	status  int
	wrote   bool // the status is set
	body    []byte
	scratch []byte
}

func (w *response) reset() {
	clear(w.header)
	w.status, w.wrote = 0, false
	if cap(w.body) > 64<<10 {
		w.body = nil // do not keep a large answer's memory
	}
	w.body = w.body[:0]
}

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter. An informational status
// (1xx other than 101) is written at once, with the header so far, as
// net/http does; the first other status is the answer's, later ones are
// ignored.
func (w *response) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if code < 100 || code > 999 {
		// net/http panics too; the connection's recover logs it.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeHead(w.c.bw, code)
		_, _ = w.c.bw.WriteString("\r\n")
		return
	}
	w.status, w.wrote = code, true
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// WriteString implements io.StringWriter.
func (w *response) WriteString(s string) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.body = append(w.body, s...)
	return len(s), nil
}

// wantsClose reports whether the handler set Connection: close.
func (w *response) wantsClose() bool {
	for _, v := range w.header["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "close") {
				return true
			}
		}
	}
	return false
}

// bodyAllowed reports whether an answer with status code has a body.
func bodyAllowed(code int) bool {
	return (code < 100 || code > 199) && code != http.StatusNoContent && code != http.StatusNotModified
}

// finish writes the answer to bw: the status line, the handler's header,
// the Content-Type net/http would sniff when the handler set none,
// Content-Length, Date, Connection: close when the connection closes
// after it, and the body.
func (w *response) finish(bw *bufio.Writer, closeAfter bool) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.writeHead(bw, w.status)
	allowed := bodyAllowed(w.status)
	if _, ok := w.header["Content-Type"]; !ok && allowed && len(w.body) > 0 {
		writeField(bw, "Content-Type", http.DetectContentType(w.body))
	}
	if allowed {
		w.scratch = strconv.AppendInt(append(w.scratch[:0], "Content-Length: "...), int64(len(w.body)), 10)
		_, _ = bw.Write(append(w.scratch, '\r', '\n'))
	}
	if _, ok := w.header["Date"]; !ok {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(httpDate())
		_, _ = bw.WriteString("\r\n")
	}
	if closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if allowed {
		_, _ = bw.Write(w.body)
	}
}

// writeHead writes the status line and the handler's header fields,
// without the framing ones this writer sets itself.
func (w *response) writeHead(bw *bufio.Writer, code int) {
	w.scratch = strconv.AppendInt(append(w.scratch[:0], "HTTP/1.1 "...), int64(code), 10)
	_, _ = bw.Write(w.scratch)
	if text := http.StatusText(code); text != "" {
		_ = bw.WriteByte(' ')
		_, _ = bw.WriteString(text)
		_, _ = bw.WriteString("\r\n")
	} else {
		_, _ = bw.WriteString(" status code " + strconv.Itoa(code) + "\r\n")
	}
	for name, values := range w.header {
		switch name {
		case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
			continue
		}
		if !validName(name) {
			continue // as net/http: not sent
		}
		for _, v := range values {
			writeField(bw, name, v)
		}
	}
}

// writeField writes one header line, its value's line breaks turned into
// spaces and its surrounding spaces cut, as net/http writes it.
func writeField(bw *bufio.Writer, name, value string) {
	if strings.ContainsAny(value, "\r\n") {
		value = strings.NewReplacer("\r", " ", "\n", " ").Replace(value)
	}
	value = strings.Trim(value, " \t")
	_, _ = bw.WriteString(name)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(value)
	_, _ = bw.WriteString("\r\n")
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isToken(name[i]) {
			return false
		}
	}
	return true
}

// dateCache is the Date header of the current second.
type dateCache struct {
	sec int64
	b   []byte
}

var date atomic.Pointer[dateCache]

// httpDate is the current time in the Date header's format, formatted
// once a second.
func httpDate() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := date.Load(); d != nil && d.sec == sec {
		return d.b
	}
	d := &dateCache{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	date.Store(d)
	return d.b
}
