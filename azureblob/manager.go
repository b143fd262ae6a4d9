package azureblob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/costwise/batcher/lease"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	bloblease "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
)

// Azure accepts fixed lease durations from 15 to 60 seconds (or infinite,
// which a shared resource never wants: a crashed holder would keep its
// partition forever).
const (
	// MinLeaseDuration is the shortest lease Azure Blob Storage grants.
	MinLeaseDuration = 15 * time.Second
	// MaxLeaseDuration is the longest fixed lease Azure Blob Storage
	// grants.
	MaxLeaseDuration = 60 * time.Second
)

// provisionParallelism bounds the concurrent requests of Provision.
const provisionParallelism = 8

// LeaseManager is a lease.Manager that keeps partitions as zero-byte
// block blobs "0".."N-1" in an Azure Blob Storage container, their leases as
// blob leases (the owner is the lease id, so owners must be UUIDs), and the
// demand of each instance as a zero-byte blob "demand/<owner>" whose
// metadata holds the partition count and ttl.
//
// Whether a demand record is live is judged with the storage service's own
// clock: the record's Last-Modified time against the Date of the List Blobs
// response that read it. The clocks of the instances never enter, so their
// skew does not matter. Both values have one-second resolution, so a record
// stays live for at least its ttl and lapses within ttl plus two seconds.
//
// Each method is one storage transaction, except Provision (one per
// partition, plus a listing to delete records of owners that are long gone)
// and Renew when asked for a duration other than the one the lease was
// acquired with (two). Snapshot is a single List Blobs call unless the
// container holds more than 5,000 blobs.
//
// Configure it with the With* methods before its first use, which builds the
// storage client: a method called without a credential configured returns an
// CredentialError. It is safe for concurrent use.
type LeaseManager struct {
	acct *account // the storage account, its credential and client

	mu            sync.Mutex         // guards leaseDuration
	leaseDuration map[leaseKey]int32 // seconds each held lease was last granted for
}

// leaseKey names one owner's lease on one partition.
type leaseKey struct {
	partition int
	owner     string
}

// NewLeaseManager returns a lease manager for container containerName
// of storage account accountName, at https://<account>.blob.core.windows.net
// unless WithServiceURL or WithConnectionString says otherwise. It needs a
// credential: WithMasterKey, WithCredential or WithConnectionString.
func NewLeaseManager(accountName, containerName string) *LeaseManager {
	return &LeaseManager{acct: newAccount(accountName, containerName), leaseDuration: map[leaseKey]int32{}}
}

// WithMasterKey authenticates with the storage account's shared key.
func (m *LeaseManager) WithMasterKey(key string) *LeaseManager {
	m.acct.set(func(a *account) { a.masterKey = key })
	return m
}

// WithCredential authenticates with Microsoft Entra ID, for instance with
// azidentity.NewDefaultAzureCredential or a managed identity credential; the
// identity needs the Storage Blob Data Contributor role on the container.
// Entra ID tokens are only sent over HTTPS.
func (m *LeaseManager) WithCredential(cred azcore.TokenCredential) *LeaseManager {
	m.acct.set(func(a *account) { a.credential = cred })
	return m
}

// WithConnectionString takes the endpoint and credential from a storage
// connection string (its account key or SAS token). It overrides the account
// name, WithServiceURL and the other credentials.
func (m *LeaseManager) WithConnectionString(connString string) *LeaseManager {
	m.acct.set(func(a *account) { a.connString = connString })
	return m
}

// WithServiceURL sets the blob service endpoint, such as
// http://127.0.0.1:10000/devstoreaccount1 for Azurite or the endpoint of a
// sovereign cloud. The default is https://<account>.blob.core.windows.net.
func (m *LeaseManager) WithServiceURL(serviceURL string) *LeaseManager {
	m.acct.set(func(a *account) { a.serviceURL = serviceURL })
	return m
}

// CloseIdleConnections closes the manager's idle HTTP connections, whose
// reader goroutines would otherwise linger until the server times them out.
// A later call opens new ones.
func (m *LeaseManager) CloseIdleConnections() { m.acct.closeIdleConnections() }

