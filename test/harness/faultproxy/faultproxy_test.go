package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRulesDownAndRecord(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	var before, after atomic.Int32
	p, err := Start(Options{Upstream: up.URL, Record: true, Rules: []Rule{
		{Method: "POST", Path: regexp.MustCompile(`/eviction$`), Fault: Throttle, RetryAfter: "3", Times: 1},
		{Body: "Action=DescribeInstances", Fault: Pass, Before: func(*http.Request, []byte) { before.Add(1) },
			Then: func(_ *http.Request, _ []byte, status int) {
				if status == http.StatusOK {
					after.Add(1)
				}
			}},
		{Method: "GET", Fault: Unauthorized, Times: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	get := func() (int, error) {
		resp, err := c.Get(p.URL + "/api/v1/nodes")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, _ := get(); code != http.StatusUnauthorized {
		t.Errorf("first GET: %d, want 401 once", code)
	}
	if code, _ := get(); code != http.StatusOK {
		t.Errorf("second GET: %d, want 200", code)
	}
	resp, err := c.Post(p.URL+"/api/v1/namespaces/a/pods/b/eviction", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("eviction: %d Retry-After %q, want 429 with 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp, err = c.Post(p.URL+"/", "application/x-www-form-urlencoded", strings.NewReader("Action=DescribeInstances&Version=2016-11-15"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Then runs once the answer is written: the client may read it first
	for i := 0; i < 100 && after.Load() == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if before.Load() != 1 || after.Load() != 1 {
		t.Errorf("Before/Then ran %d/%d times, want 1/1", before.Load(), after.Load())
	}

	p.Down(500 * time.Millisecond)
	if _, err := get(); err == nil {
		t.Errorf("GET while down succeeded")
	}
	time.Sleep(700 * time.Millisecond)
	if code, err := get(); err != nil || code != http.StatusOK {
		t.Errorf("GET after down: %d %v", code, err)
	}
	// the last request is recorded once its answer is written: the client
	// may read that answer first (as with Then above)
	reqs := p.Requests()
	for i := 0; i < 100 && len(reqs) < 5; i++ {
		time.Sleep(10 * time.Millisecond)
		reqs = p.Requests()
	}
	if len(reqs) < 5 {
		t.Fatalf("recorded %d requests", len(reqs))
	}
	if reqs[0].Fault != Unauthorized || reqs[2].Fault != Throttle || string(reqs[3].Body) != "Action=DescribeInstances&Version=2016-11-15" {
		t.Errorf("recorded: %+v", reqs)
	}
}

// TestRuleMatch: a rule with Match fires only where Match holds, and a
// request it does not match does not spend its Times.
func TestRuleMatch(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	p, err := Start(Options{Upstream: up.URL, Rules: []Rule{{Method: "GET", Fault: ServerError, Times: 1,
		Match: func(r *http.Request) bool { return r.URL.Query().Get("fieldSelector") == "spec.nodeName=a" }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		sel  string
		want int
	}{{"spec.nodeName%3Dab", http.StatusOK}, {"spec.nodeName%3Da", http.StatusServiceUnavailable}, {"spec.nodeName%3Da", http.StatusOK}} {
		resp, err := c.Get(p.URL + "/api/v1/pods?fieldSelector=" + tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("fieldSelector=%s: %d, want %d", tc.sel, resp.StatusCode, tc.want)
		}
	}
}
