package http1

import "net/http"

// HeaderLimit returns h behind a check of the request's head: the request
// line and header fields, counted as written on the wire ("Name: value"
// and CRLF each, and the blank line), against max bytes. Past it the
// answer is 431 and the connection is closed. net/http's own bound
// (Server.MaxHeaderBytes) lets up to 4 KiB more in before it answers 431,
// so a server that promises a limit puts its handler behind this one.
// Whitespace around field values, which net/http trims, is not counted.
func HeaderLimit(h http.Handler, max int) http.Handler {
	if max <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headSize(r, max) > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headSize is the size of r's head as a client writes it, counted up to
// a little past max.
func headSize(r *http.Request, max int) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + 2 + len(v) + 2
		}
		if n > max {
			return n
		}
	}
	return n
}
