package service

import (
	"context"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/costwise/batcher/envoyrl"
)

// The marks of an answer given without asking the store (fail_open while
// the store fails): a response header on REST and /json, a trailer on
// gRPC, and a header Envoy adds to the client's response.
const (
	FailOpenHeader  = "X-Ratelimit-Fail-Open"
	FailOpenTrailer = "x-ratelimit-fail-open"
)

// failOpenMark records, for one request, that the Envoy store failed open.
// A request's store calls are made one after another on its goroutine, so
// it needs no lock.
type failOpenMark struct {
	failed bool
	header http.Header // set at once when not nil (/json)
}

type failOpenKey struct{}

// withFailOpenMark returns ctx carrying a new mark; header, when not nil,
// receives FailOpenHeader when the store fails open.
func withFailOpenMark(ctx context.Context, header http.Header) (context.Context, *failOpenMark) {
	m := &failOpenMark{header: header}
	return context.WithValue(ctx, failOpenKey{}, m), m
}

// failOpenStore is the Envoy API's store while Redis fails and the policy
// is fail_open: it counts nothing (every counter reads 0, so every
// descriptor is OK with its whole limit remaining, as envoyrl.FailOpen
// answers) and marks the request. It stands in as the failure policy's
// fallback, the one place that sees each call decided without the store.
type failOpenStore struct{}

func (failOpenStore) Add(ctx context.Context, counters []envoyrl.Counter) error {
	return failOpenStore{}.Get(ctx, counters)
}

func (failOpenStore) Get(ctx context.Context, counters []envoyrl.Counter) error {
	for i := range counters {
		counters[i].Count = 0
	}
	if m, ok := ctx.Value(failOpenKey{}).(*failOpenMark); ok {
		m.failed = true
		if m.header != nil {
			m.header.Set(FailOpenHeader, "true")
		}
	}
	return nil
}

// setFailOpenTrailer marks a gRPC answer as failed open. A server that
// cannot carry trailers leaves the answer unmarked.
func setFailOpenTrailer(ctx context.Context) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(FailOpenTrailer, "true"))
}

// markEnvoyFailOpen marks an Envoy answer as failed open: a trailer for
// the caller, and a header Envoy adds to the client's response.
func markEnvoyFailOpen(ctx context.Context, resp *rlsv3.RateLimitResponse) {
	setFailOpenTrailer(ctx)
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: FailOpenTrailer, Value: "true"})
}
