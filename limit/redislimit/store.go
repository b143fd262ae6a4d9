package redislimit

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/redis/go-redis/v9"
)

//go:embed limit.lua
var scriptSource string

//go:embed allow.lua
var allowSource string

var (
	script      = redis.NewScript(scriptSource)
	allowScript = redis.NewScript(allowSource) // one key, token bucket, GCRA, fixed window
)

// Script operations, as the Lua script numbers them.
const (
	opAllow  = 1
	opCount  = 2
	opSettle = 3
	opReset  = 4
)

// Options configure New. The zero value is valid.
type Options struct {
	// Prefix starts every key. Default "limit:".
	Prefix string
	// Clock, when set, replaces the Redis server's clock: the scripts decide
	// at Clock.Now() instead of TIME, and keys are kept an hour past their
	// time to rest, since Redis expires them on its own clock. For tests
	// only; in production the server's clock must decide, or replicas' clock
	// offsets leak into the limits.
	Clock limit.Clock
	// MaxInFlight is how many batches of AllowN calls may wait for a
	// single server at once (see the package doc). Default 2.
	MaxInFlight int
	// MaxBatch caps the AllowN calls one batch carries; 1 sends every call
	// on its own. Default 256.
	MaxBatch int
	// LocalAllowance lets a token bucket, GCRA, fixed or sliding window key
	// decided often at this store (at least 4 times in each of 4 periods of
	// half a lease in a row) spend from units taken out of its Redis state
	// in one call, which records them as lent, so that the sum admitted
	// across stores never exceeds the limit (see the package doc and
	// DESIGN-allowances.md; rolling window keys keep the one-trip path).
	// Takes on a token bucket or GCRA key follow its take grid (points
	// 200 ms to 1 s apart, aligned to its period, each refilling from 16
	// units to half the burst; none when no such points exist), so that a
	// key saturated at several stores admits its rate in every period of
	// the clock; a refused decision's RetryAfter is then a point. Experimental; off by default. Every store sharing the prefix must run
	// a version that reads lent units (this one or later). Call Close to
	// give the units back and stop the renewal goroutine when the store is
	// done.
	LocalAllowance bool
	// AllowanceLease bounds how long units stay lent without a renewal.
	// Default 500ms.
	AllowanceLease time.Duration
	// MaxAllowances caps the keys with an allowance at once. Default 4096.
	MaxAllowances int
	// ColdLease, with LocalAllowance, also lends token bucket and GCRA keys
	// that are not hot, for this long: a one-trip decision of a cost above
	// 0 on a key with at least half its limit free beyond the loan takes a
	// few units along (at most an eighth of the limit, sized from the key's
	// rate at this store), in the same script call, and later decisions on
	// the key here
	// spend them without a call until they run out or the lease ends. The
	// sum admitted across stores still never exceeds the limit; what is lent
	// and not spent is lost to the key until the lease ends, unless a
	// decision, Close, or AllowAll/CountAll/Settle/Reset on the key gives it
	// back first (see DESIGN-allowances.md, section 10). Must be 0 (off,
	// the default) or from 1s to 1h. Experimental.
	ColdLease time.Duration
	// MaxColdLeases caps the cold leases a store holds at once (about 200
	// bytes each, with the key); the asks for a lease in flight count
	// against it, so that decisions that ask together stay within it too.
	// Leases past their end are forgotten as
	// decisions go on: the store keeps them in 256 parts by key, and a
	// decision that would lend sweeps its key's part when a lease has
	// passed since that part's last sweep, or when the store is at the cap.
	// Default 262,144.
	MaxColdLeases int
}

// localAllowanceForTests turns LocalAllowance on in every store: the
// package's tests set it from BATCHER_TEST_LOCAL_ALLOWANCE to run them all
// with allowances.
var localAllowanceForTests bool

// coldLeaseForTests, when not 0, is the ColdLease of every store with
// allowances that sets none: the package's tests set it from
// BATCHER_TEST_COLD_LEASE to run them all with cold leases.
var coldLeaseForTests time.Duration

// Store is a limit.Store on Redis: a single server, Sentinel or a cluster
// (any go-redis client that can run scripts). Store is safe for concurrent use.
type Store struct {
	client redis.Scripter
	prefix string
	clock  limit.Clock
	batch  *batcher    // nil on a cluster, a ring, or with MaxBatch 1
	lent   *allowances // nil unless Options.LocalAllowance
	stats  counters
}

