package authwebhook

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// TokenPrefix starts every aws-iam-authenticator token.
const TokenPrefix = "k8s-aws-v1."

// ClusterIDHeader is the header a token must sign; its value is the
// cluster's name or id.
const ClusterIDHeader = "x-k8s-aws-id"

// TokenLifetime is how long EKS accepts a token after its X-Amz-Date,
// whatever its X-Amz-Expires says (60 s for aws-iam-authenticator v0.7.x).
const TokenLifetime = 15 * time.Minute

// MaxClockSkew is how far in the future an X-Amz-Date may be.
const MaxClockSkew = time.Minute

const amzDateFormat = "20060102T150405Z"

// Presigned is the verified content of a token: a presigned STS
// GetCallerIdentity request.
type Presigned struct {
	URL *url.URL
	// Date is the signing time (X-Amz-Date).
	Date time.Time
	// Credential is X-Amz-Credential: access key id and credential scope.
	Credential string
	// SignedHeaders is X-Amz-SignedHeaders, split on ";".
	SignedHeaders []string
	Signature     string
	// SecurityToken is X-Amz-Security-Token, empty for long-term keys.
	SecurityToken string
}

// AccessKeyID is the access key id part of the credential.
func (p *Presigned) AccessKeyID() string {
	id, _, _ := strings.Cut(p.Credential, "/")
	return id
}

// VerifyToken checks the form of an aws-iam-authenticator token as EKS
// does, except for the signature: the prefix, the base64url encoding, an
// STS host among allowedHosts (host:port), Action=GetCallerIdentity with
// Version 2011-06-15, a SigV4 query signature with x-k8s-aws-id among the
// signed headers, and an X-Amz-Date at most TokenLifetime old and at most
// MaxClockSkew ahead of now. X-Amz-Expires is ignored, as EKS ignores it.
func VerifyToken(token string, now time.Time, allowedHosts []string) (*Presigned, error) {
	encoded, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return nil, fmt.Errorf("token does not start with %q", TokenPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("token is not base64url: %w", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		return nil, fmt.Errorf("token is not a URL: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("unexpected URL scheme %q", u.Scheme)
	}
	if !slices.Contains(allowedHosts, u.Host) {
		return nil, fmt.Errorf("unexpected STS host %q", u.Host)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("bad query: %w", err)
	}
	get := func(name string) (string, error) {
		switch v := q[name]; len(v) {
		case 0:
			return "", fmt.Errorf("missing %s", name)
		case 1:
			return v[0], nil
		default:
			return "", fmt.Errorf("duplicate %s", name)
		}
	}
	p := &Presigned{URL: u}
	want := map[string]string{
		"Action":          "GetCallerIdentity",
		"Version":         "2011-06-15",
		"X-Amz-Algorithm": "AWS4-HMAC-SHA256",
	}
	for _, name := range []string{"Action", "Version", "X-Amz-Algorithm"} {
		v, err := get(name)
		if err != nil {
			return nil, err
		}
		if v != want[name] {
			return nil, fmt.Errorf("unexpected %s %q", name, v)
		}
	}
	if p.Credential, err = get("X-Amz-Credential"); err != nil {
		return nil, err
	}
	if p.Signature, err = get("X-Amz-Signature"); err != nil {
		return nil, err
	}
	headers, err := get("X-Amz-SignedHeaders")
	if err != nil {
		return nil, err
	}
	p.SignedHeaders = strings.Split(headers, ";")
	if !slices.Contains(p.SignedHeaders, ClusterIDHeader) {
		return nil, fmt.Errorf("%s is not a signed header", ClusterIDHeader)
	}
	if len(q["X-Amz-Security-Token"]) > 0 {
		if p.SecurityToken, err = get("X-Amz-Security-Token"); err != nil {
			return nil, err
		}
	}
	date, err := get("X-Amz-Date")
	if err != nil {
		return nil, err
	}
	if p.Date, err = time.Parse(amzDateFormat, date); err != nil {
		return nil, fmt.Errorf("bad X-Amz-Date: %w", err)
	}
	if now.After(p.Date.Add(TokenLifetime)) {
		return nil, fmt.Errorf("token expired: signed at %s, valid for %s", p.Date.Format(time.RFC3339), TokenLifetime)
	}
	if p.Date.After(now.Add(MaxClockSkew)) {
		return nil, fmt.Errorf("token signed in the future: %s", p.Date.Format(time.RFC3339))
	}
	return p, nil
}
