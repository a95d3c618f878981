// upstream-agent: a Konnectivity agent that behaves as upstream's Go agent
// (apiserver-network-proxy's proxy-agent, v0.36) does towards proxy-servers, for konn's
// end-to-end tests (tests/go/README.md). Our own code on Debian's grpc-go (1.33).
//
// Each connection attempt is a new TLS connection (so a balancer in front of several servers
// spreads them) carrying one AgentService/Connect stream with the metadata `agentid` and
// `agentidentifiers` (always sent, possibly empty) and nothing konn-specific: no
// `konn-flow-control`, no `konn-half-close`, so the server must treat it as an upstream agent. It
// requires the `serverid` and `servercount` response headers as upstream's agent does, and keeps
// connecting every --sync-interval until it holds a stream to as many distinct servers as the
// servercount of the last new server says; a stream to a server it already has is closed again
// ("duplicate serverID"). A DIAL_REQ is dialled (5 s bound) in its own goroutine and answered
// with DIAL_RSP; then every byte the destination gives is sent as DATA as fast as it comes (32
// KiB reads, no window of its own: only gRPC's stream flow control can slow it), the
// destination's EOF or error becomes CLOSE_RSP, DATA from the server is written to the
// destination from a queue of 150 packets per connection, and CLOSE_REQ closes the connection
// and answers CLOSE_RSP. DIAL_CLS is ignored, as upstream does.
//
// Drain, as upstream's agent: the first SIGTERM or SIGINT sends DRAIN on every stream and stops
// connecting to new servers; the agent keeps serving (open tunnels and new dials) until a second
// signal, which exits 0. DRAIN goes at once, as upstream's master does since PR #893; v0.36.0
// sends it from its receive loop, so only after the next packet from that server.
//
//	upstream-agent --addr=HOST:PORT --ca=F [--cert=F --key=F] [--agent-id=ID] [--identifiers=Q]
//	               [--sync-interval=D] [--count-server-leases --lease-api=https://H:P --lease-ca=F
//	               --lease-token=T [--lease-namespace=NS] [--lease-label=SEL]
//	               [--server-count-source=default|max] [--lease-poll-interval=D]]
//
// With --count-server-leases it also counts the servers' valid Leases (listed every
// --lease-poll-interval; upstream watches them through an informer) and, as upstream's
// --server-count-source, takes that count (default) or the larger of it and the servercount
// header (max) as the number of servers to connect to.
//
// Logs each event on stderr ("connected serverID=...", "dial ...", "close ...", "sent DRAIN
// serverID=..."); exits 1 with "upstream-agent: FAILED: ..." when the first stream cannot be
// opened or a stream ends (upstream would reconnect; a test wants to know).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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
	syncEvery   = flag.Duration("sync-interval", time.Second, "interval of the connect loop")

	// Lease counting (upstream: --count-server-leases with --kubeconfig, an informer on Leases).
	countLeases = flag.Bool("count-server-leases", false, "count the servers' valid Leases")
	leaseAPI    = flag.String("lease-api", "", "https://HOST:PORT of the apiserver (upstream takes a kubeconfig)")
	leaseCA     = flag.String("lease-ca", "", "CA of the apiserver")
	leaseToken  = flag.String("lease-token", "", "bearer token towards the apiserver")
	leaseNS     = flag.String("lease-namespace", "kube-system", "namespace of the server Leases")
	leaseLabel  = flag.String("lease-label", "k8s-app=konnectivity-server", "label selector of the server Leases")
	countSource = flag.String("server-count-source", "default", "default: leases when counting; max: the larger of leases and servercount")
	leasePoll   = flag.Duration("lease-poll-interval", time.Second, "how often the Leases are listed")
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

// agent is one stream to one server (upstream's Client).
type agent struct {
	serverID string
	cc       *grpc.ClientConn
	stream   pb.AgentService_ConnectClient
	sendMu   sync.Mutex
	nextID   int64
	mu       sync.Mutex
	conns    map[int64]*endpoint
	sent     int64 // DATA bytes sent to the server
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
			fail("stream to serverID=%s ended: %v (DATA bytes sent: %d)", a.serverID, err,
				atomic.LoadInt64(&a.sent))
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

// clientSet holds one agent per server id (upstream's ClientSet).
type clientSet struct {
	cfg         *tls.Config
	mu          sync.Mutex
	agents      map[string]*agent
	serverCount int // from the last new server's servercount header
	leaseCount  int // valid Leases at the last good list (0: none listed yet)
	draining    bool
}

// target is how many servers to hold a stream to, as upstream's aggregate server counter.
// Called with mu held.
func (cs *clientSet) target() int {
	n := cs.serverCount
	if *countLeases {
		n = cs.leaseCount
		if *countSource == "max" && cs.serverCount > n {
			n = cs.serverCount
		}
	}
	if n < 1 {
		n = 1
	}
	return n
}

type leaseList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			RenewTime            string `json:"renewTime"`
			AcquireTime          string `json:"acquireTime"`
			LeaseDurationSeconds *int   `json:"leaseDurationSeconds"`
		} `json:"spec"`
	} `json:"items"`
}

