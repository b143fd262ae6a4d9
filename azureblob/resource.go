package azureblob

import (
	"context"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/sharing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/google/uuid"
)

// SharedResource is a RateLimiter that shares a capacity among
// instances through leases on blobs in an Azure Blob Storage container: a
// sharing.Resource (see its documentation for the algorithm, its timing and
// its cost in storage transactions) over a LeaseManager. Every
// instance sharing the capacity must point at the same container with the
// same shared capacity and factor.
//
// The container and partition blobs are created by Provision when missing,
// and created again without a restart should the store lose them. The
// storage account must exist. Authenticate with one of WithMasterKey,
// WithCredential (Microsoft Entra ID) or WithConnectionString; Provision
// returns a CredentialError when none was given.
//
// Configure it with the With* methods before Provision; they are not safe
// for concurrent use. Every other method is safe for concurrent use.
type SharedResource struct {
	acct          *account // the store's settings and client
	shared        *sharing.Resource
	leaseDuration time.Duration
	provisioned   bool // With methods change nothing once set
}

// NewSharedResource returns a shared resource for sharedCapacity kept
// in container containerName of storage account accountName (endpoint
// https://<account>.blob.core.windows.net unless WithServiceURL or
// WithConnectionString says otherwise). Defaults: factor 1, no reserved
// capacity, max interval 500 ms, leases of 15 s. It needs a credential
// before Provision.
func NewSharedResource(accountName, containerName string, sharedCapacity uint32) *SharedResource {
	mgr := NewLeaseManager(accountName, containerName)
	return &SharedResource{
		acct:          mgr.acct,
		shared:        sharing.New(mgr, sharedCapacity).WithLeaseDuration(sharing.DefaultLeaseDuration),
		leaseDuration: sharing.DefaultLeaseDuration,
	}
}

// NewTableSharedResource returns a shared resource like NewSharedResource
// does, kept in the lease table layout: one blob in the container holds
// every lease and demand (see TableLeaseManager), so that an instance's
// storage calls stay flat however many partitions it holds. Every instance
// sharing the container must use the same layout. The defaults and the
// configuration are those of NewSharedResource.
func NewTableSharedResource(accountName, containerName string, sharedCapacity uint32) *SharedResource {
	mgr := NewTableLeaseManager(accountName, containerName)
	return &SharedResource{
		acct:          mgr.acct,
		shared:        sharing.New(mgr, sharedCapacity).WithLeaseDuration(sharing.DefaultLeaseDuration),
		leaseDuration: sharing.DefaultLeaseDuration,
	}
}

// WithMasterKey authenticates with the storage account's shared key.
func (r *SharedResource) WithMasterKey(key string) *SharedResource {
	r.acct.set(func(a *account) { a.masterKey = key })
	return r
}

// WithCredential authenticates with a Microsoft Entra ID token credential,
// such as azidentity.NewDefaultAzureCredential (environment, workload
// identity, managed identity, developer tools) or
// azidentity.NewManagedIdentityCredential. The identity needs the Storage
// Blob Data Contributor role on the container or account, and the endpoint
// must be HTTPS.
func (r *SharedResource) WithCredential(cred azcore.TokenCredential) *SharedResource {
	r.acct.set(func(a *account) { a.credential = cred })
	return r
}

// WithConnectionString takes the endpoint and credential (account key or
// SAS token) from a storage connection string; it overrides the account
// name, WithServiceURL and the other credentials. The signature of a SAS
// token never appears in events or errors: every URL is printed through
// RedactURL.
func (r *SharedResource) WithConnectionString(connString string) *SharedResource {
	r.acct.set(func(a *account) { a.connString = connString })
	return r
}

// WithServiceURL sets the blob service endpoint, for Azurite
// http://127.0.0.1:10000/devstoreaccount1, or that of a sovereign cloud.
// The default is https://<account>.blob.core.windows.net.
func (r *SharedResource) WithServiceURL(serviceURL string) *SharedResource {
	r.acct.set(func(a *account) { a.serviceURL = serviceURL })
	return r
}

// WithFactor sets how much capacity one partition is worth (default 1); the
// shared capacity is split into ceil(shared/factor) partitions, at most 500.
func (r *SharedResource) WithFactor(factor uint32) *SharedResource {
	r.shared.WithFactor(factor)
	return r
}

// WithReservedCapacity sets capacity this instance always has, in addition
// to the shared partitions it holds (default 0).
func (r *SharedResource) WithReservedCapacity(capacity uint32) *SharedResource {
	r.shared.WithReservedCapacity(capacity)
	return r
}