// partitionName is the blob name of partition i.
func partitionName(i int) string { return strconv.Itoa(i) }

// partitionIndex parses a partition blob name; it rejects every name that
// partitionName would not produce, such as "007".
func partitionIndex(name string) (int, bool) {
	i, err := strconv.Atoi(name)
	if err != nil || i < 0 || strconv.Itoa(i) != name {
		return 0, false
	}
	return i, true
}

// leaseSeconds converts d to the whole seconds Azure takes, rounding up so
// the store never holds a lease for less time than the caller counts on.
func leaseSeconds(d time.Duration) (int32, error) {
	if d < MinLeaseDuration || d > MaxLeaseDuration {
		return 0, lease.DurationError{Duration: d, Min: MinLeaseDuration, Max: MaxLeaseDuration}
	}
	return int32((d + time.Second - 1) / time.Second), nil
}

// storageError turns a storage error into what the lease.Manager contract
// promises: context errors unchanged, lease conflicts and missing partitions
// typed, anything else wrapped with what was being done.
func storageError(ctx context.Context, err error, op string, partition int) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case bloberror.HasCode(err, bloberror.LeaseAlreadyPresent,
		bloberror.LeaseIDMismatchWithLeaseOperation, bloberror.LeaseNotPresentWithLeaseOperation,
		bloberror.LeaseIsBrokenAndCannotBeRenewed, bloberror.LeaseIsBreakingAndCannotBeAcquired,
		bloberror.LeaseAlreadyBroken, bloberror.LeaseLost):
		return lease.ConflictError{Partition: partition}
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound,
		bloberror.ContainerBeingDeleted):
		return lease.PartitionMissingError{Partition: partition}
	}
	return fmt.Errorf("batcher: azure %s of partition %d: %w", op, partition, sdkError(err))
}

// leaseClient returns a lease client for owner's lease on partition.
func (m *LeaseManager) leaseClient(partition int, owner string) (*bloblease.BlobClient, error) {
	if _, err := uuid.Parse(owner); err != nil {
		return nil, fmt.Errorf("batcher: azure lease owner %q is not a UUID, as Azure requires of lease ids: %w", owner, err)
	}
	c, err := m.acct.containerClient()
	if err != nil {
		return nil, err
	}
	return bloblease.NewBlobClient(c.NewBlobClient(partitionName(partition)), &bloblease.BlobClientOptions{LeaseID: &owner})
}

// setDuration records the seconds owner's lease on partition was granted
// for; zero forgets it.
func (m *LeaseManager) setDuration(partition int, owner string, secs int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if secs == 0 {
		delete(m.leaseDuration, leaseKey{partition, owner})
		return
	}
	m.leaseDuration[leaseKey{partition, owner}] = secs
}

// duration returns the seconds owner's lease on partition was granted for,
// or zero when this manager did not grant it.
func (m *LeaseManager) duration(partition int, owner string) int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaseDuration[leaseKey{partition, owner}]
}

// Acquire takes the lease on partition with owner as its lease id, for d
// rounded up to whole seconds; d must be within 15 to 60 seconds, else it
// returns a lease.DurationError. Acquiring a lease the owner already holds
// extends it, as Azure allows.
func (m *LeaseManager) Acquire(ctx context.Context, partition int, owner string, d time.Duration) error {
	lc, secs, err := m.leaseFor(partition, owner, d)
	if err != nil {
		return err
	}
	return m.take(ctx, lc, partition, owner, secs, "lease acquire")
}

// leaseFor checks d and returns the lease client of partition for owner
// with d in whole seconds.
func (m *LeaseManager) leaseFor(partition int, owner string, d time.Duration) (*bloblease.BlobClient, int32, error) {
	secs, err := leaseSeconds(d)
	if err != nil {
		return nil, 0, err
	}
	lc, err := m.leaseClient(partition, owner)
	return lc, secs, err
}