// New returns a store on client.
func New(client redis.Scripter, opts Options) (*Store, error) {
	if client == nil {
		return nil, &limit.OptionError{Option: "client", Reason: "must not be nil"}
	}
	if opts.Prefix == "" {
		opts.Prefix = "limit:"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, &limit.OptionError{Option: "Prefix", Reason: "must not hold a hash tag"}
	}
	if opts.MaxInFlight < 0 {
		return nil, &limit.OptionError{Option: "MaxInFlight", Reason: "must not be negative"}
	}
	if opts.MaxBatch < 0 {
		return nil, &limit.OptionError{Option: "MaxBatch", Reason: "must not be negative"}
	}
	if opts.AllowanceLease < 0 || (opts.AllowanceLease > 0 && opts.AllowanceLease < 10*time.Millisecond) {
		return nil, &limit.OptionError{Option: "AllowanceLease", Reason: "must be 0 (default) or at least 10ms"}
	}
	if opts.MaxAllowances < 0 {
		return nil, &limit.OptionError{Option: "MaxAllowances", Reason: "must not be negative"}
	}
	if opts.ColdLease != 0 && (opts.ColdLease < time.Second || opts.ColdLease > time.Hour) {
		return nil, &limit.OptionError{Option: "ColdLease", Reason: "must be 0 (off) or from 1s to 1h"}
	}
	if opts.ColdLease != 0 && !opts.LocalAllowance && !localAllowanceForTests {
		return nil, &limit.OptionError{Option: "ColdLease", Reason: "needs LocalAllowance"}
	}
	if opts.MaxColdLeases < 0 {
		return nil, &limit.OptionError{Option: "MaxColdLeases", Reason: "must not be negative"}
	}
	s := &Store{client: client, prefix: opts.Prefix, clock: opts.Clock}
	if opts.LocalAllowance || localAllowanceForTests {
		s.lent = newAllowances(s, cmp.Or(opts.AllowanceLease, defaultAllowanceLease),
			cmp.Or(opts.MaxAllowances, defaultMaxAllowances))
		s.lent.coldLeases.lease = cmp.Or(opts.ColdLease, coldLeaseForTests)
		if s.lent.coldLeases.lease > 0 {
			s.lent.coldLeases.slots = make(chan struct{}, coldRenewals)
		}
		s.lent.coldLeases.max = int64(cmp.Or(opts.MaxColdLeases, defaultMaxColdLeases))
	}
	if opts.MaxBatch != 1 && batchable(client) {
		s.batch = &batcher{s: s, maxInFlight: cmp.Or(opts.MaxInFlight, defaultMaxInFlight),
			maxBatch: cmp.Or(opts.MaxBatch, defaultMaxBatch)}
	}
	return s, nil
}

// CrossSlotError reports an AllowAll or CountAll on keys that a Redis
// Cluster keeps in different slots; give them a common hash tag.
type CrossSlotError struct {
	// Keys are the Redis keys of the decision.
	Keys []string
}

// Error returns "redislimit: keys in different cluster slots: KEYS".
func (e *CrossSlotError) Error() string {
	return fmt.Sprintf("redislimit: keys in different cluster slots, give them a common hash tag: %s",
		strings.Join(e.Keys, " "))
}

// Key returns the Redis key holding key's state under p.
func (s *Store) Key(key string, p limit.Policy) string {
	var buf [192]byte
	return string(s.appendKey(buf[:0], key, p))
}

// appendKey appends Key(key, p) to b: a decision answered from an
// allowance looks its key up without allocating it.
func (s *Store) appendKey(b []byte, key string, p limit.Policy) []byte {
	b = append(b, s.prefix...)
	switch {
	case hasTag(key):
		b = append(b, key...)
	case key == "" || key[0] == '}' || key[0] == '\\':
		// Braced, the key would open with an empty tag ("{}x}"), which
		// Redis ignores, hashing the whole name and so the policy too.
		// Such keys get a tag of their own hash, marked by a backslash
		// that no key braced as it is starts with.
		b = append(b, "{\\"...)
		b = appendHash(b, key)
		b = append(b, '}')
		b = append(b, key...)
	default:
		b = append(b, '{')
		b = append(b, key...)
		b = append(b, '}')
	}
	b = append(b, ':')
	b = append(b, p.Name...)
	b = append(b, ':')
	return append(b, algCode(p.Algorithm)...)
}

// keyAt is where appendKey puts key, as it is, in the Redis key it builds.
func (s *Store) keyAt(key string) int {
	switch {
	case hasTag(key):
		return len(s.prefix)
	case key == "" || key[0] == '}' || key[0] == '\\':
		return len(s.prefix) + len("{\\") + 16 + len("}")
	}
	return len(s.prefix) + len("{")
}

