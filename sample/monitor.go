package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// samplesPerSecond is how often the monitor looks at the replicas within a
// datastore window.
const samplesPerSecond = 10

// probe is what the monitor reads from one replica at each sample.
type probe struct {
	Capacity    uint32
	Outstanding int64
}

// second is the record of one datastore window, per replica in the order of
// the run's names.
type second struct {
	K             int
	RU            []uint64  // RU accepted
	Throttled     []uint64  // 429s
	ThrottledRU   []uint64  // RU refused with a 429
	Capacity      []float64 // mean capacity held over the window
	Queue         []int64   // records outstanding at the end of the window
	Backlog       []bool    // records outstanding at every sample of the window
	Idle          []bool    // nothing outstanding at any sample of the window
	UserRU        []uint64  // RU accepted from user requests
	UserThrottled []uint64  // 429s the user requests got
	Users         userStats // the user requests answered in the window
	Partial       bool      // the run ended within the window
}

// monitor samples the replicas ten times a second, in step with the
// datastore's windows, and at the end of each window logs one line and
// keeps a second for the summary and the report.
type monitor struct {
	names   []string
	budget  uint64
	start   time.Time
	limited bool                                // replicas hold capacity (the library run)
	probe   func() []probe                      // nil when the replicas are elsewhere
	window  func(k int, names []string) []usage // what each replica did in window k
	refresh func() []string                     // when set, names are read again each window
	users   func(k int) userStats               // the user requests answered in window k; nil for none
	quiet   bool                                // skip the line of a window where nothing happened
	keep    bool                                // keep the seconds in series (for the report)
	log     zerolog.Logger
	json    bool

	series  []second
	samples [][]probe
	done    chan struct{}
}

// run samples until ctx ends, then records the windows up to the one in
// progress, that one as partial. It closes m.done on return.
func (m *monitor) run(ctx context.Context) {
	defer close(m.done)
	next := 0 // the first window not yet finished
	for j := 1; ; j++ {
		at := m.start.Add(time.Duration(j) * time.Second / samplesPerSecond)
		if sleep(ctx, time.Until(at)) != nil {
			// A starved monitor may lag the clock: the windows it has not
			// reached are finished from the datastore's counts alone.
			now := max(int(time.Since(m.start)/time.Second), next)
			for ; next < now; next++ {
				m.finish(next, false)
			}
			m.finish(now, true)
			return
		}
		if m.probe != nil {
			m.samples = append(m.samples, m.probe())
		}
		if j%samplesPerSecond == 0 {
			m.finish(next, false)
			next++
		}
	}
}

// finish turns window k's samples and datastore counts into a second.
func (m *monitor) finish(k int, partial bool) {
	if m.refresh != nil {
		m.names = m.refresh()
	}
	n := len(m.names)
	s := second{K: k, Partial: partial, RU: make([]uint64, n), Throttled: make([]uint64, n),
		ThrottledRU: make([]uint64, n), Capacity: make([]float64, n), Queue: make([]int64, n),
		Backlog: make([]bool, n), Idle: make([]bool, n), UserRU: make([]uint64, n), UserThrottled: make([]uint64, n)}
	var total usage
	for i, u := range m.window(k, m.names) {
		s.RU[i], s.Throttled[i], s.ThrottledRU[i] = u.AcceptedRU, u.Throttled, u.ThrottledRU
		s.UserRU[i], s.UserThrottled[i] = u.InteractiveRU, u.InteractiveThrottled
		total.add(u)
	}
	if m.users != nil {
		s.Users = m.users(k)
	}
	if len(m.samples) == 0 && m.probe != nil {
		m.samples = append(m.samples, m.probe())
	}
	m.summarise(&s)
	m.samples = m.samples[:0]
	if partial && total.Requests == 0 && total.Throttled == 0 {
		return
	}
	if m.keep {
		m.series = append(m.series, s)
	}
	if m.quiet && total.Requests == 0 && total.Throttled == 0 && sumQueue(s.Queue) == 0 {
		return
	}
	m.logSecond(s, total)
}

// summarise fills capacity, queue and backlog from the window's samples.
func (m *monitor) summarise(s *second) {
	for i := range m.names {
		s.Backlog[i], s.Idle[i] = len(m.samples) > 0, true
		for _, p := range m.samples {
			s.Capacity[i] += float64(p[i].Capacity)
			s.Backlog[i] = s.Backlog[i] && p[i].Outstanding > 0
			s.Idle[i] = s.Idle[i] && p[i].Outstanding == 0
		}
		if len(m.samples) > 0 {
			s.Capacity[i] /= float64(len(m.samples))
			s.Queue[i] = m.samples[len(m.samples)-1][i].Outstanding
		}
	}
}

// logSecond writes the per-second line: RU/s per replica and in total
// against the budget, capacity held, queue depth and 429s.
func (m *monitor) logSecond(s second, total usage) {
	pct := 100 * float64(total.AcceptedRU) / float64(m.budget)
	if m.json {
		m.logJSON(s, total, pct)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "t=%3ds  %s/%s RU/s (%5.1f%%)  429s %-4d", s.K+1, num(total.AcceptedRU), num(m.budget), pct, total.Throttled)
	if m.users != nil {
		fmt.Fprintf(&b, " | users %d p99 %s 429s %d", s.Users.Requests, ms(s.Users.P99), total.InteractiveThrottled)
	}
	for i, name := range m.names {
		fmt.Fprintf(&b, " | %s %s", name, num(s.RU[i]))
		if m.limited {
			fmt.Fprintf(&b, " cap %s", num(uint64(s.Capacity[i]+0.5)))
		}
		if m.probe != nil {
			fmt.Fprintf(&b, " q %s", num(uint64(max(s.Queue[i], 0))))
		}
		if s.Throttled[i] > 0 {
			fmt.Fprintf(&b, " 429s %d", s.Throttled[i])
		}
	}
	m.log.Info().Msg(b.String())
}

// logJSON writes the per-second record as structured fields.
func (m *monitor) logJSON(s second, total usage, pct float64) {
	reps := zerolog.Arr()
	for i, name := range m.names {
		d := zerolog.Dict().Str("replica", name).Uint64("ru", s.RU[i]).Uint64("throttled", s.Throttled[i])
		if m.limited {
			d = d.Float64("capacity", s.Capacity[i])
		}
		if m.probe != nil {
			d = d.Int64("queue", s.Queue[i])
		}
		reps = reps.Dict(d)
	}
	e := m.log.Info().Int("second", s.K+1).Uint64("ru", total.AcceptedRU).Uint64("budget", m.budget).
		Float64("utilisation_pct", pct).Uint64("throttled", total.Throttled).
		Uint64("user_ru", total.InteractiveRU).Uint64("user_throttled", total.InteractiveThrottled)
	if m.users != nil {
		e = e.Int("user_requests", s.Users.Requests).Float64("user_p99_ms", msf(s.Users.P99))
	}
	e.Array("replicas", reps).Msg("tick")
}

// ms formats a latency in milliseconds.
func ms(d time.Duration) string {
	if d >= 100*time.Millisecond {
		return fmt.Sprintf("%.0f ms", msf(d))
	}
	return fmt.Sprintf("%.1f ms", msf(d))
}

// msf returns d in milliseconds.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sumQueue(q []int64) int64 {
	var t int64
	for _, n := range q {
		t += n
	}
	return t
}

// num formats n with thousands separators.
func num(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
