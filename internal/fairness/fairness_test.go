package fairness

import (
	"math"
	"testing"
)

func TestJain(t *testing.T) {
	cases := []struct {
		xs   []float64
		want float64
	}{
		{nil, 1},
		{[]float64{0, 0}, 1},
		{[]float64{5, 5, 5, 5}, 1},
		{[]float64{20, 0, 0, 0}, 0.25},
		{[]float64{10, 10, 0, 0}, 0.5},
		{[]float64{6, 5, 5, 4}, 400.0 / (4 * 102)},
	}
	for _, tc := range cases {
		if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
