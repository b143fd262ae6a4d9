// Package service is limiterd: its configuration, its stores, its REST and
// gRPC servers, and Run, which serves them until its context ends.
//
// The command (cmd/limiterd) is a thin main over Main; tests call Main or
// Run in their own process. The package is internal to the command: the
// parts a Go program embeds are the public packages it is built from
// (limit, envoyrl, middleware/httplimit), and the configuration users
// depend on is the YAML file and the flags, which a Go API of its own
// would only duplicate and freeze.
//
// Both gRPC servers (lean and grpc-go) serve grpc.health.v1 and server
// reflection, and TLS or mutual TLS themselves with one crypto/tls
// configuration (grpctls.go); the Envoy rules come from a directory
// (rules.go) or from an xDS management server (xds.go). envoyproxy/
// ratelimit's variables for TLS and xDS are read in grpcenv.go.
package service
