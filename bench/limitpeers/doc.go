// Package limitpeers benchmarks package limit's stores beside the keyed
// rate limiters a Go user would pick instead, in the same run. It is its own
// module so that the peers never enter the main module's dependencies.
package limitpeers
