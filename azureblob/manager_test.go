package azureblob_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/lease"

	"github.com/costwise/batcher/leasetest"
	"github.com/google/uuid"
)

// Azurite's fixed development account; its key is published in the Azurite
// documentation and works only against the emulator.
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// needServer stops the test when an integration server is unavailable: a
// failure under CI, where scripts/test must have started it, and a skip
// elsewhere.
func needServer(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// azuriteURL returns the blob endpoint of the Azurite that scripts/test
// started, after checking that it accepts connections.
func azuriteURL(t *testing.T) string {
	t.Helper()
	raw := os.Getenv("BATCHER_AZURITE_URL")
	if raw == "" {
		needServer(t, "BATCHER_AZURITE_URL is not set; start Azurite with scripts/lib/svc-azurite.sh (azurite_start)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("BATCHER_AZURITE_URL %q: %v", raw, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		needServer(t, "Azurite at %s is not reachable: %v", raw, err)
	}
	conn.Close()
	return raw
}

// uniqueContainer returns a container name no other test uses; Azure allows
// 3-63 lower-case letters, digits and single hyphens.
func uniqueContainer() string {
	return "bt-" + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// newAzuriteManager returns a lease manager over a container of its own in
// the Azurite at serviceURL, authenticated with the shared key.
func newAzuriteManager(t *testing.T, serviceURL string) *azureblob.LeaseManager {
	return azuriteManagerFor(t, serviceURL, uniqueContainer())
}

// azuriteManagerFor returns a lease manager over container in the Azurite
// at serviceURL, to look at what a shared resource keeps there.
func azuriteManagerFor(t *testing.T, serviceURL, container string) *azureblob.LeaseManager {
	m := azureblob.NewLeaseManager(azuriteAccount, container).
		WithServiceURL(serviceURL).
		WithMasterKey(azuriteKey)
	t.Cleanup(m.CloseIdleConnections)
	return m
}

// TestAzureLeaseConformance runs the LeaseManager suite against Azurite,
// each subtest in a fresh container. The expiry subtests wait for real
// 15-second leases (about 35 s in all), so it runs in parallel with the other
// Azure tests; -short skips them.
func TestAzureLeaseConformance(t *testing.T) {
	t.Parallel()
	serviceURL := azuriteURL(t)
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Manager {
		return newAzuriteManager(t, serviceURL)
	}, leasetest.Options{SkipExpiry: testing.Short()})
}

// TestAzureLeaseRejectsDurations checks that durations Azure would refuse
// are reported as LeaseDurationError before any request is made.
func TestAzureLeaseRejectsDurations(t *testing.T) {
	// No credential: a request would fail with AzureCredentialError, so a
	// LeaseDurationError proves the check comes first.
	m := azureblob.NewLeaseManager("account", "container")
	owner := uuid.NewString()
	for _, d := range []time.Duration{0, time.Second, 14 * time.Second, 61 * time.Second, -1} {
		for name, err := range map[string]error{
			"Acquire": m.Acquire(context.Background(), 0, owner, d),
			"Renew":   m.Renew(context.Background(), 0, owner, d),
		} {
			var lde lease.DurationError
			if !errors.As(err, &lde) || lde.Duration != d {
				t.Errorf("%s with %v: %v, want a LeaseDurationError for %v", name, d, err, d)
			}
		}
	}
}

// TestAzureLeaseMissingCredential checks that every call without a
// credential returns AzureCredentialError naming the account.
func TestAzureLeaseMissingCredential(t *testing.T) {
	m := azureblob.NewLeaseManager("myaccount", "container")
	ctx := context.Background()
	owner := uuid.NewString()
	_, snapErr := m.Snapshot(ctx, 1)
	for name, err := range map[string]error{
		"Provision":     m.Provision(ctx, 1, nil),
		"Snapshot":      snapErr,
		"Acquire":       m.Acquire(ctx, 0, owner, 15*time.Second),
		"Release":       m.Release(ctx, 0, owner),
		"PublishDemand": m.PublishDemand(ctx, owner, 1, time.Minute),
	} {
		var ce azureblob.CredentialError
		if !errors.As(err, &ce) || ce.Account != "myaccount" {
			t.Errorf("%s: %v, want an AzureCredentialError for myaccount", name, err)
		}
	}
}

// TestAzureLeaseOwnerMustBeUUID checks that an owner Azure would reject as a
// lease id is refused with a message that says why.
func TestAzureLeaseOwnerMustBeUUID(t *testing.T) {
	m := azureblob.NewLeaseManager("account", "container").WithMasterKey(azuriteKey)
	err := m.Acquire(context.Background(), 0, "not-a-uuid", 15*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Fatalf("Acquire with owner not-a-uuid: %v, want an error saying it is not a UUID", err)
	}
}

// TestAzureLeaseRenewChangesDuration checks that a renewal asking for
// another duration than the lease was acquired with gets it, also when the
// renewing manager did not acquire the lease itself: 20 s after a 15-s lease
// was renewed for 60 s, another owner still conflicts. It is the one Azure
// test that waits for a lease term to pass, and runs in parallel.
func TestAzureLeaseRenewChangesDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 20 s for a lease to outlive its first term")
	}
	t.Parallel()
	serviceURL := azuriteURL(t)
	m := newAzuriteManager(t, serviceURL)
	ctx := context.Background()
	a, b := uuid.NewString(), uuid.NewString()
	if err := m.Provision(ctx, 1, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := m.Acquire(ctx, 0, a, 15*time.Second); err != nil {
		t.Fatalf("Acquire 15 s: %v", err)
	}
	// A second manager over the same container, as after a restart of the
	// process that kept owner a.
	other := azureblob.NewLeaseManager(azuriteAccount, m.ContainerName()).
		WithServiceURL(serviceURL).WithMasterKey(azuriteKey)
	t.Cleanup(other.CloseIdleConnections)
	if err := other.Renew(ctx, 0, a, 60*time.Second); err != nil {
		t.Fatalf("Renew 60 s from another manager: %v", err)
	}
	time.Sleep(20 * time.Second)
	var conflict lease.ConflictError
	if err := m.Acquire(ctx, 0, b, 15*time.Second); !errors.As(err, &conflict) {
		t.Fatalf("Acquire by another owner 20 s after a 60-s renewal: %v, want LeaseConflictError", err)
	}
	if err := m.Release(ctx, 0, a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := m.Acquire(ctx, 0, b, 15*time.Second); err != nil {
		t.Fatalf("Acquire by another owner after the release: %v", err)
	}
}
