// konn-go-client: the benchmark's gRPC-mode client written in Go on grpc-go, as kube-apiserver's
// konnectivity-client is, so "gRPC mode driven by a Go client" is measured with Go's HTTP/2 and
// protobuf stacks. Our own code, built offline from Debian's packages (bench/goclient/build.sh);
// it speaks the same destination protocol as konn-loadgen (bench/loadgen/destination.h) and
// prints the same JSON.
//
//	konn-go-client bulk  --uds=PATH --target=IP:PORT --direction=down|up --streams=1 --bytes=N
//	konn-go-client rr    --uds=PATH --target=IP:PORT --tunnels=1 --size=64 --duration=3s
//	konn-go-client dials --uds=PATH --target=IP:PORT --concurrency=1 --request --duration=3s
//	konn-go-client hold  --uds=PATH --target=IP:PORT --count=1000 --concurrency=32
//
// hold opens --count idle tunnels, prints {"event":"ready"}, waits for a line on stdin, closes
// them and prints {"event":"closed"}: konn-loadgen hold's protocol, for the memory workload.
//
// Like konnectivity-client's single-use tunnels, each tunnel gets its own gRPC connection unless
// --shared-conn is given; received DATA waits in a channel of 10 packets (its xfrChannelSize).
// --addr=HOST:PORT --cert --key --ca reach a TCP+mTLS frontend instead of --uds (by hand; the
// bench drives the unix socket).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "konnbench/konnectivity"
)

const (
	period   = 65521 // as bench/loadgen/pattern.h
	maxSpan  = 1 << 20
	chunk    = 256 * 1024
	inboxLen = 10
)

var pattern = func() []byte {
	b := make([]byte, period+maxSpan)
	x := uint32(0x9e3779b9)
	for i := 0; i < period; i++ {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	for i := period; i < len(b); i++ {
		b[i] = b[i%period]
	}
	return b
}()

func at(off uint64, n int) []byte { s := off % period; return pattern[s : s+uint64(n)] }

type tunnel struct {
	conn      *grpc.ClientConn // owned when not shared
	stream    pb.ProxyService_ProxyClient
	cancel    context.CancelFunc
	connectID int64
	inbox     chan []byte
	pending   []byte
	closed    chan struct{} // CLOSE_RSP, DIAL_CLS or end of stream
	readErr   error
}

var shared *grpc.ClientConn

// TCP+mTLS frontend (--addr with --cert, --key, --ca) instead of the unix socket: the
// credentials are loaded once, in main, for every connection.
var tlsAddr string
var tlsCreds credentials.TransportCredentials

func loadTLS(cert, key, ca string) (credentials.TransportCredentials, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool}), nil
}