// algCode is the short name of alg in keys.
func algCode(alg limit.Algorithm) string {
	switch alg {
	case limit.TokenBucketAlgorithm:
		return "tb"
	case limit.GCRAAlgorithm:
		return "gcra"
	case limit.FixedWindowAlgorithm:
		return "fw"
	case limit.RollingWindowAlgorithm:
		return "rw"
	case limit.SlidingWindowAlgorithm:
		return "sw"
	}
	return ""
}

// hasTag reports whether key holds a Redis Cluster hash tag: a '{' followed
// later by a '}' with something between.
func hasTag(key string) bool {
	i := -1
	if len(key) <= 32 {
		// A loop is quicker than IndexByte's call over a short key.
		for k := 0; k < len(key); k++ {
			if key[k] == '{' {
				i = k
				break
			}
		}
	} else {
		i = strings.IndexByte(key, '{')
	}
	if i < 0 {
		return false
	}
	j := strings.IndexByte(key[i+1:], '}')
	return j > 0
}

// appendHash appends the 64-bit FNV-1a hash of key to b in 16 hex digits.
func appendHash(b []byte, key string) []byte {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	const hex = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hex[h>>uint(shift)&15])
	}
	return b
}

// appendAllowArg appends x to the packed arguments of allow.lua or of a
// lending script (allowance.lua, allowance_window.lua), which read each as a
// signed 64-bit little-endian integer.
func appendAllowArg(b []byte, x int64) []byte {
	return binary.LittleEndian.AppendUint64(b, uint64(x))
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// run runs the script for reqs and parses one decision per request into
// out. cost of each request is reqs[i].Cost.
func (s *Store) run(ctx context.Context, op int, opName string, reqs []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b := strconv.AppendInt((*bp)[:0], int64(op), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.now(), 10)
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		if r.Cost < 0 && op != opSettle {
			return out, &limit.CostError{Cost: r.Cost}
		}
		u, err := units(r.Policy)
		if err != nil {
			return out, err
		}
		keys[i] = s.Key(r.Key, r.Policy)
		for _, x := range [...]int64{u.alg, u.limit, u.n, u.p, u.w, r.Cost} {
			b = append(b, ' ')
			b = strconv.AppendInt(b, x, 10)
		}
	}
	*bp = b
	res, err := s.send(ctx, script, keys, string(b))
	if err != nil {
		return out, s.failure(ctx, opName, keys, err)
	}
	if op == opReset {
		return out, nil
	}
	return parse(res, reqs, out)
}

// reply is the answer of a command sent by send.
type reply struct {
	res  string
	err  error
	done chan struct{} // buffered: the sender never waits for the caller
}

var replyPool = sync.Pool{New: func() any { return &reply{done: make(chan struct{}, 1)} }}

// send runs sc with keys and args and returns its answer, or ctx's error as
// soon as ctx ends, whatever the client's own timeouts (go-redis reads and
// writes by its ReadTimeout and WriteTimeout unless ContextTimeoutEnabled
// is set). A context that has ended sends nothing, and one that ends while
// the client waits for a free connection sends nothing either; once the
// command is written it cannot be recalled: the server applies it when it
// reads it, whether or not the caller is still there.
func (s *Store) send(ctx context.Context, sc *redis.Script, keys []string, args ...any) (string, error) {
	res, _, err := s.sendLate(ctx, sc, keys, nil, args...)
	return res, err
}

// sendLate is send, but a call whose ctx ends while it is on its way is
// not forgotten when late is not nil and the store can wait for it
// (allowances.reserveLate): its answer goes to late (handed true).
func (s *Store) sendLate(ctx context.Context, sc *redis.Script, keys []string, late func(string, error), args ...any) (res string, handed bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	s.stats.commands.Add(1)
	if ctx.Done() == nil { // a context that never ends: nothing to bound
		res, err := sc.Run(ctx, s.client, keys, args...).Text()
		return res, false, err
	}
	r := replyPool.Get().(*reply)
	go func() {
		r.res, r.err = sc.Run(ctx, s.client, keys, args...).Text()
		r.done <- struct{}{}
	}()
	select {
	case <-r.done:
		res, err := r.res, r.err
		r.res, r.err = "", nil
		replyPool.Put(r)
		return res, false, err
	case <-ctx.Done():
		if late == nil || !s.lent.reserveLate() {
			return "", false, ctx.Err() // r stays with its goroutine, never reused
		}
		go func() {
			defer s.lent.lateDone()
			if s.lent.awaitLate(r.done) {
				late(r.res, r.err) // r stays unused: the pool may not hold it
			} else {
				late("", errNoLateAnswer) // r stays with its goroutine
			}
		}()
		return "", true, ctx.Err()
	}
}

