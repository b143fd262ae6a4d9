// Package bundler measures the Batcher's end-to-end throughput beside
// google.golang.org/api/support/bundler doing the same job in the same run
// (count threshold 100, a trivial handler), so that the ratio holds on
// whatever machine runs it. It is a module of its own so that bundler, a
// 52.8 MB module, stays out of the main go.mod and out of its users' builds.
//
//	cd bench/bundler && go test -run '^$' -bench Throughput
package bundler
