package main

import (
	"context"
	"fmt"
	"time"
)

// handoffAndStop measures two moves of the whole capacity between two
// instances. Hand-off: A holds every partition and stops needing them (its
// target falls to zero) while B starts needing all; the time until B holds
// half and all of them. Stop: B, now holding everything, stops, and A needs
// everything again; the time from the Stop call until A holds all.
func (b *bench) handoffAndStop(ctx context.Context, ns *namespace) ([]result, error) {
	ins, err := startInstances(ctx, ns, 2)
	if err != nil {
		return nil, err
	}
	defer stopAll(ins)
	a, bb := ins[0], ins[1]
	bb.GiveMe(0)
	a.GiveMe(sharedCap)
	if _, ok := waitFor(ctx, b.plan.waitLimit, full(a)); !ok {
		return nil, fmt.Errorf("hand-off: A did not reach every partition within %v (capacity %d)", b.plan.waitLimit, a.Capacity())
	}
	sleepCtx(ctx, b.plan.handoffHold) // let A settle into renewing

	start := time.Now()
	a.GiveMe(0)
	bb.GiveMe(sharedCap)
	_, okHalf := waitFor(ctx, b.plan.waitLimit, func() bool { return bb.Capacity() >= sharedCap/2 })
	half := time.Since(start)
	_, okAll := waitFor(ctx, b.plan.waitLimit, full(bb))
	all := time.Since(start)
	rows := []result{handoffRow(half, all, okHalf, okAll, b.plan.handoffHold)}

	stopStart := time.Now()
	bb.Stop()
	stopTook := time.Since(stopStart)
	a.GiveMe(sharedCap)
	_, ok := waitFor(ctx, b.plan.waitLimit, full(a))
	rows = append(rows, stopRow(time.Since(stopStart), stopTook, ok))
	rows[0].Note = joinNotes(rows[0].Note, errorNote(a, bb))
	return rows, nil
}

func handoffRow(half, all time.Duration, okHalf, okAll bool, hold time.Duration) result {
	row := result{
		Case:      "hand-off: A holds all and stops needing it, B starts needing all: B at 50% / 100%",
		GoBatcher: "15.7 s / 18.4 s", Goal: "≤ 1 s / ≤ 2 s",
		Values: map[string]float64{"half_s": half.Seconds(), "all_s": all.Seconds()},
		Note:   fmt.Sprintf("A held every partition for %v first", hold),
	}
	if !okHalf || !okAll {
		row.Ours = fmt.Sprintf("B did not get there: 50%% %v, 100%% %v within the limit", okHalf, okAll)
		row.Status = statusMissed
		return row
	}
	row.Ours = fmt.Sprintf("%s / %s", fmtDur(half), fmtDur(all))
	row.Status = verdict(half <= time.Second && all <= 2*time.Second)
	return row
}

func stopRow(took, stopCall time.Duration, ok bool) result {
	row := result{
		Case:      "Stop(): another instance holds the partitions after",
		GoBatcher: "11 s (leases are never released)", Goal: "< 0.5 s",
		Values: map[string]float64{"seconds": took.Seconds(), "stop_call_s": stopCall.Seconds()},
		Note:   fmt.Sprintf("from the Stop call until the other instance held all 20; Stop itself returned, with every lease released, after %s", fmtDur(stopCall)),
	}
	if !ok {
		row.Ours, row.Status = "the other instance did not get every partition", statusMissed
		return row
	}
	row.Ours = fmtDur(took)
	row.Status = verdict(took < 500*time.Millisecond)
	return row
}
