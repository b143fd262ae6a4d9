package promlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
	"github.com/costwise/batcher/middleware/promlimit"
)

// The middleware's metrics on a Prometheus registry: give it the registry
// through promlimit.New.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	store, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rl, err := httplimit.New(httplimit.Options{
		Store:           store,
		Policies:        []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(1, time.Hour)}},
		MetricsProvider: promlimit.New(reg),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(rl.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 3 {
		res, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
	}
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil && c.GetValue() > 0 {
				fmt.Println(mf.GetName(), m.GetLabel()[1].GetValue(), c.GetValue())
			}
		}
	}
	// Output:
	// batcher_http_limit_decisions_total allowed 1
	// batcher_http_limit_decisions_total denied 2
}
