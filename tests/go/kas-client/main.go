// kas-client: a Konnectivity client that dials proxy-server exactly as kube-apiserver's egress
// selector does in GRPC mode, for konn's end-to-end tests (tests/go/README.md).
//
// kube-apiserver calls grpc.Dial(<socket path>, grpc.WithDialer(<unix dialer>),
// grpc.WithInsecure()) for every request, so grpc-go sends the socket path itself as
// :authority, opens one ProxyService/Proxy stream on that new connection, sends DIAL_REQ, waits
// for DIAL_RSP, then uses the tunnel as the net.Conn of an HTTP/1.1 request and ends it with
// CLOSE_REQ. This program does the same with Debian's grpc-go (1.33) and net/http.
//
//	kas-client --uds=PATH [--dial-target=S] [--authority=S] --url=http://HOST:PORT/PATH [flags]
//	kas-client --addr=HOST:PORT --cert=F --key=F --ca=F --url=... [flags]   (TCP + mTLS frontend)
//
// Output (stdout): one JSON object {"status":200,"bytes":N,"sha256":"...","body":"..."} (body
// only with --print-body), exit 0; any failure: a line "kas-client: FAILED: ..." on stderr and
// exit 1. --read-rate=B/s reads the response body no faster than that (a slow consumer), in
// --read-chunk pieces. --requests=N repeats the request, each on a new connection.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "konnpeers/konnectivity"
)

// inboxLen is konnectivity-client's xfrChannelSize: DATA packets received but not yet read.
const inboxLen = 10

var (
	uds        = flag.String("uds", "", "proxy-server GRPC frontend unix socket")
	dialTarget = flag.String("dial-target", "\x00", "string given to grpc.Dial (default: the socket path, as kube-apiserver)")
	authority  = flag.String("authority", "", "grpc.WithAuthority (insecure only; empty: grpc-go's default from the target)")
	addr       = flag.String("addr", "", "TCP+mTLS frontend HOST:PORT instead of --uds")
	certFile   = flag.String("cert", "", "--addr: client certificate")
	keyFile    = flag.String("key", "", "--addr: its key")
	caFile     = flag.String("ca", "", "--addr: CA of the server certificate")
	url        = flag.String("url", "", "http:// URL fetched through the tunnel")
	requests   = flag.Int("requests", 1, "requests, each on a new connection and stream")
	readRate   = flag.Int64("read-rate", 0, "bytes per second the body is read at (0: as fast as it comes)")
	readChunk  = flag.Int("read-chunk", 64*1024, "bytes per body read")
	printBody  = flag.Bool("print-body", false, "include the body in the JSON output")
	timeout    = flag.Duration("timeout", 120*time.Second, "bound on each request")
	verbose    = flag.Bool("v", false, "log each step on stderr")
)

func logf(format string, a ...interface{}) {
	if *verbose {
		fmt.Fprintf(os.Stderr, "kas-client: "+format+"\n", a...)
	}
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "kas-client: FAILED: "+format+"\n", a...)
	os.Exit(1)
}

// tunnel is one Proxy stream on its own gRPC connection, seen as a net.Conn.
type tunnel struct {
	cc        *grpc.ClientConn
	stream    pb.ProxyService_ProxyClient
	cancel    context.CancelFunc
	connectID int64
	inbox     chan []byte
	pending   []byte
	done      chan struct{} // CLOSE_RSP, DIAL_CLS or the end of the stream
	endErr    error
	sendMu    sync.Mutex
	closeOnce sync.Once
	closeErr  error
}

func dialOptions() []grpc.DialOption {
	if *addr != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fail("client certificate: %v", err)
		}
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("CA: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("CA: no certificate in %s", *caFile)
		}
		return []grpc.DialOption{grpc.WithBlock(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}))}
	}
	socket := *uds
	opts := []grpc.DialOption{
		grpc.WithBlock(),
		grpc.WithInsecure(),
		// The deprecated dialer kube-apiserver uses: it ignores the address grpc-go resolved.
		grpc.WithDialer(func(string, time.Duration) (net.Conn, error) {
			return net.DialTimeout("unix", socket, 5*time.Second)
		}),
	}
	if *authority != "" {
		opts = append(opts, grpc.WithAuthority(*authority))
	}
	return opts
}

