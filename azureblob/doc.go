// Package azureblob keeps a shared capacity in Azure Blob Storage: LeaseManager
// is a lease.Manager whose partitions are zero-byte blobs with blob leases and
// whose demand records are blobs of their own, and SharedResource is a
// sharing.Resource over it with the configuration of go-batcher v1.8.0's
// AzureSharedResource (package batcher names both under their v1.8.0 names).
// It talks to the service through the azblob SDK, so Azurite serves for
// tests; authenticate with a shared key, a Microsoft Entra ID credential or a
// connection string.
package azureblob
