package azureblob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/events"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/logadapter/slogadapter"
)

// sasConnString returns a connection string for the Azurite at serviceURL
// that authenticates with an account SAS granting perms.
func sasConnString(t *testing.T, serviceURL string, perms sas.AccountPermissions) string {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(azuriteAccount, azuriteKey)
	if err != nil {
		t.Fatalf("shared key: %v", err)
	}
	qp, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   perms.String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatalf("signing the SAS: %v", err)
	}
	token := qp.Encode()
	if !strings.Contains(token, "sig=") {
		t.Fatalf("the SAS %q has no signature", token)
	}
	return "BlobEndpoint=" + serviceURL + ";SharedAccessSignature=" + token
}

// lockedBuffer is a log destination the listener goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sigChecker gathers everything a SAS resource prints: its events, their
// errors, a debug-level log of them, and the errors its methods return.
type sigChecker struct {
	recs []*batchertest.Recorder
	log  lockedBuffer
	errs []error
}

// watch registers the checker's listeners on r and returns the recorder of
// its events.
func (c *sigChecker) watch(r *azureblob.SharedResource) *batchertest.Recorder {
	rec := batchertest.NewRecorder()
	c.recs = append(c.recs, rec)
	r.AddListener(rec.Listener())
	logger := slog.New(slog.NewJSONHandler(&c.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.AddListener(slogadapter.Listener(logger, "sas"))
	return rec
}

// check fails the test if any text gathered holds a signature, and returns
// the number of texts it looked at.
func (c *sigChecker) check(t *testing.T) int {
	t.Helper()
	texts := []string{c.log.String()}
	for _, rec := range c.recs {
		for _, e := range rec.Events() {
			texts = append(texts, e.Msg)
			if err, ok := e.Metadata.(error); ok {
				texts = append(texts, err.Error(), fmt.Sprintf("%+v", err))
			}
		}
	}
	for _, err := range c.errs {
		texts = append(texts, err.Error(), fmt.Sprintf("%v", err))
	}
	for _, s := range texts {
		if strings.Contains(strings.ToLower(s), "sig=") {
			t.Fatalf("a SAS signature was printed: %q", s)
		}
	}
	return len(texts)
}

// TestAzureSASNeverPrinted runs a resource authenticated by a SAS
// connection string through the paths that print URLs: provisioning events,
// a store that refuses (a SAS without write permission), and a store that is
// gone (transport errors in error events and in Provision's error). No text
// it produces may hold the signature.
func TestAzureSASNeverPrinted(t *testing.T) {
	t.Parallel()
	azurite := newAzuriteProcess(t)
	full := sas.AccountPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true}
	var c sigChecker

	// Healthy: the container URL is in the provisioning event.
	container := uniqueContainer()
	r := azureblob.NewSharedResource("", container, 2).WithConnectionString(sasConnString(t, azurite.url(), full))
	rec := c.watch(r)
	t.Cleanup(r.Stop)
	startResource(t, r, 2)
	eventually(t, 20*time.Second, "capacity 2 through a SAS", func() bool { return r.Capacity() == 2 })
	created := rec.Named(lease.CreatedContainerEvent)
	if len(created) != 1 || !strings.HasPrefix(created[0].Msg, azurite.url()+"/"+container) {
		t.Fatalf("created-container events %v, want one naming %s/%s", created, azurite.url(), container)
	}

	// Refused: a read-only SAS cannot create the container.
	ro := azureblob.NewSharedResource("", uniqueContainer(), 2).
		WithConnectionString(sasConnString(t, azurite.url(), sas.AccountPermissions{Read: true, List: true}))
	c.watch(ro)
	err := ro.Provision(context.Background())
	if err == nil {
		t.Fatal("Provision with a read-only SAS succeeded")
	}
	c.errs = append(c.errs, err)

	// Gone: the store dies under the running resource, which reports
	// transport errors as error events; a new resource cannot provision.
	azurite.kill()
	before := rec.Count(events.ErrorEvent)
	eventually(t, 20*time.Second, "error events after the store died", func() bool {
		return rec.Count(events.ErrorEvent) >= before+3
	})
	gone := azureblob.NewSharedResource("", uniqueContainer(), 2).WithConnectionString(sasConnString(t, azurite.url(), full))
	c.watch(gone)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = gone.Provision(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Provision against a dead store: %v, want a transport error", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(azurite.port)) {
		t.Fatalf("Provision error %q does not name the endpoint", err)
	}
	c.errs = append(c.errs, err)
	n := c.check(t)
	t.Logf("%d texts, %d error events, %d bytes of log, none with a signature; e.g. %v", n,
		rec.Count(events.ErrorEvent), len(c.log.String()), err)
}
