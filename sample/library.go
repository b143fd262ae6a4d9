package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/costwise/batcher"
)

// bufferSize is each replica's batcher buffer: room for the records of the
// default scenario's jobs, so /ingest accepts a job at once and the queue
// depth shows the whole backlog. Enqueue would wait for room otherwise.
const bufferSize = 200_000

// capacityInterval is how often each batcher tells its limiter its target.
const capacityInterval = 25 * time.Millisecond

// The lines between "shown in the report" markers here and in limiter.go
// are the library code the report and the summary show (snippet.go), read
// from this source as it is.

// libIngester writes with the library: records are enqueued into a Batcher
// that releases them no faster than the replica's share of the budget (its
// shared resource's capacity) and hands them, batched, to the job's watcher.
type libIngester struct {
	r   *replica
	b   *batcher.Batcher
	lim *meteredLimiter
}

// newLibIngester provisions and starts shared, and starts a batcher limited
// by it less what the replica's user requests spend (meteredLimiter).
func newLibIngester(ctx context.Context, r *replica, shared sharedLimiter) (*libIngester, error) {
	lim := newMeteredLimiter(shared)
	li := &libIngester{r: r, lim: lim}
	lim.AddListener(li.onLimiterEvent)
	// shown in the report: begin
	if err := lim.Provision(ctx); err != nil {
		return nil, fmt.Errorf("replica %s: provision: %w", r.name, err)
	}
	if err := lim.Start(ctx); err != nil {
		return nil, fmt.Errorf("replica %s: start the shared resource: %w", r.name, err)
	}
	li.b = batcher.New(bufferSize)
	li.b.WithRateLimiter(lim)
	// shown in the report: end
	// Ask for capacity every 25 ms rather than every 100 ms: a job that
	// arrives gets its partitions sooner, and the request costs an atomic
	// store when the target has not changed.
	li.b.WithCapacityInterval(capacityInterval)
	if err := r.instrument(li.b, shared); err != nil {
		lim.Stop()
		return nil, fmt.Errorf("replica %s: metrics: %w", r.name, err)
	}
	li.b.AddListener(li.onBatcherEvent)
	// shown in the report: begin
	if err := li.b.Start(); err != nil {
		lim.Stop()
		return nil, fmt.Errorf("replica %s: start the batcher: %w", r.name, err)
	}
	// shown in the report: end
	return li, nil
}

// submit enqueues one operation per record, all for one watcher made for
// the job, so the job's records are batched together.
func (li *libIngester) submit(ctx context.Context, j *job) (int, error) {
	// shown in the report: begin
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { li.write(j, ops) }).
		WithMaxAttempts(maxAttempts).
		WithMaxBatchSize(li.r.cfg.batch)
	for i := 0; i < j.records; i++ {
		if err := li.b.EnqueueContext(ctx, batcher.NewOperation(w, j.ru, i, true)); err != nil {
			return i, err
		}
	}
	// shown in the report: end
	return j.records, nil
}

// write sends one batch as one datastore request. On a 429 it holds the
// batcher's capacity at zero for the retry-after (meteredLimiter.hold),
// which is how long the datastore said it has no room, and enqueues the
// records again; a record that reached MaxAttempts fails.
func (li *libIngester) write(j *job, ops []batcher.IOperation) {
	r := li.r
	var ru uint64
	for _, op := range ops {
		ru += uint64(op.Cost())
	}
	retry, err := r.store.Write(r.ctx, r.name, uint32(ru), false)
	switch {
	case err == nil && retry == 0:
		r.settle(j, len(ops), 0, ru)
		return
	case r.ctx.Err() != nil:
		j.fail(r.ctx.Err())
		r.settle(j, 0, len(ops), 0)
		return
	case retry > 0:
		r.throttled.Add(1)
		j.throttled.Add(1)
		r.log.Warn().Str("job", j.id).Uint64("ru", ru).Dur("retry_after", retry).Msg("429 from the datastore: holding for the retry-after")
		li.lim.hold(retry)
	default:
		r.log.Warn().Err(err).Str("job", j.id).Msg("datastore request failed: pausing")
		li.b.Pause()
	}
	li.requeue(j, ops)
}

// requeue enqueues throttled records again and fails those that may not be.
func (li *libIngester) requeue(j *job, ops []batcher.IOperation) {
	failed := 0
	for _, op := range ops {
		if err := li.b.Enqueue(op); err != nil {
			failed++
			j.fail(err)
		}
	}
	if failed > 0 {
		li.r.settle(j, 0, failed, 0)
	}
}

// capacity returns the shared resource's capacity now: what the replica
// holds for its bulk jobs and its users together.
func (li *libIngester) capacity() uint32 { return li.lim.held() }

// charge counts ru spent by a user request through the replica's budget.
func (li *libIngester) charge(ru uint32) { li.lim.charge(ru) }

// shutdown lets the batcher release what it holds, within ctx, and then
// stops the shared resource, which releases its partitions for the others.
func (li *libIngester) shutdown(ctx context.Context) {
	err := li.b.Shutdown(ctx)
	var inc batcher.ShutdownIncompleteError
	if errors.As(err, &inc) && inc.Unreleased > 0 {
		li.r.log.Warn().Uint32("unreleased", inc.Unreleased).Msg("batcher stopped with records left")
	}
	li.lim.Stop()
}

// onBatcherEvent logs the batcher's pauses.
func (li *libIngester) onBatcherEvent(event string, val int, msg string, _ interface{}) {
	switch event {
	case batcher.PauseEvent:
		li.r.log.Info().Int("ms", val).Msg("batcher paused")
	case batcher.ErrorEvent:
		li.r.log.Error().Str("msg", msg).Msg("batcher error")
	case batcher.AuditFailEvent:
		li.r.log.Warn().Str("msg", msg).Msg("batcher audit failed")
	}
}

// onLimiterEvent logs how the shared resource's capacity moves.
func (li *libIngester) onLimiterEvent(event string, val int, msg string, _ interface{}) {
	l := li.r.log
	switch event {
	case batcher.CapacityEvent:
		l.Debug().Int("capacity", val).Msg("capacity")
	case batcher.AllocatedEvent:
		l.Debug().Int("partition", val).Msg("partition leased")
	case batcher.ReleasedEvent:
		l.Debug().Int("partition", val).Msg("partition released")
	case batcher.ErrorEvent:
		l.Warn().Str("msg", msg).Msg("shared resource error")
	case batcher.CreatedContainerEvent, batcher.CreatedBlobEvent:
		l.Debug().Str("event", event).Int("val", val).Str("msg", msg).Msg("provisioned")
	}
}
