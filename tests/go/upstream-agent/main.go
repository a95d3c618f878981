// upstream-agent: a Konnectivity agent that behaves as upstream's Go agent
// (apiserver-network-proxy's proxy-agent) does towards a proxy-server, for konn's end-to-end
// tests (tests/go/README.md). Our own code on Debian's grpc-go (1.33).
//
// It opens AgentService/Connect over TLS with the metadata `agentid` and `agentidentifiers`
// (always sent, possibly empty) and nothing konn-specific: no `konn-flow-control`, no
// `konn-half-close`, so the server must treat it as an upstream agent. It requires the
// `serverid` and `servercount` response headers as upstream's agent does. A DIAL_REQ is dialled
// (5 s bound) in its own goroutine and answered with DIAL_RSP; then every byte the destination
// gives is sent as DATA as fast as it comes (32 KiB reads, no window of its own: only gRPC's
// stream flow control can slow it), the destination's EOF or error becomes CLOSE_RSP, DATA from
// the server is written to the destination from a queue of 150 packets per connection, and
// CLOSE_REQ closes the connection and answers CLOSE_RSP. DIAL_CLS is ignored, as upstream does.
//
//	upstream-agent --addr=HOST:PORT --ca=F [--cert=F --key=F] [--agent-id=ID] [--identifiers=Q]
//
// Logs each event on stderr ("connected serverID=...", "dial ...", "close ..."); exits 1 with
// "upstream-agent: FAILED: ..." when the stream cannot be opened or ends.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	pb "konnpeers/konnectivity"
)

var (
	addr        = flag.String("addr", "", "proxy-server agent port HOST:PORT")
	caFile      = flag.String("ca", "", "CA of the server certificate")
	certFile    = flag.String("cert", "", "client certificate (mTLS; optional)")
	keyFile     = flag.String("key", "", "its key")
	agentID     = flag.String("agent-id", "upstream-agent", "agentid metadata")
	identifiers = flag.String("identifiers", "", "agentidentifiers metadata (URL query form)")
	readSize    = flag.Int("read-size", 32*1024, "bytes per destination read (one DATA packet at most)")
)

// queueLen is upstream's per-connection queue of DATA towards the destination.
const queueLen = 150

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" upstream-agent: "+format+"\n", a...)
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "upstream-agent: FAILED: "+format+"\n", a...)
	os.Exit(1)
}

type endpoint struct {
	conn      net.Conn
	toDest    chan []byte
	closeOnce sync.Once
}

type agent struct {
	stream pb.AgentService_ConnectClient
	sendMu sync.Mutex
	nextID int64
	mu     sync.Mutex
	conns  map[int64]*endpoint
	sent   int64 // DATA bytes sent to the server
}

func (a *agent) send(p *pb.Packet) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return a.stream.Send(p)
}

func (a *agent) mustSend(p *pb.Packet) {
	if err := a.send(p); err != nil {
		// Upstream's agent drops the whole server connection when a send fails.
		fail("send %v: %v", p.Type, err)
	}
}

func (a *agent) dial(req *pb.DialRequest) {
	conn, err := net.DialTimeout(req.GetProtocol(), req.GetAddress(), 5*time.Second)
	if err != nil {
		logf("dial %s %s failed: %v", req.GetProtocol(), req.GetAddress(), err)
		a.mustSend(&pb.Packet{Type: pb.PacketType_DIAL_RSP, Payload: &pb.Packet_DialResponse{
			DialResponse: &pb.DialResponse{Random: req.GetRandom(), Error: err.Error()}}})
		return
	}
	id := atomic.AddInt64(&a.nextID, 1)
	ep := &endpoint{conn: conn, toDest: make(chan []byte, queueLen)}
	a.mu.Lock()
	a.conns[id] = ep
	a.mu.Unlock()
	logf("dial %s connectID=%d random=%d", req.GetAddress(), id, req.GetRandom())
	a.mustSend(&pb.Packet{Type: pb.PacketType_DIAL_RSP, Payload: &pb.Packet_DialResponse{
		DialResponse: &pb.DialResponse{Random: req.GetRandom(), ConnectID: id}}})
	go a.toDestination(id, ep)
	go a.fromDestination(id, ep)
}

