// Package limitcore holds what the HTTP middleware (package httplimit) and
// the gRPC interceptors (package grpclimit) share: the failure modes, the
// rate-limit header formats and their writing, client address keys, the
// metrics interface and the configuration error.
//
// Programs rarely import it: httplimit and grpclimit give every name here
// under their own (httplimit.FailFallback is limitcore.FailFallback). It is
// for code that serves both protocols, writes the same headers itself, or
// records the middlewares' metrics somewhere other than Prometheus (package
// promlimit is the Prometheus adapter).
package limitcore
