package azureblob

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestRedactURL is a table of the URLs a SAS connection string produces and
// what RedactURL leaves of them.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:10000/devstoreaccount1/c", "http://127.0.0.1:10000/devstoreaccount1/c"},
		{"https://a.blob.core.windows.net/c?sv=2023-11-03&se=2030-01-01&sig=abc%2Bdef%3D",
			"https://a.blob.core.windows.net/c?se=2030-01-01&sv=2023-11-03"},
		{"https://a.blob.core.windows.net/c/0?sig=abc", "https://a.blob.core.windows.net/c/0"},
		{"https://a.blob.core.windows.net/c?SIG=abc&sp=rw", "https://a.blob.core.windows.net/c?sp=rw"},
		{"https://a.blob.core.windows.net/c?sig=a;b&%zz", "https://a.blob.core.windows.net/c"},
		{"://bad url?sig=abc", "://bad url"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactText checks messages with signatures in and around URLs.
func TestRedactText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Put "http://h/c/0?comp=lease&sig=s3cr%2Ft&sv=1": dial tcp: refused`,
			`Put "http://h/c/0?comp=lease&sv=1": dial tcp: refused`},
		{"list blobs in https://h/c?sig=x and https://h/d?sv=1&sig=y", "list blobs in https://h/c and https://h/d?sv=1"},
		{"token sv=1&sig=abc&se=2", "token sv=1&se=2"},
		{"SharedAccessSignature=sv=1&sig=abc;BlobEndpoint=x", "SharedAccessSignature=sv=1&;BlobEndpoint=x"},
	} {
		got := redactText(tc.in)
		if got != tc.want {
			t.Errorf("redactText(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(strings.ToLower(got), "sig=") {
			t.Errorf("redactText(%q) = %q still holds a signature", tc.in, got)
		}
	}
}

// TestSDKErrorWraps checks that the wrapper redacts the text, keeps the
// chain for errors.As and is not applied twice.
func TestSDKErrorWraps(t *testing.T) {
	if sdkError(nil) != nil {
		t.Fatal("sdkError(nil) is not nil")
	}
	inner := &url.Error{Op: "Put", URL: "http://h/c?sig=secret", Err: errors.New("refused")}
	err := fmt.Errorf("batcher: azure x: %w", sdkError(inner))
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("wrapped error %q holds the signature", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || ue != inner {
		t.Fatalf("errors.As through the wrapper: %v", ue)
	}
	if twice := sdkError(sdkError(inner)); twice.(redactedError).err != inner {
		t.Fatal("sdkError wrapped an already redacted error again")
	}
}
