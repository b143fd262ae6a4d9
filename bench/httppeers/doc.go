// Package httppeers measures the overhead the HTTP rate-limit middleware of
// package httplimit adds to an empty handler, beside go-chi/httprate,
// sethvargo/go-limiter's httplimit and didip/tollbooth in the same run. It
// is a module of its own so that the peers stay out of the main go.mod.
//
//	cd bench/httppeers && go test -run '^$' -bench . -benchmem -count 3
package httppeers
