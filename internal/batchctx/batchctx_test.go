package batchctx

import (
	"context"
	"testing"
	"time"
)

type call struct {
	d  time.Time
	ok bool
}

func (c call) Deadline() (time.Time, bool) { return c.d, c.ok }

func TestFor(t *testing.T) {
	now := time.Now()
	const bound = time.Hour
	for _, tc := range []struct {
		name  string
		calls []call
		want  time.Time // zero: now + bound
	}{
		{"latest of the deadlines", []call{{now.Add(time.Second), true}, {now.Add(3 * time.Second), true}, {now.Add(2 * time.Second), true}}, now.Add(3 * time.Second)},
		{"a call without a deadline", []call{{now.Add(time.Second), true}, {}}, time.Time{}},
		{"a deadline past the bound", []call{{now.Add(2 * time.Hour), true}}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := For(tc.calls, bound)
			defer cancel()
			got, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			want := tc.want
			if want.IsZero() {
				if d := got.Sub(now.Add(bound)); d < 0 || d > time.Minute {
					t.Fatalf("deadline %v, want about now + %v", got, bound)
				}
				return
			}
			if !got.Equal(want) {
				t.Fatalf("deadline %v, want %v", got, want)
			}
		})
	}
}

func TestForIgnoresCallCancellation(t *testing.T) {
	parent, cancelParent := context.WithTimeout(context.Background(), time.Hour)
	ctx, cancel := For([]context.Context{parent}, time.Hour)
	defer cancel()
	cancelParent()
	if err := ctx.Err(); err != nil {
		t.Fatalf("batch context ended with its call's: %v", err)
	}
}
