package unarygrpc

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// limiter is a test implementation of ratelimiter.v1: the key says what to
// do.
type limiter struct {
	ratelimiterv1.UnimplementedRateLimiterServer
	inFlight, most atomic.Int32
	release        chan struct{} // "block" waits for it
	sawCancel      chan struct{}
}

func (l *limiter) Allow(ctx context.Context, in *ratelimiterv1.AllowRequest) (*ratelimiterv1.AllowResponse, error) {
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for {
		m := l.most.Load()
		if n <= m || l.most.CompareAndSwap(m, n) {
			break
		}
	}
	switch {
	case in.Key == "error":
		return nil, status.Error(codes.FailedPrecondition, "bad 100% \"état\"\nsecond line")
	case in.Key == "details":
		st, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
		return nil, st.Err()
	case in.Key == "plain-error":
		return nil, errors.New("not a status")
	case in.Key == "block":
		select {
		case <-l.release:
		case <-ctx.Done():
			if l.sawCancel != nil {
				l.sawCancel <- struct{}{}
			}
			return nil, ctx.Err()
		}
	case in.Key == "stubborn":
		<-l.release // whatever the context says
	case in.Key == "deadline":
		d, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "no deadline")
		}
		return &ratelimiterv1.AllowResponse{RetryAfter: durationpb.New(time.Until(d))}, nil
	}
	return &ratelimiterv1.AllowResponse{Allowed: in.Tokens < 100, RetryAfter: durationpb.New(time.Duration(len(in.Key)))}, nil
}

// envoy answers RateLimitRequest with a raw body as long as hits_addend.
type envoy struct{}

func (envoy) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, RawBody: []byte(strings.Repeat(r.Domain, int(r.HitsAddend)))}, nil
}

// serveTest starts a Server with both services on loopback.
func serveTest(t *testing.T, s *Server, l *limiter) string {
	t.Helper()
	ratelimiterv1.RegisterRateLimiterServer(s, l)
	rlsv3.RegisterRateLimitServiceServer(s, envoy{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallsFromGRPCGo(t *testing.T) {
	addr := serveTest(t, &Server{}, &limiter{})
	cc := dial(t, addr)
	c := ratelimiterv1.NewRateLimiterClient(cc)
	ctx := ctxT(t)

	r, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "abc", Tokens: 2})
	if err != nil || !r.Allowed || r.RetryAfter.AsDuration() != 3 {
		t.Fatalf("Allow: %v %v", r, err)
	}
	// An empty message (every field zero) is a message of 0 bytes.
	if r, err = c.Allow(ctx, &ratelimiterv1.AllowRequest{}); err != nil || !r.Allowed {
		t.Fatalf("empty request: %v %v", r, err)
	}

	// Many calls at once over one connection, each with its own answer.
	var wg sync.WaitGroup
	errs := make(chan error, 2000)
	for i := range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := strings.Repeat("k", i%300)
			r, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: key, Tokens: float64(i % 200)})
			if err != nil {
				errs <- err
				return
			}
			if r.Allowed != (i%200 < 100) || r.RetryAfter.AsDuration() != time.Duration(len(key)) {
				errs <- errors.New("wrong answer")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestStatuses(t *testing.T) {
	addr := serveTest(t, &Server{}, &limiter{})
	cc := dial(t, addr)
	c := ratelimiterv1.NewRateLimiterClient(cc)
	ctx := ctxT(t)

	_, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "error"})
	if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != "bad 100% \"état\"\nsecond line" {
		t.Fatalf("error: %v", err)
	}
	_, err = c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "details"})
	s := status.Convert(err)
	if s.Code() != codes.ResourceExhausted || len(s.Details()) != 1 {
		t.Fatalf("details: %v %v", err, s.Details())
	}
	if ri, ok := s.Details()[0].(*errdetails.RetryInfo); !ok || ri.RetryDelay.AsDuration() != 3*time.Second {
		t.Fatalf("details: %v", s.Details())
	}
	if _, err = c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "plain-error"}); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "not a status" {
		t.Fatalf("plain error: %v", err)
	}

	var out ratelimiterv1.AllowResponse
	err = cc.Invoke(ctx, "/ratelimiter.v1.RateLimiter/Nope", &ratelimiterv1.AllowRequest{}, &out)
	if s := status.Convert(err); s.Code() != codes.Unimplemented || s.Message() != "unknown method Nope for service ratelimiter.v1.RateLimiter" {
		t.Fatalf("unknown method: %v", err)
	}
	err = cc.Invoke(ctx, "/no.Such/Allow", &ratelimiterv1.AllowRequest{}, &out)
	if s := status.Convert(err); s.Code() != codes.Unimplemented || s.Message() != "unknown service no.Such" {
		t.Fatalf("unknown service: %v", err)
	}
	// A streaming call on a unary method: the client sends no message.
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, ratelimiterv1.RateLimiter_Allow_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(&out); status.Code(err) != codes.Internal {
		t.Fatalf("no message: %v", err)
	}
	// Two messages.
	st, err = cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, ratelimiterv1.RateLimiter_Allow_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SendMsg(&ratelimiterv1.AllowRequest{Key: "a"})
	_ = st.SendMsg(&ratelimiterv1.AllowRequest{Key: "b"})
	_ = st.CloseSend()
	if err := st.RecvMsg(&out); status.Code(err) != codes.Internal {
		t.Fatalf("two messages: %v", err)
	}
	// The connection still serves.
	if _, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}
}

