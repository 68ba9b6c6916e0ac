// Command goload is the inter-node benchmark's real-peer load generator: Go's net/http client,
// the stack of the original Go workload manager, sending POST /v1/workloads/events over mutual
// TLS the way a Go peer does: one request per write sequence, each body a new workload.
//
// It speaks the same control protocol on stdin/stdout as bench/loadgen.py, so the Python
// harness drives both alike: a "ready" line first, then one JSON line of totals for each
// command line ("r" resume, "p" pause, "s" report); EOF stops it after a last totals line.
//
// Standard library only (no module downloads).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type gen struct {
	client    *http.Client
	url       string
	templates []string
	nextID    atomic.Int64
	done      atomic.Int64
	active    atomic.Int64
	mu        sync.Mutex
	cond      *sync.Cond
	paused    bool
	status    map[string]int64
	errs      map[string]int64
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func (g *gen) totals() map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	status := map[string]int64{}
	for k, v := range g.status {
		status[k] = v
	}
	errs := map[string]int64{}
	for k, v := range g.errs {
		errs[k] = v
	}
	return map[string]any{
		"done": g.done.Load(), "frames": g.done.Load(), "status": status, "errors": errs,
		"active": g.active.Load(), "paused": g.paused, "cpu": cpuSeconds(),
		"t": float64(time.Now().UnixNano()) / 1e9,
	}
}

func (g *gen) worker() {
	turn := 0
	for {
		g.mu.Lock()
		for g.paused {
			g.cond.Wait()
		}
		g.active.Add(1)
		g.mu.Unlock()

		id := g.nextID.Add(1) - 1
		body := fmt.Sprintf(g.templates[turn%len(g.templates)], id)
		turn++
		req, err := http.NewRequest(http.MethodPost, g.url, bytes.NewReader([]byte(body)))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.client.Do(req)
		g.mu.Lock()
		if err != nil {
			g.errs[errName(err)]++
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			g.status[strconv.Itoa(resp.StatusCode)]++
			if resp.StatusCode == http.StatusAccepted {
				g.done.Add(1)
			}
		}
		g.active.Add(-1)
		g.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // do not spin on a refusing server
		}
	}
}

func errName(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func main() {
	addr := flag.String("addr", "127.0.0.1:14320", "server host:port")
	cert := flag.String("cert", "", "client certificate (PEM)")
	key := flag.String("key", "", "client key (PEM)")
	pin := flag.String("pin", "", "sha256 hex of the server certificate (DER)")
	proto := flag.String("proto", "h2", "h2 or h1")
	workers := flag.Int("workers", 1, "requests in flight (h2: streams on one connection; h1: connections)")
	tplPath := flag.String("templates", "", "JSON list of body templates, each with one %d")
	idBase := flag.Int64("id-base", 0, "first workload id")
	flag.Parse()

	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		fail(err)
	}
	raw, err := os.ReadFile(*tplPath)
	if err != nil {
		fail(err)
	}
	var templates []string
	if err := json.Unmarshal(raw, &templates); err != nil || len(templates) == 0 {
		fail(fmt.Errorf("templates: %v", err))
	}
	tlsConf := &tls.Config{
		Certificates:       []tls.Certificate{pair},
		InsecureSkipVerify: true, // the pin is checked below, per connection, as a peer does
	}
	tlsConf.VerifyPeerCertificate = func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if *pin == "" {
			return nil
		}
		if len(rawCerts) == 0 {
			return errors.New("no server certificate")
		}
		sum := sha256.Sum256(rawCerts[0])
		if hex.EncodeToString(sum[:]) != *pin {
			return errors.New("server certificate is not the pinned one")
		}
		return nil
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsConf,
		MaxIdleConnsPerHost: *workers,
		IdleConnTimeout:     10 * time.Minute,
	}
	switch *proto {
	case "h2":
		tr.ForceAttemptHTTP2 = true
		tr.MaxConnsPerHost = 1
	case "h1":
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		tlsConf.NextProtos = []string{"http/1.1"}
		tr.MaxConnsPerHost = *workers
	default:
		fail(fmt.Errorf("-proto must be h2 or h1"))
	}
	g := &gen{
		client:    &http.Client{Transport: tr, Timeout: 30 * time.Second},
		url:       "https://" + *addr + "/v1/workloads/events",
		templates: templates,
		paused:    true,
		status:    map[string]int64{},
		errs:      map[string]int64{},
	}
	g.nextID.Store(*idBase)
	g.cond = sync.NewCond(&g.mu)

	// One probe handshake: TLS details for the report, and the pin checked before any load.
	probeConf := tlsConf.Clone()
	if *proto == "h2" {
		probeConf.NextProtos = []string{"h2"}
	}
	conn, err := tls.Dial("tcp", *addr, probeConf)
	if err != nil {
		fail(err)
	}
	st := conn.ConnectionState()
	conn.Close()
	out := bufio.NewWriter(os.Stdout)
	reply := func(v map[string]any) {
		b, _ := json.Marshal(v)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	reply(map[string]any{
		"ready": true, "version": versionName(st.Version),
		"cipher": tls.CipherSuiteName(st.CipherSuite), "alpn": st.NegotiatedProtocol,
	})
	for i := 0; i < *workers; i++ {
		go g.worker()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "r":
			g.mu.Lock()
			g.paused = false
			g.cond.Broadcast()
			g.mu.Unlock()
		case "p":
			g.mu.Lock()
			g.paused = true
			g.mu.Unlock()
		}
		reply(g.totals())
	}
	reply(g.totals())
}

func versionName(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLSv1.3"
	case tls.VersionTLS12:
		return "TLSv1.2"
	}
	return fmt.Sprintf("0x%04x", v)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goload:", err)
	os.Exit(1)
}