func openTunnel(ctx context.Context, address string) (*tunnel, error) {
	target := *addr
	if target == "" {
		target = *uds
		if *dialTarget != "\x00" {
			target = *dialTarget
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second) // kube-apiserver's dial bound
	defer dcancel()
	cc, err := grpc.DialContext(dctx, target, dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("grpc.Dial(%q): %w", target, err)
	}
	logf("connected to %q", target)
	sctx, cancel := context.WithCancel(context.Background())
	t := &tunnel{cc: cc, cancel: cancel, inbox: make(chan []byte, inboxLen), done: make(chan struct{})}
	t.stream, err = pb.NewProxyServiceClient(cc).Proxy(sctx)
	if err != nil {
		t.abort()
		return nil, fmt.Errorf("Proxy stream: %w", err)
	}
	random := rand.Int63()
	err = t.send(&pb.Packet{Type: pb.PacketType_DIAL_REQ, Payload: &pb.Packet_DialRequest{
		DialRequest: &pb.DialRequest{Protocol: "tcp", Address: address, Random: random}}})
	if err != nil {
		t.abort()
		return nil, fmt.Errorf("send DIAL_REQ: %w", err)
	}
	for {
		p, err := t.stream.Recv()
		if err != nil {
			t.abort()
			return nil, fmt.Errorf("waiting for DIAL_RSP: %w", err)
		}
		if p.Type != pb.PacketType_DIAL_RSP {
			t.abort()
			return nil, fmt.Errorf("expected DIAL_RSP, got %v", p.Type)
		}
		d := p.GetDialResponse()
		if d.GetRandom() != random {
			t.abort()
			return nil, fmt.Errorf("DIAL_RSP for dial %d, sent %d", d.GetRandom(), random)
		}
		if d.GetError() != "" {
			t.abort()
			return nil, fmt.Errorf("dial refused: %s", d.GetError())
		}
		t.connectID = d.GetConnectID()
		break
	}
	logf("DIAL_RSP connectID=%d", t.connectID)
	go t.receive()
	return t, nil
}

func (t *tunnel) send(p *pb.Packet) error {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	return t.stream.Send(p)
}

func (t *tunnel) receive() {
	defer close(t.inbox)
	for {
		p, err := t.stream.Recv()
		if err != nil {
			if err != io.EOF {
				t.endErr = err
			}
			close(t.done)
			return
		}
		switch p.Type {
		case pb.PacketType_DATA:
			if id := p.GetData().GetConnectID(); id != t.connectID {
				t.endErr = fmt.Errorf("DATA for connectID %d on tunnel %d", id, t.connectID)
				close(t.done)
				return
			}
			t.inbox <- p.GetData().GetData()
		case pb.PacketType_CLOSE_RSP, pb.PacketType_DIAL_CLS:
			logf("%v %v", p.Type, p.GetCloseResponse())
			if e := p.GetCloseResponse().GetError(); e != "" {
				t.endErr = errors.New("CLOSE_RSP: " + e)
			}
			close(t.done)
			return
		default:
			t.endErr = fmt.Errorf("unexpected %v on an established tunnel", p.Type)
			close(t.done)
			return
		}
	}
}

func (t *tunnel) Read(b []byte) (int, error) {
	for len(t.pending) == 0 {
		d, ok := <-t.inbox
		if !ok {
			if t.endErr != nil {
				return 0, t.endErr
			}
			return 0, io.EOF
		}
		t.pending = d
	}
	n := copy(b, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

func (t *tunnel) Write(b []byte) (int, error) {
	err := t.send(&pb.Packet{Type: pb.PacketType_DATA, Payload: &pb.Packet_Data{
		Data: &pb.Data{ConnectID: t.connectID, Data: append([]byte(nil), b...)}}})
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close sends CLOSE_REQ and waits (10 s, as konnectivity-client) for CLOSE_RSP or the end.
func (t *tunnel) Close() error {
	t.closeOnce.Do(func() {
		var err error
		select {
		case <-t.done: // the agent closed first (CLOSE_RSP): nothing to ask for
		default:
			err = t.send(&pb.Packet{Type: pb.PacketType_CLOSE_REQ, Payload: &pb.Packet_CloseRequest{
				CloseRequest: &pb.CloseRequest{ConnectID: t.connectID}}})
			if err == io.EOF { // the server ended the stream meanwhile
				err = nil
			}
		}
		if err == nil {
			go func() {
				for range t.inbox {
				}
			}()
			select {
			case <-t.done:
			case <-time.After(10 * time.Second):
				err = errors.New("no CLOSE_RSP within 10s of CLOSE_REQ")
			}
		}
		t.stream.CloseSend()
		t.abort()
		t.closeErr = err
	})
	return t.closeErr
}

func (t *tunnel) abort() {
	t.cancel()
	t.cc.Close()
}

func (t *tunnel) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "kas-client", Net: "unix"} }
func (t *tunnel) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "konnectivity", Net: "unix"} }
func (t *tunnel) SetDeadline(time.Time) error      { return nil }
func (t *tunnel) SetReadDeadline(time.Time) error  { return nil }
func (t *tunnel) SetWriteDeadline(time.Time) error { return nil }

type result struct {
	Status int     `json:"status"`
	Bytes  int64   `json:"bytes"`
	SHA256 string  `json:"sha256"`
	Body   string  `json:"body,omitempty"`
	Secs   float64 `json:"seconds"`
}

func fetch() result {
	var tunnels []*tunnel
	var mu sync.Mutex
	transport := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			t, err := openTunnel(ctx, address)
			if err == nil {
				mu.Lock()
				tunnels = append(tunnels, t)
				mu.Unlock()
			}
			return t, err
		},
	}
	client := &http.Client{Transport: transport, Timeout: *timeout}
	start := time.Now()
	rsp, err := client.Get(*url)
	if err != nil {
		fail("GET %s: %v", *url, err)
	}
	h := sha256.New()
	var body []byte
	var n int64
	buf := make([]byte, *readChunk)
	for {
		m, err := rsp.Body.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if *printBody {
				body = append(body, buf[:m]...)
			}
			n += int64(m)
			if *readRate > 0 {
				// Read no faster than --read-rate: sleep until this many bytes are due.
				due := start.Add(time.Duration(float64(n) / float64(*readRate) * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("body of %s ended after %d bytes: %v", *url, n, err)
		}
	}
	rsp.Body.Close()
	transport.CloseIdleConnections()
	mu.Lock()
	defer mu.Unlock()
	for _, t := range tunnels {
		if err := t.Close(); err != nil {
			fail("closing the tunnel: %v", err)
		}
	}
	r := result{Status: rsp.StatusCode, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil)),
		Secs: time.Since(start).Seconds()}
	if *printBody {
		r.Body = string(body)
	}
	return r
}

func main() {
	flag.Parse()
	if (*uds == "") == (*addr == "") || *url == "" {
		fail("one of --uds or --addr, and --url, are required")
	}
	rand.Seed(time.Now().UnixNano())
	for i := 0; i < *requests; i++ {
		j, _ := json.Marshal(fetch())
		fmt.Println(string(j))
	}
}
