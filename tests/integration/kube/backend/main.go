// kube-test-backend: the cluster side of tests/integration/kube, everything the real
// kube-apiserver reaches through konn's proxy-server and proxy-agent. Standard library only, so
// it builds offline with Debian's golang-go (GOPATH mode, no modules).
//
//	kube-test-backend serve   -ca-cert F -ca-key F -https-port N -kubelet-port N -stats-port N
//	kube-test-backend create  -server URL -token T -ca-cert F -namespace NS -prefix P -n 200
//
// serve: one HTTPS listener (a serving certificate for localhost, 127.0.0.1 and the -names,
// signed by the test CA at start) with
//
//	/validate/service, /validate/url   validating admission webhooks (AdmissionReview v1)
//	/convert                           CRD conversion webhook (ConversionReview v1), v1 <-> v2
//	/apis/wardle.konn.test/...         an aggregated API (client certificate of the front proxy
//	                                   required, X-Remote-User for resources): discovery, list, watch
//
// a second HTTPS listener that plays a kubelet (/containerLogs, /exec over WebSocket), and a
// plain-HTTP loopback listener with /stats (JSON counters the test reads).
//
// create: creates -n ConfigMaps at once (one goroutine each) and exits non-zero unless every
// create succeeded; kubectl would need one process per create.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const group = "wardle.konn.test"
const groupVersion = group + "/v1alpha1"

// BigLogSize is the size of the "big" pod's log; the test rebuilds the same bytes (bigLog).
const bigLogSize = 16 << 20

type counters struct {
	mu     sync.Mutex
	counts map[string]int64
	// webhook calls in flight and the most seen at once
	inflight, maxInflight int64
}

func (c *counters) add(name string) {
	c.mu.Lock()
	c.counts[name]++
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{"webhook_max_inflight": atomic.LoadInt64(&c.maxInflight)}
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

var stats = &counters{counts: map[string]int64{}}

func main() {
	log.SetFlags(log.Lmicroseconds)
	if len(os.Args) < 2 {
		log.Fatal("usage: kube-test-backend serve|create [flags]")
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "create":
		create(os.Args[2:])
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	caCert := fs.String("ca-cert", "", "CA certificate (PEM): signs our serving certificate, verifies client certificates")
	caKey := fs.String("ca-key", "", "CA private key (PEM)")
	names := fs.String("names", "", "extra DNS names of the serving certificate, comma-separated")
	httpsPort := fs.Int("https-port", 0, "webhooks, conversion and aggregated API")
	kubeletPort := fs.Int("kubelet-port", 0, "the fake kubelet")
	statsPort := fs.Int("stats-port", 0, "plain HTTP /stats on 127.0.0.1")
	proxyNames := fs.String("requestheader-allowed-names", "", "client certificate CNs allowed to send X-Remote-User (empty: any from the CA)")
	webhookDelay := fs.Duration("webhook-delay", 0, "time each webhook call takes")
	_ = fs.Parse(args)

	pool, cert := loadCA(*caCert, *caKey, *names)
	tlsConfig := func() *tls.Config {
		return &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			// The webhooks' callers present no certificate; the front proxy does.
			ClientAuth: tls.VerifyClientCertIfGiven,
			MinVersion: tls.VersionTLS12,
		}
	}
	allowed := map[string]bool{}
	for _, n := range strings.Split(*proxyNames, ",") {
		if n != "" {
			allowed[n] = true
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/validate/service", webhook("service", *webhookDelay))
	mux.HandleFunc("/validate/url", webhook("url", *webhookDelay))
	mux.HandleFunc("/convert", convert)
	mux.HandleFunc("/apis/"+group+"/", aggregated(allowed))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		stats.add("https_other")
		http.NotFound(w, r)
	})
	kubelet := http.NewServeMux()
	kubelet.HandleFunc("/containerLogs/", containerLogs)
	kubelet.HandleFunc("/exec/", execHandler)
	kubelet.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		stats.add("kubelet_other")
		http.NotFound(w, r)
	})
	statsMux := http.NewServeMux()
	statsMux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(stats.snapshot())
	})

	listen := func(port int, h http.Handler, tc *tls.Config, what string) {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			log.Fatalf("%s: %v", what, err)
		}
		srv := &http.Server{Handler: h, TLSConfig: tc, ErrorLog: log.Default()}
		if what == "kubelet" {
			// HTTP/1.1 only: exec upgrades the connection.
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		}
		go func() {
			if tc != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			log.Fatalf("%s: %v", what, err)
		}()
		log.Printf("%s listening on %s", what, ln.Addr())
	}
	listen(*httpsPort, mux, tlsConfig(), "https")
	listen(*kubeletPort, kubelet, tlsConfig(), "kubelet")
	listen(*statsPort, statsMux, nil, "stats")
	log.Printf("ready")
	select {}
}

