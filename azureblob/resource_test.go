package azureblob_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"

	"github.com/costwise/batcher/batchertest"
	"github.com/google/uuid"
	"go.uber.org/goleak"
)

// newAzureResource returns a resource sharing shared over container in the
// Azurite at serviceURL, with a recorder of its events; it is stopped when
// the test ends.
func newAzureResource(t *testing.T, serviceURL, container string, shared uint32) (*azureblob.SharedResource, *batchertest.Recorder) {
	t.Helper()
	return newAzureResourceLayout(t, serviceURL, container, shared, false)
}

// newAzureResourceLayout is newAzureResource with a blob per partition or,
// when table is set, the lease table layout.
func newAzureResourceLayout(t *testing.T, serviceURL, container string, shared uint32, table bool) (*azureblob.SharedResource, *batchertest.Recorder) {
	t.Helper()
	newResource := azureblob.NewSharedResource
	if table {
		newResource = azureblob.NewTableSharedResource
	}
	r := newResource(azuriteAccount, container, shared).
		WithServiceURL(serviceURL).
		WithMasterKey(azuriteKey)
	rec := batchertest.NewRecorder()
	r.AddListener(rec.Listener())
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			logEvents(t, rec)
		}
	})
	return r, rec
}

// logEvents logs the last events of rec, to tell why a test failed.
func logEvents(t *testing.T, rec *batchertest.Recorder) {
	events := rec.Events()
	if len(events) > 60 {
		events = events[len(events)-60:]
	}
	for _, e := range events {
		t.Logf("event %s val=%d msg=%q", e.Name, e.Val, e.Msg)
	}
}

// startResource provisions and starts r and asks for want capacity.
func startResource(t *testing.T, r *azureblob.SharedResource, want uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Provision(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	r.GiveMe(want)
}

// eventually polls cond every 20 ms until it holds, failing the test after
// timeout; it returns how long it took. The resources under test run on
// their own goroutines against a real server, so there is no clock to drive.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("after %v: %s did not happen", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// vals returns the values of rec's events called name, sorted.
func vals(rec *batchertest.Recorder, name string) []int {
	var out []int
	for _, e := range rec.Named(name) {
		out = append(out, e.Val)
	}
	sort.Ints(out)
	return out
}

// TestAzureSharedProvisionEvents checks the provisioning events: a first
// Provision creates the container and every partition, a second one (another
// instance) verifies them all.
func TestAzureSharedProvisionEvents(t *testing.T) {
	t.Parallel()
	serviceURL, container := azuriteURL(t), uniqueContainer()
	first, rec1 := newAzureResource(t, serviceURL, container, 4000)
	first.WithFactor(1000)
	if err := first.Provision(context.Background()); err != nil {
		t.Fatalf("first Provision: %v", err)
	}
	created := rec1.Named(lease.CreatedContainerEvent)
	if len(created) != 1 || created[0].Msg != serviceURL+"/"+container {
		t.Fatalf("first Provision raised created-container %v, want one with msg %s/%s", created, serviceURL, container)
	}
	if got := fmt.Sprint(vals(rec1, lease.CreatedBlobEvent)); got != "[0 1 2 3]" {
		t.Fatalf("first Provision created blobs %s, want [0 1 2 3]", got)
	}
	if n := rec1.Count(lease.VerifiedBlobEvent) + rec1.Count(lease.VerifiedContainerEvent); n != 0 {
		t.Fatalf("first Provision raised %d verified events, want none", n)
	}

	second, rec2 := newAzureResource(t, serviceURL, container, 4000)
	second.WithFactor(1000)
	if err := second.Provision(context.Background()); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	verified := rec2.Named(lease.VerifiedContainerEvent)
	if len(verified) != 1 || verified[0].Msg != serviceURL+"/"+container {
		t.Fatalf("second Provision raised verified-container %v, want one with the container URL", verified)
	}
	if got := fmt.Sprint(vals(rec2, lease.VerifiedBlobEvent)); got != "[0 1 2 3]" {
		t.Fatalf("second Provision verified blobs %s, want [0 1 2 3]", got)
	}
	if n := rec2.Count(lease.CreatedBlobEvent) + rec2.Count(lease.CreatedContainerEvent); n != 0 {
		t.Fatalf("second Provision raised %d created events, want none", n)
	}
}

// TestAzureSharedConcurrentProvision checks that four instances provisioning
// the same container at once all succeed and that the container and each
// partition are created exactly once between them.
func TestAzureSharedConcurrentProvision(t *testing.T) {
	t.Parallel()
	serviceURL, container := azuriteURL(t), uniqueContainer()
	const instances, partitions = 4, 10
	recs := make([]*batchertest.Recorder, instances)
	errs := make([]error, instances)
	var wg sync.WaitGroup
	for i := range instances {
		var r *azureblob.SharedResource
		r, recs[i] = newAzureResource(t, serviceURL, container, partitions)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Provision(context.Background())
		}()
	}
	wg.Wait()
	created, verified := map[int]int{}, map[int]int{}
	containers := 0
	for i, rec := range recs {
		if errs[i] != nil {
			t.Fatalf("instance %d: Provision: %v", i, errs[i])
		}
		containers += rec.Count(lease.CreatedContainerEvent)
		for _, v := range vals(rec, lease.CreatedBlobEvent) {
			created[v]++
		}
		for _, v := range vals(rec, lease.VerifiedBlobEvent) {
			verified[v]++
		}
	}
	if containers != 1 {
		t.Fatalf("created-container raised %d times between the instances, want 1", containers)
	}
	for p := range partitions {
		if created[p] != 1 || verified[p] != instances-1 {
			t.Fatalf("partition %d: created %d and verified %d times, want 1 and %d", p, created[p], verified[p], instances-1)
		}
	}
}

