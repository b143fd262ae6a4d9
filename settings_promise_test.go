package batcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// TestPromiseNonPositiveDurationsRefused: "A non-positive duration is
// refused: Start returns InvalidSettingError naming the setting." The
// existing test (TestInvalidSettingIsReportedByStart) covers a zero flush
// interval only.
func TestPromiseNonPositiveDurationsRefused(t *testing.T) {
	settings := []struct {
		name string
		set  func(b batcher.IBatcher, d time.Duration)
	}{
		{"FlushInterval", func(b batcher.IBatcher, d time.Duration) { b.WithFlushInterval(d) }},
		{"CapacityInterval", func(b batcher.IBatcher, d time.Duration) { b.WithCapacityInterval(d) }},
		{"AuditInterval", func(b batcher.IBatcher, d time.Duration) { b.WithAuditInterval(d) }},
		{"MaxOperationTime", func(b batcher.IBatcher, d time.Duration) { b.WithMaxOperationTime(d) }},
		{"PauseTime", func(b batcher.IBatcher, d time.Duration) { b.WithPauseTime(d) }},
		{"MaxPauseTime", func(b batcher.IBatcher, d time.Duration) { b.WithMaxPauseTime(d) }},
	}
	for _, s := range settings {
		for _, d := range []time.Duration{0, -time.Nanosecond, -time.Second} {
			t.Run(s.name+"="+d.String(), func(t *testing.T) {
				b := batcher.NewBatcher()
				s.set(b, d)
				err := b.Start()
				defer b.Stop()
				var ise batcher.InvalidSettingError
				if !errors.As(err, &ise) {
					t.Fatalf("Start: %v, want InvalidSettingError", err)
				}
				if ise.Setting != s.name {
					t.Fatalf("InvalidSettingError names %q, want %q", ise.Setting, s.name)
				}
				if msg := err.Error(); len(msg) < 9 || msg[:9] != "batcher: " {
					t.Fatalf("message %q does not start with \"batcher: \"", msg)
				}
			})
		}
	}
}
