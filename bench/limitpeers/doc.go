// Package limitpeers benchmarks package limit's stores beside the keyed
// rate limiters a Go user would pick instead, in the same run. It is its own
// module so that the peers never enter the main module's dependencies.
//
// Every benchmark names the path it measures and checks it from the
// decision of every call: "admitted" (a limit no run reaches; more than one
// denial in 10,000 fails the run), "denied" (a hot key whose burst is spent
// before the timing; more admissions than the burst and the refill allow
// fails it), and the Zipf "limited" mix, whose share of denials is reported.
// A denial and an admission cost a store different work, so a ratio is only
// meaningful between runs on the same path.
//
//	cd bench/limitpeers && go test -run XXX -bench 'HotKey|Zipf1M|Redis' -benchmem -count 5
package limitpeers
