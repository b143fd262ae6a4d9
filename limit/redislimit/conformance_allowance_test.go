package redislimit_test

import (
	"context"
	"testing"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// allowanceFactory is singleFactory with Options.LocalAllowance on: every
// store is a holder of its own, closed at cleanup.
func allowanceFactory(t *testing.T, clock limit.Clock, n int) []limit.Store {
	stores := make([]limit.Store, n)
	var prefix string
	for i := range stores {
		c := connect(t)
		if i == 0 {
			prefix = testPrefix(t, c)
		}
		s, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clock, LocalAllowance: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(context.Background()); err != nil {
				t.Error(err)
			}
		})
		stores[i] = s
	}
	return stores
}

// TestConformanceLocalAllowance runs the conformance suite with local
// allowances on: the answers a caller sees are the one-trip path's.
func TestConformanceLocalAllowance(t *testing.T) {
	limittest.Run(t, allowanceFactory)
}
