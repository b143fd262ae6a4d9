// Package sharing shares one capacity among the instances (processes,
// replicas) of a service through exclusive expiring leases on partitions of
// it, kept in a store behind lease.Manager. Resource is the algorithm, a
// RateLimiter for package batcher; MemoryLeaseManager is the in-process
// store for tests and single-process use. Package azureblob and package
// redislease hold the Azure Blob Storage and Redis stores; package batcher
// names these types under their go-batcher v1.8.0 names (SharedResource,
// NewSharedResource, MemoryLeaseManager).
//
// DESIGN.md beside this package explains the design in full.
package sharing
