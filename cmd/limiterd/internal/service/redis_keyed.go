package service

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/limit/redislimit"
)

// newRedisLimitStore is the keyed limits' store on Redis, its keys under
// the prefix "limiterd", with local allowances when the config asks.
func newRedisLimitStore(c redis.UniversalClient, cfg Config) (*redislimit.Store, error) {
	return redislimit.New(c, redislimit.Options{Prefix: "limiterd", LocalAllowance: cfg.Backends.Redis.LocalAllowance})
}

// allowanceCloseTimeout bounds the give-back of the allowances at shutdown.
const allowanceCloseTimeout = 2 * time.Second

// closeRedisLimitStore gives back the units the store holds.
func closeRedisLimitStore(s *redislimit.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), allowanceCloseTimeout)
	defer cancel()
	_ = s.Close(ctx)
}