func dialConn(uds string) (*grpc.ClientConn, error) {
	if tlsAddr != "" {
		return grpc.Dial(tlsAddr, grpc.WithTransportCredentials(tlsCreds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	}
	return grpc.Dial("unix://"+uds, grpc.WithInsecure(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
}

func open(uds, target string) (*tunnel, error) {
	t := &tunnel{inbox: make(chan []byte, inboxLen), closed: make(chan struct{})}
	cc := shared
	if cc == nil {
		var err error
		if cc, err = dialConn(uds); err != nil {
			return nil, err
		}
		t.conn = cc
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	stream, err := pb.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		t.abort()
		return nil, err
	}
	t.stream = stream
	err = stream.Send(&pb.Packet{Type: pb.PacketType_DIAL_REQ, Payload: &pb.Packet_DialRequest{
		DialRequest: &pb.DialRequest{Protocol: "tcp", Address: target, Random: rand.Int63()}}})
	if err != nil {
		t.abort()
		return nil, err
	}
	rsp, err := stream.Recv()
	if err != nil {
		t.abort()
		return nil, err
	}
	d := rsp.GetDialResponse()
	if rsp.Type != pb.PacketType_DIAL_RSP || d == nil || d.Error != "" {
		t.abort()
		return nil, fmt.Errorf("dial refused: %v", rsp)
	}
	t.connectID = d.ConnectID
	go t.receive()
	return t, nil
}

func (t *tunnel) receive() {
	defer close(t.inbox)
	for {
		p, err := t.stream.Recv()
		if err != nil {
			t.readErr = err
			close(t.closed)
			return
		}
		switch p.Type {
		case pb.PacketType_DATA:
			t.inbox <- p.GetData().Data
		case pb.PacketType_CLOSE_RSP, pb.PacketType_DIAL_CLS:
			close(t.closed)
			for { // drain to the end of the stream
				if _, err := t.stream.Recv(); err != nil {
					return
				}
			}
		}
	}
}

func (t *tunnel) Read(b []byte) (int, error) {
	for len(t.pending) == 0 {
		d, ok := <-t.inbox
		if !ok {
			return 0, io.EOF
		}
		t.pending = d
	}
	n := copy(b, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

func (t *tunnel) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += chunk {
		end := off + chunk
		if end > len(b) {
			end = len(b)
		}
		err := t.stream.Send(&pb.Packet{Type: pb.PacketType_DATA, Payload: &pb.Packet_Data{
			Data: &pb.Data{ConnectID: t.connectID, Data: b[off:end]}}})
		if err != nil {
			return off, err
		}
	}
	return len(b), nil
}

// Close sends CLOSE_REQ, discards what still arrives until CLOSE_RSP, and ends the call.
func (t *tunnel) Close() error {
	err := t.stream.Send(&pb.Packet{Type: pb.PacketType_CLOSE_REQ, Payload: &pb.Packet_CloseRequest{
		CloseRequest: &pb.CloseRequest{ConnectID: t.connectID}}})
	if err == nil {
		go func() {
			for range t.inbox {
			}
		}()
		select {
		case <-t.closed:
		case <-time.After(10 * time.Second):
			err = errors.New("no CLOSE_RSP within 10s")
		}
	}
	t.stream.CloseSend()
	t.abort()
	return err
}

func (t *tunnel) abort() {
	if t.cancel != nil {
		t.cancel()
	}
	if t.conn != nil {
		t.conn.Close()
	}
}

func header(kind byte, n uint64) []byte {
	h := []byte{kind}
	if kind == 'D' || kind == 'U' {
		h = binary.LittleEndian.AppendUint64(h, n)
	}
	return h
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	i := int(p * float64(len(v)))
	if i >= len(v) {
		i = len(v) - 1
	}
	return v[i]
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "konn-go-client: FAILED: "+format+"\n", a...)
	os.Exit(1)
}

// parallel runs f(i) for i < n and fails on the first error.
func parallel(n int, f func(i int) error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = f(i) }(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fail("%v", err)
		}
	}
}

func roundTrip(t *tunnel, off *uint64, size int, buf []byte) (float64, error) {
	t0 := time.Now()
	if _, err := t.Write(at(*off, size)); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(t, buf[:size]); err != nil {
		return 0, err
	}
	us := float64(time.Since(t0).Nanoseconds()) / 1e3
	if !bytes.Equal(buf[:size], at(*off, size)) {
		return 0, errors.New("echo bytes wrong")
	}
	*off += uint64(size)
	return us, nil
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: konn-go-client bulk|rr|dials [flags]")
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	uds := fs.String("uds", "", "proxy-server gRPC frontend unix socket")
	target := fs.String("target", "", "destination IPv4:port (konn-loadgen serve)")
	direction := fs.String("direction", "down", "bulk: down or up")
	streams := fs.Int("streams", 1, "bulk: parallel tunnels")
	total := fs.Int64("bytes", 1<<30, "bulk: bytes in all")
	tunnels := fs.Int("tunnels", 1, "rr: concurrent tunnels")
	size := fs.Int("size", 64, "rr, dials --request: bytes per request")
	duration := fs.Duration("duration", 3*time.Second, "rr, dials: how long")
	concurrency := fs.Int("concurrency", 1, "dials: concurrent dialers; hold: tunnels opened at once")
	request := fs.Bool("request", false, "dials: one echo request per tunnel")
	count := fs.Int("count", 1000, "hold: tunnels to hold open")
	sharedConn := fs.Bool("shared-conn", false, "all tunnels on one gRPC connection")
	fs.StringVar(&tlsAddr, "addr", "", "TCP+mTLS frontend host:port instead of --uds")
	cert := fs.String("cert", "", "--addr: client certificate")
	key := fs.String("key", "", "--addr: its key")
	ca := fs.String("ca", "", "--addr: CA of the server's certificate")
	fs.Parse(os.Args[2:])
	if (*uds == "" && tlsAddr == "") || *target == "" {
		fail("--uds (or --addr) and --target are required")
	}
	if tlsAddr != "" {
		var err error
		if tlsCreds, err = loadTLS(*cert, *key, *ca); err != nil {
			fail("%v", err)
		}
	}
	if *sharedConn {
		var err error
		if shared, err = dialConn(*uds); err != nil {
			fail("%v", err)
		}
	}
	out := map[string]interface{}{"workload": mode, "via": "go-grpc+unix://" + *uds,
		"client": "grpc-go/" + grpc.Version}
	switch mode {
	case "bulk":
		n := *streams
		ts := make([]*tunnel, n)
		parallel(n, func(i int) (err error) { ts[i], err = open(*uds, *target); return })
		start := time.Now()
		parallel(n, func(i int) error {
			t, length := ts[i], uint64(*total/int64(n))
			if i == 0 {
				length += uint64(*total % int64(n))
			}
			if *direction == "down" {
				if _, err := t.Write(header('D', length)); err != nil {
					return err
				}
				buf := make([]byte, chunk)
				for off := uint64(0); off < length; {
					want := uint64(len(buf))
					if length-off < want {
						want = length - off
					}
					got, err := t.Read(buf[:want])
					if err != nil {
						return fmt.Errorf("download ended after %d bytes: %v", off, err)
					}
					if !bytes.Equal(buf[:got], at(off, got)) {
						return fmt.Errorf("download bytes wrong near offset %d", off)
					}
					off += uint64(got)
				}
				return nil
			}
			if _, err := t.Write(header('U', length)); err != nil {
				return err
			}
			for off := uint64(0); off < length; {
				part := uint64(chunk)
				if length-off < part {
					part = length - off
				}
				if _, err := t.Write(at(off, int(part))); err != nil {
					return err
				}
				off += part
			}
			answer := make([]byte, 1)
			if _, err := io.ReadFull(t, answer); err != nil || answer[0] != 'K' {
				return fmt.Errorf("upload not confirmed: %v %q", err, answer)
			}
			return nil
		})
		secs := time.Since(start).Seconds()
		parallel(n, func(i int) error { return ts[i].Close() })
		out["direction"], out["streams"], out["bytes"] = *direction, n, *total
		out["seconds"], out["mb_s"] = secs, float64(*total)/secs/1e6
	case "rr":
		n := *tunnels
		ts := make([]*tunnel, n)
		parallel(n, func(i int) (err error) {
			if ts[i], err = open(*uds, *target); err == nil {
				_, err = ts[i].Write(header('E', 0))
			}
			return
		})
		lat := make([][]float64, n)
		start := time.Now()
		deadline := start.Add(*duration)
		parallel(n, func(i int) error {
			buf, off := make([]byte, *size), uint64(0)
			for time.Now().Before(deadline) {
				us, err := roundTrip(ts[i], &off, *size, buf)
				if err != nil {
					return err
				}
				lat[i] = append(lat[i], us)
			}
			return nil
		})
		secs := time.Since(start).Seconds()
		parallel(n, func(i int) error { return ts[i].Close() })
		var all []float64
		for _, l := range lat {
			all = append(all, l...)
		}
		out["tunnels"], out["size"], out["round_trips"] = n, *size, len(all)
		out["rate"] = float64(len(all)) / secs
		out["p50_us"], out["p99_us"] = percentile(all, 0.5), percentile(all, 0.99)
	case "dials":
		n := *concurrency
		lat := make([][]float64, n)
		var count int64
		start := time.Now()
		deadline := start.Add(*duration)
		parallel(n, func(i int) error {
			buf := make([]byte, *size)
			req := append([]byte{'E'}, at(0, *size)...)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				t, err := open(*uds, *target)
				if err != nil {
					return err
				}
				if *request {
					if _, err := t.Write(req); err != nil {
						return err
					}
					if _, err := io.ReadFull(t, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, at(0, *size)) {
						return errors.New("echo bytes wrong")
					}
				}
				if err := t.Close(); err != nil {
					return err
				}
				lat[i] = append(lat[i], float64(time.Since(t0).Nanoseconds())/1e3)
				atomic.AddInt64(&count, 1)
			}
			return nil
		})
		secs := time.Since(start).Seconds()
		var all []float64
		for _, l := range lat {
			all = append(all, l...)
		}
		out["concurrency"], out["request"], out["dials"] = n, *request, count
		out["rate"] = float64(count) / secs
		out["p50_us"], out["p99_us"] = percentile(all, 0.5), percentile(all, 0.99)
	case "hold":
		ts := make([]*tunnel, *count)
		start := time.Now()
		var next int64 = -1
		parallel(*concurrency, func(int) error {
			for i := atomic.AddInt64(&next, 1); i < int64(*count); i = atomic.AddInt64(&next, 1) {
				t, err := open(*uds, *target)
				if err != nil {
					return err
				}
				if _, err := t.Write(header('I', 0)); err != nil {
					return err
				}
				ts[i] = t
			}
			return nil
		})
		j, _ := json.Marshal(map[string]interface{}{"event": "ready", "count": *count,
			"seconds": time.Since(start).Seconds()})
		fmt.Println(string(j))
		bufio.NewReader(os.Stdin).ReadString('\n')
		next = -1
		parallel(*concurrency, func(int) error {
			for i := atomic.AddInt64(&next, 1); i < int64(*count); i = atomic.AddInt64(&next, 1) {
				if err := ts[i].Close(); err != nil {
					return err
				}
			}
			return nil
		})
		out["event"], out["workload"], out["count"] = "closed", "hold", *count
	default:
		fail("unknown mode %q", mode)
	}
	j, _ := json.Marshal(out)
	fmt.Println(string(j))
}
