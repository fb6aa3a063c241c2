package authwebhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/aws-iam-authenticator/pkg/token"

	"github.com/node-drainer/node-drainer/test/harness/authwebhook"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// TestWebhookWithMoto makes real aws-iam-authenticator tokens with
// credentials assumed on moto's STS and reviews them through the webhook
// kubeconfig, as kube-apiserver would.
func TestWebhookWithMoto(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	emu, err := moto.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("starting moto: %v", err)
	}
	t.Cleanup(func() { _ = emu.Stop() })

	cfg := emu.AWSConfig()
	assumed, err := sts.NewFromConfig(cfg).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String("arn:aws:iam::" + moto.AccountID + ":role/node-drainer"),
		RoleSessionName: aws.String("drain-1"),
	})
	if err != nil {
		t.Fatalf("AssumeRole: %v", err)
	}
	c := assumed.Credentials
	cfg.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
	stsClient := sts.NewFromConfig(cfg)
	gen, err := token.NewGenerator(false, false)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := gen.GetWithSTS("test-cluster", stsClient)
	if err != nil {
		t.Fatalf("GetWithSTS: %v", err)
	}

	var skew atomic.Int64 // added to the webhook's clock
	srv, err := authwebhook.Start(ctx, authwebhook.Options{
		STSEndpoint: emu.URL(),
		Mappings: []authwebhook.Mapping{{
			PrincipalARN: "arn:aws:iam::" + moto.AccountID + ":role/node-drainer",
			Username:     "node-drainer:{{SessionName}}",
			Groups:       []string{"node-drainer"},
		}},
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading webhook kubeconfig: %v", err)
	}

	t.Run("accepted", func(t *testing.T) {
		st := review(ctx, t, restCfg.Host, tok.Token)
		if !st.Authenticated || st.User.Username != "node-drainer:drain-1" || !slices.Equal(st.User.Groups, []string{"node-drainer"}) {
			t.Fatalf("want node-drainer:drain-1 in [node-drainer], got %+v", st)
		}
		const arn = "arn:aws:sts::" + moto.AccountID + ":assumed-role/node-drainer/drain-1"
		if got := st.User.Extra["arn"]; len(got) != 1 || got[0] != arn {
			t.Errorf("extra arn = %v, want %s", got, arn)
		}
	})

	t.Run("unmapped role", func(t *testing.T) {
		other, err := sts.NewFromConfig(emu.AWSConfig()).AssumeRole(ctx, &sts.AssumeRoleInput{
			RoleArn:         aws.String("arn:aws:iam::" + moto.AccountID + ":role/someone-else"),
			RoleSessionName: aws.String("x"),
		})
		if err != nil {
			t.Fatal(err)
		}
		oc := emu.AWSConfig()
		oc.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(other.Credentials.AccessKeyId), aws.ToString(other.Credentials.SecretAccessKey), aws.ToString(other.Credentials.SessionToken))
		otk, err := gen.GetWithSTS("test-cluster", sts.NewFromConfig(oc))
		if err != nil {
			t.Fatal(err)
		}
		wantRejected(t, review(ctx, t, restCfg.Host, otk.Token), "ARN not mapped: arn:aws:sts::"+moto.AccountID+":assumed-role/someone-else/x")
	})

	t.Run("looked up", func(t *testing.T) {
		// a principal no Mapping names, mapped by Lookup (the harness reads
		// the emulator's EKS access entries there)
		lookedUp, err := authwebhook.Start(ctx, authwebhook.Options{
			STSEndpoint: emu.URL(),
			Lookup: func(_ context.Context, principal string) (authwebhook.Mapping, bool, error) {
				if principal != "arn:aws:iam::"+moto.AccountID+":role/node-drainer" {
					return authwebhook.Mapping{}, false, nil
				}
				return authwebhook.Mapping{Username: "arn:aws:sts::{{AccountID}}:assumed-role/node-drainer/{{SessionName}}", Groups: []string{"g"}}, true, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer lookedUp.Stop()
		kc := filepath.Join(t.TempDir(), "lookup.kubeconfig")
		if err := lookedUp.WriteKubeconfig(kc); err != nil {
			t.Fatal(err)
		}
		lc, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		st := review(ctx, t, lc.Host, tok.Token)
		if !st.Authenticated || st.User.Username != "arn:aws:sts::"+moto.AccountID+":assumed-role/node-drainer/drain-1" || !slices.Equal(st.User.Groups, []string{"g"}) {
			t.Fatalf("want the looked-up identity in [g], got %+v", st)
		}
	})

	t.Run("expired", func(t *testing.T) {
		skew.Store(int64(16 * time.Minute))
		defer skew.Store(0)
		wantRejected(t, review(ctx, t, restCfg.Host, tok.Token), "token expired")
	})

	t.Run("not GetCallerIdentity", func(t *testing.T) {
		req, err := sts.NewPresignClient(stsClient).PresignAssumeRole(ctx, &sts.AssumeRoleInput{
			RoleArn: aws.String("arn:aws:iam::" + moto.AccountID + ":role/node-drainer"), RoleSessionName: aws.String("y"),
		})
		if err != nil {
			t.Fatal(err)
		}
		bad := authwebhook.TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(req.URL))
		wantRejected(t, review(ctx, t, restCfg.Host, bad), `unexpected Action "AssumeRole"`)
	})

	reviews := srv.Reviews()
	if len(reviews) != 4 {
		t.Fatalf("want 4 reviews, got %+v", reviews)
	}
	if r := reviews[0]; !r.Authenticated || r.Username != "node-drainer:drain-1" || r.Reason != "" {
		t.Errorf("first review: %+v", r)
	}
	for _, r := range reviews[1:] {
		if r.Authenticated || r.Reason == "" {
			t.Errorf("want rejected with a reason: %+v", r)
		}
	}
}

// review posts a TokenReview as kube-apiserver's webhook client does.
func review(ctx context.Context, t *testing.T, url, tok string) authenticationv1.TokenReviewStatus {
	t.Helper()
	body, err := json.Marshal(authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out authenticationv1.TokenReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || out.Kind != "TokenReview" || out.APIVersion != "authentication.k8s.io/v1" {
		t.Fatalf("bad answer: %s %+v", resp.Status, out)
	}
	if out.Spec.Token != "" {
		t.Error("the answer echoes the token")
	}
	return out.Status
}

func wantRejected(t *testing.T, st authenticationv1.TokenReviewStatus, reason string) {
	t.Helper()
	if st.Authenticated || !strings.Contains(st.Error, reason) {
		t.Fatalf("want rejected with %q, got %+v", reason, st)
	}
}
