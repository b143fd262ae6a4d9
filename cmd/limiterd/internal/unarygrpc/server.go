package unarygrpc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
)

// Defaults of the Server's settings.
const (
	// DefaultMaxConcurrentStreams is the calls in flight a connection may
	// have when Server.MaxConcurrentStreams is 0.
	DefaultMaxConcurrentStreams = 1000
	// DefaultMaxRecvMsgSize is the largest request message when
	// Server.MaxRecvMsgSize is 0: 4 MiB, as grpc-go's.
	DefaultMaxRecvMsgSize = 4 << 20
	// DefaultMaxHeaderListSize is the largest header block when
	// Server.MaxHeaderListSize is 0.
	DefaultMaxHeaderListSize = 1 << 20
	// DefaultWorkers is the number of goroutines kept to run calls when
	// Server.Workers is 0.
	DefaultWorkers = 256
)

// Server serves the unary methods registered with RegisterService. Set its
// fields before Serve; the zero value uses the defaults above and gRPC's
// protobuf codec.
type Server struct {
	// Codec reads requests and writes answers; nil means gRPC's registered
	// "proto" codec.
	Codec encoding.CodecV2
	// MaxConcurrentStreams is the most calls a connection may have in
	// flight; more are refused with RST_STREAM REFUSED_STREAM, which gRPC
	// clients retry.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize is the largest request message; a larger one is
	// answered ResourceExhausted.
	MaxRecvMsgSize int
	// MaxHeaderListSize is the largest header block a call may send, as
	// HTTP/2 counts it (names and values plus 32 bytes a field).
	MaxHeaderListSize uint32
	// Workers is the number of goroutines kept to run calls. A call that
	// finds them all busy runs on a goroutine of its own.
	Workers int
	// HandshakeTimeout bounds the wait for a new connection's preface and
	// first SETTINGS; 0 means 10 s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write to a connection; a peer that stops
	// reading for longer loses the connection, and its calls end. It also
	// bounds a call's wait for flow-control credit: an answer that the
	// peer's windows hold back for longer is reset (RST_STREAM CANCEL).
	// 0 means 10 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection (GOAWAY NO_ERROR "idle", then close)
	// that has had no call in flight for this long, pings or not, as
	// grpc-go's keepalive.ServerParameters.MaxConnectionIdle does; 0 means
	// never.
	IdleTimeout time.Duration
	// MaxConnectionAge ends a connection this old, give or take a tenth
	// at random so that connections opened together do not all end
	// together: GOAWAY NO_ERROR "max_age", no new calls, close when the
	// calls in flight are answered, as grpc-go's
	// keepalive.ServerParameters.MaxConnectionAge does; 0 means never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long the calls in flight may take after
	// that GOAWAY before the connection is closed under them; 0 means as
	// long as they take.
	MaxConnectionAgeGrace time.Duration
	// KeepalivePolicy is how often a peer may ping, as in grpc-go: a ping
	// sooner than MinTime after the previous one (sooner than two hours
	// without calls in flight, unless PermitWithoutStream) is a strike, and
	// the third strike ends the connection with GOAWAY ENHANCE_YOUR_CALM
	// "too_many_pings". A MinTime of 0 means DefaultKeepaliveMinTime.
	KeepalivePolicy keepalive.EnforcementPolicy
	// TLSConfig, when set, makes every connection TLS: the handshake, with
	// HandshakeTimeout as its deadline, comes before the HTTP/2 preface.
	// Its NextProtos should offer "h2", which gRPC clients ask for.
	TLSConfig *tls.Config
	// ErrorLog receives accept errors, at most one a second; nil means the
	// log package's standard logger.
	ErrorLog *log.Logger

	mu        sync.Mutex
	methods   map[string]*method
	services  map[string]grpc.ServiceInfo
	regErr    error
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	draining  bool // GracefulStop or Stop called
	connWG    sync.WaitGroup
	// callWG counts the workers and the goroutines of calls past them:
	// stop waits for them, so that none outlives it.
	callWG   sync.WaitGroup
	quit     chan struct{}
	initOnce sync.Once

	work     chan *stream
	nworkers atomic.Int32
	loggedAt atomic.Int64 // when an accept error was last logged, in Unix nanoseconds
}

// method is a registered method and the service implementation it calls.
type method struct {
	impl    any
	handler grpc.MethodHandler
	stream  *grpc.StreamDesc // a streaming method's; nil for a unary one
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// ErrStreaming was reported by Serve when a registered service had a
// streaming method.
//
// Deprecated: streaming methods are served; nothing reports it any more.
var ErrStreaming = errors.New("unarygrpc: streaming methods are not served")

// RegisterService registers the methods of a service, as
// grpc.Server.RegisterService does. A service registered twice, or an
// implementation that does not implement the descriptor's handler type,
// is refused: Serve then returns the error.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.regErr != nil {
		return
	}
	if s.methods == nil {
		s.methods = make(map[string]*method)
		s.services = make(map[string]grpc.ServiceInfo)
	}
	if _, dup := s.services[sd.ServiceName]; dup {
		s.regErr = fmt.Errorf("unarygrpc: service %s registered twice", sd.ServiceName)
		return
	}
	if impl != nil && sd.HandlerType != nil {
		ht := reflect.TypeOf(sd.HandlerType).Elem()
		if !reflect.TypeOf(impl).Implements(ht) {
			s.regErr = fmt.Errorf("unarygrpc: %T does not implement %v", impl, ht)
			return
		}
	}
	info := grpc.ServiceInfo{Metadata: sd.Metadata}
	for i := range sd.Methods {
		md := &sd.Methods[i]
		s.methods["/"+sd.ServiceName+"/"+md.MethodName] = &method{impl: impl, handler: md.Handler}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: md.MethodName})
	}
	for i := range sd.Streams {
		d := &sd.Streams[i]
		s.methods["/"+sd.ServiceName+"/"+d.StreamName] = &method{impl: impl, stream: d}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
	}
	s.services[sd.ServiceName] = info
}

