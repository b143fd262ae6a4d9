package azureblob

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	bloblease "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/costwise/batcher/lease"
	"github.com/google/uuid"
)

// This file holds the reading side of LeaseManager, Snapshot, and the
// demand records: how they are written, judged live and cleaned up.

const (
	// demandPrefix names the demand records: "demand/<owner>". Partition
	// blobs are named by their index, so the two never collide.
	demandPrefix = "demand/"
	// Metadata keys of a demand record; Azure metadata keys are
	// case-insensitive, and they are written in lower case.
	metaPartitions = "partitions"
	metaTTL        = "ttlms"
	// serverTimeGranularity is the resolution of the Date and Last-Modified
	// headers that decide whether a demand record is live.
	serverTimeGranularity = time.Second
	// staleDemandAge is how long past its lapse a demand record must be
	// before Provision deletes it, so that an owner that is merely slow to
	// publish again never loses a record it is about to refresh.
	staleDemandAge = time.Minute
)

// Snapshot reads every partition's lease state and the live demand records
// with one List Blobs call (more only past 5,000 blobs). A missing container
// reads as every partition missing and no demand.
func (m *LeaseManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	c, err := m.acct.containerClient()
	if err != nil {
		return lease.Snapshot{}, err
	}
	snap := lease.Snapshot{Partitions: make([]lease.PartitionState, count), Demands: map[string]uint32{}}
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Include: container.ListBlobsInclude{Metadata: true},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return lease.Snapshot{}, ctx.Err()
		case bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted):
			return lease.Snapshot{Partitions: make([]lease.PartitionState, count), Demands: map[string]uint32{}}, nil
		default:
			return lease.Snapshot{}, fmt.Errorf("batcher: azure list blobs in %s: %w", RedactURL(c.URL()), sdkError(err))
		}
		if page.Date == nil {
			return lease.Snapshot{}, fmt.Errorf("batcher: azure list blobs in %s: the response has no Date header to judge demand records by", RedactURL(c.URL()))
		}
		if page.Segment == nil {
			continue
		}
		for _, item := range page.Segment.BlobItems {
			noteBlob(&snap, item, *page.Date)
		}
	}
	return snap, nil
}

// noteBlob records what one listed blob says in snap: the state of a
// partition within range, or a live demand. now is the server's time.
func noteBlob(snap *lease.Snapshot, item *container.BlobItem, now time.Time) {
	if item == nil || item.Name == nil {
		return
	}
	if i, ok := partitionIndex(*item.Name); ok {
		if i < len(snap.Partitions) {
			snap.Partitions[i] = partitionState(item.Properties)
		}
		return
	}
	owner, ok := strings.CutPrefix(*item.Name, demandPrefix)
	if !ok || item.Properties == nil || item.Properties.LastModified == nil {
		return
	}
	partitions, ttl, ok := parseDemand(item.Metadata)
	if ok && demandLive(*item.Properties.LastModified, now, ttl) {
		snap.Demands[owner] = partitions
	}
}

// partitionState maps a blob's lease state: a lease being broken still
// excludes others, an expired or broken one does not.
func partitionState(p *container.BlobProperties) lease.PartitionState {
	if p == nil || p.LeaseState == nil {
		return lease.PartitionFree
	}
	switch *p.LeaseState {
	case bloblease.StateTypeLeased, bloblease.StateTypeBreaking:
		return lease.PartitionLeased
	}
	return lease.PartitionFree
}

// demandLive reports whether a record last written at modified (server
// time) with ttl is live at now (server time). Both times are truncated to
// whole seconds, so the true age is within a second of now-modified either
// way: a record is never dropped before ttl and is gone by ttl + 2 s.
func demandLive(modified, now time.Time, ttl time.Duration) bool {
	return now.Sub(modified) < ttl+serverTimeGranularity
}

// parseDemand reads a demand record's metadata; ok is false when it is not
// one this manager wrote.
func parseDemand(meta map[string]*string) (partitions uint32, ttl time.Duration, ok bool) {
	var p, t string
	for k, v := range meta {
		if v == nil {
			continue
		}
		switch strings.ToLower(k) {
		case metaPartitions:
			p = *v
		case metaTTL:
			t = *v
		}
	}
	n, err1 := strconv.ParseUint(p, 10, 32)
	ms, err2 := strconv.ParseInt(t, 10, 64)
	if err1 != nil || err2 != nil || n == 0 || ms <= 0 {
		return 0, 0, false
	}
	return uint32(n), time.Duration(ms) * time.Millisecond, true
}

// PublishDemand writes owner's demand record, replacing the previous one;
// zero deletes it. A container that does not exist yet is created, since a
// demand needs no partitions.
func (m *LeaseManager) PublishDemand(ctx context.Context, owner string, partitions uint32, ttl time.Duration) error {
	if _, err := uuid.Parse(owner); err != nil {
		return fmt.Errorf("batcher: azure demand owner %q is not a UUID: %w", owner, err)
	}
	c, err := m.acct.containerClient()
	if err != nil {
		return err
	}
	if partitions == 0 {
		return withdrawDemand(ctx, c, owner)
	}
	if ttl <= 0 {
		return fmt.Errorf("batcher: azure demand ttl %v is not positive", ttl)
	}
	err = writeDemand(ctx, c, owner, partitions, ttl)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		if _, err = createContainer(ctx, c); err == nil {
			err = writeDemand(ctx, c, owner, partitions, ttl)
		}
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("batcher: azure publish demand of %s: %w", owner, sdkError(err))
}

// writeDemand uploads owner's record; its Last-Modified time is when the
// ttl starts.
func writeDemand(ctx context.Context, c *container.Client, owner string, partitions uint32, ttl time.Duration) error {
	p := strconv.FormatUint(uint64(partitions), 10)
	t := strconv.FormatInt(ttl.Milliseconds(), 10)
	_, err := c.NewBlockBlobClient(demandPrefix+owner).Upload(ctx, emptyBody(), &blockblob.UploadOptions{
		Metadata: map[string]*string{metaPartitions: &p, metaTTL: &t},
	})
	return err
}

// withdrawDemand deletes owner's record; one that is already gone is fine.
func withdrawDemand(ctx context.Context, c *container.Client, owner string) error {
	_, err := c.NewBlobClient(demandPrefix+owner).Delete(ctx, nil)
	switch {
	case err == nil, bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("batcher: azure withdraw demand of %s: %w", owner, sdkError(err))
}

// sweepDemands deletes demand records that lapsed more than staleDemandAge
// ago, left by instances that crashed. Each delete is conditional on the
// record's ETag being the one listed, so a record its owner
// refreshes meanwhile survives. Failures are ignored: the next Provision
// tries again, and a stale record is never counted anyway.
func (m *LeaseManager) sweepDemands(ctx context.Context, c *container.Client) error {
	prefix := demandPrefix
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Include: container.ListBlobsInclude{Metadata: true},
		Prefix:  &prefix,
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil || page.Date == nil || page.Segment == nil {
			return ctx.Err()
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name == nil || item.Properties == nil || item.Properties.LastModified == nil {
				continue
			}
			_, ttl, ok := parseDemand(item.Metadata)
			if ok && demandLive(*item.Properties.LastModified, page.Date.Add(-staleDemandAge), ttl) {
				continue
			}
			_, _ = c.NewBlobClient(*item.Name).Delete(ctx, &blob.DeleteOptions{
				AccessConditions: &blob.AccessConditions{
					ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: item.Properties.ETag},
				},
			})
		}
	}
	return ctx.Err()
}