// loadCA reads the test CA and makes a serving certificate signed by it.
func loadCA(certPath, keyPath, names string) (*x509.CertPool, tls.Certificate) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		log.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		log.Fatal(err)
	}
	ca, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		log.Fatalf("CA: %v", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	dns := []string{"localhost"}
	for _, n := range strings.Split(names, ",") {
		if n != "" {
			dns = append(dns, n)
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kube-test-backend"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		log.Fatal(err)
	}
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func readJSON(w http.ResponseWriter, r *http.Request, v interface{}) bool {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

type objectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// webhook denies objects named deny-<which>-*, allows everything else, and counts its calls.
func webhook(which string, delay time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := atomic.AddInt64(&stats.inflight, 1)
		defer atomic.AddInt64(&stats.inflight, -1)
		for {
			m := atomic.LoadInt64(&stats.maxInflight)
			if n <= m || atomic.CompareAndSwapInt64(&stats.maxInflight, m, n) {
				break
			}
		}
		var review struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Request    struct {
				UID    string `json:"uid"`
				Object struct {
					Metadata objectMeta `json:"metadata"`
				} `json:"object"`
			} `json:"request"`
		}
		if !readJSON(w, r, &review) {
			return
		}
		time.Sleep(delay)
		name := review.Request.Object.Metadata.Name
		stats.add("webhook_" + which)
		if strings.HasPrefix(name, "many-") {
			stats.add("webhook_" + which + "_many")
		}
		response := map[string]interface{}{"uid": review.Request.UID, "allowed": true}
		if strings.HasPrefix(name, "deny-"+which+"-") {
			response["allowed"] = false
			response["status"] = map[string]interface{}{
				"code": 403, "message": "konn test " + which + " webhook denies " + name,
			}
		}
		writeJSON(w, map[string]interface{}{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response,
		})
	}
}

// convert renames spec.text (v1) to spec.message (v2) and back.
func convert(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request struct {
			UID               string                   `json:"uid"`
			DesiredAPIVersion string                   `json:"desiredAPIVersion"`
			Objects           []map[string]interface{} `json:"objects"`
		} `json:"request"`
	}
	if !readJSON(w, r, &review) {
		return
	}
	stats.add("conversion_reviews")
	out := make([]map[string]interface{}, 0, len(review.Request.Objects))
	for _, o := range review.Request.Objects {
		spec, _ := o["spec"].(map[string]interface{})
		if spec == nil {
			spec = map[string]interface{}{}
		}
		from, to := "text", "message"
		if strings.HasSuffix(review.Request.DesiredAPIVersion, "/v1") {
			from, to = "message", "text"
		}
		if v, ok := spec[from]; ok {
			delete(spec, from)
			spec[to] = v
		}
		o["spec"] = spec
		if o["apiVersion"] != review.Request.DesiredAPIVersion {
			stats.add("conversions_to_" + review.Request.DesiredAPIVersion[strings.LastIndex(review.Request.DesiredAPIVersion, "/")+1:])
		}
		o["apiVersion"] = review.Request.DesiredAPIVersion
		out = append(out, o)
	}
	writeJSON(w, map[string]interface{}{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"response": map[string]interface{}{
			"uid": review.Request.UID, "convertedObjects": out,
			"result": map[string]interface{}{"status": "Success"},
		},
	})
}

func flunder(ns, name, user string) map[string]interface{} {
	return map[string]interface{}{
		"apiVersion": groupVersion, "kind": "Flunder",
		"metadata": map[string]interface{}{
			"name": name, "namespace": ns, "resourceVersion": "1",
			"annotations": map[string]string{"wardle.konn.test/requested-by": user},
		},
	}
}

