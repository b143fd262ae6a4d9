package service

import (
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// newRedisLimitStore is the keyed limits' store on Redis, its keys under
// the prefix "limiterd".
func newRedisLimitStore(c redis.UniversalClient) (limit.Store, error) {
	return redislimit.New(c, redislimit.Options{Prefix: "limiterd"})
}
