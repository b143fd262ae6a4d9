package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/costwise/batcher"
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/redislease"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Azurite's fixed development account. Its key is published in the Azurite
// documentation and works only against the emulator.
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// store opens namespaces on one coordination store: every scenario gets a
// fresh one (an Azure container, a Redis key prefix, a memory manager), so
// that nothing a scenario leaves behind disturbs the next.
type store struct {
	name string
	open func(ctx context.Context) (*namespace, error)
	shut func() // releases what the store itself holds (clients)
}

// namespace is one set of partitions; newManager returns the lease manager
// of one instance, as a separate process would make its own.
type namespace struct {
	newManager func() batcher.LeaseManager
	cleanup    func() // deletes what the namespace created in the store
	// listing measures what one Snapshot of count partitions moves; nil
	// when the store cannot tell.
	listing func(ctx context.Context, count int) (listingCost, error)
}

// unavailableError says that a store is not configured or not reachable.
type unavailableError struct{ why string }

func (e unavailableError) Error() string { return e.why }

// connectStore returns the named store, an unavailableError when it is not
// configured or does not answer, or another error.
func connectStore(ctx context.Context, name string) (*store, error) {
	switch name {
	case "memory":
		return memoryStore(), nil
	case "azurite":
		return azuriteStore(ctx, false)
	case "azurite-table":
		return azuriteStore(ctx, true)
	case "redis":
		return redisStore(ctx)
	}
	return nil, fmt.Errorf("unknown store %q", name)
}

func memoryStore() *store {
	return &store{
		name: "memory",
		open: func(context.Context) (*namespace, error) {
			mgr := batcher.NewMemoryLeaseManager()
			return &namespace{
				newManager: func() batcher.LeaseManager { return mgr },
				cleanup:    func() {},
				listing:    func(ctx context.Context, count int) (listingCost, error) { return memoryListing(ctx, mgr, count) },
			}, nil
		},
		shut: func() {},
	}
}

// azuriteStore uses the Azurite at BATCHER_AZURITE_URL, a container per
// namespace, with a blob per partition or, when table is set, the lease
// table layout.
func azuriteStore(ctx context.Context, table bool) (*store, error) {
	raw := os.Getenv("BATCHER_AZURITE_URL")
	if raw == "" {
		return nil, unavailableError{"BATCHER_AZURITE_URL is not set (source scripts/lib/services.sh && services_start)"}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("BATCHER_AZURITE_URL %q is not a URL", raw)
	}
	if err := dial(ctx, u.Host); err != nil {
		return nil, unavailableError{fmt.Sprintf("Azurite at %s does not answer: %v", raw, err)}
	}
	name := "azurite"
	if table {
		name = "azurite-table"
	}
	return &store{
		name: name,
		open: func(ctx context.Context) (*namespace, error) { return azuriteNamespace(raw, table), nil },
		shut: func() {},
	}, nil
}

func azuriteNamespace(serviceURL string, table bool) *namespace {
	name := "bb-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	// azureManager is what both layouts' managers are, for this namespace.
	type azureManager interface {
		batcher.LeaseManager
		CloseIdleConnections()
	}
	newManager := func() azureManager {
		return batcher.NewAzureLeaseManager(azuriteAccount, name).WithServiceURL(serviceURL).WithMasterKey(azuriteKey)
	}
	listing := azureListing
	if table {
		newManager = func() azureManager {
			return azureblob.NewTableLeaseManager(azuriteAccount, name).WithServiceURL(serviceURL).WithMasterKey(azuriteKey)
		}
		listing = tableListing
	}
	var mu sync.Mutex
	var made []azureManager
	return &namespace{
		listing: func(ctx context.Context, count int) (listingCost, error) {
			return listing(ctx, serviceURL, name, count)
		},
		newManager: func() batcher.LeaseManager {
			m := newManager()
			mu.Lock()
			made = append(made, m)
			mu.Unlock()
			return m
		},
		cleanup: func() {
			deleteContainer(serviceURL, name)
			mu.Lock()
			defer mu.Unlock()
			for _, m := range made {
				m.CloseIdleConnections()
			}
		},
	}
}

// deleteContainer removes a namespace's container; a failure only leaves
// garbage in an emulator, so it is ignored.
func deleteContainer(serviceURL, name string) {
	cred, err := container.NewSharedKeyCredential(azuriteAccount, azuriteKey)
	if err != nil {
		return
	}
	c, err := container.NewClientWithSharedKeyCredential(strings.TrimRight(serviceURL, "/")+"/"+name, cred, nil)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = c.Delete(ctx, nil)
}

// redisStore uses the Redis at BATCHER_REDIS_ADDR, a key prefix per
// namespace and a client per instance.
func redisStore(ctx context.Context) (*store, error) {
	addr := os.Getenv("BATCHER_REDIS_ADDR")
	if addr == "" {
		return nil, unavailableError{"BATCHER_REDIS_ADDR is not set (source scripts/lib/services.sh && services_start)"}
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := admin.Ping(pctx).Err(); err != nil {
		admin.Close()
		return nil, unavailableError{fmt.Sprintf("Redis at %s does not answer PING: %v", addr, err)}
	}
	return &store{
		name: "redis",
		open: func(context.Context) (*namespace, error) {
			prefix := "batcherbench-" + uuid.NewString()
			// Clients are closed with their namespace, so that a run of
			// many namespaces of a hundred instances each does not pile up
			// connections.
			var mu sync.Mutex
			var clients []*redis.Client
			return &namespace{
				newManager: func() batcher.LeaseManager {
					c := redis.NewClient(&redis.Options{Addr: addr})
					mu.Lock()
					clients = append(clients, c)
					mu.Unlock()
					return redislease.New(c, prefix)
				},
				cleanup: func() {
					deleteKeys(admin, prefix)
					mu.Lock()
					defer mu.Unlock()
					for _, c := range clients {
						c.Close()
					}
				},
				listing: func(ctx context.Context, count int) (listingCost, error) {
					return redisListing(ctx, addr, prefix, count)
				},
			}, nil
		},
		shut: func() { admin.Close() },
	}, nil
}

// deleteKeys deletes every key of the resource with prefix.
func deleteKeys(c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "{"+prefix+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// dial checks that something accepts TCP connections at host:port.
func dial(ctx context.Context, hostport string) error {
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return err
	}
	return conn.Close()
}
