package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// directBatch is one datastore request's worth of a job's records.
type directBatch struct {
	j *job
	n int
}

// directIngester is the replica without the library: a fixed number of
// workers send requests as fast as the datastore answers, each knowing
// nothing of the other replicas. Like the Cosmos DB SDKs, a worker that gets
// a 429 waits for the retry-after and sends the same request again, up to
// maxAttempts times.
type directIngester struct {
	r      *replica
	work   chan directBatch
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newDirectIngester starts workers goroutines for r.
func newDirectIngester(r *replica, workers int) *directIngester {
	ctx, cancel := context.WithCancel(r.ctx)
	d := &directIngester{r: r, work: make(chan directBatch), ctx: ctx, cancel: cancel}
	d.wg.Add(workers)
	for i := 0; i < workers; i++ {
		go d.worker()
	}
	return d
}

// submit cuts the job into requests and hands them to the workers.
func (d *directIngester) submit(ctx context.Context, j *job) (int, error) {
	size := int(d.r.cfg.batch)
	for done := 0; done < j.records; done += size {
		n := min(size, j.records-done)
		select {
		case d.work <- directBatch{j: j, n: n}:
		case <-ctx.Done():
			return done, ctx.Err()
		case <-d.ctx.Done():
			return done, errors.New("replica stopping")
		}
	}
	return j.records, nil
}

func (d *directIngester) worker() {
	defer d.wg.Done()
	for {
		select {
		case b := <-d.work:
			d.write(b)
		case <-d.ctx.Done():
			return
		}
	}
}

// write sends b until it is accepted, it was tried maxAttempts times, or
// the replica stops.
func (d *directIngester) write(b directBatch) {
	r := d.r
	ru := uint64(b.n) * uint64(b.j.ru)
	for attempt := 1; ; attempt++ {
		retry, err := r.store.Write(d.ctx, r.name, uint32(ru))
		if err == nil && retry == 0 {
			r.settle(b.j, b.n, 0, ru)
			return
		}
		if retry > 0 {
			r.throttled.Add(1)
			b.j.throttled.Add(1)
			r.log.Debug().Str("job", b.j.id).Dur("retry_after", retry).Msg("429 from the datastore")
		} else if d.ctx.Err() == nil {
			r.log.Warn().Err(err).Str("job", b.j.id).Msg("datastore request failed")
			retry = 100 * time.Millisecond
		}
		if attempt >= maxAttempts {
			b.j.fail(fmt.Errorf("gave up after %d attempts", maxAttempts))
			r.settle(b.j, 0, b.n, 0)
			return
		}
		if err := sleep(d.ctx, retry); err != nil {
			b.j.fail(err)
			r.settle(b.j, 0, b.n, 0)
			return
		}
	}
}

// capacity is 0: nothing limits this replica but the datastore.
func (d *directIngester) capacity() uint32 { return 0 }

// shutdown waits, within ctx, for the workers to run out of work, then
// stops them.
func (d *directIngester) shutdown(ctx context.Context) {
	for d.r.outstanding.Load() > 0 && ctx.Err() == nil {
		_ = sleep(ctx, 10*time.Millisecond)
	}
	d.cancel()
	d.wg.Wait()
}
