package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// The interactive side of a replica: its users' point reads (GET
// /items/{id}) and small writes (PUT /items/{id}), each one datastore
// request of --read-ru or --write-ru, sent at once through the SDK's retry
// policy. With the library the RU each one spent are charged through the
// replica's budget afterwards, so the bulk jobs give way (meter.go).

// throttledHeader tells the client how many 429s its request met on the
// way: each one a round trip and a retry-after's wait in its latency.
const throttledHeader = "X-Throttled"

// servedHeader tells the client how long, in microseconds, the replica took
// to serve its request: the datastore's round trips and waits, without the
// HTTP hop between the client and the replica.
const servedHeader = "X-Served-Us"

// itemResult is the answer to a user request.
type itemResult struct {
	ID        string `json:"id"`
	RU        uint32 `json:"ru"`
	Throttled int    `json:"throttled"`
	Error     string `json:"error,omitempty"`
}

// handleItem serves one user request: 200 once the datastore accepted it,
// 429 when the SDK's retry budget ran out on 429s, 503 for anything else.
func (r *replica) handleItem(w http.ResponseWriter, req *http.Request) {
	t0 := time.Now()
	ru := r.cfg.readRU
	if req.Method == http.MethodPut {
		ru = r.cfg.writeRU
	}
	res := sendWithRetries(req.Context(), r.store, r.name, ru, true)
	r.userThrottled.Add(uint64(res.Throttled))
	out := itemResult{ID: req.PathValue("id"), RU: ru, Throttled: res.Throttled}
	status := http.StatusOK
	switch {
	case res.Err == nil:
		r.userRU.Add(uint64(ru))
		r.ing.charge(ru)
	case errors.Is(res.Err, errRetryBudget):
		status = http.StatusTooManyRequests
	default:
		status = http.StatusServiceUnavailable
	}
	if res.Err != nil {
		r.userFailed.Add(1)
		out.Error = res.Err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(throttledHeader, strconv.Itoa(res.Throttled))
	w.Header().Set(servedHeader, strconv.FormatInt(time.Since(t0).Microseconds(), 10))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(out)
}
