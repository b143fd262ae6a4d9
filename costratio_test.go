package batcher

import "testing"

func TestCostRatioSteps(t *testing.T) {
	var r costRatio
	steps := []struct {
		est, act, window uint64
		want             float64
	}{
		{0, 0, 1000, 1},           // nothing observed: 1
		{100, 200, 1000, 2},       // twice the estimates
		{100, 0, 1000, 1},         // (200+0)/(100+100)
		{1800, 900, 1000, 0.55},   // (1100)/(2000): at twice the window, not halved yet
		{2000, 2000, 1000, 0.775}, // 3100/4000, halved to 1550/2000
		{0, 5, 1000, 0.7775},
	}
	for i, st := range steps {
		r.observe(st.est, st.act, st.window)
		got := float64(r.fixed()) / ratioOne
		if d := got - st.want; d > 0.001 || d < -0.001 {
			t.Errorf("step %d: ratio %.4f, want %.4f (sums %d/%d)", i, got, st.want, r.act, r.est)
		}
	}
	r = costRatio{}
	r.observe(100, 0, 1000)
	if r.fixed() != 1 {
		t.Errorf("all actual costs 0: fixed %d, want 1 (0 means unknown)", r.fixed())
	}
}

func TestScaleTarget(t *testing.T) {
	cases := []struct {
		target int64
		ratio  uint64
		want   uint32
	}{
		{1000, 0, 1000},
		{1000, ratioOne, 1000},
		{1000, ratioOne * 3 / 2, 1500},
		{1000, ratioOne / 2, 500},
		{-5, ratioOne * 2, 0},
		{1 << 40, ratioOne * 2, ^uint32(0)},
	}
	for _, c := range cases {
		if got := scaleTarget(c.target, c.ratio); got != c.want {
			t.Errorf("scaleTarget(%d, %d) = %d, want %d", c.target, c.ratio, got, c.want)
		}
	}
}
