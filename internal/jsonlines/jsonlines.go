// Package jsonlines parses the JSON-lines output of structured loggers, for
// the log adapters' tests.
package jsonlines

import (
	"encoding/json"
	"strings"
	"testing"
)

// Parse returns one map per non-empty line of out, failing t on a line that
// is not a JSON object.
func Parse(t testing.TB, out string) []map[string]interface{} {
	t.Helper()
	var recs []map[string]interface{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]interface{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}
