// Package httppeers measures the overhead the HTTP rate-limit middleware of
// package httplimit adds to an empty handler, beside go-chi/httprate,
// sethvargo/go-limiter's httplimit and didip/tollbooth in the same run. It
// is a module of its own so that the peers stay out of the main go.mod.
// Every limiter is set to admit every request of a run, and a benchmark
// fails when more than one request in 10,000 is answered otherwise.
//
//	cd bench/httppeers && go test -run '^$' -bench . -benchmem -count 3
package httppeers
