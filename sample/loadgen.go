package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// jobSpec is one job of the scenario: Records records sent to replica
// Replica At after the start of the load.
type jobSpec struct {
	Name    string
	Replica int
	At      time.Duration
	Records int
}

// jobOutcome is what became of a jobSpec: the replica's answer and the
// latency the client saw.
type jobOutcome struct {
	Spec    jobSpec
	Result  jobResult
	Latency time.Duration
	Err     string
}

// scenario returns go-batcher's example scaled to cfg.duration: two large
// jobs arrive at once at the first two replicas, then at a quarter of the
// duration a smaller one arrives at each other replica. The sizes are set so
// that, with the room the user requests leave shared fairly among the
// replicas with a job, the small jobs end at about three quarters of the
// duration and the large ones at about the duration: the datastore has a
// backlog from start to end.
//
// The room is the whole budget less the users' mean RU/s, and the jobs fill
// cfg.duration's whole windows of it and a tenth of the next one. A client
// that floods the datastore writes whatever it has left for its last
// one-second window in that window's first milliseconds, so its total time
// jumps by up to a second with where its end falls in a window; ending a
// little into a window, the comparison does not depend on that accident
// (see the README).
func scenario(cfg config) []jobSpec {
	d := cfg.duration.Seconds()
	n := cfg.replicas
	large := min(2, n)
	room := float64(cfg.budget) - cfg.interactiveRU()*float64(n) // RU/s the bulk jobs can have
	alone := room / float64(large)                               // RU/s of a large job's replica before and after the small jobs
	together := room / float64(n)                                // RU/s of every replica while all have jobs
	largeRU := alone*d/2 + together*d/2 + room/10/float64(n)
	smallRU := together*d/2 + room/10/float64(n)
	var specs []jobSpec
	for i := 0; i < large; i++ {
		specs = append(specs, jobSpec{Name: fmt.Sprintf("large-%d", i+1), Replica: i,
			Records: records(largeRU, cfg.cost)})
	}
	for i := large; i < n; i++ {
		specs = append(specs, jobSpec{Name: fmt.Sprintf("small-%d", i-large+1), Replica: i,
			At: cfg.duration / 4, Records: records(smallRU, cfg.cost)})
	}
	return specs
}

// records returns how many records of cost RU make ru, at least one.
func records(ru float64, cost uint32) int {
	return max(1, int(ru/float64(cost)+0.5))
}

// runLoad sends every job of specs to its replica over HTTP at its time and
// waits for all the answers (or for ctx to end).
func runLoad(ctx context.Context, specs []jobSpec, urls []string, cost uint32, log zerolog.Logger) []jobOutcome {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	out := make([]jobOutcome, len(specs))
	start := time.Now()
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sleep(ctx, time.Until(start.Add(s.At))) != nil {
				out[i] = jobOutcome{Spec: s, Err: ctx.Err().Error()}
				return
			}
			log.Debug().Str("job", s.Name).Str("replica", urls[s.Replica]).Int("records", s.Records).Msg("submitting job")
			out[i] = submit(ctx, client, urls[s.Replica], s, cost)
		}()
	}
	wg.Wait()
	return out
}

// submit posts one job and waits for the replica's answer.
func submit(ctx context.Context, client *http.Client, url string, s jobSpec, cost uint32) jobOutcome {
	o := jobOutcome{Spec: s}
	body, _ := json.Marshal(ingestRequest{Records: s.Records, RUPerItem: cost})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/ingest", bytes.NewReader(body))
	if err != nil {
		o.Err = err.Error()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	defer resp.Body.Close()
	o.Latency = time.Since(t0)
	if err := json.NewDecoder(resp.Body).Decode(&o.Result); err != nil {
		o.Err = fmt.Sprintf("%s: %v", resp.Status, err)
	} else if resp.StatusCode != http.StatusOK {
		o.Err = resp.Status
	}
	return o
}
