package main

// The exactness check of the hotkeys scenario. Every worker process dates
// each admission by two readings of the machine's real-time clock, one
// before the decision and one after it; the Redis server's TIME reads the
// same clock, so the decision happened between the two readings whichever
// path took it. Admissions are counted per key per tick: those whose two
// readings fall in one tick are certain to lie in it; the others (a round
// trip across a tick boundary) are kept with their first and last tick and
// count in a span of ticks only when both lie inside it. A violation is
// therefore proven, never a matter of dating.

// tickCounts are the admissions on one key, merged over the workers.
type tickCounts struct {
	certain []int64            // by tick
	across  map[[2]int32]int64 // (first tick, last tick) → admissions
}

func newTickCounts(ticks int) *tickCounts {
	return &tickCounts{certain: make([]int64, ticks), across: map[[2]int32]int64{}}
}

// add counts n admissions dated between ticks a and b (a ≤ b); ticks
// outside the run are clamped to its ends.
func (t *tickCounts) add(a, b int32, n int64) {
	last := int32(len(t.certain) - 1)
	a, b = min(max(a, 0), last), min(max(b, 0), last)
	if a == b {
		t.certain[a] += n
		return
	}
	t.across[[2]int32{a, b}] += n
}

// in counts the admissions certainly inside ticks [from, to), and those
// that may be (dated across its edges).
func (t *tickCounts) in(from, to int) (certain, maybe int64) {
	for i := from; i < to && i < len(t.certain); i++ {
		certain += t.certain[i]
	}
	for k, c := range t.across {
		a, b := int(k[0]), int(k[1])
		switch {
		case a >= from && b < to:
			certain += c
		case b >= from && a < to:
			maybe += c
		}
	}
	return certain, maybe
}

// bucketExcess checks a token bucket or GCRA of capacity (burst) limit
// refilled at count per period: in any span of time T it admits at most
// limit + count·T/period. Over every span of whole ticks [i, j) it returns
// the largest number of admissions certainly inside the span beyond that
// bound (0 or less when the bucket held; a positive value is a proven
// over-admission), and how many spans exceeded it. period and tick are in
// one unit (nanoseconds).
func (t *tickCounts) bucketExcess(limit, count int64, period, tick int64) (worst int64, spans int) {
	n := len(t.certain)
	ends := make([][]acrossAt, n) // by last tick
	for k, c := range t.across {
		ends[k[1]] = append(ends[k[1]], acrossAt{first: int(k[0]), n: c})
	}
	worst = -limit
	for i := 0; i < n; i++ {
		var adm int64
		for j := i; j < n; j++ {
			adm += t.certain[j]
			for _, a := range ends[j] {
				if a.first >= i {
					adm += a.n
				}
			}
			allowed := (limit*period + count*tick*int64(j-i+1)) / period
			if adm > allowed {
				spans++
			}
			worst = max(worst, adm-allowed)
		}
	}
	return worst, spans
}

type acrossAt struct {
	first int
	n     int64
}

// windowCounts checks a fixed window of limit per window of w ticks, the
// windows aligned to the ticks' origin (a multiple of the window since the
// Unix epoch): for each window, the admissions certainly inside it and
// those that may be. A window whose certain count is above limit is a
// proven over-admission.
func (t *tickCounts) windowCounts(w int) (certain, maybe []int64) {
	for from := 0; from+w <= len(t.certain); from += w {
		c, m := t.in(from, from+w)
		certain, maybe = append(certain, c), append(maybe, m)
	}
	return certain, maybe
}