func (s *Store) now() int64 {
	if s.clock == nil {
		return -1
	}
	return s.clock.Now().UnixMicro()
}

// failure classifies err: the context's own error unchanged, a cross-slot
// refusal as *CrossSlotError, anything else as a *limit.StoreError.
func (s *Store) failure(ctx context.Context, op string, keys []string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	if strings.HasPrefix(err.Error(), "CROSSSLOT") {
		return &CrossSlotError{Keys: keys}
	}
	return &limit.StoreError{Op: op, Err: err}
}

// parse reads the script's answer: five integers per request.
func parse(res string, reqs []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	var v [5]int64
	for _, r := range reqs {
		var err error
		if res, err = parseInts(res, v[:]); err != nil {
			return out, err
		}
		out = append(out, limit.Decision{
			Allowed: v[0] == 1, Reason: limit.Reason(v[1]), Limit: r.Policy.Limit, Remaining: v[2],
			RetryAfter: time.Duration(v[3]) * time.Microsecond, ResetAfter: time.Duration(v[4]) * time.Microsecond,
			Policy: r.Policy.Name,
		})
	}
	return out, nil
}

// parseInts reads len(v) integers separated by spaces from the front of
// res into v and returns the rest of res.
func parseInts(res string, v []int64) (string, error) {
	for j := range v {
		var f string
		f, res, _ = strings.Cut(res, " ")
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return res, &limit.StoreError{Op: "parse", Err: fmt.Errorf("redislimit: bad script answer %q", f)}
		}
		v[j] = n
	}
	return res, nil
}

// AllowN spends cost on key under p if the key has it, in one round trip.
// On a single server, the calls of the token bucket, GCRA and fixed window
// made while others wait for the server share that round trip.
func (s *Store) AllowN(ctx context.Context, key string, p limit.Policy, cost int64) (dec limit.Decision, err error) {
	var rk string
	var ask lendAsk
	// The policy is validated where a record or lease would be made of it
	// or ended for it (getLocked, spendColdLocked): a decision spends only
	// under the policy its record or lease holds, made valid. The
	// decisions answered here write into dec: a Decision is too large to
	// be passed back in registers.
	if a := s.lent; a != nil && lendable(p.Algorithm) && cost >= 0 {
		var buf [192]byte
		rkb := s.appendKey(buf[:0], key, p)
		var r *allowance
		if a.coldLeases.lease > 0 && bucketLike(p) {
			sh, h, hot, ok := a.spendCold(rkb, &p, cost, &dec)
			if ok {
				return dec, nil
			}
			r = hot
			if r == nil {
				var d limit.Decision
				if r, d, ok, ask = a.getOrSpendCold(ctx, sh, h, rkb, key, p, cost); ok {
					return d, nil
				}
			}
		} else {
			r = a.get(rkb, key, p)
		}
		if r != nil && a.decide(ctx, r, p, cost, &dec) {
			return dec, nil
		}
		rk = string(rkb)
	}
	// Built past the decisions answered here, which need neither.
	var buf [1]limit.Decision
	reqs := [1]limit.Request{{Key: key, Policy: p, Cost: cost}}
	s.stats.remote.Add(1)
	switch p.Algorithm {
	case limit.TokenBucketAlgorithm, limit.GCRAAlgorithm, limit.FixedWindowAlgorithm:
		var sent time.Time
		if ask.want > 0 {
			sent = s.lent.now()
		}
		var g lendGrant
		var late func([8]int64, error)
		if ask.want > 0 || ask.seq != 0 {
			// A caller that leaves once the call is sent leaves its
			// answer to be taken in: the lease it ends, the lease it lends.
			r := reqs[0]
			late = func(v [8]int64, err error) { s.lent.askAnswered(r, rk, ask, sent, v, err) }
		}
		var handed bool
		dec, g, handed, err = s.allowFastLate(ctx, reqs[0], ask, late)
		if s.lent != nil && !handed {
			s.lent.endedCold(ask, err)
			if ask.want > 0 {
				if err != nil {
					g = lendGrant{}
				}
				if testHookColdAsked != nil {
					testHookColdAsked(s, g.granted)
				}
				s.lent.installCold(ctx, rk, reqs[0], dec, g, sent, ask.mine)
				// What the decision lent this store is this store's to
				// spend (or given back, so free again): Remaining counts
				// it and ResetAfter does not, as the lease's own decisions
				// do after (spentCold).
				if g.granted > 0 {
					dec.Remaining += g.granted
					dec.ResetAfter = unheld(&reqs[0].Policy, dec.ResetAfter, g.granted)
				}
			}
			if err == nil && !dec.Allowed && ask.wait != nil {
				if testHookAskWait != nil {
					testHookAskWait(s)
				}
				if d, ok := s.lent.spendAfterAsk(ctx, rk, p, cost, ask.wait); ok {
					s.stats.remote.Add(-1) // answered by the lease after all
					return d, nil
				}
			}
		}
	default:
		var out []limit.Decision
		out, err = s.run(ctx, opAllow, "allow", reqs[:], buf[:0])
		if err == nil && len(out) > 0 {
			dec = out[0]
		}
	}
	if err == nil && rk != "" {
		s.lent.warm(rk, cost, dec)
	}
	return dec, err
}