// aggregated serves wardle.konn.test/v1alpha1 (flunders: list and watch) to the front proxy only.
func aggregated(allowed map[string]bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The client certificate was verified against the CA by the TLS layer when given.
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			stats.add("aggregated_unauthenticated")
			http.Error(w, "client certificate required", http.StatusUnauthorized)
			return
		}
		if cn := r.TLS.PeerCertificates[0].Subject.CommonName; len(allowed) > 0 && !allowed[cn] {
			stats.add("aggregated_forbidden")
			http.Error(w, "client certificate "+cn+" may not proxy", http.StatusForbidden)
			return
		}
		path := strings.TrimSuffix(r.URL.Path, "/")
		switch path {
		case "/apis/" + group:
			stats.add("aggregated_discovery")
			writeJSON(w, map[string]interface{}{
				"kind": "APIGroup", "apiVersion": "v1", "name": group,
				"versions":         []interface{}{map[string]string{"groupVersion": groupVersion, "version": "v1alpha1"}},
				"preferredVersion": map[string]string{"groupVersion": groupVersion, "version": "v1alpha1"},
			})
			return
		case "/apis/" + groupVersion:
			stats.add("aggregated_discovery")
			writeJSON(w, map[string]interface{}{
				"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": groupVersion,
				"resources": []interface{}{map[string]interface{}{
					"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
					"verbs": []string{"get", "list", "watch"},
				}},
			})
			return
		}
		user := r.Header.Get("X-Remote-User")
		if user == "" {
			stats.add("aggregated_no_user")
			http.Error(w, "no X-Remote-User", http.StatusUnauthorized)
			return
		}
		// /apis/wardle.konn.test/v1alpha1/namespaces/NS/flunders
		parts := strings.Split(strings.TrimPrefix(path, "/apis/"+groupVersion+"/"), "/")
		if len(parts) != 3 || parts[0] != "namespaces" || parts[2] != "flunders" || r.Method != http.MethodGet {
			stats.add("aggregated_other")
			http.NotFound(w, r)
			return
		}
		ns := parts[1]
		items := []interface{}{flunder(ns, "flunder-1", user), flunder(ns, "flunder-2", user), flunder(ns, "flunder-3", user)}
		if watch := r.URL.Query().Get("watch"); watch != "true" && watch != "1" {
			stats.add("aggregated_list")
			writeJSON(w, map[string]interface{}{
				"apiVersion": groupVersion, "kind": "FlunderList",
				"metadata": map[string]string{"resourceVersion": "1"}, "items": items,
			})
			return
		}
		// Watch: one ADDED event per item, then a MODIFIED event every 200 ms until
		// timeoutSeconds passed or the client went away.
		stats.add("aggregated_watch")
		timeout := 30 * time.Second
		if s, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && s > 0 {
			timeout = time.Duration(s) * time.Second
		}
		w.Header().Set("Content-Type", "application/json")
		flusher, _ := w.(http.Flusher)
		enc := json.NewEncoder(w)
		for _, it := range items {
			_ = enc.Encode(map[string]interface{}{"type": "ADDED", "object": it})
		}
		if flusher != nil {
			flusher.Flush()
		}
		deadline := time.After(timeout)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-deadline:
				return
			case <-tick.C:
				it := flunder(ns, "flunder-1", user)
				it["metadata"].(map[string]interface{})["resourceVersion"] = strconv.Itoa(i + 2)
				if enc.Encode(map[string]interface{}{"type": "MODIFIED", "object": it}) != nil {
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
	}
}

// bigLog is the "big" pod's log: "konn log line %09d\n" lines cut at bigLogSize bytes.
func bigLog() []byte {
	var b bytes.Buffer
	b.Grow(bigLogSize + 32)
	for i := 0; b.Len() < bigLogSize; i++ {
		fmt.Fprintf(&b, "konn log line %09d\n", i)
	}
	return b.Bytes()[:bigLogSize]
}

// containerLogs: /containerLogs/NS/POD/CONTAINER. Pod "big": 16 MiB; with follow=true a line
// every 100 ms until the client goes away; else one greeting line.
func containerLogs(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	ns, pod, container := parts[0], parts[1], parts[2]
	w.Header().Set("Content-Type", "text/plain")
	if pod == "big" {
		stats.add("kubelet_logs_big")
		_, _ = w.Write(bigLog())
		return
	}
	if r.URL.Query().Get("follow") == "true" {
		stats.add("kubelet_logs_follow")
		flusher, _ := w.(http.Flusher)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			if _, err := fmt.Fprintf(w, "follow line %d of %s/%s/%s\n", i, ns, pod, container); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}
	stats.add("kubelet_logs")
	fmt.Fprintf(w, "hello from the fake kubelet: %s/%s/%s\n", ns, pod, container)
}

