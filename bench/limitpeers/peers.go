package limitpeers

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// The limit every peer enforces: 100 per second with a burst of 100.
const (
	PerSecond = 100
	Burst     = 100
)

// Peer is one keyed limiter under test: Allow spends 1 on key and says
// whether it was allowed; err reports a call that failed.
type Peer struct {
	Name  string
	Allow func(ctx context.Context, key string) (allowed bool, err error)
	Close func()
}

// Memory peers.

// LimitGCRA is package limit's memory store with GCRA.
func LimitGCRA() Peer {
	m, _ := limit.NewMemory(limit.MemoryOptions{MaxKeys: 2 << 20})
	p := limit.GCRA(limit.PerSecond(PerSecond), Burst)
	return Peer{Name: "limit memory gcra", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := m.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// LimitTokenBucket is package limit's memory store with the token bucket.
func LimitTokenBucket() Peer {
	m, _ := limit.NewMemory(limit.MemoryOptions{MaxKeys: 2 << 20})
	p := limit.TokenBucket(Burst, limit.PerSecond(PerSecond))
	return Peer{Name: "limit memory token_bucket", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := m.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// Sethvargo is github.com/sethvargo/go-limiter's memorystore.
func Sethvargo() Peer {
	var s sethvargo.Store
	s, _ = memorystore.New(&memorystore.Config{Tokens: Burst, Interval: time.Second, SweepInterval: time.Hour})
	return Peer{Name: "sethvargo memorystore", Allow: func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}, Close: func() { s.Close(context.Background()) }}
}

// shardedRate is a 256-shard map of x/time/rate limiters.
type shardedRate struct {
	seed   maphash.Seed
	shards [256]struct {
		mu sync.Mutex
		m  map[string]*rate.Limiter
		_  [40]byte
	}
}

// XTimeRate is a 256-shard map of golang.org/x/time/rate limiters.
func XTimeRate() Peer {
	s := &shardedRate{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = map[string]*rate.Limiter{}
	}
	return Peer{Name: "x/time/rate 256-shard map", Allow: func(_ context.Context, key string) (bool, error) {
		sh := &s.shards[maphash.String(s.seed, key)&255]
		sh.mu.Lock()
		l := sh.m[key]
		if l == nil {
			l = rate.NewLimiter(PerSecond, Burst)
			sh.m[key] = l
		}
		sh.mu.Unlock()
		return l.Allow(), nil
	}, Close: func() {}}
}

// Throttled is github.com/throttled/throttled/v2's GCRA on its memstore
// (a plain map: no key limit).
func Throttled() Peer {
	st, _ := memstore.NewCtx(0)
	rl, _ := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(PerSecond), MaxBurst: Burst - 1})
	return Peer{Name: "throttled memstore (map)", Allow: func(ctx context.Context, key string) (bool, error) {
		limited, _, err := rl.RateLimitCtx(ctx, key, 1)
		return !limited, err
	}, Close: func() {}}
}

// Ulule is github.com/ulule/limiter/v3's memory store (fixed window).
func Ulule() Peer {
	l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: time.Second, Limit: PerSecond})
	return Peer{Name: "ulule memory", Allow: func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		return !c.Reached, err
	}, Close: func() {}}
}

// MemoryPeers returns every in-memory peer, fresh.
func MemoryPeers() []func() Peer {
	return []func() Peer{LimitGCRA, LimitTokenBucket, Sethvargo, XTimeRate, Throttled, Ulule}
}
