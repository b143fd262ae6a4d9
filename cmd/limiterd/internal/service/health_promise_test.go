package service

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
)

// TestPromiseHealthWithinItsBound: docs/limiterd.md's "GET /health: 200 ok
// when the store answers within 2 s, 503 otherwise". With Redis frozen
// (SIGSTOP: nothing but a timeout ends a command), each of 20 overlapping
// checks gets its 503 within the 2 s and a loaded machine's margin, with
// go-redis's own timeouts at their defaults; once Redis is back, 200 ok.
func TestPromiseHealthWithinItsBound(t *testing.T) {
	const bound = 2*time.Second + 1500*time.Millisecond
	srv := redistest.StartServer(t)
	p := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\n", srv.Addr()))
	url := "http://" + p.http + "/health"
	if code, body := p.get(url); code != http.StatusOK || body != "ok" {
		t.Fatalf("GET /health with Redis up: %d %q, want 200 ok", code, body)
	}
	srv.Freeze(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			resp, err := http.Get(url)
			if err != nil {
				t.Errorf("check %d: %v", i, err)
				return
			}
			resp.Body.Close()
			took := time.Since(began)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("check %d with Redis frozen: %d, want 503", i, resp.StatusCode)
			}
			if took > bound {
				t.Errorf("check %d with Redis frozen: answered after %v, want within %v", i, took, bound)
			}
		}()
	}
	wg.Wait()
	srv.Thaw(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := p.get(url)
		if code == http.StatusOK && body == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /health 15 s after Redis came back: %d %q, want 200 ok", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
