package unarygrpc

import (
	"encoding/base64"
	"errors"
	"strings"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// callStream is a unary call's grpc.ServerTransportStream, which
// grpc.SetTrailer finds in the handler's context: trailers set by the
// handler are sent with the call's status. Response headers are not
// served. The handler runs on the goroutine that then writes the answer,
// so the trailers need no lock.
type callStream struct {
	path    string
	trailer metadata.MD
}

var _ grpc.ServerTransportStream = (*callStream)(nil)

// errNoHeaders is SetHeader's and SendHeader's answer.
var errNoHeaders = errors.New("unarygrpc: response metadata in headers is not supported; use trailers")

func (c *callStream) Method() string               { return c.path }
func (c *callStream) SetHeader(metadata.MD) error  { return errNoHeaders }
func (c *callStream) SendHeader(metadata.MD) error { return errNoHeaders }
func (c *callStream) SetTrailer(md metadata.MD) error {
	c.trailer = metadata.Join(c.trailer, md)
	return nil
}

// appendTrailerLocked encodes md into hbuf, after the status fields. Keys
// are lower case already (metadata's functions make them so); binary
// values (keys ending in -bin) are base64, as gRPC carries them. Reserved
// names (grpc-*, pseudo-headers) are skipped.
func (c *conn) appendTrailerLocked(md metadata.MD) {
	for k, vs := range md {
		if strings.HasPrefix(k, "grpc-") || strings.HasPrefix(k, ":") {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			_ = c.henc.WriteField(hpack.HeaderField{Name: k, Value: v})
		}
	}
}
