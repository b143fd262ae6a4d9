package main

import (
	"context"
	"errors"
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
// nothing of the other replicas. A worker that gets a 429 does what the
// Cosmos DB SDKs do (sendWithRetries): it waits for the retry-after and
// sends the same request again, within the SDK's retry budget.
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

// write sends b through the SDK's retry policy (sendWithRetries): until
// it is accepted, the retry budget runs out, or the replica stops.
func (d *directIngester) write(b directBatch) {
	r := d.r
	ru := uint64(b.n) * uint64(b.j.ru)
	res := sendWithRetries(d.ctx, r.store, r.name, uint32(ru), false)
	r.throttled.Add(uint64(res.Throttled))
	b.j.throttled.Add(int64(res.Throttled))
	if res.Err == nil {
		r.settle(b.j, b.n, 0, ru)
		return
	}
	if d.ctx.Err() == nil {
		r.log.Warn().Err(res.Err).Str("job", b.j.id).Msg("datastore request failed")
	}
	b.j.fail(res.Err)
	r.settle(b.j, 0, b.n, 0)
}

// charge does nothing: without the library nothing keeps count.
func (d *directIngester) charge(uint32) {}

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
