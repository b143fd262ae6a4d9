// Package unarygrpc is limiterd's lean gRPC server. It serves HTTP/2
// connections that start with the client preface on a plain listener
// (prior knowledge, h2c, as grpc-go's server does without TLS), or over
// TLS when Server.TLSConfig is set (crypto/tls, ALPN "h2"), calling
// the handlers of the generated service descriptors with the codec it is
// given, and costs a fraction of grpc-go's server per unary call: no
// per-connection writer goroutine, no per-call timers without a deadline,
// one buffered write per burst of answers.
//
// # HTTP/2
//
// It implements the parts of HTTP/2 a gRPC peer uses: SETTINGS and their
// acknowledgement, PING, flow control both ways (WINDOW_UPDATE for the
// connection and each stream), HEADERS with CONTINUATION, DATA, RST_STREAM,
// GOAWAY on a graceful stop and on connection errors, and a limit on the
// calls in flight per connection. It checks what RFC 9113 asks a server to
// check: stream states (frames on idle, half-closed and closed streams),
// pseudo-headers (each once, before the other fields, :method, :scheme and
// :path present), connection-specific fields, trailers without
// pseudo-headers, content-length against the DATA received, streams that
// depend on themselves, and SETTINGS values. PRIORITY is accepted and
// otherwise ignored; the server never pushes.
//
// h2spec v2.2.1 (generic, http2 and hpack: 145 cases; 146 with --strict)
// passes in full; limiterd's TestH2Spec runs it against this server and
// grpc-go's as limiterd configures them.
//
// A request that is not gRPC gets an HTTP answer once it ends, as from
// grpc-go's server: 415 without a gRPC content-type, 405 for a method other
// than POST, with a short text body (none for HEAD) and the grpc-status
// and grpc-message fields.
//
// # gRPC
//
// One length-prefixed message each way for unary methods; the grpc-timeout
// header as the call's deadline; answers ending in trailers with
// grpc-status and grpc-message (and grpc-status-details-bin when the
// status has details), followed by the trailers a unary handler set with
// grpc.SetTrailer (grpc.SetHeader and grpc.SendHeader return an error: a
// unary answer's metadata goes in its trailers). A call refused at its headers (unknown method,
// compressed, malformed grpc-timeout) or at its message's length prefix
// (larger than MaxRecvMsgSize) is answered at once, before its request
// ends, and the rest of its request is discarded: a client that means to
// stream, such as grpcurl asking for server reflection, is not left
// waiting.
//
// Streaming methods are served too, on a goroutine each from their headers
// on, so that server reflection (grpc.reflection.v1 and v1alpha
// ServerReflectionInfo, a bidirectional stream) lets grpcurl list the
// services, and grpc.health.v1.Health (Check, and Watch) works. They are
// few and small in limiterd; the unary path is the one made cheap. What a
// streaming call has buffered is at most one message and one stream window.
//
// # Limits
//
// Each bounds what one peer can make the server hold or do:
//
//	limit                           default          when exceeded
//	MaxConcurrentStreams            1000 a conn      RST_STREAM REFUSED_STREAM (clients retry)
//	MaxRecvMsgSize                  4 MiB            ResourceExhausted, at the length prefix
//	MaxHeaderListSize               1 MiB            ResourceExhausted
//	a header block, raw             4 MiB            GOAWAY ENHANCE_YOUR_CALM (CONTINUATION flood)
//	HandshakeTimeout                10 s             the connection closes (preface and SETTINGS)
//	WriteTimeout                    10 s             the connection closes; a call waiting as long
//	                                                 for flow-control credit: RST_STREAM CANCEL
//	IdleTimeout                     none             GOAWAY NO_ERROR "idle", then close
//	KeepalivePolicy.MinTime         5 min            3rd early ping: GOAWAY ENHANCE_YOUR_CALM
//	                                                 "too_many_pings" (2 h without calls, unless
//	                                                 PermitWithoutStream)
//	SETTINGS frames                 100, then 10/s   GOAWAY ENHANCE_YOUR_CALM "too_many_settings"
//
// A call stops counting against MaxConcurrentStreams when its answer ends,
// before the frame that ends it is sent, so that a client that opens its
// next stream on reading it is not refused. Calls that a peer resets while
// their methods run still count until the methods return (rapid reset).
// A call whose answer the peer's windows hold back waits at most its
// deadline or
// WriteTimeout, so a peer that sets its window to 0 and never reads holds
// at most MaxConcurrentStreams goroutines for that long. The answers to
// control frames (SETTINGS and PING acknowledgements, WINDOW_UPDATE,
// RST_STREAM) wait in the write buffer until no whole frame is left to
// read, so that a burst of them goes out in one write.
//
// Accept errors other than the listener's closing (out of file
// descriptors) do not end Serve: it waits, 5 ms doubling to 1 s, and
// retries, logging to ErrorLog at most once a second, as net/http does.
//
// # What it leaves out
//
// Compression (a compressed request is answered Unimplemented or Internal,
// as grpc-go answers one it cannot decompress), interceptors, stats
// handlers, the call's metadata and peer (so the client's certificate) in
// the handler's context, response headers set by any handler, and trailers
// set by a streaming
// handler (dropped).
package unarygrpc
