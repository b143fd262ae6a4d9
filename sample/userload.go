package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// userSample is one user request as the load generator saw it.
type userSample struct {
	Replica   int
	Write     bool
	Sent      time.Time
	Latency   time.Duration // from sending to the end of the answer
	Served    time.Duration // the part of it spent in the replica (its X-Served-Us)
	Throttled int           // 429s it met on the way (the replica's X-Throttled)
	Status    int           // HTTP status; 0 when no answer came
}

// ok reports whether the request was served.
func (s userSample) ok() bool { return s.Status == http.StatusOK }

// userStats summarises user requests.
type userStats struct {
	Requests  int
	Throttled int // requests that met at least one 429
	Retries   int // 429s they met in all
	Failed    int // requests not served
	P50, P99  time.Duration
	Max       time.Duration
	// ServedP99 and ServedMax are the p99 and max of the time the replicas
	// took, without the HTTP hop from the load generator.
	ServedP99, ServedMax time.Duration
}

// statsOf summarises samples.
func statsOf(samples []userSample) userStats {
	st := userStats{Requests: len(samples)}
	lat := make([]time.Duration, 0, len(samples))
	var served []time.Duration
	for _, s := range samples {
		if s.Throttled > 0 {
			st.Throttled++
			st.Retries += s.Throttled
		}
		if !s.ok() {
			st.Failed++
		}
		if s.Status != 0 {
			lat = append(lat, s.Latency)
			served = append(served, s.Served)
		}
	}
	slices.Sort(lat)
	slices.Sort(served)
	st.P50, st.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	st.ServedP99 = quantile(served, 0.99)
	if len(lat) > 0 {
		st.Max, st.ServedMax = lat[len(lat)-1], served[len(served)-1]
	}
	return st
}

// quantile returns the q-quantile of sorted by the nearest-rank method, 0
// for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// userLog collects the user requests of a run. The monitor reads the ones
// answered in each datastore window as they come. It is safe for
// concurrent use.
type userLog struct {
	start time.Time // the datastore's window 0

	mu       sync.Mutex
	samples  []userSample
	byWindow map[int][]userSample // by the window in which the answer came
}

func newUserLog(start time.Time) *userLog {
	return &userLog{start: start, byWindow: map[int][]userSample{}}
}

func (l *userLog) add(s userSample) {
	k := int(s.Sent.Add(s.Latency).Sub(l.start) / time.Second)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, s)
	l.byWindow[k] = append(l.byWindow[k], s)
}

// window summarises the requests answered in window k.
func (l *userLog) window(k int) userStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return statsOf(l.byWindow[k])
}

// all returns every sample so far.
func (l *userLog) all() []userSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples)
}

// runUsers sends the user requests until stop is closed or ctx ends, then
// waits for the answers of those in flight. Each replica gets
// cfg.interactiveRate/cfg.replicas requests a second with exponential gaps
// (Poisson arrivals: independent users, bursts included), a share
// cfg.writeShare of them writes; the arrivals come from cfg.seed, so both
// runs see the same ones.
func runUsers(ctx context.Context, cfg config, urls []string, ul *userLog, stop <-chan struct{}, log zerolog.Logger) {
	if cfg.interactiveRate <= 0 {
		return
	}
	// The arrivals do not wait for the answers (an open loop, as real users
	// are), so a starved machine piles requests up: at most 64 connections
	// to a replica keep them from exhausting the process's file
	// descriptors; the rest wait for one, and that wait is in their latency.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	rate := cfg.interactiveRate / float64(len(urls))
	start := time.Now()
	var inflight, gens sync.WaitGroup
	for i, url := range urls {
		gens.Add(1)
		go func() {
			defer gens.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
			at := start
			for {
				at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
				write := rng.Float64() < cfg.writeShare
				id := rng.IntN(1_000_000)
				if !wait(ctx, stop, time.Until(at)) {
					return
				}
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					ul.add(userRequest(ctx, client, url, i, id, write))
				}()
			}
		}()
	}
	gens.Wait()
	inflight.Wait()
	log.Debug().Int("requests", len(ul.all())).Msg("user requests done")
}

// wait sleeps for d; it returns false when stop is closed or ctx ends
// first.
func wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	default:
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// userRequest sends one point read or small write to the replica at url
// and times it.
func userRequest(ctx context.Context, client *http.Client, url string, replica, id int, write bool) userSample {
	s := userSample{Replica: replica, Write: write, Sent: time.Now()}
	method := http.MethodGet
	if write {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s/items/%d", url, id), nil)
	if err != nil {
		return s
	}
	resp, err := client.Do(req)
	if err != nil {
		return s
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.Latency = time.Since(s.Sent)
	s.Status = resp.StatusCode
	s.Throttled, _ = strconv.Atoi(resp.Header.Get(throttledHeader))
	us, _ := strconv.ParseInt(resp.Header.Get(servedHeader), 10, 64)
	s.Served = time.Duration(us) * time.Microsecond
	return s
}
