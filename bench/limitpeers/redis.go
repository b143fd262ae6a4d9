package limitpeers

import (
	"context"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// LimitRedis is package redislimit with GCRA.
func LimitRedis(c *redis.Client, l Limit) Peer {
	s, _ := redislimit.New(c, redislimit.Options{Prefix: "peers:limit:"})
	p := limit.GCRA(limit.PerSecond(l.PerSecond), l.Burst)
	return Peer{Name: "redislimit gcra", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := s.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// LimitRedisFixed is package redislimit with a fixed window, the algorithm
// of ulule's Redis store.
func LimitRedisFixed(c *redis.Client, l Limit) Peer {
	s, _ := redislimit.New(c, redislimit.Options{Prefix: "peers:limitfw:"})
	p := limit.FixedWindow(l.PerSecond, time.Second)
	return Peer{Name: "redislimit fixed_window", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := s.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// RedisRate is github.com/go-redis/redis_rate/v10 (GCRA).
func RedisRate(c *redis.Client, l Limit) Peer {
	rl := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(l.PerSecond), Burst: int(l.Burst), Period: time.Second}
	return Peer{Name: "redis_rate", Allow: func(ctx context.Context, key string) (bool, error) {
		r, err := rl.Allow(ctx, key, lim)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, Close: func() {}}
}

// UluleRedis is github.com/ulule/limiter/v3's Redis store (fixed window).
func UluleRedis(c *redis.Client, l Limit) Peer {
	st, _ := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "peers:ulule"})
	u := ulule.New(st, ulule.Rate{Period: time.Second, Limit: l.PerSecond})
	return Peer{Name: "ulule redis", Allow: func(ctx context.Context, key string) (bool, error) {
		r, err := u.Get(ctx, key)
		return !r.Reached, err
	}, Close: func() {}}
}

// RedisPeers returns every Redis peer's constructor.
func RedisPeers() []func(*redis.Client, Limit) Peer {
	return []func(*redis.Client, Limit) Peer{LimitRedis, LimitRedisFixed, RedisRate, UluleRedis}
}
