package main

import (
	"fmt"
	"io"
)

// goal is one claim the sample makes about the run with the library, and
// whether this run bore it out.
type goal struct {
	What string
	Want string
	Got  string
	Met  bool
}

// goals checks the run with the library (runs[0]) against what the sample
// claims for it; the time goal needs the run without (runs[1]) and is left
// out when there is none. The latency goal is relative to the calibration:
// what the user requests got alone on this machine just before the runs.
func goals(cfg config, runs []*runResult, cal calibration) []goal {
	lib := summarise(runs[0])
	limit := latencyGoal(cfg, cal)
	gs := []goal{
		{"user requests throttled", "0", num(uint64(lib.Users.Throttled)), lib.Users.Throttled == 0},
		{"user latency p99", "≤ " + ms(limit) + ", " + latencyGoalBasis(cfg, cal), ms(lib.Users.P99), lib.Users.P99 <= limit},
	}
	if len(runs) > 1 {
		direct := summarise(runs[1])
		ratio := lib.Elapsed.Seconds() / direct.Elapsed.Seconds()
		gs = append(gs, goal{"bulk: total time", "≤ 1.03 × without the library", fmt.Sprintf("%.3f ×", ratio), ratio <= 1.03})
	}
	gs = append(gs,
		goal{"bulk: utilisation of the room users left, whole run", "≥ 97%", pct(lib.RoomUtil), lib.RoomUtil >= 0.97},
		goal{"429s in all", "≤ 0.1% of requests", fmt.Sprintf("%.2f%%", 100*lib.throttledShare()), lib.throttledShare() <= 0.001},
		goal{"bulk: records lost", "0", num(lib.Failed), lib.Failed == 0},
	)
	return gs
}

// latencyGoalBasis says how the latency goal was derived.
func latencyGoalBasis(cfg config, cal calibration) string {
	if cal.Users.Requests == 0 || cal.Users.P99 < cfg.latency {
		return "2 × the datastore's latency of " + ms(cfg.latency)
	}
	return fmt.Sprintf("2 × the p99 of the same user requests alone on this machine (%s over %s, %s requests, no bulk job, just before the runs)",
		ms(cal.Users.P99), secs(cal.Took), num(uint64(cal.Users.Requests)))
}

// printGoals writes the goals and whether they were met.
func printGoals(w io.Writer, gs []goal) {
	fmt.Fprintln(w, "\nGoals with the library:")
	for _, g := range gs {
		mark := "met    "
		if !g.Met {
			mark = "NOT MET"
		}
		fmt.Fprintf(w, "  %s  %s: %s (goal %s)\n", mark, g.What, g.Got, g.Want)
	}
}

// headline states the outcome in two short sentences: the user requests
// throttled and their p99, with the library and without.
func headline(runs []*runResult) string {
	lib := summarise(runs[0])
	if len(runs) < 2 {
		return fmt.Sprintf("With the library, %s user requests were throttled; their p99 was %s.",
			num(uint64(lib.Users.Throttled)), ms(lib.Users.P99))
	}
	d := summarise(runs[1])
	return fmt.Sprintf("User requests throttled: %s with the library, %s without. User p99: %s with, %s without.",
		num(uint64(lib.Users.Throttled)), num(uint64(d.Users.Throttled)), ms(lib.Users.P99), ms(d.Users.P99))
}

// outcome returns the few sentences that follow the headline: what ran,
// and what the bulk jobs got with the library and without.
func outcome(cfg config, runs []*runResult) string {
	lib := summarise(runs[0])
	s := fmt.Sprintf("%d replicas share a %s RU/s datastore with their users through %s. "+
		"With it, the bulk jobs wrote %s RU in %s, using %s of the room the users left.",
		cfg.replicas, num(uint64(cfg.budget)), libraryPath, num(lib.BulkRU), secs(lib.Elapsed), pct(lib.RoomUtil))
	if len(runs) < 2 {
		return s
	}
	d := summarise(runs[1])
	return s + fmt.Sprintf(" Without it, the same jobs took %s and %.2f%% of all requests met a 429 (%.2f%% with it).",
		secs(d.Elapsed), 100*d.throttledShare(), 100*lib.throttledShare())
}

// libraryPath is the library's import path, as the report names it.
const libraryPath = "github.com/costwise/batcher"