func TestLargeMessagesBothWays(t *testing.T) {
	addr := serveTest(t, &Server{}, &limiter{})
	cc := dial(t, addr, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	ctx := ctxT(t)
	// A request of 3 MB crosses many stream and connection windows; so
	// does the answer of 3 MB.
	big := strings.Repeat("x", 3<<20)
	r, err := ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: big})
	if err != nil || r.RetryAfter.AsDuration() != time.Duration(len(big)) {
		t.Fatalf("big request: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "abc", HitsAddend: 1 << 20})
			if err != nil || len(resp.RawBody) != 3<<20 {
				t.Errorf("big answer: %v", err)
			}
		}()
	}
	wg.Wait()

	_, err = ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: strings.Repeat("x", 5<<20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("request over MaxRecvMsgSize: %v", err)
	}
	if _, err := ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
		t.Fatalf("after a refused request: %v", err)
	}
}

func TestDeadlineAndCancel(t *testing.T) {
	l := &limiter{release: make(chan struct{}), sawCancel: make(chan struct{}, 1)}
	addr := serveTest(t, &Server{}, l)
	c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "deadline"})
	if err != nil || r.RetryAfter.AsDuration() <= 4*time.Second || r.RetryAfter.AsDuration() > 5*time.Second {
		t.Fatalf("deadline seen by the handler: %v %v", r, err)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := c.Allow(short, &ratelimiterv1.AllowRequest{Key: "block"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("blocked call: %v", err)
	}
	select {
	case <-l.sawCancel:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end at the deadline")
	}

	ctx3, cancel3 := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel3() }()
	if _, err := c.Allow(ctx3, &ratelimiterv1.AllowRequest{Key: "block"}); status.Code(err) != codes.Canceled {
		t.Fatalf("canceled call: %v", err)
	}
	select {
	case <-l.sawCancel:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end when the client reset the stream")
	}
}

func TestMaxConcurrentStreams(t *testing.T) {
	l := &limiter{release: make(chan struct{})}
	addr := serveTest(t, &Server{MaxConcurrentStreams: 3}, l)
	c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "block"}); err == nil {
				ok.Add(1)
			} else {
				t.Error(err)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(l.release)
	wg.Wait()
	if ok.Load() != 10 || l.most.Load() > 3 {
		t.Fatalf("%d calls succeeded, at most %d at once; want 10 and 3", ok.Load(), l.most.Load())
	}
}

func TestCompressedRequestRefused(t *testing.T) {
	addr := serveTest(t, &Server{}, &limiter{})
	c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))
	_, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "k"}, grpc.UseCompressor(gzip.Name))
	if s := status.Convert(err); s.Code() != codes.Unimplemented || !strings.Contains(s.Message(), "gzip") {
		t.Fatalf("gzip request: %v", err)
	}
}