// AllowAll decides reqs together, atomically, in one round trip.
func (s *Store) AllowAll(ctx context.Context, reqs []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	if len(reqs) == 0 {
		return out, nil
	}
	if err := s.dropAllowances(ctx, reqs); err != nil {
		return out, err
	}
	s.stats.remote.Add(int64(len(reqs)))
	return s.run(ctx, opAllow, "allow all", reqs, out)
}

// CountAll counts every request, Envoy-style, in one round trip. Under
// LocalAllowance, a token bucket or GCRA request on a key this store holds
// an allowance for is decided from it (these algorithms do not count denied
// costs, so each request is an AllowN); the others go to Redis together.
func (s *Store) CountAll(ctx context.Context, reqs []limit.Request, out []limit.Decision) ([]limit.Decision, error) {
	if len(reqs) == 0 {
		return out, nil
	}
	if s.lent == nil {
		s.stats.remote.Add(int64(len(reqs)))
		return s.run(ctx, opCount, "count all", reqs, out)
	}
	start := len(out)
	var rest []limit.Request
	var restAt []int
	for i, r := range reqs {
		out = append(out, limit.Decision{})
		if r.Cost >= 0 && (r.Policy.Algorithm == limit.TokenBucketAlgorithm || r.Policy.Algorithm == limit.GCRAAlgorithm) &&
			r.Policy.Validate() == nil {
			if a := s.lent.get(s.appendKey(nil, r.Key, r.Policy), r.Key, r.Policy); a != nil {
				if s.lent.decide(ctx, a, r.Policy, r.Cost, &out[start+i]) {
					continue
				}
			}
		}
		rest = append(rest, r)
		restAt = append(restAt, start+i)
	}
	if len(rest) == 0 {
		return out, nil
	}
	if len(rest) == len(reqs) {
		// Nothing decided here: the allowances of windows' keys (whose
		// denials CountAll counts in Redis) and of keys just cooled give
		// way to the shared state.
		if err := s.dropAllowances(ctx, reqs); err != nil {
			return out[:start], err
		}
		s.stats.remote.Add(int64(len(reqs)))
		out, err := s.run(ctx, opCount, "count all", reqs, out[:start])
		if err == nil {
			s.warmCounted(reqs, out[start:])
		}
		return out, err
	}
	if err := s.dropAllowances(ctx, rest); err != nil {
		return out[:start], err
	}
	s.stats.remote.Add(int64(len(rest)))
	decs, err := s.run(ctx, opCount, "count all", rest, nil)
	if err != nil {
		return out[:start], err
	}
	for i, d := range decs {
		out[restAt[i]] = d
	}
	s.warmCounted(rest, decs)
	return out, nil
}

// warmCounted counts the token bucket and GCRA requests of a CountAll
// Redis answered (decs) towards their keys' heat.
func (s *Store) warmCounted(reqs []limit.Request, decs []limit.Decision) {
	for i, r := range reqs {
		if r.Cost >= 0 && (r.Policy.Algorithm == limit.TokenBucketAlgorithm || r.Policy.Algorithm == limit.GCRAAlgorithm) &&
			r.Policy.Validate() == nil && i < len(decs) {
			s.lent.warm(s.Key(r.Key, r.Policy), r.Cost, decs[i])
		}
	}
}

