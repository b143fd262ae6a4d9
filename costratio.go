package batcher

// ratioOne is the fixed-point 1.0 of costRatio.
const ratioOne = 1 << 16

// costRatio estimates actual ÷ estimated cost from settled batches, each
// weighted by its estimated cost. Both sums are halved whenever the
// estimated one passes twice the window, so the ratio follows a change
// within a few windows of cost.
//
// It is owned by the batcher's loop goroutine.
type costRatio struct {
	est, act uint64
}

// observe adds settled costs; window is in units of estimated cost.
func (r *costRatio) observe(est, act, window uint64) {
	r.est += min(est, 1<<40)
	r.act += min(act, 1<<40)
	for r.est > 2*max(window, 1) {
		r.est /= 2
		r.act /= 2
	}
}

// fixed returns the ratio × ratioOne; ratioOne when nothing was observed,
// and at least 1 once something was, so that 0 always means "unknown".
func (r *costRatio) fixed() uint64 {
	if r.est == 0 {
		return ratioOne
	}
	return max(r.act*ratioOne/r.est, 1)
}

// scaleTarget returns target × ratio (a costRatio.fixed value; 0 means 1),
// saturating at the largest uint32.
func scaleTarget(target int64, ratio uint64) uint32 {
	if target <= 0 {
		return 0
	}
	if ratio == 0 || ratio == ratioOne {
		return clampU32(target)
	}
	v := satMulU(uint64(target), ratio) / ratioOne
	return clampU32(int64(min(v, 1<<32)))
}
