package envoyrl

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// GRPCServer serves envoy.service.ratelimit.v3.RateLimitService from a
// Service: register it with rlsv3.RegisterRateLimitServiceServer. A bad
// request is InvalidArgument, a store failure Unavailable.
type GRPCServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	Service *Service
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (g GRPCServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := g.Service.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, status.Error(grpcCode(err), err.Error())
	}
	return resp, nil
}

func grpcCode(err error) codes.Code {
	var se *StoreError
	switch { // a store failure first: a store's own timeout is Unavailable, not the caller's deadline
	case errors.Is(err, ErrBadRequest):
		return codes.InvalidArgument
	case errors.As(err, &se):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// DefaultMaxJSONBodyBytes is the largest body JSONHandler reads when
// Options.MaxJSONBodyBytes is not set.
const DefaultMaxJSONBodyBytes = 1 << 20

// JSONHandler serves envoyproxy/ratelimit's /json endpoint: the body is a
// RateLimitRequest in protobuf JSON, the answer its RateLimitResponse, with
// status 200 when OK and 429 when OVER_LIMIT; 400 for a body that is not a
// request or that the service refuses, 413 for a body over
// Options.MaxJSONBodyBytes (1 MiB by default) or over an http.MaxBytesReader
// put around it, 503 when the store fails.
func JSONHandler(s *Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		bp := jsonPool.Get().(*[]byte)
		defer putJSONBuffer(bp)
		maxBody := s.opts.MaxJSONBodyBytes
		body, err := readBody(http.MaxBytesReader(w, r.Body, maxBody), (*bp)[:0], r.ContentLength, maxBody)
		*bp = body
		if err != nil {
			code := http.StatusBadRequest
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				code = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "reading body: "+err.Error(), code)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := decodeRequestJSON(body, &req); err != nil {
			http.Error(w, "body is not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusBadRequest
			if grpcCode(err) != codes.InvalidArgument {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		// The request holds copies of its strings: the body's buffer is
		// free for the answer.
		out, ok := appendResponseJSON((*bp)[:0], resp)
		*bp = out
		if !ok {
			if out, err = protojson.Marshal(resp); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header()["Content-Type"] = jsonContentType
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

// jsonPool holds the JSON endpoint's buffers, for a body and then its
// answer.
var jsonPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// putJSONBuffer returns a buffer to jsonPool unless a large body grew it.
func putJSONBuffer(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		jsonPool.Put(bp)
	}
}

// jsonContentType is the answers' Content-Type header, shared so that
// setting it allocates nothing; nothing writes to it.
var jsonContentType = []string{"application/json"}

// readBody appends what r holds to b, growing b to size first when size,
// the request's Content-Length, is known and at most maxBody.
func readBody(r io.Reader, b []byte, size, maxBody int64) ([]byte, error) {
	if size > 0 && size <= maxBody && int64(cap(b)) < size+1 {
		b = make([]byte, 0, size+1) // +1: the read that finds the end
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
