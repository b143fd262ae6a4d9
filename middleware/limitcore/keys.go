package limitcore

import (
	"fmt"
	"strconv"
)

// MaxKeyPart is the longest key part taken from what a client sends (a
// header, a metadata entry, a path): longer values are cut there, so a
// client cannot make the store hold arbitrarily long keys.
const MaxKeyPart = 512

// TruncateKey returns s cut to MaxKeyPart bytes.
func TruncateKey(s string) string {
	if len(s) > MaxKeyPart {
		return s[:MaxKeyPart]
	}
	return s
}

// ContextKey returns the key a value found in a request's context stands
// for, as an authentication middleware leaves it (a user or tenant id):
// a string as it is, a fmt.Stringer's String, an int, int64 or uint64 in
// decimal; anything else, nil included, gives "", which exempts the request
// from the policy.
func ContextKey(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	}
	return ""
}

// KeySeparator joins the parts of a combined key ("tenant|route").
const KeySeparator = '|'
