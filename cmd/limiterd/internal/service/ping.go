package service

import (
	"context"
	"time"

	"golang.org/x/sync/singleflight"
)

// pingTimeout bounds a health check's wait for the store (`GET /health`).
const pingTimeout = 2 * time.Second

// sharedPing runs one store ping at a time for every health check that
// overlaps it, and answers each check by its own context, whatever the
// client's timeouts: go-redis bounds a command by its read and write
// timeouts, not by the context's deadline, unless ContextTimeoutEnabled is
// set, which limiterd leaves off so that a caller's short deadline does not
// cost a pooled connection. So a frozen store answers `GET /health` with
// 503 at the check's deadline, and a flood of checks holds one goroutine.
type sharedPing struct {
	ping  func(context.Context) error
	group singleflight.Group
}

// Ping reports whether the store answered the ping in flight, or a new
// one, before ctx ended.
func (p *sharedPing) Ping(ctx context.Context) error {
	ch := p.group.DoChan("ping", func() (any, error) {
		// The ping's own bound: the longest a health check waits. It
		// ends sooner when the client is closed (the service stops).
		pctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		defer cancel()
		return nil, p.ping(pctx)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}
