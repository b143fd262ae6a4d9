//go:build !unix

package prometheus_test

import "time"

// cpuTime is not measured on this platform; BenchmarkMetricsOverhead then
// reports wall time only.
func cpuTime() time.Duration { return 0 }
