package azureblob

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// A SAS token is a bearer credential carried in the query string of every
// request URL, and its signature, the "sig" parameter, is the secret part.
// The SDK puts request URLs into transport errors (a *url.Error prints
// `Put "https://…?…&sig=…"`), and this package prints the container URL in
// its events and errors, which log adapters write at info level. Everything
// this package prints therefore goes through RedactURL or redactText, and
// every SDK error it returns is wrapped by sdkError.

// sigParam is the query parameter of a SAS token that holds its signature.
const sigParam = "sig"

// urlInText finds the URLs within a message.
var urlInText = regexp.MustCompile(`https?://[^\s"'<>]+`)

// sigInText finds a signature outside a URL that parsed, such as one in a
// SAS token quoted on its own or in a URL with a mangled scheme.
var sigInText = regexp.MustCompile(`(?i)(^|[?&;\s"'])sig=[^&;\s"'<>]*&?`)

// RedactURL returns raw without the signature of a SAS token: the "sig"
// query parameter is dropped, and the other parameters (expiry,
// permissions, version: nothing that grants access) are kept, so that a log
// still tells which token was used. A raw that does not parse as a URL keeps
// nothing after its "?". Every URL this package prints, in events and in
// error messages, goes through it.
func RedactURL(raw string) string {
	i := strings.IndexByte(raw, '?')
	if i < 0 {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw[:i]
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		u.RawQuery = ""
		return u.String()
	}
	for k := range q {
		if strings.EqualFold(k, sigParam) {
			delete(q, k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactText returns msg with every URL in it redacted by RedactURL and any
// other SAS signature removed.
func redactText(msg string) string {
	if !strings.Contains(strings.ToLower(msg), sigParam+"=") {
		return msg
	}
	msg = urlInText.ReplaceAllStringFunc(msg, RedactURL)
	return sigInText.ReplaceAllString(msg, "$1")
}

// redactedError is an error from the SDK or the transport whose message is
// redacted; errors.Is and errors.As still reach the error it wraps.
type redactedError struct{ err error }

func (e redactedError) Error() string { return redactText(e.err.Error()) }

// Unwrap returns the SDK's error, for errors.Is and errors.As (such as
// bloberror.HasCode). Its own text is not redacted: print the wrapper.
func (e redactedError) Unwrap() error { return e.err }

// sdkError wraps err, an error the SDK returned, so that its message is
// redacted. A nil err stays nil.
func sdkError(err error) error {
	if err == nil {
		return nil
	}
	var re redactedError
	if errors.As(err, &re) {
		return err
	}
	return redactedError{err}
}

// redactingTransport is the SDK's transport: an http.Client whose errors
// carry the request URL redacted, so that no error the SDK builds on them
// (its retries, its wrapping) can print a signature.
type redactingTransport struct{ client *http.Client }

// Do sends req through the client and redacts the URL of a *url.Error.
func (t redactingTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.client.Do(req)
	if ue, ok := err.(*url.Error); ok {
		redacted := *ue
		redacted.URL = RedactURL(ue.URL)
		return resp, &redacted
	}
	return resp, err
}
