package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The datastore can be served over HTTP (--serve-datastore) so that replicas
// in separate processes (--single --datastore-url) write to one budget, as
// real pods write to one Cosmos container. The protocol imitates Cosmos:
// a throttled request gets status 429 and x-ms-retry-after-ms.

// writeRequest is the body of POST /write.
type writeRequest struct {
	Replica     string `json:"replica"`
	RU          uint32 `json:"ru"`
	Interactive bool   `json:"interactive,omitempty"`
}

// retryAfterHeader is the header Cosmos DB uses for the retry-after.
const retryAfterHeader = "x-ms-retry-after-ms"

// datastoreHandler serves POST /write for d, and GET /window?k=N with what
// each replica did in window N.
func datastoreHandler(d *Datastore) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var req writeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Replica == "" {
			http.Error(w, "body must be {\"replica\": name, \"ru\": n}", http.StatusBadRequest)
			return
		}
		retry, err := d.Write(r.Context(), req.Replica, req.RU, req.Interactive)
		if err != nil {
			return // the client went away
		}
		if retry > 0 {
			w.Header().Set(retryAfterHeader, strconv.FormatInt(retry.Milliseconds()+1, 10))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /window", func(w http.ResponseWriter, r *http.Request) {
		k, _ := strconv.Atoi(r.URL.Query().Get("k"))
		by, total := d.Window(k)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"replicas": by, "total": total})
	})
	return mux
}

// remoteStore writes to a datastore served by datastoreHandler.
type remoteStore struct {
	url    string
	client *http.Client
}

// newRemoteStore returns a client of the datastore at baseURL.
func newRemoteStore(baseURL string) *remoteStore {
	return &remoteStore{url: baseURL + "/write", client: &http.Client{Timeout: 30 * time.Second}}
}

// Write sends one request; a transport failure or an unexpected status is
// an error, a 429 a retry-after.
func (s *remoteStore) Write(ctx context.Context, replica string, ru uint32, interactive bool) (time.Duration, error) {
	body, _ := json.Marshal(writeRequest{Replica: replica, RU: ru, Interactive: interactive})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return 0, nil
	case http.StatusTooManyRequests:
		ms, _ := strconv.Atoi(resp.Header.Get(retryAfterHeader))
		return time.Duration(max(ms, 1)) * time.Millisecond, nil
	}
	return 0, fmt.Errorf("datastore answered %s", resp.Status)
}
