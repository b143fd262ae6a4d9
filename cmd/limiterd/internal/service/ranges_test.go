package service

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// numericFields walks the schema for every field whose value is a number,
// an integer or a duration, as dotted paths.
func numericFields(prefix string, schema map[string]any, out map[string]string) {
	for k, v := range schema {
		switch v := v.(type) {
		case map[string]any:
			numericFields(prefix+k+".", v, out)
		case string:
			if v == kindInt || v == kindNumber || v == kindDur {
				out[prefix+k] = v
			}
		}
	}
}

// yamlWith is a file setting field (dotted) to value, with what the field
// needs beside it to be checked on its own.
func yamlWith(field, value string) string {
	parts := strings.Split(field, ".")
	var b strings.Builder
	switch field {
	case "algo_settings.capacity":
		return "algo_settings: {capacity: " + value + ", rate: 1}\n"
	case "algo_settings.rate":
		return "algo_settings: {capacity: 1, rate: " + value + "}\n"
	case "algo_settings.window_size":
		return "use_algo: fixed_window\nalgo_settings: {max_requests: 1, window_size: " + value + "}\n"
	case "algo_settings.max_requests":
		return "use_algo: fixed_window\nalgo_settings: {window_size: 1, max_requests: " + value + "}\n"
	}
	if parts[0] == "backends" && parts[1] == "redis" {
		b.WriteString("store: redis\n")
	}
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestEveryNumericFieldRangeChecked sets every numeric field of the file to
// values past its range (the largest int64, a negative value, a duration
// of a century): each is refused with one line naming the field, by
// ParseConfig and by Main (exit 2, no panic), never accepted to overflow
// where it is used. eviction_time: 10000000000 once panicked in
// time.NewTicker.
func TestEveryNumericFieldRangeChecked(t *testing.T) {
	fields := map[string]string{}
	numericFields("", configSchema, fields)
	if len(fields) < 25 {
		t.Fatalf("only %d numeric fields found in the schema", len(fields))
	}
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, field := range names {
		bad := []string{"9223372036854775807", "-1"}
		switch fields[field] {
		case kindNumber:
			bad = []string{"1e300", "-1"}
		case kindDur:
			bad = []string{`"876000h"`, `"-1s"`}
		}
		if field == "backends.in_memory.eviction_time" {
			bad = append(bad, "10000000000")
		}
		for _, v := range bad {
			t.Run(fmt.Sprintf("%s=%s", field, v), func(t *testing.T) {
				text := yamlWith(field, v)
				_, err := ParseConfig("f.yaml", []byte(text))
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Field != field || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%q: %v; want a one-line *ConfigError on %s", text, err, field)
				}
				file := writeFile(t, t.TempDir(), "f.yaml", text)
				code, stderr := runOnce(t, "--config", file, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")
				if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, field) {
					t.Fatalf("exit %d, stderr %q: want 2 and one line naming %s", code, stderr, field)
				}
			})
		}
	}
}

// TestLimitFlagsRangeChecked: the flags of the limits and servers are
// checked as the file's fields are.
func TestLimitFlagsRangeChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--max-key-bytes", "0"}, {"--max-body-bytes", "9223372036854775807"},
		{"--read-timeout", "-1s"}, {"--grpc-max-concurrent-streams", "0"},
	} {
		code, stderr := runOnce(t, append(args, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")...)
		if code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
	cfg, err := ParseFlags([]string{"--max-key-bytes", "64", "--idle-timeout", "3s"}, &syncBuffer{})
	if err != nil || cfg.Limits.MaxKeyBytes != 64 || cfg.Servers.IdleTimeout.Seconds() != 3 {
		t.Fatalf("flags not applied: %+v %+v %v", cfg.Limits, cfg.Servers, err)
	}
}
