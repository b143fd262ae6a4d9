package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types the middleware's bodies use. QuotaExceededType is the one
// the rate-limit headers draft registers for requests over a quota policy;
// a store failure uses "about:blank" with the status's own title, as RFC
// 9457 says a problem without a more specific type should.
const (
	QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	BlankType         = "about:blank"
)

const (
	fieldContentType = "Content-Type"
	problemMediaType = "application/problem+json"
)

// Problem is an RFC 9457 problem-details object, as the middleware writes it
// in application/problem+json bodies.
type Problem struct {
	// Type is a URI naming the kind of problem.
	Type string `json:"type"`
	// Title is a short, human-readable summary of the kind of problem.
	Title string `json:"title"`
	// Status is the HTTP status code of the response.
	Status int `json:"status"`
	// Detail explains this occurrence of the problem.
	Detail string `json:"detail,omitempty"`
	// Instance is a URI naming this occurrence; the middleware leaves it
	// empty.
	Instance string `json:"instance,omitempty"`
	// ViolatedPolicies names the policies that denied the request: the
	// extension member the rate-limit headers draft defines.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After field, in seconds, for clients
	// that read only bodies; omitted when there is none.
	RetryAfter int64 `json:"retry-after,omitempty"`
}

// QuotaExceeded returns the problem for a request denied by the named
// policies, retryable after retry (zero: never, as the cost exceeds a
// limit).
func QuotaExceeded(retry time.Duration, policies ...string) *Problem {
	p := &Problem{
		Type:             QuotaExceededType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		ViolatedPolicies: policies,
		RetryAfter:       Seconds(retry),
	}
	if retry > 0 {
		p.Detail = "Retry after " + strconv.FormatInt(p.RetryAfter, 10) + " s."
	} else {
		p.Detail = "The request costs more than the quota allows at once; it will not be admitted."
	}
	return p
}

// Unavailable returns the problem for a request refused because the limit
// store failed and the middleware fails closed.
func Unavailable(retry time.Duration) *Problem {
	return &Problem{
		Type:       BlankType,
		Title:      http.StatusText(http.StatusServiceUnavailable),
		Status:     http.StatusServiceUnavailable,
		Detail:     "The rate limit store is unavailable.",
		RetryAfter: Seconds(retry),
	}
}

// WriteProblem writes p as the response: Content-Type
// application/problem+json, the status p.Status and p as JSON. Headers set
// on w before the call (Retry-After, rate-limit fields) are kept.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for this type; keep the status anyway
		body = nil
	}
	h := w.Header()
	h[fieldContentType] = []string{problemMediaType}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
