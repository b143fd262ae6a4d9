package limitcore

import (
	"fmt"
	"strings"
	"testing"
)

func TestConfigErrorNamesItsPackage(t *testing.T) {
	for _, c := range []struct {
		err  *ConfigError
		want string
	}{
		{&ConfigError{Field: "Policies", Reason: "none", Package: "grpclimit"}, "grpclimit: invalid Policies: none"},
		{&ConfigError{Field: "Store", Reason: "a store is required"}, "limitcore: invalid Store: a store is required"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestResultNames(t *testing.T) {
	want := []string{"allowed", "denied", "shadow_denied", "failed_open", "failed_closed"}
	if int(NumResults) != len(want) {
		t.Fatalf("%d results, want %d", NumResults, len(want))
	}
	for r := range NumResults {
		if r.String() != want[r] {
			t.Errorf("Result(%d) = %q, want %q", r, r, want[r])
		}
	}
	if got := NumResults.String(); got != "Result(5)" {
		t.Errorf("out of range: %q", got)
	}
}

type stringer struct{}

func (stringer) String() string { return "s" }

func TestContextKeyAndTruncateKey(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, ""}, {"", ""}, {"a", "a"}, {stringer{}, "s"}, {-3, "-3"}, {int64(1) << 40, "1099511627776"},
		{^uint64(0), "18446744073709551615"}, {int32(5), ""}, {true, ""}, {fmt.Errorf("e"), ""},
	} {
		if got := ContextKey(c.v); got != c.want {
			t.Errorf("ContextKey(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
	long := strings.Repeat("k", MaxKeyPart+1)
	if got := TruncateKey(long); len(got) != MaxKeyPart {
		t.Errorf("TruncateKey kept %d bytes, want %d", len(got), MaxKeyPart)
	}
	if got := TruncateKey("short"); got != "short" {
		t.Errorf("TruncateKey(short) = %q", got)
	}
}
