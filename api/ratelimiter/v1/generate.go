// Package ratelimiterv1 holds the generated Go code of the limiter service's
// gRPC API, ratelimiter.v1 (ratelimiter.proto beside this file):
// RateLimiter/Allow, one keyed decision per call.
//
// Regenerate after editing the .proto (protoc 3.21 or later, with
// protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2 on the PATH):
//
//	go generate ./api/ratelimiter/v1
package ratelimiterv1

//go:generate protoc -I ../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative ratelimiter/v1/ratelimiter.proto