// TestAzureSharedExclusive runs two instances that both want all four
// partitions: at no time do they count more than the shared capacity
// between them, they settle on two each, and the leases behind their
// capacity are real (another owner conflicts).
func TestAzureSharedExclusive(t *testing.T) {
	t.Parallel()
	serviceURL, container := azuriteURL(t), uniqueContainer()
	a, _ := newAzureResource(t, serviceURL, container, 4)
	b, _ := newAzureResource(t, serviceURL, container, 4)
	startResource(t, a, 4)
	startResource(t, b, 4)
	took := eventually(t, 20*time.Second, "a 2/2 split between two instances", func() bool {
		ca, cb := a.Capacity(), b.Capacity()
		if ca+cb > 4 {
			t.Fatalf("instances count %d + %d capacity, more than the 4 shared", ca, cb)
		}
		return ca == 2 && cb == 2
	})
	t.Logf("two instances settled on 2/2 in %v", took)

	m := azuriteManagerFor(t, serviceURL, container)
	snap, err := m.Snapshot(context.Background(), 4)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	for p, s := range snap.Partitions {
		if s != lease.PartitionLeased {
			t.Fatalf("partition %d is in state %d with both instances settled, want leased", p, s)
		}
		var conflict lease.ConflictError
		if err := m.Acquire(context.Background(), p, uuid.NewString(), 15*time.Second); !errors.As(err, &conflict) {
			t.Fatalf("a third owner acquiring partition %d: %v, want LeaseConflictError", p, err)
		}
	}
	if len(snap.Demands) != 2 {
		t.Fatalf("Snapshot demands = %v, want the two instances'", snap.Demands)
	}
}

