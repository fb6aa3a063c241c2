package authwebhook

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"
)

const testHost = "127.0.0.1:4566"

var signedAt = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// presignedURL builds a presigned GetCallerIdentity URL; edit changes its
// query before encoding.
func presignedURL(edit func(q url.Values)) string {
	q := url.Values{
		"Action":               {"GetCallerIdentity"},
		"Version":              {"2011-06-15"},
		"X-Amz-Algorithm":      {"AWS4-HMAC-SHA256"},
		"X-Amz-Credential":     {"ASIAEXAMPLE/20261121/us-east-1/sts/aws4_request"},
		"X-Amz-Date":           {signedAt.Format("20060102T150405Z")},
		"X-Amz-Expires":        {"60"},
		"X-Amz-SignedHeaders":  {"host;x-k8s-aws-id"},
		"X-Amz-Security-Token": {"session-token"},
		"X-Amz-Signature":      {"abc123"},
	}
	if edit != nil {
		edit(q)
	}
	return "http://" + testHost + "/?" + q.Encode()
}

func tokenFor(rawURL string) string {
	return TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(rawURL))
}

func TestVerifyToken(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		now     time.Time
		wantErr string // empty: valid
	}{
		{name: "good", token: tokenFor(presignedURL(nil)), now: signedAt.Add(time.Minute)},
		{name: "good after X-Amz-Expires", token: tokenFor(presignedURL(nil)), now: signedAt.Add(14 * time.Minute)},
		{name: "good at 15 minutes", token: tokenFor(presignedURL(nil)), now: signedAt.Add(TokenLifetime)},
		{name: "bad prefix", token: "k8s-aws-v2." + strings.TrimPrefix(tokenFor(presignedURL(nil)), TokenPrefix), now: signedAt, wantErr: "does not start with"},
		{name: "bad base64", token: TokenPrefix + "not*base64", now: signedAt, wantErr: "not base64url"},
		{name: "padded base64", token: TokenPrefix + base64.URLEncoding.EncodeToString([]byte(presignedURL(nil)+"x")), now: signedAt, wantErr: "not base64url"},
		{name: "other host", token: tokenFor(strings.Replace(presignedURL(nil), testHost, "sts.amazonaws.com", 1)), now: signedAt, wantErr: `unexpected STS host "sts.amazonaws.com"`},
		{name: "wrong action", token: tokenFor(presignedURL(func(q url.Values) { q.Set("Action", "AssumeRole") })), now: signedAt, wantErr: `unexpected Action "AssumeRole"`},
		{name: "duplicate action", token: tokenFor(presignedURL(func(q url.Values) { q.Add("Action", "GetCallerIdentity") })), now: signedAt, wantErr: "duplicate Action"},
		{name: "wrong version", token: tokenFor(presignedURL(func(q url.Values) { q.Set("Version", "2010-01-01") })), now: signedAt, wantErr: "unexpected Version"},
		{name: "missing signature", token: tokenFor(presignedURL(func(q url.Values) { q.Del("X-Amz-Signature") })), now: signedAt, wantErr: "missing X-Amz-Signature"},
		{name: "missing x-k8s-aws-id", token: tokenFor(presignedURL(func(q url.Values) { q.Set("X-Amz-SignedHeaders", "host") })), now: signedAt, wantErr: "x-k8s-aws-id is not a signed header"},
		{name: "bad date", token: tokenFor(presignedURL(func(q url.Values) { q.Set("X-Amz-Date", "yesterday") })), now: signedAt, wantErr: "bad X-Amz-Date"},
		{name: "older than 15 minutes", token: tokenFor(presignedURL(nil)), now: signedAt.Add(TokenLifetime + time.Second), wantErr: "token expired"},
		{name: "future", token: tokenFor(presignedURL(nil)), now: signedAt.Add(-2 * time.Minute), wantErr: "in the future"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := VerifyToken(tt.token, tt.now, []string{testHost})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if p.AccessKeyID() != "ASIAEXAMPLE" || p.SecurityToken != "session-token" || p.Signature != "abc123" || !p.Date.Equal(signedAt) {
				t.Errorf("unexpected content: %+v", p)
			}
		})
	}
}

func TestMapARN(t *testing.T) {
	mappings := []Mapping{
		{PrincipalARN: "arn:aws:iam::123456789012:role/node-drainer", Username: "node-drainer:{{SessionName}}", Groups: []string{"node-drainer"}},
		{PrincipalARN: "arn:aws:iam::123456789012:user/admin", Username: "admin@{{AccountID}}", Groups: []string{"system:masters"}},
	}
	tests := []struct {
		arn, user, group string
		ok               bool
	}{
		{"arn:aws:sts::123456789012:assumed-role/node-drainer/s1", "node-drainer:s1", "node-drainer", true},
		{"arn:aws:iam::123456789012:user/admin", "admin@123456789012", "system:masters", true},
		{"arn:aws:sts::123456789012:assumed-role/other/s1", "", "", false},
		{"arn:aws:sts::999999999999:assumed-role/node-drainer/s1", "", "", false},
		{"arn:aws:iam::123456789012:role/node-drainer", "node-drainer:", "node-drainer", true},
	}
	for _, tt := range tests {
		user, groups, ok := mapARN(tt.arn, mappings)
		if ok != tt.ok || user != tt.user || (ok && (len(groups) != 1 || groups[0] != tt.group)) {
			t.Errorf("mapARN(%s) = %q %v %v, want %q [%s] %v", tt.arn, user, groups, ok, tt.user, tt.group, tt.ok)
		}
	}
}
