// Package authwebhook authenticates aws-iam-authenticator tokens for the
// test harness's kube-apiserver, as EKS does, against the AWS emulator.
//
// kube-apiserver runs with --authentication-token-webhook-config-file set to
// the kubeconfig written by WriteKubeconfig and
// --authentication-token-webhook-version=v1; it then sends every bearer
// token it does not know itself to this server as an
// authentication.k8s.io/v1 TokenReview. The server checks the token's form
// and age (VerifyToken), asks the emulator's STS who signed it, and maps the
// caller's ARN to a Kubernetes user and groups, like EKS access entries.
//
// moto does not verify SigV4 signatures, so the cluster id carried in the
// signed x-k8s-aws-id header cannot be checked here: only that the header
// is signed. And moto routes a request by its Authorization header (a
// presigned URL replayed as-is would land in S3), so the server rebuilds a
// GetCallerIdentity request whose Authorization header carries the
// presigned query's credential, signed headers and signature.
//
// kube-apiserver accepts a plain http:// webhook URL, so the server does
// not use TLS. Note that kube-apiserver caches webhook answers
// (--authentication-token-webhook-cache-ttl, 2 minutes by default).
package authwebhook

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Mapping maps an IAM principal to a Kubernetes identity, like an EKS
// access entry.
type Mapping struct {
	// PrincipalARN is an IAM role or user ARN, without path, e.g.
	// arn:aws:iam::123456789012:role/node-drainer. A caller's assumed-role
	// ARN arn:aws:sts::123456789012:assumed-role/node-drainer/<session>
	// matches it.
	PrincipalARN string
	// Username may contain {{SessionName}} and {{AccountID}}, e.g.
	// node-drainer:{{SessionName}}.
	Username string
	Groups   []string
}

// Options configure the server.
type Options struct {
	// STSEndpoint is the emulator's URL, e.g. http://127.0.0.1:PORT.
	STSEndpoint string
	// AllowedHosts are the host:port values a token's URL may have;
	// default: the host of STSEndpoint.
	AllowedHosts []string
	Mappings     []Mapping
	// Lookup, when set, is asked for a principal no Mapping matches (the
	// role ARN of an assumed-role caller): like EKS reading the cluster's
	// access entries. ok false means not mapped.
	Lookup func(ctx context.Context, principalARN string) (m Mapping, ok bool, err error)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// HTTPClient calls STS; default a client with a 10 s timeout.
	HTTPClient *http.Client
}

// Review is one TokenReview answered by the server.
type Review struct {
	Time          time.Time
	Authenticated bool
	// ARN is the caller's ARN, when STS answered.
	ARN      string
	Username string
	Groups   []string
	// Reason says why the token was rejected; empty when accepted.
	Reason string
}

// Server is a running webhook.
type Server struct {
	opts   Options
	srv    *http.Server
	url    string
	served chan struct{}

	mu      sync.Mutex
	reviews []Review
	expire  time.Time // tokens signed before this are treated as expired
}

// Start listens on a free port of 127.0.0.1 and serves TokenReviews until
// Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.STSEndpoint == "" {
		return nil, errors.New("authwebhook: STSEndpoint is required")
	}
	if len(o.AllowedHosts) == 0 {
		u, err := url.Parse(o.STSEndpoint)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("authwebhook: bad STSEndpoint %q", o.STSEndpoint)
		}
		o.AllowedHosts = []string{u.Host}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("authwebhook: %w", err)
	}
	s := &Server{opts: o, url: "http://" + ln.Addr().String() + "/authenticate", served: make(chan struct{})}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// ExpireTokensSignedBefore makes every token signed before t count as
// expired, as if 15 minutes had passed for them: tests force a client's
// cached token to expire mid-drain this way. (X-Amz-Date has a resolution of
// a second: a token signed in the same second as t stays valid.)
func (s *Server) ExpireTokensSignedBefore(t time.Time) {
	s.mu.Lock()
	s.expire = t.Truncate(time.Second)
	s.mu.Unlock()
}

// AddMapping maps one more principal, as creating an EKS access entry does
// on a running cluster (a deploy test maps the role its stack created).
func (s *Server) AddMapping(m Mapping) {
	s.mu.Lock()
	s.opts.Mappings = append(s.opts.Mappings, m)
	s.mu.Unlock()
}

// RemoveMapping unmaps a principal, as deleting its access entry does.
func (s *Server) RemoveMapping(principalARN string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.opts.Mappings[:0:0]
	for _, m := range s.opts.Mappings {
		if m.PrincipalARN != principalARN {
			kept = append(kept, m)
		}
	}
	s.opts.Mappings = kept
}

// URL is the TokenReview endpoint, http://127.0.0.1:PORT/authenticate.
func (s *Server) URL() string { return s.url }

// Stop closes the server. It is idempotent.
func (s *Server) Stop() error {
	err := s.srv.Close()
	<-s.served
	return err
}

// WriteKubeconfig writes the webhook configuration file for
// kube-apiserver's --authentication-token-webhook-config-file.
func (s *Server) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["authwebhook"] = &clientcmdapi.Cluster{Server: s.url}
	cfg.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["authwebhook"] = &clientcmdapi.Context{Cluster: "authwebhook", AuthInfo: "kube-apiserver"}
	cfg.CurrentContext = "authwebhook"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing webhook kubeconfig: %w", err)
	}
	return nil
}