// execHandler: /exec/NS/POD/CONTAINER?command=echo&command=... over the WebSocket channel
// protocol (v5/v4.channel.k8s.io: binary messages whose first byte is the stream: 1 stdout,
// 3 the final Status). Only `echo` runs; anything else exits 127 (a Status Failure).
func execHandler(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		stats.add("kubelet_exec_not_websocket")
		http.Error(w, "this kubelet speaks WebSocket only (no SPDY)", http.StatusBadRequest)
		return
	}
	var protocol string
	offered := map[string]bool{}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			offered[strings.TrimSpace(p)] = true
		}
	}
	for _, p := range []string{"v5.channel.k8s.io", "v4.channel.k8s.io"} {
		if offered[p] {
			protocol = p
			break
		}
	}
	if protocol == "" {
		stats.add("kubelet_exec_bad_protocol")
		http.Error(w, "no supported channel protocol", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(sum[:]), protocol)
	stats.add("kubelet_exec_" + strings.SplitN(protocol, ".", 2)[0])

	// Read (and drop) what the client sends, until it closes.
	go func() {
		_, _ = io.Copy(io.Discard, rw.Reader)
	}()
	cmd := r.URL.Query()["command"]
	status := `{"metadata":{},"status":"Success"}`
	if len(cmd) > 0 && cmd[0] == "echo" {
		writeFrame(rw.Writer, 2, append([]byte{1}, []byte(strings.Join(cmd[1:], " ")+"\n")...))
	} else {
		writeFrame(rw.Writer, 2, append([]byte{2}, []byte("fake kubelet: only echo runs\n")...))
		status = `{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code",` +
			`"reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"127"}]}}`
	}
	writeFrame(rw.Writer, 2, append([]byte{3}, []byte(status)...))
	// Close frame, status 1000.
	writeFrame(rw.Writer, 8, []byte{0x03, 0xe8})
	_ = rw.Flush()
	// Give the client a moment to answer the close before the socket goes.
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	time.Sleep(200 * time.Millisecond)
}

func writeFrame(w *bufio.Writer, opcode byte, payload []byte) {
	_ = w.WriteByte(0x80 | opcode)
	switch n := len(payload); {
	case n < 126:
		_ = w.WriteByte(byte(n))
	case n < 1<<16:
		_ = w.WriteByte(126)
		_ = binary.Write(w, binary.BigEndian, uint16(n))
	default:
		_ = w.WriteByte(127)
		_ = binary.Write(w, binary.BigEndian, uint64(n))
	}
	_, _ = w.Write(payload)
	_ = w.Flush()
}

func create(args []string) {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	server := fs.String("server", "", "https://127.0.0.1:PORT of the kube-apiserver")
	token := fs.String("token", "", "bearer token")
	caCert := fs.String("ca-cert", "", "CA of the kube-apiserver's serving certificate")
	ns := fs.String("namespace", "default", "namespace")
	prefix := fs.String("prefix", "many-", "ConfigMap name prefix")
	label := fs.String("label", "konn-test=webhook", "label key=value put on each ConfigMap")
	n := fs.Int("n", 200, "how many ConfigMaps, all at once")
	_ = fs.Parse(args)
	caPEM, err := os.ReadFile(*caCert)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		log.Fatal("no CA certificate in " + *caCert)
	}
	client := &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxConnsPerHost: 0, ForceAttemptHTTP2: true},
	}
	kv := strings.SplitN(*label, "=", 2)
	var wg sync.WaitGroup
	var failed int64
	var firstErr atomic.Value
	start := time.Now()
	gate := make(chan struct{})
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-gate
			body, _ := json.Marshal(map[string]interface{}{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]interface{}{
					"name": fmt.Sprintf("%s%03d", *prefix, i), "labels": map[string]string{kv[0]: kv[1]},
				},
				"data": map[string]string{"i": strconv.Itoa(i)},
			})
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost,
				*server+"/api/v1/namespaces/"+*ns+"/configmaps", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+*token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
				}
			}
			if err != nil {
				atomic.AddInt64(&failed, 1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}(i)
	}
	close(gate)
	wg.Wait()
	fmt.Printf("created %d of %d in %.2f s\n", int64(*n)-failed, *n, time.Since(start).Seconds())
	if failed > 0 {
		fmt.Printf("first error: %v\n", firstErr.Load())
		os.Exit(1)
	}
}
