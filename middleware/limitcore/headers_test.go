package limitcore

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/middleware/internal/sftest"
)

func TestSecondsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {time.Nanosecond, 1}, {999 * time.Millisecond, 1},
		{time.Second, 1}, {time.Second + 1, 2}, {59*time.Second + 1, 60}, {time.Hour, 3600},
	} {
		if got := Seconds(tc.d); got != tc.want {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestDraftFieldsParse(t *testing.T) {
	h := http.Header{}
	WriteHeaders(h, HeaderDraft, time.Unix(0, 0), Status{
		Policy: `per "ip"\x`, Limit: 100, Remaining: 42, Window: time.Minute,
		Reset: 16*time.Second + time.Millisecond, Allowed: true,
	})
	pol, err := sftest.ParseList(h.Get("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", h.Get("RateLimit-Policy"), err)
	}
	if len(pol) != 1 || pol[0].Value != `per "ip"\x` || pol[0].Param("q") != int64(100) || pol[0].Param("w") != int64(60) {
		t.Errorf("RateLimit-Policy parsed to %+v", pol)
	}
	rl, err := sftest.ParseList(h.Get("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", h.Get("RateLimit"), err)
	}
	if len(rl) != 1 || rl[0].Value != `per "ip"\x` || rl[0].Param("r") != int64(42) || rl[0].Param("t") != int64(17) {
		t.Errorf("RateLimit parsed to %+v", rl)
	}
}

func TestDraftFieldExamples(t *testing.T) {
	if got, want := PolicyField("per-ip", 100, time.Minute), `"per-ip";q=100;w=60`; got != want {
		t.Errorf("PolicyField = %s, want %s", got, want)
	}
	if got, want := RateLimitField("per-ip", 42, 17*time.Second), `"per-ip";r=42;t=17`; got != want {
		t.Errorf("RateLimitField = %s, want %s", got, want)
	}
	if got, want := PolicyField("global", 5, 0), `"global";q=5`; got != want {
		t.Errorf("PolicyField without window = %s, want %s", got, want)
	}
	// Non-ASCII and out-of-range values still give a valid field.
	v := RateLimitField("é", -3, 1<<62)
	if PolicyField("p", 1<<62, 0) != `"p";q=999999999999999` {
		t.Errorf("quota not clamped to the Integer range: %s", PolicyField("p", 1<<62, 0))
	}
	items, err := sftest.ParseList(v)
	if err != nil {
		t.Fatalf("%q: %v", v, err)
	}
	if items[0].Param("r") != int64(0) || items[0].Param("t") != Seconds(1<<62) {
		t.Errorf("clamped field parsed to %+v", items)
	}
}

func TestClosestPolicyDescribed(t *testing.T) {
	statuses := []Status{
		{Policy: "global", Limit: 1000, Remaining: 900, Reset: time.Second, Allowed: true},
		{Policy: "per-ip", Limit: 10, Remaining: 2, Reset: 5 * time.Second, Allowed: true},
		{Policy: "per-key", Limit: 100, Remaining: 2, Reset: 9 * time.Second, Allowed: true},
	}
	if i := Closest(statuses); i != 2 {
		t.Errorf("Closest = %d, want 2 (least remaining, longest reset)", i)
	}
	statuses[0].Allowed, statuses[0].RetryAfter = false, 3*time.Second
	if i := Closest(statuses); i != 0 {
		t.Errorf("Closest = %d, want the denied policy 0", i)
	}
	h := http.Header{}
	WriteHeaders(h, HeaderDraft, time.Now(), statuses...)
	rl, err := sftest.ParseList(h.Get("RateLimit"))
	if err != nil || len(rl) != 1 || rl[0].Value != "global" || rl[0].Param("t") != int64(3) {
		t.Errorf("RateLimit = %q (%v), want the denied policy with t = its retry delay", h.Get("RateLimit"), err)
	}
	if Closest(nil) != -1 {
		t.Error("Closest(nil) != -1")
	}
}

func TestTrioAndXFields(t *testing.T) {
	now := time.Unix(1_700_000_000, 250_000_000)
	s := Status{Policy: "p", Limit: 10, Remaining: 3, Reset: 4500 * time.Millisecond, Allowed: true}
	h := http.Header{}
	WriteHeaders(h, HeaderTrio, now, s)
	for field, want := range map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "3", "RateLimit-Reset": "5"} {
		if got := h.Get(field); got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if h.Get("RateLimit") != "" || h.Get("X-RateLimit-Limit") != "" {
		t.Errorf("trio format wrote other fields: %v", h)
	}
	h = http.Header{}
	WriteHeaders(h, HeaderX, now, s)
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if h.Get("X-RateLimit-Limit") != "10" || h.Get("X-RateLimit-Remaining") != "3" || reset != 1_700_000_005 {
		t.Errorf("X fields = %v, want reset 1700000005 (4.75 s after now, rounded up)", h)
	}
	h = http.Header{}
	WriteHeaders(h, HeaderNone, now, s)
	if len(h) != 0 {
		t.Errorf("HeaderNone wrote %v", h)
	}
}

func TestRetryAfter(t *testing.T) {
	h := http.Header{}
	RetryAfter(h, 1500*time.Millisecond)
	if h.Get("Retry-After") != "2" {
		t.Errorf("Retry-After = %q, want 2", h.Get("Retry-After"))
	}
	h = http.Header{}
	RetryAfter(h, 0)
	if _, ok := h["Retry-After"]; ok {
		t.Error("Retry-After written for a request that can never be admitted")
	}
}

func TestParseHeaderFormat(t *testing.T) {
	for _, f := range []HeaderFormat{HeaderDraft, HeaderTrio, HeaderX, HeaderNone} {
		got, err := ParseHeaderFormat(f.String())
		if err != nil || got != f {
			t.Errorf("ParseHeaderFormat(%q) = %v, %v", f.String(), got, err)
		}
	}
	if f, err := ParseHeaderFormat(""); err != nil || f != HeaderDraft {
		t.Errorf(`ParseHeaderFormat("") = %v, %v`, f, err)
	}
	if _, err := ParseHeaderFormat("ietf-2019"); err == nil {
		t.Error("unknown format accepted")
	} else if _, ok := err.(*UnknownFormatError); !ok {
		t.Errorf("error %T, want *UnknownFormatError", err)
	}
}

// Whatever the policy name and numbers, the draft fields parse back as
// structured-field lists carrying the same name and non-negative integers.
func FuzzDraftFields(f *testing.F) {
	f.Add("per-ip", int64(100), int64(42), int64(17e9))
	f.Add(`a"b\c`, int64(-1), int64(1<<62), int64(-5))
	f.Add("é\x00\x7f", int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, name string, q, r, d int64) {
		for _, v := range []string{PolicyField(name, q, time.Duration(d)), RateLimitField(name, r, time.Duration(d))} {
			items, err := sftest.ParseList(v)
			if err != nil {
				t.Fatalf("%q: %v", v, err)
			}
			if ValidPolicyName(name) && items[0].Value != name {
				t.Fatalf("%q: name %v, want %q", v, items[0].Value, name)
			}
			for _, p := range items[0].Params {
				if n, ok := p.Value.(int64); !ok || n < 0 {
					t.Fatalf("%q: parameter %s = %v", v, p.Key, p.Value)
				}
			}
		}
	})
}
