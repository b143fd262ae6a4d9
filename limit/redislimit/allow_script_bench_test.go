package redislimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAllowScriptBatch: one call of allow.lua on a batch of keys, each
// an early renewal of this holder's cold lease on a token bucket key that
// three holders lease from (the ledger a cold key carries when three
// instances decide on it), as a batch of renewals sends. Reported: the
// server's µs per key (INFO commandstats), the time the batch holds Redis,
// which decides nothing else meanwhile:
//
//	go test -run '^$' -bench AllowScriptBatch ./limit/redislimit/
func BenchmarkAllowScriptBatch(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	for _, n := range []int{1, 16, 256} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			now := time.Now().UnixMicro()
			keys := make([]string, n)
			states := make([]any, 0, 2*n)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench:{k%d}::tb", i)
				// Debt 7 µs at now, three live leases.
				states = append(states, keys[i], fmt.Sprintf("7 %d L HOLDERAAAAAAAAAA:61:%d:%d HOLDERBBBBBBBBBB:27:%d:%d HOLDERCCCCCCCCCC:28:%d:%d",
					now, now+60e6, now, now+60e6, now+1, now+60e6, now+2))
			}
			// The renewal: token bucket, limit 1,000,000 per second, cost
			// 0, the server's time, 20 units more for 60 s, extending
			// lease now (HOLDERAAAAAAAAAA's) after 7 units spent.
			var args []byte
			for range n {
				for _, x := range [...]int64{1, 1_000_000, 1, 1, 1, 0, -1, 20, 60_000_000, -now, 7, -1} {
					args = appendAllowArg(args, x)
				}
			}
			serverTime(b, c, allowScript, keys, states, string(args), float64(n), "server-µs/key")
		})
	}
}

// serverTime runs sc on keys with args, the keys set to states (key,
// value pairs) before each call, and reports the server's time per call
// divided by per.
func serverTime(b *testing.B, c *redis.Client, sc *redis.Script, keys []string, states []any, args string, per float64, unit string) {
	ctx := context.Background()
	if err := sc.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		// Each call finds the same states.
		if err := c.MSet(ctx, states...).Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := sc.Run(ctx, c, keys, args, "HOLDERAAAAAAAAAA").Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if calls, usec := evalshaStats(b, c); calls > 0 {
		b.ReportMetric(usec/calls/per, unit)
	}
}

// evalshaStats reads the calls of EVALSHA and their µs from INFO
// commandstats.
func evalshaStats(b *testing.B, c *redis.Client) (calls, usec float64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"), ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls = x
			case "usec":
				usec = x
			}
		}
	}
	return calls, usec
}

// BenchmarkAllowanceScriptTake: one call of allowance.lua, a hot key's take
// renewing this holder's allowance on a token bucket key that three holders
// lease from, as a hot key at its limit sends a few times a second at each
// instance. Reported as BenchmarkAllowScriptBatch is:
//
//	go test -run '^$' -bench AllowanceScriptTake ./limit/redislimit/
func BenchmarkAllowanceScriptTake(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	const key = "bench:{hot}::tb"
	now := time.Now().UnixMicro()
	// Limit 1,000 a second (a token weighing 1,000 µs), three leases of
	// half a second.
	state := fmt.Sprintf("5000 %d L HOLDERAAAAAAAAAA:61:%d:%d HOLDERBBBBBBBBBB:27:%d:%d HOLDERCCCCCCCCCC:28:%d:%d",
		now, now+500_000, now, now+500_000, now+1, now+500_000, now+2)
	// op take, token bucket, limit 1,000, n 1, p 1,000, w 1,000,000, the
	// server's time, lease now, 40 used (at or before now), 50 wanted for
	// 500 ms, no decision waiting, the remainder not known, a 200 ms grid.
	var args []byte
	for _, x := range [...]int64{1, 1, 1000, 1, 1000, 1_000_000, -1, now, 40, -1, 50, 500_000, 0, -1, 200_000} {
		args = appendAllowArg(args, x)
	}
	serverTime(b, c, allowanceScript, []string{key}, []any{key, state}, string(args), 1, "server-µs/call")
}
