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
	r := cfg.Backends.Redis
	cold := r.ColdLease
	if cold == 0 && r.LocalAllowance {
		cold = testColdLease
	}
	return redislimit.New(c, redislimit.Options{Prefix: "limiterd", LocalAllowance: r.LocalAllowance, ColdLease: cold})
}

// testColdLease, when not 0, is the cold lease of the keyed stores with
// local allowances whose config sets none: the package's tests set it from
// LIMITERD_TEST_COLD_LEASE to run them all with cold leases.
var testColdLease time.Duration

// allowanceCloseTimeout bounds the give-back of the allowances at shutdown;
// with cold leases, of which a store may hold hundreds of thousands (tens
// of microseconds of script time each), coldCloseTimeout. Leases not given
// back in time end in Redis on their own.
const (
	allowanceCloseTimeout = 2 * time.Second
	coldCloseTimeout      = 30 * time.Second
)

// closeRedisLimitStore gives back the units the store holds.
func closeRedisLimitStore(s *redislimit.Store) {
	timeout := allowanceCloseTimeout
	if s.AllowanceStats().ColdLeases > 0 {
		timeout = coldCloseTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.Close(ctx)
}
