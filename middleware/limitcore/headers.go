package limitcore

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderFormat chooses which rate-limit header fields a response carries.
// The zero value is HeaderDraft.
type HeaderFormat int

const (
	// HeaderDraft writes the two structured fields of the IETF draft
	// draft-ietf-httpapi-ratelimit-headers (revision 12 of November 2026,
	// whose field grammar is that of revision 11): RateLimit-Policy, a list
	// of quota policies such as `"per-ip";q=100;w=60`, and RateLimit, a list
	// of service limits such as `"per-ip";r=42;t=17`.
	HeaderDraft HeaderFormat = iota
	// HeaderTrio writes the three fields of the draft's earlier revisions
	// (up to revision 06): RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the last in seconds from now.
	HeaderTrio
	// HeaderX writes the common X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, the last as a Unix time in seconds, as GitHub's API
	// and most libraries write it.
	HeaderX
	// HeaderNone writes no rate-limit fields; Retry-After is still written
	// on denied requests.
	HeaderNone
)

// Field names, in the canonical form net/http stores them under, so that
// writing them skips the canonicalisation.
const (
	fieldPolicy       = "Ratelimit-Policy"
	fieldRateLimit    = "Ratelimit"
	fieldLimit        = "Ratelimit-Limit"
	fieldRemaining    = "Ratelimit-Remaining"
	fieldReset        = "Ratelimit-Reset"
	fieldXLimit       = "X-Ratelimit-Limit"
	fieldXRemaining   = "X-Ratelimit-Remaining"
	fieldXReset       = "X-Ratelimit-Reset"
	fieldRetryAfter   = "Retry-After"
	maxSFInteger      = 999_999_999_999_999 // RFC 9651, section 3.3.1
	headerFormatNames = "draft, trio, x, none"
)

var formatNames = [...]string{"draft", "trio", "x", "none"}

// String returns the name ParseHeaderFormat accepts for f.
func (f HeaderFormat) String() string {
	if f >= 0 && int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "HeaderFormat(" + strconv.Itoa(int(f)) + ")"
}

// ParseHeaderFormat returns the format named s: "draft", "trio", "x" or
// "none" (case does not matter; "" means "draft"). Any other name is an
// *UnknownFormatError.
func ParseHeaderFormat(s string) (HeaderFormat, error) {
	if s == "" {
		return HeaderDraft, nil
	}
	for i, name := range formatNames {
		if strings.EqualFold(s, name) {
			return HeaderFormat(i), nil
		}
	}
	return 0, &UnknownFormatError{Name: s}
}

// UnknownFormatError reports a header format name ParseHeaderFormat does not
// know.
type UnknownFormatError struct {
	Name string
}

// Error names the format and the ones accepted.
func (e *UnknownFormatError) Error() string {
	return fmt.Sprintf("limitcore: unknown header format %q (want one of %s)", e.Name, headerFormatNames)
}

// Status is what the headers say about one policy for one request: the
// outcome of one limit's decision, in the terms of the IETF draft.
type Status struct {
	// Policy names the policy; it is the item of the draft's fields and
	// should be printable ASCII (other bytes are written as '?').
	Policy string
	// Limit is the quota: the most the key can spend at once, from rest.
	Limit int64
	// Remaining is what the key can still spend now.
	Remaining int64
	// Window is the policy's time window, written as the draft's w
	// parameter when positive.
	Window time.Duration
	// Reset is the time until the key is back to rest (its full quota).
	Reset time.Duration
	// Allowed reports whether this policy admitted the request.
	Allowed bool
	// RetryAfter is, for a denied request, the wait until the same request
	// would be admitted; zero when it never would (a cost above the limit).
	RetryAfter time.Duration
}

// resetAfter is the delay the reset fields carry: the time to rest for an
// admitted request, and the retry delay for a denied one, so that the
// RateLimit field and Retry-After name the same moment (the draft says
// Retry-After must not be earlier than the end of the effective window).
func (s *Status) resetAfter() time.Duration {
	if !s.Allowed && s.RetryAfter > 0 {
		return s.RetryAfter
	}
	return s.Reset
}

// Closest returns the index of the status the headers should describe: a
// denied one before any admitted one (among denied, the longest retry
// delay); among admitted ones, the least remaining, then the longest reset.
// It returns -1 for an empty slice.
func Closest(statuses []Status) int {
	best := -1
	for i := range statuses {
		if best < 0 || closer(&statuses[i], &statuses[best]) {
			best = i
		}
	}
	return best
}