// fromDestination sends what the destination gives, as fast as it gives it.
func (a *agent) fromDestination(id int64, ep *endpoint) {
	buf := make([]byte, *readSize)
	var total int64
	for {
		n, err := ep.conn.Read(buf)
		if n > 0 {
			a.mustSend(&pb.Packet{Type: pb.PacketType_DATA, Payload: &pb.Packet_Data{
				Data: &pb.Data{ConnectID: id, Data: append([]byte(nil), buf[:n]...)}}})
			total += int64(n)
			atomic.AddInt64(&a.sent, int64(n))
		}
		if err != nil {
			if err != io.EOF {
				logf("connectID=%d read: %v", id, err)
			}
			break
		}
	}
	if a.forget(id) {
		// The destination ended the connection: upstream answers CLOSE_RSP unasked.
		logf("close connectID=%d: destination done after %d bytes", id, total)
		a.mustSend(&pb.Packet{Type: pb.PacketType_CLOSE_RSP, Payload: &pb.Packet_CloseResponse{
			CloseResponse: &pb.CloseResponse{ConnectID: id}}})
	}
}

func (a *agent) toDestination(id int64, ep *endpoint) {
	for d := range ep.toDest {
		if _, err := ep.conn.Write(d); err != nil {
			logf("connectID=%d write: %v", id, err)
			ep.conn.Close()
			for range ep.toDest {
			}
			return
		}
	}
}

// forget removes connection id; true when this call removed it.
func (a *agent) forget(id int64) bool {
	a.mu.Lock()
	ep, ok := a.conns[id]
	delete(a.conns, id)
	a.mu.Unlock()
	if ok {
		ep.closeOnce.Do(func() {
			ep.conn.Close()
			close(ep.toDest)
		})
	}
	return ok
}

func (a *agent) lookup(id int64) *endpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[id]
}

func (a *agent) serve() {
	for {
		p, err := a.stream.Recv()
		if err != nil {
			fail("stream ended: %v (DATA bytes sent: %d)", err, atomic.LoadInt64(&a.sent))
		}
		switch p.Type {
		case pb.PacketType_DIAL_REQ:
			go a.dial(p.GetDialRequest())
		case pb.PacketType_DATA:
			id := p.GetData().GetConnectID()
			ep := a.lookup(id)
			if ep == nil {
				a.mustSend(&pb.Packet{Type: pb.PacketType_CLOSE_RSP, Payload: &pb.Packet_CloseResponse{
					CloseResponse: &pb.CloseResponse{ConnectID: id, Error: "unrecognized connectID"}}})
				continue
			}
			func() {
				defer func() { recover() }()       // closed meanwhile by the destination side
				ep.toDest <- p.GetData().GetData() // blocks when full, as upstream's receive loop
			}()
		case pb.PacketType_CLOSE_REQ:
			id := p.GetCloseRequest().GetConnectID()
			rsp := &pb.CloseResponse{ConnectID: id}
			if !a.forget(id) {
				rsp.Error = "Unknown connectID"
			}
			logf("close connectID=%d: CLOSE_REQ", id)
			a.mustSend(&pb.Packet{Type: pb.PacketType_CLOSE_RSP, Payload: &pb.Packet_CloseResponse{
				CloseResponse: rsp}})
		case pb.PacketType_DIAL_CLS:
			logf("ignoring DIAL_CLS random=%d", p.GetCloseDial().GetRandom())
		default:
			logf("ignoring unrecognized packet %v", p.Type)
		}
	}
}

func main() {
	flag.Parse()
	if *addr == "" || *caFile == "" {
		fail("--addr and --ca are required")
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fail("CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fail("CA: no certificate in %s", *caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if *certFile != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fail("client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	cc, err := grpc.DialContext(ctx, *addr, grpc.WithBlock(),
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	cancel()
	if err != nil {
		fail("dial %s: %v", *addr, err)
	}
	md := metadata.Pairs("agentid", *agentID, "agentidentifiers", *identifiers)
	stream, err := pb.NewAgentServiceClient(cc).Connect(metadata.NewOutgoingContext(context.Background(), md))
	if err != nil {
		fail("Connect: %v", err)
	}
	hdr, err := stream.Header()
	if err != nil {
		fail("Connect response headers: %v", err)
	}
	ids, counts := hdr.Get("serverid"), hdr.Get("servercount")
	if len(ids) != 1 || len(counts) != 1 {
		fail("want one serverid and one servercount header, got %v %v", ids, counts)
	}
	if _, err := strconv.Atoi(counts[0]); err != nil {
		fail("servercount %q: %v", counts[0], err)
	}
	logf("connected serverID=%s serverCount=%s agentID=%s", ids[0], counts[0], *agentID)
	a := &agent{stream: stream, conns: map[int64]*endpoint{}}
	a.serve()
}