func TestGracefulStop(t *testing.T) {
	l := &limiter{release: make(chan struct{})}
	s := &Server{}
	ratelimiterv1.RegisterRateLimiterServer(s, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := ratelimiterv1.NewRateLimiterClient(dial(t, ln.Addr().String()))
	ctx := ctxT(t)
	if _, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := c.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "block"})
		answered <- err
	}()
	for l.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a call in flight")
	default:
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after GracefulStop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("the listener still accepts")
	}
	close(l.release)
	if err := <-answered; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop did not return after the last call")
	}
}

func TestStopCancelsCalls(t *testing.T) {
	l := &limiter{release: make(chan struct{}), sawCancel: make(chan struct{}, 1)}
	s := &Server{}
	addr := serveTest(t, s, l)
	c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))
	answered := make(chan error, 1)
	go func() {
		_, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "block"})
		answered <- err
	}()
	for l.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Stop()
	// Stop returns once the method it canceled has returned.
	if n := l.inFlight.Load(); n != 0 {
		t.Fatalf("Stop returned with %d methods still running", n)
	}
	select {
	case <-l.sawCancel:
	default:
		t.Fatal("Stop returned before the method saw its context canceled")
	}
	if err := <-answered; status.Code(err) != codes.Unavailable {
		t.Fatalf("the call cut by Stop: %v, want Unavailable", err)
	}
}

func TestRegistrationRefusals(t *testing.T) {
	s := &Server{}
	ratelimiterv1.RegisterRateLimiterServer(s, &limiter{})
	ratelimiterv1.RegisterRateLimiterServer(s, &limiter{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("Serve with a service registered twice: %v", err)
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1H": time.Hour, "2M": 2 * time.Minute, "3S": 3 * time.Second, "20m": 20 * time.Millisecond,
		"5u": 5 * time.Microsecond, "99999999n": 99999999, "0n": 0, "99999999H": maxDuration,
	} {
		if got, ok := parseTimeout(in); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "S", "1", "123456789S", "1s", "-1S", "1.5S", "1 S"} {
		if _, ok := parseTimeout(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEncodeMessage(t *testing.T) {
	if got := encodeMessage("plain text"); got != "plain text" {
		t.Fatal(got)
	}
	if got := encodeMessage("100%\né"); got != "100%25%0A%C3%A9" {
		t.Fatal(got)
	}
}

// TestMaxConnectionAge checks the age of connections: a call in flight
// when the age is reached finishes within the grace, one still running
// after the grace is cut (its context canceled, Unavailable), and the
// client's next calls go on a new connection.
func TestMaxConnectionAge(t *testing.T) {
	const age, grace = 200 * time.Millisecond, 300 * time.Millisecond
	t.Run("within the grace", func(t *testing.T) {
		l := &limiter{release: make(chan struct{})}
		addr := serveTest(t, &Server{MaxConnectionAge: age, MaxConnectionAgeGrace: 10 * time.Second}, l)
		c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))
		answered := make(chan error, 1)
		go func() {
			_, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "block"})
			answered <- err
		}()
		time.Sleep(2 * age)
		close(l.release)
		if err := <-answered; err != nil {
			t.Fatalf("the call in flight at the connection's age: %v", err)
		}
		for i := range 3 {
			if _, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
				t.Fatalf("call %d after the age: %v", i, err)
			}
		}
	})
	t.Run("past the grace", func(t *testing.T) {
		l := &limiter{release: make(chan struct{}), sawCancel: make(chan struct{}, 1)}
		defer close(l.release)
		addr := serveTest(t, &Server{MaxConnectionAge: age, MaxConnectionAgeGrace: grace}, l)
		c := ratelimiterv1.NewRateLimiterClient(dial(t, addr))
		began := time.Now()
		answered := make(chan error, 1)
		go func() {
			_, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "block"})
			answered <- err
		}()
		select {
		case <-l.sawCancel:
		case <-time.After(10 * time.Second):
			t.Fatal("the call was not cut after the grace")
		}
		if took := time.Since(began); took < age*9/10+grace {
			t.Fatalf("cut after %v, before the age and the grace (%v)", took, age*9/10+grace)
		}
		if err := <-answered; status.Code(err) != codes.Unavailable {
			t.Fatalf("the call cut: %v, want Unavailable", err)
		}
		if _, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
			t.Fatalf("a call after: %v", err)
		}
	})
}
