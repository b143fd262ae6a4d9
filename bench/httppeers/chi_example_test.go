package httppeers

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// With chi the middleware goes in Use, like any net/http middleware.
func Example_chi() {
	store, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	perIP, err := httplimit.New(httplimit.Options{Store: store,
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(1, time.Minute)}}})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(perIP.Handler)
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, chi.URLParam(r, "id")) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, path := range []string{"/items/1", "/items/2"} {
		res, _ := http.Get(srv.URL + path)
		res.Body.Close()
		fmt.Println(path, res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// /items/1 200 "per-ip";q=1;w=60
	// /items/2 429 "per-ip";q=1;w=60
}