// Settle charges or refunds key under p, in one round trip.
func (s *Store) Settle(ctx context.Context, key string, p limit.Policy, delta int64) (limit.Decision, error) {
	var buf [1]limit.Decision
	reqs := [1]limit.Request{{Key: key, Policy: p, Cost: delta}}
	if err := s.dropAllowances(ctx, reqs[:]); err != nil {
		return limit.Decision{}, err
	}
	s.stats.remote.Add(1)
	out, err := s.run(ctx, opSettle, "settle", reqs[:], buf[:0])
	if err != nil || len(out) == 0 {
		return limit.Decision{}, err
	}
	out[0].Allowed = true
	return out[0], nil
}

// Reset deletes key's state under p.
func (s *Store) Reset(ctx context.Context, key string, p limit.Policy) error {
	reqs := []limit.Request{{Key: key, Policy: p}}
	if err := s.dropAllowances(ctx, reqs); err != nil {
		return err
	}
	_, err := s.run(ctx, opReset, "reset", reqs, nil)
	return err
}

// dropAllowances gives back this store's allowances on the keys of reqs,
// so that the one-trip decision on them that follows sees the Redis state
// alone: AllowAll stays atomic, Settle and Reset act on the shared state.
func (s *Store) dropAllowances(ctx context.Context, reqs []limit.Request) error {
	if s.lent == nil {
		return nil
	}
	for _, r := range reqs {
		if !lendable(r.Policy.Algorithm) {
			continue
		}
		if err := s.lent.drop(ctx, s.Key(r.Key, r.Policy)); err != nil {
			return err // already classified by lend
		}
	}
	return nil
}

// Close gives back every unit this store holds under Options.LocalAllowance
// and stops its background work; decisions after Close take the one-trip
// path. Without LocalAllowance it does nothing. It returns by ctx's end,
// whatever the client's options: the renewals and the waits for answers in
// flight end with ctx too. Units it could not give back (ctx ended, Redis
// unreachable) count as spent when their lease ends. It does not close the
// client.
func (s *Store) Close(ctx context.Context) error {
	if s.lent == nil {
		return nil
	}
	return s.lent.close(ctx)
}

var _ limit.Store = (*Store)(nil)

// allowFast decides one request with the short script, with the lend ask
// of Options.ColdLease (the zero lendAsk for none).
func (s *Store) allowFast(ctx context.Context, r limit.Request, ask lendAsk) (limit.Decision, lendGrant, error) {
	dec, g, _, err := s.allowFastLate(ctx, r, ask, nil)
	return dec, g, err
}

// allowFastLate is allowFast, but the answer to a call whose ctx ends once
// it is sent goes to late, if not nil, when the store can wait for it
// (handed true; see sendLate): a lend ask's grant is then kept or given
// back rather than left lent in Redis until its lease ends.
func (s *Store) allowFastLate(ctx context.Context, r limit.Request, ask lendAsk, late func([8]int64, error)) (dec limit.Decision, g lendGrant, handed bool, err error) {
	if r.Cost < 0 {
		return limit.Decision{}, lendGrant{}, false, &limit.CostError{Cost: r.Cost}
	}
	u, err := units(r.Policy)
	if err != nil {
		return limit.Decision{}, lendGrant{}, false, err
	}
	if s.batch != nil {
		return s.allowBatched(ctx, r, u, ask, late)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b := (*bp)[:0]
	for _, x := range [...]int64{u.alg, u.limit, u.n, u.p, u.w, r.Cost, s.now(), ask.want, ask.lease, ask.seq, ask.used, ask.spentAt} {
		b = appendAllowArg(b, x)
	}
	*bp = b
	key := s.Key(r.Key, r.Policy)
	var lateText func(string, error)
	if late != nil {
		lateText = func(res string, err error) {
			var v [8]int64
			if err == nil {
				_, err = parseInts(res, v[:])
			}
			late(v, err)
		}
	}
	res, handed, err := s.sendLate(ctx, allowScript, []string{key}, lateText, string(b), s.holder())
	if err != nil {
		return limit.Decision{}, lendGrant{}, handed, s.failure(ctx, "allow", []string{key}, err)
	}
	var v [8]int64
	if _, err := parseInts(res, v[:]); err != nil {
		return limit.Decision{}, lendGrant{}, false, err
	}
	dec, g = fastAnswer(r, v)
	return dec, g, false, nil
}

// holder is the id under which this store's allowances are lent ("-"
// without LocalAllowance: nothing is lent to it).
func (s *Store) holder() string {
	if s.lent == nil {
		return "-"
	}
	return s.lent.holder
}