// TestAzureSharedReleaseOnStop checks that Stop releases every lease at
// once: the partitions read free straight after, and another instance gets
// them all far sooner than a 15-s lease would expire.
func TestAzureSharedReleaseOnStop(t *testing.T) {
	t.Parallel()
	serviceURL, container := azuriteURL(t), uniqueContainer()
	a, recA := newAzureResource(t, serviceURL, container, 8)
	a.WithReservedCapacity(2)
	startResource(t, a, 10)
	took := eventually(t, 20*time.Second, "the first instance holding all 8 partitions", func() bool {
		return a.Capacity() == 10
	})
	t.Logf("one instance ramped from 0 to 8 partitions in %v", took)

	a.Stop()
	if got := a.Capacity(); got != 2 {
		t.Fatalf("Capacity after Stop = %d, want the reserved 2", got)
	}
	if got := fmt.Sprint(vals(recA, sharing.ReleasedEvent)); got != "[0 1 2 3 4 5 6 7]" {
		t.Fatalf("released events after Stop: %s, want every partition", got)
	}
	snap, err := azuriteManagerFor(t, serviceURL, container).Snapshot(context.Background(), 8)
	if err != nil {
		t.Fatalf("Snapshot after Stop: %v", err)
	}
	for p, s := range snap.Partitions {
		if s != lease.PartitionFree {
			t.Fatalf("partition %d in state %d right after Stop, want free", p, s)
		}
	}
	if len(snap.Demands) != 0 {
		t.Fatalf("demands right after Stop: %v, want none", snap.Demands)
	}

	b, _ := newAzureResource(t, serviceURL, container, 8)
	start := time.Now()
	startResource(t, b, 8)
	took = eventually(t, 10*time.Second, "the second instance holding all 8 partitions", func() bool {
		return b.Capacity() == 8
	})
	t.Logf("after Stop, another instance held all 8 partitions %v after its Provision began", time.Since(start))
	if took > 5*time.Second {
		t.Fatalf("the second instance needed %v, want well under the 15-s lease", took)
	}
}