// closer reports whether a is closer to its limit than b.
func closer(a, b *Status) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// WriteHeaders sets the rate-limit fields of format f on h, describing the
// status closest to its limit (see Closest); now is used only by HeaderX,
// whose reset is a Unix time. It writes nothing for HeaderNone or an empty
// statuses. It does not write Retry-After: see RetryAfter.
func WriteHeaders(h http.Header, f HeaderFormat, now time.Time, statuses ...Status) {
	i := Closest(statuses)
	if i < 0 || f == HeaderNone {
		return
	}
	WriteStatus(h, f, now, &statuses[i], "")
}

// WriteStatus sets the rate-limit fields of format f on h describing s
// alone; now is used only by HeaderX. policyField is s's RateLimit-Policy
// item, which a middleware computes once per policy with PolicyField; ""
// means computing it here.
func WriteStatus(h http.Header, f HeaderFormat, now time.Time, s *Status, policyField string) {
	switch f {
	case HeaderDraft:
		policy := policyField
		if policy == "" {
			policy = PolicyField(s.Policy, s.Limit, s.Window)
		}
		v := make([]string, 2) // one allocation backs both fields' values
		v[0], v[1] = policy, RateLimitField(s.Policy, s.Remaining, s.resetAfter())
		h[fieldPolicy], h[fieldRateLimit] = v[0:1:1], v[1:2:2]
	case HeaderTrio:
		v := make([]string, 3)
		v[0] = strconv.FormatInt(clampInt(s.Limit), 10)
		v[1] = strconv.FormatInt(clampInt(s.Remaining), 10)
		v[2] = strconv.FormatInt(Seconds(s.resetAfter()), 10)
		h[fieldLimit], h[fieldRemaining], h[fieldReset] = v[0:1:1], v[1:2:2], v[2:3:3]
	case HeaderX:
		reset := now.Add(s.resetAfter())
		v := make([]string, 3)
		v[0] = strconv.FormatInt(clampInt(s.Limit), 10)
		v[1] = strconv.FormatInt(clampInt(s.Remaining), 10)
		v[2] = strconv.FormatInt(reset.Unix()+boolInt(reset.Nanosecond() != 0), 10)
		h[fieldXLimit], h[fieldXRemaining], h[fieldXReset] = v[0:1:1], v[1:2:2], v[2:3:3]
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Seconds returns d in whole seconds rounded up, never negative: the form
// of Retry-After and of the reset fields, which must never promise a time
// earlier than the real one.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfter sets Retry-After on h to d in whole seconds rounded up (at
// least 1, so that a client never retries at once into a denial). It sets
// nothing when d is not positive: a request that can never be admitted
// gets no retry delay.
func RetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	h[fieldRetryAfter] = []string{strconv.FormatInt(Seconds(d), 10)}
}

// PolicyField returns one quota-policy item of the draft's RateLimit-Policy
// field: the policy name as a structured-field string, q the quota and, when
// window is positive, w the window in seconds rounded up.
func PolicyField(policy string, quota int64, window time.Duration) string {
	b := make([]byte, 0, len(policy)+32)
	b = appendSFString(b, policy)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, clampInt(quota), 10)
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, clampInt(Seconds(window)), 10)
	}
	return string(b)
}

// RateLimitField returns one service-limit item of the draft's RateLimit
// field: the policy name as a structured-field string, r the remaining
// quota and t the seconds, rounded up, until it is restored.
func RateLimitField(policy string, remaining int64, reset time.Duration) string {
	var buf [64]byte // on the stack: the only allocation is the string
	b := appendSFString(buf[:0], policy)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, clampInt(remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, clampInt(Seconds(reset)), 10)
	return string(b)
}

// appendSFString appends s as a structured-field string (RFC 9651, section
// 3.3.3): quoted, with '"' and '\' escaped; bytes outside printable ASCII,
// which the grammar does not allow, become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// clampInt keeps v within the structured-field Integer range, and not
// negative, since every count the fields carry is non-negative.
func clampInt(v int64) int64 {
	switch {
	case v < 0:
		return 0
	case v > maxSFInteger:
		return maxSFInteger
	}
	return v
}

// ValidPolicyName reports whether name can be written as a structured-field
// string unchanged: non-empty and printable ASCII.
func ValidPolicyName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return false
		}
	}
	return true
}
