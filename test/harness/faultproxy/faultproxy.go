// Package faultproxy is a reverse proxy that injects faults into a fraction
// of the requests it forwards: server errors, throttling, dropped
// connections and latency. Tests put it between the function and the
// apiserver or the AWS emulator to show that a drain survives them.
package faultproxy

import (
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Fault is one kind of injected failure.
type Fault string

// The faults.
const (
	ServerError Fault = "5xx"        // 503 with the upstream's error format, not forwarded
	Throttle    Fault = "429"        // throttling, not forwarded
	Drop        Fault = "drop"       // connection closed without an answer, not forwarded
	Latency     Fault = "latency"    // forwarded after 100-400 ms
	DropAfter   Fault = "drop-after" // forwarded, the answer lost (the call took effect)
)

// Flavor says which error format the upstream speaks.
type Flavor int

// Upstream flavors.
const (
	Kubernetes Flavor = iota // Status JSON
	AWSQuery                 // autoscaling/EC2 query-protocol XML
)

// Options configure a proxy.
type Options struct {
	Upstream    string // e.g. https://127.0.0.1:6443
	Flavor      Flavor
	Rate        float64     // fraction of requests faulted, 0..1
	Faults      []Fault     // chosen uniformly for a faulted request
	Seed        uint64      // for a repeatable sequence
	FaultFirst  int         // the first N requests are always faulted
	ServeTLS    *tls.Config // serve HTTPS with this (nil: HTTP)
	UpstreamTLS *tls.Config // for an HTTPS upstream
}

// Proxy is a running fault proxy.
type Proxy struct {
	URL string

	o     Options
	srv   *http.Server
	rp    *httputil.ReverseProxy
	mu    sync.Mutex
	rng   *rand.Rand
	total int
	count map[Fault]int
}

// Start listens on a free port of 127.0.0.1.
func Start(o Options) (*Proxy, error) {
	u, err := url.Parse(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), count: map[Fault]int{}}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.FlushInterval = -1 // stream watches
	p.rp.Transport = &http.Transport{TLSClientConfig: o.UpstreamTLS, ForceAttemptHTTP2: false}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if o.ServeTLS != nil {
		ln = tls.NewListener(ln, o.ServeTLS)
		scheme = "https"
	}
	p.URL = scheme + "://" + ln.Addr().String()
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Stop closes the proxy.
func (p *Proxy) Stop() error { return p.srv.Close() }

// Counts returns the requests seen and the faults injected per kind.
func (p *Proxy) Counts() (total int, faults map[Fault]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	faults = make(map[Fault]int, len(p.count))
	for k, v := range p.count {
		faults[k] = v
	}
	return p.total, faults
}

func (p *Proxy) pick() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total++
	if len(p.o.Faults) == 0 || (p.total > p.o.FaultFirst && p.rng.Float64() >= p.o.Rate) {
		return ""
	}
	f := p.o.Faults[p.rng.IntN(len(p.o.Faults))]
	p.count[f]++
	return f
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch f := p.pick(); f {
	case ServerError:
		p.fail(w, http.StatusServiceUnavailable)
	case Throttle:
		p.fail(w, http.StatusTooManyRequests)
	case Drop:
		drop(w)
	case Latency:
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		p.rp.ServeHTTP(w, r)
	case DropAfter:
		if r.URL.Query().Get("watch") != "true" { // a watch would hold the answer for minutes
			p.rp.ServeHTTP(discard{}, r)
		}
		drop(w)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// fail answers with the upstream's own error format.
func (p *Proxy) fail(w http.ResponseWriter, code int) {
	if p.o.Flavor == AWSQuery {
		errCode := "ServiceUnavailable"
		if code == http.StatusTooManyRequests {
			code, errCode = http.StatusBadRequest, "Throttling"
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(code)
		fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>injected by faultproxy</Message></Error><RequestId>faultproxy</RequestId></ErrorResponse>`, errCode)
		return
	}
	reason := "ServiceUnavailable"
	if code == http.StatusTooManyRequests {
		reason = "TooManyRequests"
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by faultproxy","reason":%q,"code":%d}`, reason, code)
}

func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // closes the connection where hijacking is not possible
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
