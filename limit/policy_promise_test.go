package limit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/costwise/batcher/limit"
)

// TestParsePolicyNamesEveryField: "every parameter is validated and a bad
// one is a *limit.PolicyError naming the field". Each line below has one
// bad parameter; the error names it as the text wrote it.
func TestParsePolicyNamesEveryField(t *testing.T) {
	for _, c := range []struct{ text, field string }{
		{"", "algorithm"},
		{"leaky_bucket capacity=5 rate=1/s", "algorithm"},
		{"gcra rate=1/s burst=5 name=a{b}", "name"},
		{"gcra rate=1/s burst=5 name=" + strings.Repeat("n", 129), "name"},
		{"gcra rate=fast burst=5", "rate"},
		{"gcra rate=1/0s burst=5", "rate"},
		{"gcra rate=-1/s burst=5", "rate"},
		{"gcra burst=5", "rate"},
		{"token_bucket capacity=1000000000 rate=1/8760h", "rate"},
		{"fixed_window max=5 rate=1/s window=1m", "rate"},
		{"token_bucket capacity=5 rate=1/s window=1m", "window"},
		{"fixed_window max=5 window=soon", "window"},
		{"fixed_window max=5 window=0s", "window"},
		{"sliding_window max=5 window=-1m", "window"},
		{"rolling_window max=5 window=1500ns", "window"},
		{"fixed_window max=5", "window"},
		{"gcra rate=1/s burst=x", "burst"},
		{"gcra rate=1/s burst", "burst"},
		{"gcra rate=1/s burst=5 burst=6", "burst"},
		{"gcra rate=1/s burst=5 capacity=5", "capacity"},
		{"rolling_window max=1048577 window=1s", "max"},
		{"sliding_window max=1073741825 window=1s", "max"},
		{"fixed_window max=1000000 window=8760h", "max"},
		{"gcra rate=1/s burst=5 jitter=1ms", "jitter"},
	} {
		p, err := limit.ParsePolicy(c.text)
		var pe *limit.PolicyError
		if !errors.As(err, &pe) || !errors.Is(err, limit.ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want a *PolicyError", c.text, p, err)
			continue
		}
		if pe.Field != c.field {
			t.Errorf("ParsePolicy(%q): field %q (%v), want %q", c.text, pe.Field, err, c.field)
		}
	}
}
