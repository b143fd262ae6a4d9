package azureblob

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/costwise/batcher/lease"
)

// account is where a manager keeps its leases and how it reaches them: the
// storage account and container, the endpoint, the credential and the HTTP
// client. Its settings are made before first use, which builds the container
// client once. It is safe for concurrent use.
type account struct {
	name      string // the storage account
	container string // the container of the leases

	mu         sync.Mutex // guards everything below
	serviceURL string
	masterKey  string
	credential azcore.TokenCredential
	connString string
	httpClient *http.Client
	client     *container.Client // built by the first containerClient
}

// newAccount returns the settings of container containerName of storage
// account accountName, with no credential yet.
func newAccount(accountName, containerName string) *account {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A ramp acquires many partitions at once; keep their connections.
	transport.MaxIdleConnsPerHost = 32
	return &account{name: accountName, container: containerName, httpClient: &http.Client{Transport: transport}}
}

// set changes the settings under the lock.
func (a *account) set(change func(a *account)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	change(a)
}

// closeIdleConnections closes the idle HTTP connections, whose reader
// goroutines would otherwise linger until the server times them out.
func (a *account) closeIdleConnections() { a.httpClient.CloseIdleConnections() }

// containerClient returns the storage client, building it on first use.
func (a *account) containerClient() (*container.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, nil
	}
	c, err := a.newClient()
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// newClient builds the storage client from the settings. It requires a.mu.
func (a *account) newClient() (*container.Client, error) {
	if a.container == "" {
		return nil, ConfigError{Reason: "the container name is empty"}
	}
	opts := &container.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport: redactingTransport{a.httpClient},
		// The shared resource retries on its own schedule and counts a
		// lease from when its request was sent; long SDK retries would
		// only delay what it learns.
		Retry: policy.RetryOptions{
			MaxRetries:    2,
			RetryDelay:    100 * time.Millisecond,
			MaxRetryDelay: time.Second,
			TryTimeout:    15 * time.Second,
		},
		Telemetry: policy.TelemetryOptions{ApplicationID: "costwise-batcher"},
	}}
	if a.connString != "" {
		c, err := container.NewClientFromConnectionString(a.connString, a.container, opts)
		if err != nil {
			return nil, ConfigError{Reason: "the connection string is invalid", Err: sdkError(err)}
		}
		return c, nil
	}
	if a.masterKey == "" && a.credential == nil {
		return nil, CredentialError{Account: a.name}
	}
	serviceURL := a.serviceURL
	if serviceURL == "" {
		if a.name == "" {
			return nil, ConfigError{Reason: "the account name is empty and no service URL was given"}
		}
		serviceURL = "https://" + a.name + ".blob.core.windows.net"
	}
	containerURL := runtime.JoinPaths(serviceURL, a.container)
	if a.masterKey != "" {
		cred, err := container.NewSharedKeyCredential(a.name, a.masterKey)
		if err != nil {
			return nil, ConfigError{Reason: "the master key is invalid", Err: sdkError(err)}
		}
		c, err := container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
		return c, sdkError(err)
	}
	c, err := container.NewClient(containerURL, a.credential, opts)
	return c, sdkError(err)
}

// createContainer creates the container and returns the event that
// describes what it found.
func createContainer(ctx context.Context, c *container.Client) (string, error) {
	_, err := c.Create(ctx, nil)
	switch {
	case err == nil:
		return lease.CreatedContainerEvent, nil
	case bloberror.HasCode(err, bloberror.ContainerAlreadyExists):
		return lease.VerifiedContainerEvent, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	return "", fmt.Errorf("batcher: azure create container %s: %w", RedactURL(c.URL()), sdkError(err))
}
