package unarygrpc

import (
	"log"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/cmd/limiterd/internal/fdtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	fdtest.Child(map[string]func(net.Listener) error{
		"lean": func(ln net.Listener) error {
			s := &Server{HandshakeTimeout: time.Minute, ErrorLog: log.New(os.Stderr, "", 0)}
			ratelimiterv1.RegisterRateLimiterServer(s, &limiter{})
			return s.Serve(ln)
		},
	})
	// No goroutine of a server outlives its Close or Shutdown.
	goleak.VerifyTestMain(m)
}

// TestFileDescriptorsExhausted runs the server in a process with few file
// descriptors and opens connections until Accept fails with "too many
// open files": the server waits and retries, logging at most once a
// second, and serves again once the connections close.
func TestFileDescriptorsExhausted(t *testing.T) {
	p := fdtest.Start(t, "lean")
	start := time.Now()
	conns := p.Exhaust(t)
	for _, c := range conns {
		c.Close()
	}
	legitimateCall(t, dial(t, p.Addr))
	p.Alive(t)
	logged := strings.Count(p.Stderr(), "accept error")
	if most := int(time.Since(start)/time.Second) + 1; logged > most {
		t.Fatalf("%d accept errors logged in %v, want at most one a second:\n%s", logged, time.Since(start), p.Stderr())
	}
}