// Reviews returns every review answered so far, in order.
func (s *Server) Reviews() []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Review(nil), s.reviews...)
}

// ServeHTTP answers a TokenReview.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a TokenReview", http.StatusMethodNotAllowed)
		return
	}
	var tr authenticationv1.TokenReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&tr); err != nil {
		http.Error(w, "bad TokenReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	rev := s.review(r.Context(), tr.Spec.Token)
	s.mu.Lock()
	s.reviews = append(s.reviews, rev)
	s.mu.Unlock()

	tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
	tr.Spec = authenticationv1.TokenReviewSpec{} // never echo the token
	tr.Status = authenticationv1.TokenReviewStatus{Authenticated: rev.Authenticated}
	if rev.Authenticated {
		tr.Status.User = authenticationv1.UserInfo{
			Username: rev.Username,
			UID:      "aws-iam-authenticator:" + rev.ARN,
			Groups:   rev.Groups,
			Extra:    map[string]authenticationv1.ExtraValue{"arn": {rev.ARN}},
		}
	} else {
		tr.Status.Error = rev.Reason
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&tr)
}

func (s *Server) review(ctx context.Context, token string) Review {
	rev := Review{Time: s.opts.Now()}
	p, err := VerifyToken(token, rev.Time, s.opts.AllowedHosts)
	if err != nil {
		rev.Reason = err.Error()
		return rev
	}
	s.mu.Lock()
	expire := s.expire
	s.mu.Unlock()
	if p.Date.Before(expire) {
		rev.Reason = fmt.Sprintf("token expired: signed at %s, before the forced expiry at %s", p.Date.UTC().Format(time.RFC3339), expire.UTC().Format(time.RFC3339))
		return rev
	}
	if rev.ARN, err = s.callerARN(ctx, p); err != nil {
		rev.Reason = err.Error()
		return rev
	}
	s.mu.Lock()
	mappings := append([]Mapping(nil), s.opts.Mappings...)
	s.mu.Unlock()
	user, groups, ok := mapARN(rev.ARN, mappings)
	if !ok && s.opts.Lookup != nil {
		principal, _, _ := principalOf(rev.ARN)
		m, found, err := s.opts.Lookup(ctx, principal)
		if err != nil {
			rev.Reason = fmt.Sprintf("looking up %s: %v", principal, err)
			return rev
		}
		if found {
			m.PrincipalARN = principal
			user, groups, ok = mapARN(rev.ARN, []Mapping{m})
		}
	}
	if !ok {
		rev.Reason = "ARN not mapped: " + rev.ARN
		return rev
	}
	rev.Authenticated, rev.Username, rev.Groups = true, user, groups
	return rev
}

// callerARN asks the emulator's STS who signed the presigned request.
func (s *Server) callerARN(ctx context.Context, p *Presigned) (string, error) {
	body := url.Values{"Action": {"GetCallerIdentity"}, "Version": {"2011-06-15"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.STSEndpoint, strings.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("calling STS: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s, SignedHeaders=%s, Signature=%s",
		p.Credential, strings.Join(p.SignedHeaders, ";"), p.Signature))
	req.Header.Set("X-Amz-Date", p.Date.Format(amzDateFormat))
	if p.SecurityToken != "" {
		req.Header.Set("X-Amz-Security-Token", p.SecurityToken)
	}
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("calling STS: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("calling STS: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("STS GetCallerIdentity: %s: %s", resp.Status, b)
	}
	var out struct {
		Arn string `xml:"GetCallerIdentityResult>Arn"`
	}
	if err := xml.Unmarshal(b, &out); err != nil || out.Arn == "" {
		return "", fmt.Errorf("STS GetCallerIdentity: no Arn in %q", b)
	}
	return out.Arn, nil
}

// principalOf returns the principal a caller ARN stands for (an assumed
// role's role ARN), the session name and the account.
func principalOf(arn string) (principal, session, account string) {
	principal = arn
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) == 6 && parts[2] == "sts" {
		if rest, found := strings.CutPrefix(parts[5], "assumed-role/"); found {
			role, sess, _ := strings.Cut(rest, "/")
			principal = fmt.Sprintf("arn:%s:iam::%s:role/%s", parts[1], parts[4], role)
			session = sess
		}
	}
	if len(parts) == 6 {
		account = parts[4]
	}
	return principal, session, account
}

// mapARN finds the mapping for a caller ARN. An assumed-role ARN
// arn:<p>:sts::<acct>:assumed-role/<role>/<session> matches the role ARN
// arn:<p>:iam::<acct>:role/<role>; other ARNs match themselves.
func mapARN(arn string, mappings []Mapping) (username string, groups []string, ok bool) {
	principal, session, account := principalOf(arn)
	for _, m := range mappings {
		if m.PrincipalARN != principal {
			continue
		}
		name := strings.NewReplacer("{{SessionName}}", session, "{{AccountID}}", account).Replace(m.Username)
		return name, append([]string(nil), m.Groups...), true
	}
	return "", nil, false
}