// take acquires the lease for secs seconds and remembers that duration, so
// that Renew knows whether the lease must be taken again to change it.
func (m *LeaseManager) take(ctx context.Context, lc *bloblease.BlobClient, partition int, owner string, secs int32, what string) error {
	if _, err := lc.AcquireLease(ctx, secs, nil); err != nil {
		return storageError(ctx, err, what, partition)
	}
	m.setDuration(partition, owner, secs)
	return nil
}

// Renew extends owner's lease on partition to d from now. Azure renews a
// lease for the duration it was acquired with, so when d differs from that
// (or this manager did not acquire it) the renewal, which proves ownership,
// is followed by an acquire with the same lease id to set the new duration.
// As in Azure, the owner of an expired lease that nobody took since may
// renew it.
func (m *LeaseManager) Renew(ctx context.Context, partition int, owner string, d time.Duration) error {
	lc, secs, err := m.leaseFor(partition, owner, d)
	if err != nil {
		return err
	}
	if _, err := lc.RenewLease(ctx, nil); err != nil {
		return storageError(ctx, err, "lease renew", partition)
	}
	if m.duration(partition, owner) == secs {
		return nil
	}
	return m.take(ctx, lc, partition, owner, secs, "lease renew")
}

// Release ends owner's lease on partition, so any owner may acquire it at
// once.
func (m *LeaseManager) Release(ctx context.Context, partition int, owner string) error {
	lc, err := m.leaseClient(partition, owner)
	if err != nil {
		return err
	}
	if _, err := lc.ReleaseLease(ctx, nil); err != nil {
		return storageError(ctx, err, "lease release", partition)
	}
	m.setDuration(partition, owner, 0)
	return nil
}

// emptyBody is the content of every blob this manager writes.
func emptyBody() io.ReadSeekCloser { return streaming.NopCloser(bytes.NewReader(nil)) }

// Provision creates the container unless it exists, then partitions
// 0..count-1 that do not exist, a few at a time. Each partition is created
// with If-None-Match "*", so when many instances provision at once exactly
// one creates it and the others verify it; a leased partition is left as it
// is. Reports follow in order: the container first, then the partitions by
// index, each once it is known. It also deletes the demand records of owners
// that stopped publishing long ago.
func (m *LeaseManager) Provision(ctx context.Context, count int, report func(event string, val int, msg string)) error {
	if report == nil {
		report = func(string, int, string) {}
	}
	c, err := m.acct.containerClient()
	if err != nil {
		return err
	}
	event, err := createContainer(ctx, c)
	if err != nil {
		return err
	}
	report(event, 0, RedactURL(c.URL()))
	created := make([]int8, count) // 1 created, -1 verified, 0 unknown
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(provisionParallelism)
	for i := 0; i < count; i++ {
		g.Go(func() error {
			ok, err := createPartition(gctx, c, i)
			if err == nil {
				created[i] = -1
				if ok {
					created[i] = 1
				}
			}
			return err
		})
	}
	err = g.Wait()
	for i, s := range created {
		switch s {
		case 1:
			report(lease.CreatedBlobEvent, i, "")
		case -1:
			report(lease.VerifiedBlobEvent, i, "")
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return m.sweepDemands(ctx, c)
}

// createPartition creates partition i unless it exists and reports whether
// it created it.
func createPartition(ctx context.Context, c *container.Client, i int) (bool, error) {
	any := azcore.ETagAny
	_, err := c.NewBlockBlobClient(partitionName(i)).Upload(ctx, emptyBody(), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &any},
		},
	})
	switch {
	case err == nil:
		return true, nil
	// Azure answers BlobAlreadyExists or ConditionNotMet for an existing
	// blob, and LeaseIdMissing first when it is leased; Azurite differs.
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet, bloberror.LeaseIDMissing):
		return false, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	}
	return false, fmt.Errorf("batcher: azure create partition %d: %w", i, sdkError(err))
}

// ContainerName returns the name of the container the partitions are in.
func (m *LeaseManager) ContainerName() string { return m.acct.container }
