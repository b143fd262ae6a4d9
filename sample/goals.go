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
// out when there is none.
func goals(cfg config, runs []*runResult) []goal {
	lib := summarise(runs[0])
	limit := 2 * cfg.latency
	gs := []goal{
		{"user requests throttled", "0", num(uint64(lib.Users.Throttled)), lib.Users.Throttled == 0},
		{"user latency p99", "≤ 2 × the datastore's latency (" + ms(limit) + ")", ms(lib.Users.P99), lib.Users.P99 <= limit},
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

// outcome returns one sentence that states the result of runs with its
// numbers: the first paragraph of the report.
func outcome(cfg config, runs []*runResult) string {
	lib := summarise(runs[0])
	s := fmt.Sprintf("With the library, the bulk jobs wrote %s RU in %s, using %s of the room the users left, "+
		"while the %s user requests met %s 429s (p99 %s, max %s)",
		num(lib.BulkRU), secs(lib.Elapsed), pct(lib.RoomUtil), num(uint64(lib.Users.Requests)),
		num(uint64(lib.Users.Retries)), ms(lib.Users.P99), ms(lib.Users.Max))
	if len(runs) < 2 {
		return s + "."
	}
	d := summarise(runs[1])
	cmp := "faster than"
	ratio := lib.Elapsed.Seconds() / d.Elapsed.Seconds()
	switch {
	case ratio > 1.005:
		cmp = fmt.Sprintf("%.1f%% slower than", 100*(ratio-1))
	case ratio >= 0.995:
		cmp = "as fast as"
	default:
		cmp = fmt.Sprintf("%.1f%% faster than", 100*(1-ratio))
	}
	return s + fmt.Sprintf("; without it the same jobs took %s (the library was %s that), but %s of the user requests were throttled "+
		"(%s × 429, %s failed) and their p99 was %s, max %s, with %s 429s in all against %s.",
		secs(d.Elapsed), cmp, num(uint64(d.Users.Throttled)), num(uint64(d.Users.Retries)), num(uint64(d.Users.Failed)),
		ms(d.Users.P99), ms(d.Users.Max), num(d.Throttled), num(lib.Throttled))
}