// TestAzureSharedStopLeavesNoGoroutines checks that nothing a resource
// started, its loop or its HTTP connections, outlives Stop. It does not run
// in parallel, so that other tests' goroutines do not count.
func TestAzureSharedStopLeavesNoGoroutines(t *testing.T) {
	serviceURL := azuriteURL(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r, _ := newAzureResource(t, serviceURL, uniqueContainer(), 4)
	startResource(t, r, 4)
	eventually(t, 20*time.Second, "capacity 4", func() bool { return r.Capacity() == 4 })
	r.Stop()
}

// TestAzureSharedConnectionString checks the connection-string path: no
// account name, the endpoint and key taken from the string.
func TestAzureSharedConnectionString(t *testing.T) {
	t.Parallel()
	serviceURL, container := azuriteURL(t), uniqueContainer()
	cs := "DefaultEndpointsProtocol=http;AccountName=" + azuriteAccount + ";AccountKey=" + azuriteKey +
		";BlobEndpoint=" + serviceURL + ";"
	r := azureblob.NewSharedResource("", container, 2).WithConnectionString(cs)
	rec := batchertest.NewRecorder()
	r.AddListener(rec.Listener())
	t.Cleanup(r.Stop)
	startResource(t, r, 2)
	if got := rec.Named(lease.CreatedContainerEvent); len(got) != 1 || got[0].Msg != serviceURL+"/"+container {
		t.Fatalf("created-container events %v, want one for %s/%s", got, serviceURL, container)
	}
	eventually(t, 20*time.Second, "capacity 2 through a connection string", func() bool {
		return r.Capacity() == 2
	})
}

// TestAzureSharedConfigErrors checks the errors Provision returns before
// touching the store: no credential, and lease durations Azure refuses.
func TestAzureSharedConfigErrors(t *testing.T) {
	r := azureblob.NewSharedResource("myaccount", "container", 10)
	var ce azureblob.CredentialError
	if err := r.Provision(context.Background()); !errors.As(err, &ce) || ce.Account != "myaccount" {
		t.Fatalf("Provision without a credential: %v, want AzureCredentialError for myaccount", err)
	}
	if err := r.Start(context.Background()); !errors.As(err, new(sharing.RateLimiterImproperOrderError)) {
		t.Fatalf("Start after a failed Provision: %v, want RateLimiterImproperOrderError", err)
	}
	for _, d := range []time.Duration{time.Second, 14 * time.Second, 61 * time.Second} {
		r := azureblob.NewSharedResource("myaccount", "container", 10).WithMasterKey(azuriteKey).WithLeaseDuration(d)
		var lde lease.DurationError
		if err := r.Provision(context.Background()); !errors.As(err, &lde) || lde.Duration != d {
			t.Errorf("Provision with lease duration %v: %v, want LeaseDurationError", d, err)
		}
	}
}

// azuriteProcess is an Azurite started by a test, on a port of its own.
type azuriteProcess struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newAzuriteProcess starts an in-memory Azurite of the test's own; it is
// killed when the test ends.
func newAzuriteProcess(t *testing.T) *azuriteProcess {
	t.Helper()
	bin := os.Getenv("BATCHER_AZURITE_BIN")
	if bin == "" {
		needServer(t, "BATCHER_AZURITE_BIN is not set; start Azurite with scripts/lib/svc-azurite.sh (azurite_start)")
	}
	p := &azuriteProcess{bin: bin, dir: t.TempDir(), port: freePort(t)}
	p.start(t)
	t.Cleanup(p.kill)
	return p
}

// url returns the blob endpoint of p.
func (p *azuriteProcess) url() string {
	return "http://127.0.0.1:" + strconv.Itoa(p.port) + "/devstoreaccount1"
}

// start runs Azurite on p's port and waits until it accepts connections.
func (p *azuriteProcess) start(t *testing.T) {
	t.Helper()
	logPath := filepath.Join(p.dir, fmt.Sprintf("azurite-%d.log", time.Now().UnixNano()))
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("creating the Azurite log: %v", err)
	}
	defer log.Close()
	p.cmd = exec.Command(p.bin, "--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(p.port),
		"--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck", "--loose")
	p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = p.dir, log, log
	if err := p.cmd.Start(); err != nil {
		needServer(t, "starting %s: %v", p.bin, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.port), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			p.kill()
			t.Fatalf("Azurite did not listen on port %d within 60 s; its log:\n%s", p.port, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill ends the Azurite process at once, losing everything it stored.
func (p *azuriteProcess) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// TestAzureSharedRecoversFromEmptyStore kills the store under a running
// instance and starts it again empty, as when Azurite restarts or the
// container is deleted: the instance provisions again and regains its
// capacity without being restarted.
func TestAzureSharedRecoversFromEmptyStore(t *testing.T) {
	t.Parallel()
	azurite := newAzuriteProcess(t)
	container := uniqueContainer()
	r, rec := newAzureResource(t, azurite.url(), container, 3)
	startResource(t, r, 3)
	eventually(t, 20*time.Second, "capacity 3 before the restart", func() bool { return r.Capacity() == 3 })

	azurite.kill()
	azurite.start(t)
	took := eventually(t, 60*time.Second, "re-provisioning and capacity 3 after the restart", func() bool {
		// The container may come back through a demand record, so the
		// partitions created anew are what shows the re-provisioning.
		return rec.Count(lease.CreatedBlobEvent) == 6 && rec.Count(sharing.AllocatedEvent) == 6 &&
			r.Capacity() == 3
	})
	snap, err := azuriteManagerFor(t, azurite.url(), container).Snapshot(context.Background(), 3)
	if err != nil {
		t.Fatalf("Snapshot after recovery: %v", err)
	}
	for p, s := range snap.Partitions {
		if s != lease.PartitionLeased {
			t.Fatalf("partition %d in the restarted store is in state %d, want leased", p, s)
		}
	}
	t.Logf("capacity back to 3 in %v after Azurite restarted empty (%d error events)",
		took, rec.Count(sharing.ErrorEvent))
}
