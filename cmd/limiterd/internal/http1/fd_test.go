package http1

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/cmd/limiterd/internal/fdtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	fdtest.Child(map[string]func(net.Listener) error{
		"http1": func(ln net.Listener) error {
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
			s := &Server{Handler: ok, Routes: []Route{{Method: "POST", Path: "/limit", Handler: ok}}, ErrorLog: log.New(os.Stderr, "", 0)}
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
	p := fdtest.Start(t, "http1")
	start := time.Now()
	conns := p.Exhaust(t)
	for _, c := range conns {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.Addr+"/limit", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a request after the descriptors were freed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request after the descriptors were freed: %s", resp.Status)
	}
	p.Alive(t)
	logged := strings.Count(p.Stderr(), "accept error")
	if most := int(time.Since(start)/time.Second) + 1; logged > most {
		t.Fatalf("%d accept errors logged in %v, want at most one a second:\n%s", logged, time.Since(start), p.Stderr())
	}
}
