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

// Limit is what every peer of a run enforces on each key: PerSecond
// tokens per second, Burst at once.
type Limit struct {
	PerSecond int64
	Burst     int64
}

var (
	// Limited is 100 per second with a burst of 100: on a hot key nearly
	// every call is denied, on 100,000 keys drawn uniformly nearly every
	// call is admitted.
	Limited = Limit{PerSecond: 100, Burst: 100}
	// Unlimited admits every call a benchmark can make: 10^8 per second
	// with a burst of 10^8, on any key.
	Unlimited = Limit{PerSecond: 100_000_000, Burst: 100_000_000}
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
func LimitGCRA(l Limit) Peer {
	m, _ := limit.NewMemory(limit.MemoryOptions{MaxKeys: 2 << 20})
	p := limit.GCRA(limit.PerSecond(l.PerSecond), l.Burst)
	return Peer{Name: "limit memory gcra", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := m.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// LimitTokenBucket is package limit's memory store with the token bucket.
func LimitTokenBucket(l Limit) Peer {
	m, _ := limit.NewMemory(limit.MemoryOptions{MaxKeys: 2 << 20})
	p := limit.TokenBucket(l.Burst, limit.PerSecond(l.PerSecond))
	return Peer{Name: "limit memory token_bucket", Allow: func(ctx context.Context, key string) (bool, error) {
		d, err := m.AllowN(ctx, key, p, 1)
		return d.Allowed, err
	}, Close: func() {}}
}

// Sethvargo is github.com/sethvargo/go-limiter's memorystore.
func Sethvargo(l Limit) Peer {
	var s sethvargo.Store
	s, _ = memorystore.New(&memorystore.Config{Tokens: uint64(l.Burst), Interval: SethvargoInterval(l), SweepInterval: time.Hour})
	return Peer{Name: "sethvargo memorystore", Allow: func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}, Close: func() { s.Close(context.Background()) }}
}

// SethvargoInterval is the memorystore Interval that enforces l with
// Tokens = l.Burst. At each Interval tick memorystore sets a bucket to
// min(Tokens, ticks × Interval/Tokens), Interval counted in nanoseconds, so
// a bucket is refilled in full only when Interval ≥ Tokens² ns: with
// Tokens 10^8 and an Interval of 1 s it holds 10 tokens after its first
// second. Where l's own interval (Burst/PerSecond) is shorter than that,
// the Interval is Tokens² ns: the bucket then starts full and is not
// refilled within a run, which Unlimited's burst covers.
func SethvargoInterval(l Limit) time.Duration {
	iv := time.Duration(l.Burst * int64(time.Second) / l.PerSecond)
	return max(iv, time.Duration(l.Burst*l.Burst))
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
func XTimeRate(l Limit) Peer {
	s := &shardedRate{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = map[string]*rate.Limiter{}
	}
	return Peer{Name: "x/time/rate 256-shard map", Allow: func(_ context.Context, key string) (bool, error) {
		sh := &s.shards[maphash.String(s.seed, key)&255]
		sh.mu.Lock()
		lim := sh.m[key]
		if lim == nil {
			lim = rate.NewLimiter(rate.Limit(l.PerSecond), int(l.Burst))
			sh.m[key] = lim
		}
		sh.mu.Unlock()
		return lim.Allow(), nil
	}, Close: func() {}}
}

// Throttled is github.com/throttled/throttled/v2's GCRA on its memstore
// (a plain map: no key limit).
func Throttled(l Limit) Peer {
	st, _ := memstore.NewCtx(0)
	rl, _ := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(int(l.PerSecond)), MaxBurst: int(l.Burst) - 1})
	return Peer{Name: "throttled memstore (map)", Allow: func(ctx context.Context, key string) (bool, error) {
		limited, _, err := rl.RateLimitCtx(ctx, key, 1)
		return !limited, err
	}, Close: func() {}}
}

// Ulule is github.com/ulule/limiter/v3's memory store (fixed window).
func Ulule(l Limit) Peer {
	u := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: time.Second, Limit: l.PerSecond})
	return Peer{Name: "ulule memory", Allow: func(ctx context.Context, key string) (bool, error) {
		c, err := u.Get(ctx, key)
		return !c.Reached, err
	}, Close: func() {}}
}

// MemoryPeers returns every in-memory peer's constructor.
func MemoryPeers() []func(Limit) Peer {
	return []func(Limit) Peer{LimitGCRA, LimitTokenBucket, Sethvargo, XTimeRate, Throttled, Ulule}
}
