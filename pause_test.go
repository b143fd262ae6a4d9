package batcher

import (
	"testing"
	"time"
)

func TestPauserSteps(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	type step struct {
		at       time.Duration
		op       string // "pause" or "resume"
		length   time.Duration
		extended bool // for pause; for resume: whether a pause ended
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first pause is the base", []step{
			{0, "pause", 500 * ms, false},
			{499 * ms, "resume", 0, false},
			{500 * ms, "resume", 500 * ms, true},
		}},
		{"pause while paused doubles and extends", []step{
			{0, "pause", 500 * ms, false},
			{100 * ms, "pause", 1000 * ms, true},
			{600 * ms, "resume", 0, false},
			{1000 * ms, "resume", 1000 * ms, true},
		}},
		{"pause soon after resume doubles", []step{
			{0, "pause", 500 * ms, false},
			{500 * ms, "resume", 500 * ms, true},
			{1000 * ms, "pause", 1000 * ms, false},
			{2000 * ms, "resume", 1000 * ms, true},
			{2100 * ms, "pause", 2000 * ms, false},
		}},
		{"doubling stops at the max", []step{
			{0, "pause", 500 * ms, false},
			{1 * ms, "pause", 1000 * ms, true},
			{2 * ms, "pause", 2000 * ms, true},
			{3 * ms, "pause", 4000 * ms, true},
			{4 * ms, "pause", 4000 * ms, true},
		}},
		{"a late pause keeps the length", []step{
			{0, "pause", 500 * ms, false},
			{1 * ms, "pause", 1000 * ms, true},
			{1000 * ms, "resume", 1000 * ms, true},
			{3000 * ms, "pause", 1000 * ms, false},
		}},
		{"ten base times without a pause reset it", []step{
			{0, "pause", 500 * ms, false},
			{1 * ms, "pause", 1000 * ms, true},
			{1000 * ms, "resume", 1000 * ms, true},
			{5001 * ms, "pause", 500 * ms, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pauser{base: 500 * ms, max: 4000 * ms}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var length time.Duration
				var flag bool
				if s.op == "pause" {
					length, flag = p.pause(now)
				} else {
					length, flag = p.resume(now)
				}
				if length != s.length || flag != s.extended {
					t.Fatalf("step %d (%s at %v): got %v/%v, want %v/%v", i, s.op, s.at, length, flag, s.length, s.extended)
				}
			}
		})
	}
}
