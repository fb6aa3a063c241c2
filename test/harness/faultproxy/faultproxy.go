// Package faultproxy is a reverse proxy that injects faults into a fraction
// of the requests it forwards: server errors, throttling, dropped
// connections and latency. Tests put it between the function and the
// apiserver or the AWS emulator to show that a drain survives them.
//
// Beside the random faults of Options, Rules fault only the requests they
// match (a method, a path, a body such as Action=DescribeInstances), in a
// time window, a number of times or at a fixed rate, and can run code before
// or after a request (to change the world between two calls). Down makes the
// upstream unreachable for a while: new connections are refused and every
// request on an open connection is dropped. Record keeps every request for
// the test to inspect (bodies of evictions and deletes, AWS actions).
package faultproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
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
	// Unauthorized answers 401 (an expired or refused token), not forwarded.
	Unauthorized Fault = "401"
	// Pass forwards the request unchanged: a Rule that only observes or
	// runs its Before/Then.
	Pass Fault = "pass"
	// Refused counts requests dropped while the proxy is Down.
	Refused Fault = "refused"
	// Answer replies 200 with the Rule's Reply as a JSON body, not
	// forwarded: an answer the upstream could give but that is not true now
	// (a list served stale from a lagging watch cache).
	Answer Fault = "answer"
)

// Rule faults the requests it matches. Rules are tried in order before the
// random faults of Options; the first rule that is active, matches and fires
// decides.
type Rule struct {
	Name   string
	Method string         // e.g. GET, POST; "" any
	Path   *regexp.Regexp // matched against the URL path; nil any
	Query  string         // a substring of the raw query; "" any
	Body   string         // a substring of the request body (AWS: Action=...); "" any
	// Match, when set, must also hold (e.g. one query parameter's exact
	// value, where a substring of the raw query is not enough)
	Match func(r *http.Request) bool
	Fault Fault
	Rate  float64       // fraction of matching requests faulted; 0 means every one
	Times int           // fault at most this many; 0 no limit
	After time.Duration // active from After after the rule is added
	For   time.Duration // and for this long; 0 no end
	// RetryAfter is the Retry-After header of a Throttle answer (seconds);
	// "" means 1.
	RetryAfter string
	// Before runs when the rule fires, before the request is faulted or
	// forwarded (a test changes the world between two calls here).
	Before func(r *http.Request, body []byte)
	// Then runs after the request was answered, with the status sent.
	Then func(r *http.Request, body []byte, status int)
	// Reply is the body the Answer fault sends.
	Reply string
}

// Active is a rule added to a running proxy.
type Active struct {
	Rule
	from, until time.Time
	mu          sync.Mutex
	hits        int
}

// Hits says how many times the rule fired.
func (a *Active) Hits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits
}

// Request is one request the proxy saw (Options.Record).
type Request struct {
	Time   time.Time
	Method string
	Path   string
	Query  string
	Body   []byte // up to 64 KiB
	Header http.Header
	Fault  Fault // "" when forwarded untouched
	Status int   // the status sent (0: connection dropped)
}

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
	Rules       []Rule      // added, active from Start
	Record      bool        // keep every request (see Requests)
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

	addr      string
	ln        net.Listener
	rules     []*Active
	downUntil time.Time
	stopped   bool
	inflight  map[*context.CancelFunc]struct{}
	requests  []Request
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
	p := &Proxy{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), count: map[Fault]int{},
		addr: ln.Addr().String(), inflight: map[*context.CancelFunc]struct{}{}}
	for _, r := range o.Rules {
		p.Add(r)
	}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.FlushInterval = -1 // stream watches
	p.rp.Transport = &http.Transport{TLSClientConfig: o.UpstreamTLS, ForceAttemptHTTP2: false}
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		if p.IsDown() {
			panic(http.ErrAbortHandler) // cut by Down: the client sees the connection drop
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if o.ServeTLS != nil {
		scheme = "https"
	}
	p.URL = scheme + "://" + p.addr
	p.serve(ln)
	return p, nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	if p.o.ServeTLS != nil {
		ln = tls.NewListener(ln, p.o.ServeTLS)
	}
	go func() { _ = p.srv.Serve(ln) }()
}

// Stop closes the proxy.
func (p *Proxy) Stop() error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	return p.srv.Close()
}

// Add activates a rule now (its window counts from now).
func (p *Proxy) Add(r Rule) *Active {
	a := &Active{Rule: r, from: time.Now().Add(r.After)}
	if r.For > 0 {
		a.until = a.from.Add(r.For)
	}
	p.mu.Lock()
	p.rules = append(p.rules, a)
	p.mu.Unlock()
	return a
}

// End ends the rule's window now: it fires no more.
func (a *Active) End() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.until = time.Now()
}

// Down makes the upstream unreachable for d from now, as a dead endpoint or a
// network partition: the listener is closed (new connections are refused),
// requests in flight are cut and requests on connections still open are
// dropped. The same address listens again after d.
func (p *Proxy) Down(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	until := time.Now().Add(d)
	if until.After(p.downUntil) {
		p.downUntil = until
	}
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.inflight {
		(*c)()
	}
	go p.upAt(until)
}