// countLeasesLoop lists the Leases every --lease-poll-interval and counts the valid ones
// (renewTime, else acquireTime, plus leaseDurationSeconds after now; at least 1). A failed list
// keeps the last count, as upstream's counter falls back to its last good count.
func (cs *clientSet) countLeasesLoop() {
	pem, err := os.ReadFile(*leaseCA)
	if err != nil {
		fail("lease CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	u := *leaseAPI + "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(*leaseNS) +
		"/leases?labelSelector=" + url.QueryEscape(*leaseLabel)
	for {
		if n, err := listValidLeases(client, u); err != nil {
			logf("cannot list leases: %v", err)
		} else {
			cs.mu.Lock()
			changed := n != cs.leaseCount
			cs.leaseCount = n
			cs.mu.Unlock()
			if changed {
				logf("lease count %d", n)
			}
		}
		time.Sleep(*leasePoll)
	}
}

func listValidLeases(client *http.Client, u string) (int, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+*leaseToken)
	req.Header.Set("Accept", "application/json")
	rsp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d", rsp.StatusCode)
	}
	var list leaseList
	if err := json.NewDecoder(rsp.Body).Decode(&list); err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	for _, l := range list.Items {
		at := l.Spec.RenewTime
		if at == "" {
			at = l.Spec.AcquireTime
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		if t.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).After(now) {
			n++
		}
	}
	if n == 0 {
		n = 1
	}
	return n, nil
}

// connectOnce opens one stream over a new connection; false when it failed.
func (cs *clientSet) connectOnce() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	cc, err := grpc.DialContext(ctx, *addr, grpc.WithBlock(),
		grpc.WithTransportCredentials(credentials.NewTLS(cs.cfg)))
	cancel()
	if err != nil {
		logf("dial %s: %v", *addr, err)
		return false
	}
	md := metadata.Pairs("agentid", *agentID, "agentidentifiers", *identifiers)
	streamCtx, streamCancel := context.WithCancel(context.Background())
	stream, err := pb.NewAgentServiceClient(cc).Connect(metadata.NewOutgoingContext(streamCtx, md))
	if err != nil {
		streamCancel()
		cc.Close()
		logf("Connect: %v", err)
		return false
	}
	hdr, err := stream.Header()
	if err != nil {
		streamCancel()
		cc.Close()
		logf("Connect response headers: %v", err)
		return false
	}
	ids, counts := hdr.Get("serverid"), hdr.Get("servercount")
	if len(ids) != 1 || len(counts) != 1 {
		fail("want one serverid and one servercount header, got %v %v", ids, counts)
	}
	count, err := strconv.Atoi(counts[0])
	if err != nil {
		fail("servercount %q: %v", counts[0], err)
	}
	cs.mu.Lock()
	if _, dup := cs.agents[ids[0]]; dup {
		cs.mu.Unlock()
		streamCancel()
		cc.Close()
		logf("duplicate serverID=%s: connection closed", ids[0])
		return true
	}
	a := &agent{serverID: ids[0], cc: cc, stream: stream, conns: map[int64]*endpoint{}}
	cs.agents[ids[0]] = a
	cs.serverCount = count
	held := len(cs.agents)
	draining := cs.draining
	cs.mu.Unlock()
	logf("connected serverID=%s serverCount=%s agentID=%s (streams: %d)", ids[0], counts[0],
		*agentID, held)
	if draining {
		// Connected while the drain began: kept, and told at once (drain() saw the others).
		a.sendDrain()
	}
	go a.serve()
	return true
}

// syncLoop connects until there is a stream to target() distinct servers.
func (cs *clientSet) syncLoop() {
	for {
		cs.mu.Lock()
		want := !cs.draining && len(cs.agents) < cs.target()
		first := len(cs.agents) == 0
		cs.mu.Unlock()
		if want && !cs.connectOnce() && first {
			fail("cannot connect to %s", *addr)
		}
		time.Sleep(*syncEvery)
	}
}

// drain sends DRAIN on every stream and stops connecting to new servers.
func (cs *clientSet) drain() {
	cs.mu.Lock()
	cs.draining = true
	agents := make([]*agent, 0, len(cs.agents))
	for _, a := range cs.agents {
		agents = append(agents, a)
	}
	cs.mu.Unlock()
	for _, a := range agents {
		a.sendDrain()
	}
}

func (a *agent) sendDrain() {
	if err := a.send(&pb.Packet{Type: pb.PacketType_DRAIN,
		Payload: &pb.Packet_Drain{Drain: &pb.Drain{}}}); err != nil {
		logf("DRAIN to serverID=%s: %v", a.serverID, err)
		return
	}
	logf("sent DRAIN serverID=%s", a.serverID)
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
	cs := &clientSet{cfg: cfg, agents: map[string]*agent{}, serverCount: 1}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	if *countLeases {
		if *leaseAPI == "" || *leaseCA == "" {
			fail("--count-server-leases needs --lease-api and --lease-ca")
		}
		go cs.countLeasesLoop()
	}
	go cs.syncLoop()
	s := <-signals
	logf("signal %v: draining", s)
	cs.drain()
	s = <-signals
	logf("signal %v again: exiting", s)
	os.Exit(0)
}
