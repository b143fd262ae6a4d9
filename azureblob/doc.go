// Package azureblob keeps a shared capacity in Azure Blob Storage, in one of
// two layouts that instances sharing a container must agree on:
//
//   - a blob per partition (LeaseManager, NewSharedResource): partitions are
//     zero-byte blobs with blob leases and each instance's demand record is a
//     blob of its own, go-batcher v1.8.0's layout. Each lease is renewed
//     with a call of its own, so an instance's calls grow with the
//     partitions it holds.
//   - the lease table (TableLeaseManager, NewTableSharedResource): every
//     lease and demand is kept in a log of changes in append blobs, so an
//     instance acquires, renews or releases any number of partitions in one
//     append, which never conflicts with another instance's, and reads what
//     changed since its last read in one small conditional read; every
//     instance folds the log alike and so agrees on who holds what.
//
// sharing/SIZING.md says which to choose. SharedResource is a
// sharing.Resource over either, with the configuration of go-batcher
// v1.8.0's AzureSharedResource (package batcher names the first layout's
// types under their v1.8.0 names). The package talks to the service through
// the azblob SDK, so Azurite serves for tests; authenticate with a shared
// key, a Microsoft Entra ID credential or a connection string.
package azureblob