// WithMaxInterval sets, in milliseconds, the longest wait between two looks
// at the store while more partitions are needed (default 500). Longer means
// fewer storage transactions and slower gains.
func (r *SharedResource) WithMaxInterval(ms uint32) *SharedResource {
	r.shared.WithMaxInterval(ms)
	return r
}

// WithLeaseDuration sets the length of the partition leases (default 15 s).
// Azure grants 15 to 60 s; Provision returns a lease.DurationError for any
// other value. Longer leases mean fewer renewals but a longer wait for
// partitions held by an instance that died without stopping.
func (r *SharedResource) WithLeaseDuration(d time.Duration) *SharedResource {
	if r.provisioned {
		return r
	}
	r.leaseDuration = d
	r.shared.WithLeaseDuration(d)
	return r
}

// WithClock sets the clock for lease timing and the loop's timers (default
// the system clock). The store keeps its own time for leases, so a fake
// clock only suits tests that do not depend on real expiry.
func (r *SharedResource) WithClock(c clock.Clock) *SharedResource {
	r.shared.WithClock(c)
	return r
}

// AddListener registers fn for the resource's events (capacity, target,
// allocated, released, failed, error, the provisioning events and
// shutdown) and returns an id for RemoveListener.
func (r *SharedResource) AddListener(fn func(event string, val int, msg string, metadata interface{})) uuid.UUID {
	return r.shared.AddListener(fn)
}

// RemoveListener unregisters the listener with id.
func (r *SharedResource) RemoveListener(id uuid.UUID) {
	r.shared.RemoveListener(id)
}

// Provision checks the configuration (credential, lease duration, capacity
// and factor), then creates the container and partition blobs that do not
// exist, raising created-container or verified-container (msg: the
// container's URL, without a SAS signature) and created-blob or verified-blob (val: the partition
// index). Many instances may provision at once. Call it before Start.
func (r *SharedResource) Provision(ctx context.Context) error {
	if _, err := leaseSeconds(r.leaseDuration); err != nil {
		return err
	}
	if _, err := r.acct.containerClient(); err != nil {
		return err
	}
	if err := r.shared.Provision(ctx); err != nil {
		return err
	}
	r.provisioned = true
	return nil
}

// Start starts the loop that acquires and renews partition leases; it must
// follow Provision. Cancelling ctx ends the loop as Stop does.
func (r *SharedResource) Start(ctx context.Context) error {
	return r.shared.Start(ctx)
}

// Stop ends the loop, releases every lease so other instances can take the
// partitions at once, withdraws this instance's demand, raises the shutdown
// event and closes idle connections. It returns within
// sharing.StopTimeout (2 s) whatever the store does, leaving a release the
// store does not answer to finish in the background, ended by the SDK's
// try timeout; it may be called from a listener. It is idempotent; Capacity
// afterwards is the reserved capacity. A stopped resource cannot be started
// again.
func (r *SharedResource) Stop() {
	r.shared.Stop()
	r.acct.closeIdleConnections()
}

// MaxCapacity returns the shared plus the reserved capacity.
func (r *SharedResource) MaxCapacity() uint32 { return r.shared.MaxCapacity() }

// Capacity returns the reserved capacity plus one factor for each partition
// whose lease is valid now (the last partition is worth only the remainder
// of shared/factor), never more than MaxCapacity.
func (r *SharedResource) Capacity() uint32 { return r.shared.Capacity() }

// GiveMe asks for target capacity: the loop seeks
// ceil((target-reserved)/factor) partitions, within its fair share when
// other instances want them too.
func (r *SharedResource) GiveMe(target uint32) { r.shared.GiveMe(target) }

// SetSharedCapacity changes the shared capacity at run time, provisioning
// the partitions it adds. It returns sharing.UndefinedSharedCapacityError for zero
// and sharing.PartitionsOutOfRangeError past 500 partitions. Every instance should
// be given the same value.
func (r *SharedResource) SetSharedCapacity(capacity uint32) error {
	return r.shared.SetSharedCapacity(capacity)
}

// SetReservedCapacity changes the reserved capacity at run time.
func (r *SharedResource) SetReservedCapacity(capacity uint32) {
	r.shared.SetReservedCapacity(capacity)
}

// Stats returns a snapshot of the resource's state and counters.
func (r *SharedResource) Stats() sharing.Stats { return r.shared.Stats() }
