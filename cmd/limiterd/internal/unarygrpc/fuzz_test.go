package unarygrpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// seedFrames writes the frames of a few calls, the way a client sends
// them, for the fuzzer to start from.
func seedFrames(f *testing.F) [][]byte {
	var out [][]byte
	msg, _ := proto.Marshal(&ratelimiterv1.AllowRequest{Key: "k", Tokens: 2})
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	for variant := range 6 {
		var buf, hbuf bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		enc := hpack.NewEncoder(&hbuf)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 7})
		for i := 0; i+1 < len(callHeaders); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: callHeaders[i], Value: callHeaders[i+1]})
		}
		block := hbuf.Bytes()
		switch variant {
		case 0:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
			_ = fr.WriteData(1, true, body)
		case 1:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:4]})
			_ = fr.WriteContinuation(1, true, block[4:])
			_ = fr.WriteData(1, false, body[:3])
			_ = fr.WriteWindowUpdate(0, 100)
			_ = fr.WriteData(1, true, body[3:])
			_ = fr.WritePing(false, [8]byte{9})
		case 2:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
			_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true, EndStream: true})
		case 3:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
			_ = fr.WriteDataPadded(1, true, body, make([]byte, 9))
			_ = fr.WriteWindowUpdate(1, 1000)
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		case 4:
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true, Priority: http2.PriorityParam{StreamDep: 1}})
			_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		case 5:
			for id := uint32(1); id < 12; id += 2 {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true})
				_ = fr.WriteData(id, true, body)
			}
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// FuzzFrames sends the server any bytes after the preface: it must end the
// connection when they end, without panicking or hanging, and write only
// well-formed frames.
func FuzzFrames(f *testing.F) {
	for _, s := range seedFrames(f) {
		f.Add(s)
	}
	srv := &Server{HandshakeTimeout: time.Second, MaxConcurrentStreams: 4, MaxRecvMsgSize: 1 << 16}
	ratelimiterv1.RegisterRateLimiterServer(srv, &limiter{})
	srv.init()
	defer srv.Stop() // ends the workers the calls started
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c := newConn(srv, server)
		served := make(chan struct{})
		go func() { c.serve(); close(served) }()
		out := make(chan []byte, 1)
		go func() { b, _ := io.ReadAll(client); out <- b }()
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Write([]byte(http2.ClientPreface))
		_, _ = client.Write(in)
		// The end of the input ends the connection: the server sees EOF.
		_ = client.(*net.TCPConn).CloseWrite()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("the connection did not end:\n%s", buf[:runtime.Stack(buf, true)])
		}
		client.Close()
		written := <-out
		fr := http2.NewFramer(nil, bytes.NewReader(written))
		fr.SetMaxReadFrameSize(1 << 24)
		for {
			_, err := fr.ReadFrame()
			if errors.Is(err, io.EOF) {
				break
			}
			var se http2.StreamError
			if err != nil && !errors.As(err, &se) {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					break // the write cut by the close
				}
				t.Fatalf("the server wrote a bad frame: %v", err)
			}
		}
	})
}