// GetServiceInfo returns the registered services and their methods, as
// grpc.Server.GetServiceInfo does; server reflection lists them from it.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]grpc.ServiceInfo, len(s.services))
	for name, info := range s.services {
		out[name] = info
	}
	return out
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.quit = make(chan struct{})
		s.work = make(chan *stream)
		if s.Codec == nil {
			s.Codec = encoding.GetCodecV2(grpcproto.Name)
		}
		if s.MaxConcurrentStreams == 0 {
			s.MaxConcurrentStreams = DefaultMaxConcurrentStreams
		}
		if s.MaxRecvMsgSize <= 0 {
			s.MaxRecvMsgSize = DefaultMaxRecvMsgSize
		}
		if s.MaxHeaderListSize == 0 {
			s.MaxHeaderListSize = DefaultMaxHeaderListSize
		}
		if s.Workers <= 0 {
			s.Workers = DefaultWorkers
		}
		if s.HandshakeTimeout <= 0 {
			s.HandshakeTimeout = 10 * time.Second
		}
		if s.WriteTimeout <= 0 {
			s.WriteTimeout = 10 * time.Second
		}
	})
}

// lookup finds the method of a :path.
func (s *Server) lookup(path string) (*method, bool) {
	s.mu.Lock()
	m, ok := s.methods[path]
	s.mu.Unlock()
	return m, ok
}

// unknownMethod is the message of the Unimplemented answer to path, in
// grpc-go's words.
func (s *Server) unknownMethod(path string) string {
	if len(path) < 2 || path[0] != '/' {
		return fmt.Sprintf("malformed method name: %q", path)
	}
	i := len(path) - 1
	for i > 0 && path[i] != '/' {
		i--
	}
	if i == 0 {
		return fmt.Sprintf("malformed method name: %q", path)
	}
	svc, name := path[1:i], path[i+1:]
	s.mu.Lock()
	_, known := s.services[svc]
	s.mu.Unlock()
	if known {
		return fmt.Sprintf("unknown method %v for service %v", name, svc)
	}
	return fmt.Sprintf("unknown service %v", svc)
}

// Serve accepts connections on ln and serves them until GracefulStop or
// Stop, then returns nil; it returns the error of a refused registration,
// or net.ErrClosed when ln is closed by someone else. Other Accept errors
// (out of file descriptors) are waited out: see accept. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.init()
	s.mu.Lock()
	if err := s.regErr; err != nil {
		s.mu.Unlock()
		ln.Close()
		return err
	}
	if s.draining {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	for {
		nc, err := s.accept(ln)
		if err != nil {
			if s.stopping() {
				return nil
			}
			return err
		}
		if s.TLSConfig != nil {
			nc = tls.Server(nc, s.TLSConfig)
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		if s.conns == nil {
			s.conns = make(map[*conn]struct{})
		}
		s.conns[c] = struct{}{}
		s.connWG.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.connWG.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// GracefulStop stops accepting connections, sends GOAWAY on every
// connection, refuses calls started after it, and returns when the calls in
// flight have been answered and the connections closed.
func (s *Server) GracefulStop() {
	s.stop(true)
}

// Stop closes the listeners and every connection at once and cancels the
// contexts of the calls in flight; it returns once their methods have
// returned, and no goroutine of the server is left.
func (s *Server) Stop() {
	s.stop(false)
}

func (s *Server) stop(graceful bool) {
	s.init()
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.quit)
	}
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if graceful {
			c.goAway()
		} else {
			c.close()
		}
	}
	s.connWG.Wait()
	// Every connection has ended, so no call is dispatched any more; the
	// workers have seen quit, and the calls in flight end with their
	// connections.
	s.callWG.Wait()
}

// dispatch runs a call whose request is complete: on an idle worker, on a
// new worker while there are fewer than Workers, else on a goroutine of
// its own. Workers keep their grown stacks from call to call.
func (s *Server) dispatch(st *stream) {
	select {
	case s.work <- st:
		return
	default:
	}
	s.callWG.Add(1)
	if s.nworkers.Add(1) <= int32(s.Workers) {
		go s.worker(st)
		return
	}
	s.nworkers.Add(-1)
	go func() {
		defer s.callWG.Done()
		st.c.handle(st)
	}()
}

func (s *Server) worker(st *stream) {
	defer s.callWG.Done()
	defer s.nworkers.Add(-1)
	for {
		st.c.handle(st)
		select {
		case st = <-s.work:
		case <-s.quit:
			return
		}
	}
}
