// Package leasetest is a conformance suite for implementations of
// lease.Manager. Every lease manager in this module (memory, Azure
// Blob, Redis) runs it, so sharing.Resource can rely on the same contract
// whatever the store:
//
//	func TestConformance(t *testing.T) {
//		leasetest.Run(t, func(t *testing.T) lease.Manager {
//			return newIsolatedManager(t) // an empty store of its own
//		})
//	}
//
// Each subtest calls newManager once and expects an empty store that no
// other subtest uses (a fresh container or key prefix). Stores whose time
// cannot be moved by hand wait in real time for the expiry subtests; see
// Options to shorten, speed up or skip them.
package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
)

// Options tunes the suite for a store. The zero value suits every store in
// this module, at the price of real waits of about 35 s in all in the three
// expiry subtests (Azure accepts no lease shorter than 15 s).
type Options struct {
	// LeaseDuration is the lease the subtests that do not wait for expiry
	// ask for. Zero means 15 s. It must be one the store accepts.
	LeaseDuration time.Duration
	// ExpiryLeaseDuration is the lease the expiry subtests ask for, and then
	// wait for it to end. Zero means 15 s; stores that accept shorter leases
	// (Redis, memory) can pass one second or less to run faster.
	ExpiryLeaseDuration time.Duration
	// DemandTTL is the ttl of the demand records the lapse subtest waits
	// for. Zero means 2 s.
	DemandTTL time.Duration
	// Slack is how long past an expiry the suite waits before it checks
	// that the lease or record is gone, covering store clock granularity.
	// Zero means 1 s; a fake clock can use a nanosecond.
	Slack time.Duration
	// Wait makes d of time pass for the store m. Nil means time.Sleep; a
	// store driven by a fake clock passes a function that advances it.
	Wait func(m lease.Manager, d time.Duration)
	// SkipExpiry skips the subtests that wait for leases and demand records
	// to expire.
	SkipExpiry bool
	// Timeout bounds each call the suite makes. Zero means 30 s.
	Timeout time.Duration
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.ExpiryLeaseDuration <= 0 {
		o.ExpiryLeaseDuration = 15 * time.Second
	}
	if o.DemandTTL <= 0 {
		o.DemandTTL = 2 * time.Second
	}
	if o.Slack <= 0 {
		o.Slack = time.Second
	}
	if o.Wait == nil {
		o.Wait = func(_ lease.Manager, d time.Duration) { time.Sleep(d) }
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return o
}

// Run checks the lease.Manager contract with the default Options. newManager
// must return a manager over an empty store of its own each time it is
// called.
func Run(t *testing.T, newManager func(t *testing.T) lease.Manager) {
	t.Helper()
	RunWithOptions(t, newManager, Options{})
}

// suite carries what every subtest needs.
type suite struct {
	opts       Options
	newManager func(t *testing.T) lease.Manager
}

// RunWithOptions checks the lease.Manager contract, each rule in a subtest of
// its own.
func RunWithOptions(t *testing.T, newManager func(t *testing.T) lease.Manager, opts Options) {
	t.Helper()
	s := suite{opts: opts.withDefaults(), newManager: newManager}
	cases := []struct {
		name   string
		expiry bool
		fn     func(t *testing.T)
	}{
		{"ProvisionCreatesAndReports", false, s.provisionCreates},
		{"ProvisionIsIdempotent", false, s.provisionIdempotent},
		{"ProvisionGrows", false, s.provisionGrows},
		{"ProvisionConcurrent", false, s.provisionConcurrent},
		{"ProvisionKeepsLeases", false, s.provisionKeepsLeases},
		{"SnapshotBeforeProvision", false, s.snapshotBeforeProvision},
		{"SnapshotPastProvisioned", false, s.snapshotPastProvisioned},
		{"AcquireConflict", false, s.acquireConflict},
		{"AcquireMissingPartition", false, s.acquireMissing},
		{"AcquireConcurrentOneWinner", false, s.acquireConcurrent},
		{"AcquireConcurrentDistinct", false, s.acquireDistinct},
		{"RenewOnlyByOwner", false, s.renewOnlyByOwner},
		{"RenewBatch", false, s.renewBatch},
		{"AcquireBatch", false, s.acquireBatch},
		{"ReleaseBatch", false, s.releaseBatch},
		{"ReleaseOnlyByOwner", false, s.releaseOnlyByOwner},
		{"ReleaseFreesAtOnce", false, s.releaseFrees},
		{"Demands", false, s.demands},
		{"DemandWithdrawUnknown", false, s.demandWithdrawUnknown},
		{"ContextErrorsPassThrough", false, s.contextErrors},
		{"LeaseExpires", true, s.leaseExpires},
		{"RenewExtends", true, s.renewExtends},
		{"DemandLapses", true, s.demandLapses},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			if c.expiry && s.opts.SkipExpiry {
				t.Skip("leasetest: expiry subtests skipped by Options.SkipExpiry")
			}
			c.fn(t)
		})
	}
}

// ctx returns a context bounded by the suite's timeout.
func (s suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// provisioned returns a fresh manager with count partitions.
func (s suite) provisioned(t *testing.T, count int) lease.Manager {
	t.Helper()
	m := s.newManager(t)
	if err := m.Provision(s.ctx(t), count, nil); err != nil {
		t.Fatalf("Provision(%d): %v", count, err)
	}
	return m
}
