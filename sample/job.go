package main

import (
	"fmt"
	"sync/atomic"
	"time"
)

// maxAttempts is how many times a record is sent before it counts as failed,
// with and without the library: the first attempt and the SDK's 9 retries.
const maxAttempts = 1 + sdkMaxRetries

// ingestRequest is the body of POST /ingest.
type ingestRequest struct {
	Records   int    `json:"records"`
	RUPerItem uint32 `json:"ru_per_record"`
}

// jobResult is the answer to POST /ingest, sent when the job is done.
type jobResult struct {
	ID          string    `json:"id"`
	Replica     string    `json:"replica"`
	Records     int       `json:"records"`
	RUPerRecord uint32    `json:"ru_per_record"`
	Written     int64     `json:"written"`
	Failed      int64     `json:"failed"`
	Throttled   int64     `json:"throttled"` // 429s its requests met
	Received    time.Time `json:"received"`
	Finished    time.Time `json:"finished"`
	Seconds     float64   `json:"seconds"`
	Error       string    `json:"error,omitempty"`
}

// job is one ingest request being processed: it is done when every record
// was written or given up on.
type job struct {
	id        string
	replica   string
	records   int
	ru        uint32
	received  time.Time
	remaining atomic.Int64
	written   atomic.Int64
	failed    atomic.Int64
	throttled atomic.Int64
	finished  atomic.Int64 // unix nanoseconds
	done      chan struct{}
	err       atomic.Pointer[string] // the first reason a record failed
}

// newJob returns a job of n records of ru each, received now.
func newJob(replica string, seq int64, n int, ru uint32) *job {
	j := &job{
		id:       fmt.Sprintf("%s-%d", replica, seq),
		replica:  replica,
		records:  n,
		ru:       ru,
		received: time.Now(),
		done:     make(chan struct{}),
	}
	j.remaining.Store(int64(n))
	if n == 0 {
		j.finish()
	}
	return j
}

// settle records that written records were written and failed ones given
// up on, and finishes the job when none remain.
func (j *job) settle(written, failed int) {
	j.written.Add(int64(written))
	j.failed.Add(int64(failed))
	if j.remaining.Add(-int64(written+failed)) == 0 {
		j.finish()
	}
}

// fail records why records failed; the first reason is kept.
func (j *job) fail(reason error) {
	s := reason.Error()
	j.err.CompareAndSwap(nil, &s)
}

func (j *job) finish() {
	j.finished.Store(time.Now().UnixNano())
	close(j.done)
}

// result summarises the job; call it once done is closed (or to report an
// unfinished job, whose Finished is zero).
func (j *job) result() jobResult {
	r := jobResult{
		ID: j.id, Replica: j.replica, Records: j.records, RUPerRecord: j.ru,
		Written: j.written.Load(), Failed: j.failed.Load(), Throttled: j.throttled.Load(),
		Received: j.received,
	}
	if ns := j.finished.Load(); ns != 0 {
		r.Finished = time.Unix(0, ns)
		r.Seconds = r.Finished.Sub(j.received).Seconds()
	}
	if e := j.err.Load(); e != nil {
		r.Error = *e
	}
	return r
}
