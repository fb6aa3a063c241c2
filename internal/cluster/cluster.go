// Package cluster builds the Kubernetes client the function uses: for EKS
// (endpoint and CA from eks:DescribeCluster), for self-managed clusters
// (endpoint and CA given), both authenticated with an aws-iam-authenticator
// STS token that is cached, refreshed before it expires and reset on a 401;
// or from a kubeconfig (file, SSM parameter or Secrets Manager secret).
package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"golang.org/x/oauth2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/aws-iam-authenticator/pkg/token"
)

// Source says where the cluster is.
type Source struct {
	ClusterName  string // EKS name, or the authenticator cluster id
	Endpoint     string // self-managed: skip DescribeCluster
	CAData       []byte
	Kubeconfig   []byte // kubeconfig mode: the file's content
	QPS          float32
	Burst        int
	RequestLimit time.Duration // per-request timeout (not for watches)
}

// EKSAPI is the part of the EKS API the function uses.
type EKSAPI interface {
	DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, opts ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
}

// RESTConfig returns the client configuration for src. For EKS it asks
// DescribeCluster once; tokens are minted lazily by the transport.
func RESTConfig(ctx context.Context, src Source, eksAPI EKSAPI, stsClient *sts.Client) (*rest.Config, error) {
	var cfg *rest.Config
	switch {
	case len(src.Kubeconfig) > 0:
		c, err := clientcmd.RESTConfigFromKubeConfig(src.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("parsing kubeconfig: %w", err)
		}
		cfg = c
	default:
		endpoint, ca := src.Endpoint, src.CAData
		if endpoint == "" {
			out, err := eksAPI.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(src.ClusterName)})
			if err != nil {
				return nil, fmt.Errorf("describing EKS cluster %s: %w", src.ClusterName, err)
			}
			if out.Cluster == nil || out.Cluster.Endpoint == nil || out.Cluster.CertificateAuthority == nil || out.Cluster.CertificateAuthority.Data == nil {
				return nil, fmt.Errorf("EKS cluster %s has no endpoint or CA yet (status %v)", src.ClusterName, statusOf(out))
			}
			endpoint = *out.Cluster.Endpoint
			b, err := base64.StdEncoding.DecodeString(*out.Cluster.CertificateAuthority.Data)
			if err != nil {
				return nil, fmt.Errorf("EKS cluster %s: CA data is not base64: %w", src.ClusterName, err)
			}
			ca = b
		}
		ts, err := NewTokenSource(src.ClusterName, stsClient)
		if err != nil {
			return nil, err
		}
		cfg = &rest.Config{
			Host:            endpoint,
			TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		}
		cfg.Wrap(transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(ts)))
	}
	cfg.QPS, cfg.Burst = src.QPS, src.Burst
	// not cfg.Timeout: client-go puts it on the http.Client, which ends
	// every watch after it too (a drain's watches were re-opened every 30 s)
	cfg.Timeout = 0
	if src.RequestLimit > 0 {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return requestLimit{rt, src.RequestLimit} })
	}
	cfg.UserAgent = "node-drainer"
	return cfg, nil
}

func statusOf(out *eks.DescribeClusterOutput) any {
	if out == nil || out.Cluster == nil {
		return "unknown"
	}
	return out.Cluster.Status
}

// NewClientset is kubernetes.NewForConfig, named for the call site.
func NewClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cfg)
}

// tokenSource mints aws-iam-authenticator tokens (a presigned STS
// GetCallerIdentity URL) with the function's own credentials.
type tokenSource struct {
	clusterID string
	gen       token.Generator
	sts       *sts.Client
}

// NewTokenSource returns an oauth2.TokenSource of EKS tokens for clusterID.
// Wrap it in client-go's cached, resettable token source: a token lives 15
// minutes from its signing; it is renewed a minute early and on a 401.
func NewTokenSource(clusterID string, stsClient *sts.Client) (oauth2.TokenSource, error) {
	if clusterID == "" {
		return nil, errors.New("a cluster name/id is required for STS tokens")
	}
	gen, err := token.NewGenerator(false, false)
	if err != nil {
		return nil, fmt.Errorf("creating token generator: %w", err)
	}
	return &tokenSource{clusterID: clusterID, gen: gen, sts: stsClient}, nil
}

func (t *tokenSource) Token() (*oauth2.Token, error) {
	tok, err := t.gen.GetWithSTS(t.clusterID, t.sts)
	if err != nil {
		return nil, fmt.Errorf("minting STS token for cluster %s: %w", t.clusterID, err)
	}
	return &oauth2.Token{AccessToken: tok.Token, TokenType: "Bearer", Expiry: tok.Expiration}, nil
}

// SSMAPI and SecretsAPI are the calls used to fetch a stored kubeconfig.
type SSMAPI interface {
	GetParameter(ctx context.Context, in *ssm.GetParameterInput, opts ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

// SecretsAPI fetches a kubeconfig stored in Secrets Manager.
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// LoadKubeconfig reads the kubeconfig from exactly one of path, SSM parameter
// or secret; all empty returns nil.
func LoadKubeconfig(ctx context.Context, path, parameter, secretID string, ssmAPI SSMAPI, secrets SecretsAPI) ([]byte, error) {
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig: %w", err)
		}
		return b, nil
	case parameter != "":
		out, err := ssmAPI.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(parameter), WithDecryption: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig from SSM parameter %s: %w", parameter, err)
		}
		if out.Parameter == nil || out.Parameter.Value == nil {
			return nil, fmt.Errorf("SSM parameter %s is empty", parameter)
		}
		return []byte(*out.Parameter.Value), nil
	case secretID != "":
		out, err := secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(secretID)})
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig from secret %s: %w", secretID, err)
		}
		if out.SecretString != nil {
			return []byte(*out.SecretString), nil
		}
		return out.SecretBinary, nil
	}
	return nil, nil
}

// requestLimit bounds each request but a watch: from sending it until its
// response body is closed, as http.Client.Timeout would. A watch lasts as
// long as the server's timeoutSeconds (the reflector asks for 5-10 min),
// and its caller's context.
type requestLimit struct {
	next  http.RoundTripper
	limit time.Duration
}

func (t requestLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.limit)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends the request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
