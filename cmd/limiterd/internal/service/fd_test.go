package service

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
)

// TestFileDescriptorsExhausted runs limiterd in a child process limited to
// 128 file descriptors and opens a burst of 10,000 connections to its REST
// and gRPC ports: accepts fail with "too many open files" while they are
// open. The service must not exit, and serves again once they close.
func TestFileDescriptorsExhausted(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", "-c", `ulimit -n 128 && exec "$0" "$@"`, exe,
				"--http-addr", httpAddr, "--grpc-addr", grpcAddr, "--metrics-addr", "", "--grpc-server", gs)
			cmd.Env = append(os.Environ(), "LIMITERD_TEST_MAIN=1")
			log := &syncBuffer{}
			cmd.Stderr = log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			waitFor(t, "limiterd started", func() bool { return strings.Contains(log.String(), "limiterd started") })

			conns := burst(10_000, httpAddr, grpcAddr)
			waitFor(t, "accept errors in the log", func() bool { return strings.Contains(log.String(), "too many open files") })
			for _, c := range conns {
				c.Close()
			}
			select {
			case err := <-exited:
				t.Fatalf("limiterd exited (%v) with the descriptors exhausted: %s", err, log.String())
			default:
			}
			waitFor(t, "a legitimate caller served again", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/limit", nil)
				req.Header.Set("X-Client-Key", "legit")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			if !processAlive(exited) {
				t.Fatalf("limiterd exited: %s", log.String())
			}
			// The connections of the burst still queued are accepted and
			// found closed first.
			waitFor(t, "a legitimate gRPC caller served again", func() bool {
				_, err := allowClient(grpcAddr)
				return err == nil
			})
			if !processAlive(exited) {
				t.Fatalf("limiterd exited: %s", log.String())
			}
		})
	}
}

// burst opens n connections, alternately to each address, from 256
// goroutines; a dial that finds the listen backlog full gives up after
// half a second.
func burst(n int, addrs ...string) []net.Conn {
	var mu sync.Mutex
	var conns []net.Conn
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				c, err := net.DialTimeout("tcp", addrs[int(i)%len(addrs)], 500*time.Millisecond)
				if err != nil {
					continue // the backlog is full: what the test is after
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return conns
}

func processAlive(exited chan error) bool {
	select {
	case err := <-exited:
		exited <- err
		return false
	default:
		return true
	}
}
