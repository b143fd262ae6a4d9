// Package grpclimit applies the keyed limits of package limit to gRPC
// calls: unary and stream server interceptors, and a client interceptor
// that waits for a local limit instead of sending calls it would refuse.
//
// A server interceptor decides one or more policies per call (per peer, per
// API key from metadata, per tenant from the context, global), all or
// nothing. A denied call fails with codes.ResourceExhausted and a
// google.rpc.RetryInfo detail carrying the retry delay, which gRPC clients
// and Google's API guidelines read; the rate-limit fields httplimit
// writes as headers go out as response metadata (ratelimit-policy, ratelimit,
// retry-after, ...). Store failures, shadow mode, the allow-list and the
// metrics work as in httplimit; the types the two share are package
// limitcore's, named here too, so a gRPC service needs neither httplimit
// nor, unless it masks peer addresses its own way (KeyPeer), limitcore. Package promlimit records the metrics on a Prometheus
// registry.
package grpclimit
