package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/costwise/batcher"
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/redislease"
	"github.com/redis/go-redis/v9"
)

// listingCost is what one listing (a lease.Manager Snapshot) moves between
// an instance and its store: the demand records of every instance and the
// state of every partition, so it grows with both.
type listingCost struct {
	sent, received int64         // bytes; sent is 0 when not measured
	how            string        // how the figures were obtained
	took           time.Duration // how long the measured listing took
}

// memoryListing estimates a listing of the in-process store from what it
// copies: a byte per partition state, and an owner id and a count per
// demand record. Nothing crosses a wire.
func memoryListing(ctx context.Context, mgr *batcher.MemoryLeaseManager, count int) (listingCost, error) {
	snap, err := mgr.Snapshot(ctx, count)
	if err != nil {
		return listingCost{}, err
	}
	n := int64(len(snap.Partitions))
	for owner := range snap.Demands {
		n += int64(len(owner)) + 4
	}
	return listingCost{received: n, how: "estimate: data copied in process"}, nil
}

// redisListing measures a listing on the wire: a client of its own, whose
// connection counts the bytes written and read, runs the snapshot script
// once to load it and open the connection, then once more, measured.
func redisListing(ctx context.Context, addr, prefix string, count int) (listingCost, error) {
	var sent, recv atomic.Int64
	c := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, sent: &sent, recv: &recv}, nil
		},
	})
	defer c.Close()
	m := redislease.New(c, prefix)
	if _, err := m.Snapshot(ctx, count); err != nil {
		return listingCost{}, err
	}
	s0, r0 := sent.Load(), recv.Load()
	if _, err := m.Snapshot(ctx, count); err != nil {
		return listingCost{}, err
	}
	return listingCost{sent: sent.Load() - s0, received: recv.Load() - r0, how: "measured on the wire (EVALSHA with every lease key, and its reply)"}, nil
}

// countingConn counts the bytes that cross a connection.
type countingConn struct {
	net.Conn
	sent, recv *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.recv.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

// azureListing measures a listing of an Azurite container as the Azure
// store makes it (List Blobs with metadata, every page): the bytes of the
// response bodies.
func azureListing(ctx context.Context, serviceURL, name string, _ int) (listingCost, error) {
	var recv atomic.Int64
	c, err := countingContainer(serviceURL, name, &recv)
	if err != nil {
		return listingCost{}, err
	}
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}})
	pages := 0
	for pager.More() {
		if _, err := pager.NextPage(ctx); err != nil {
			return listingCost{}, err
		}
		pages++
	}
	return listingCost{received: recv.Load(), how: fmt.Sprintf("measured: List Blobs response bodies, %d page(s)", pages)}, nil
}

// tableListing measures what one Snapshot of the lease log moves once an
// instance follows the log: a reader catches up with the log, waits a
// second (the sharing loop's listing pace) and reads again; the second
// read's response bytes and time are the figures.
func tableListing(ctx context.Context, serviceURL, name string, count int) (listingCost, error) {
	m := azureblob.NewTableLeaseManager(azuriteAccount, name).WithServiceURL(serviceURL).WithMasterKey(azuriteKey)
	defer m.CloseIdleConnections()
	if _, err := m.Snapshot(ctx, count); err != nil {
		return listingCost{}, err
	}
	select {
	case <-ctx.Done():
		return listingCost{}, ctx.Err()
	case <-time.After(time.Second):
	}
	before := m.BytesRead()
	began := time.Now()
	if _, err := m.Snapshot(ctx, count); err != nil {
		return listingCost{}, err
	}
	return listingCost{received: int64(m.BytesRead() - before), took: time.Since(began),
		how: "measured: the log read by a Snapshot 1 s after the previous one"}, nil
}

// countingContainer returns a client of container name in the Azurite at
// serviceURL whose response bodies count their bytes into recv.
func countingContainer(serviceURL, name string, recv *atomic.Int64) (*container.Client, error) {
	cred, err := container.NewSharedKeyCredential(azuriteAccount, azuriteKey)
	if err != nil {
		return nil, err
	}
	opts := &container.ClientOptions{ClientOptions: policy.ClientOptions{Transport: countingTransport{recv: recv}}}
	return container.NewClientWithSharedKeyCredential(strings.TrimRight(serviceURL, "/")+"/"+name, cred, opts)
}

// countingTransport sends requests with the default HTTP client and counts
// the bytes of the response bodies read.
type countingTransport struct{ recv *atomic.Int64 }

func (t countingTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body = countingBody{ReadCloser: resp.Body, n: t.recv}
	return resp, nil
}

// countingBody counts the bytes read from a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