func (p *Proxy) upAt(t time.Time) {
	time.Sleep(time.Until(t))
	for i := 0; i < 100; i++ {
		p.mu.Lock()
		if p.stopped || p.ln != nil || time.Now().Before(p.downUntil) {
			p.mu.Unlock()
			return // stopped, already up, or extended by a later Down
		}
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// IsDown reports whether the proxy is in a Down window.
func (p *Proxy) IsDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.downUntil)
}

// Requests returns the requests seen so far (Options.Record), in the order
// they arrived: each is recorded when its answer is done, and a fault answers
// sooner than the upstream does.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]Request(nil), p.requests...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

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
	if len(p.o.Faults) == 0 || (p.total > p.o.FaultFirst && p.rng.Float64() >= p.o.Rate) {
		return ""
	}
	f := p.o.Faults[p.rng.IntN(len(p.o.Faults))]
	p.count[f]++
	return f
}

// rule returns the first active rule that matches and fires, or nil.
func (p *Proxy) rule(r *http.Request, body []byte, now time.Time) *Active {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.rules {
		a.mu.Lock()
		over := !a.until.IsZero() && !now.Before(a.until)
		a.mu.Unlock()
		if now.Before(a.from) || over {
			continue
		}
		if (a.Method != "" && !strings.EqualFold(a.Method, r.Method)) ||
			(a.Path != nil && !a.Path.MatchString(r.URL.Path)) ||
			(a.Query != "" && !strings.Contains(r.URL.RawQuery, a.Query)) ||
			(a.Body != "" && !bytes.Contains(body, []byte(a.Body))) ||
			(a.Match != nil && !a.Match(r)) {
			continue
		}
		a.mu.Lock()
		spent := a.Times > 0 && a.hits >= a.Times
		fires := !spent && (a.Rate <= 0 || a.Rate >= 1 || p.rng.Float64() < a.Rate)
		if fires {
			a.hits++
		}
		a.mu.Unlock()
		if !fires {
			continue
		}
		if a.Fault != Pass {
			p.count[a.Fault]++
		}
		return a
	}
	return nil
}

func (p *Proxy) needBody() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.o.Record {
		return true
	}
	for _, a := range p.rules {
		if a.Body != "" || a.Before != nil || a.Then != nil {
			return true
		}
	}
	return false
}

// statusWriter remembers the status sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var body []byte
	if p.needBody() && r.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 8<<20))
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	p.mu.Lock()
	p.total++
	down := now.Before(p.downUntil)
	if down {
		p.count[Refused]++
	}
	p.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	var f Fault
	var a *Active
	defer func() {
		if a != nil && a.Then != nil {
			a.Then(r, body, sw.status)
		}
		if p.o.Record {
			keep := body
			if len(keep) > 64<<10 {
				keep = keep[:64<<10]
			}
			p.mu.Lock()
			p.requests = append(p.requests, Request{Time: now, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
				Body: keep, Header: r.Header.Clone(), Fault: f, Status: sw.status})
			p.mu.Unlock()
		}
	}()
	if down {
		f = Refused
		drop(w)
		return
	}
	if a = p.rule(r, body, now); a != nil {
		f = a.Fault
		if a.Before != nil {
			a.Before(r, body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
	} else {
		f = p.pick()
	}
	// cut when the proxy goes Down meanwhile
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p.mu.Lock()
	p.inflight[&cancel] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.inflight, &cancel)
		p.mu.Unlock()
	}()
	r = r.WithContext(ctx)
	switch f {
	case ServerError:
		p.fail(sw, http.StatusServiceUnavailable, "")
	case Throttle:
		retryAfter := "1"
		if a != nil && a.RetryAfter != "" {
			retryAfter = a.RetryAfter
		}
		p.fail(sw, http.StatusTooManyRequests, retryAfter)
	case Unauthorized:
		p.fail(sw, http.StatusUnauthorized, "")
	case Answer:
		if a == nil {
			p.fail(sw, http.StatusInternalServerError, "") // an answer needs a rule's Reply
			break
		}
		sw.Header().Set("Content-Type", "application/json")
		sw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(sw, a.Reply)
	case Drop:
		drop(w)
	case Latency:
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		p.rp.ServeHTTP(sw, r)
	case DropAfter:
		if r.URL.Query().Get("watch") != "true" { // a watch would hold the answer for minutes
			p.rp.ServeHTTP(discard{}, r)
		}
		drop(w)
	default:
		p.rp.ServeHTTP(sw, r)
	}
}

// fail answers with the upstream's own error format.
func (p *Proxy) fail(w http.ResponseWriter, code int, retryAfter string) {
	if p.o.Flavor == AWSQuery {
		errCode := "ServiceUnavailable"
		switch code {
		case http.StatusTooManyRequests:
			code, errCode = http.StatusBadRequest, "Throttling"
		case http.StatusUnauthorized:
			code, errCode = http.StatusForbidden, "ExpiredToken"
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(code)
		fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>injected by faultproxy</Message></Error><RequestId>faultproxy</RequestId></ErrorResponse>`, errCode)
		return
	}
	reason := "ServiceUnavailable"
	switch code {
	case http.StatusTooManyRequests:
		reason = "TooManyRequests"
		w.Header().Set("Retry-After", retryAfter)
	case http.StatusUnauthorized:
		reason = "Unauthorized"
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
