package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/test/harness/authwebhook"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// TestEKSAccessAgainstEmulator: in EKS mode the endpoint and CA come from
// DescribeCluster (the emulator's), and every request carries an
// aws-iam-authenticator token for the cluster, minted from the emulator's STS;
// a 401 makes the next request carry a fresh token, otherwise it is reused.
func TestEKSAccessAgainstEmulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := moto.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	cfg := m.AWSConfig()

	// an "apiserver" that answers 401 to the second request, then 200
	var mu sync.Mutex
	var tokens []string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		n := len(tokens)
		mu.Unlock()
		if n == 2 {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","items":[]}`))
	}))
	defer api.Close()

	fake := fakeEKS{endpoint: api.URL, ca: api.Certificate().Raw}
	rc, err := cluster.RESTConfig(ctx, cluster.Source{ClusterName: "prod", QPS: 50, Burst: 100}, fake, sts.NewFromConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != api.URL || rc.QPS != 50 || rc.Burst != 100 {
		t.Fatalf("rest config: host %s qps %v burst %d", rc.Host, rc.QPS, rc.Burst)
	}
	// the test server's certificate is self-signed: trust it as the CA
	rc.TLSClientConfig.CAData = nil
	rc.TLSClientConfig.Insecure = true
	c, err := cluster.NewClientset(rc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i == 1 {
			// a token is a URL signed to the second: a new one must differ
			time.Sleep(1100 * time.Millisecond)
		}
		_, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if (i == 1) != (err != nil) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if len(tokens) != 4 {
		t.Fatalf("want 4 requests, got %d", len(tokens))
	}
	if tokens[0] != tokens[1] {
		t.Errorf("the token was not reused between requests")
	}
	if tokens[2] == tokens[1] {
		t.Errorf("the token was not replaced after a 401")
	}
	if tokens[3] != tokens[2] {
		t.Errorf("the new token was not reused")
	}
	host := m.URL()[len("http://"):]
	for i, tok := range []string{tokens[0], tokens[2]} {
		p, err := authwebhook.VerifyToken(tok[len("Bearer "):], time.Now(), []string{host})
		if err != nil {
			t.Fatalf("token %d is not a valid aws-iam-authenticator token: %v", i, err)
		}
		if time.Since(p.Date) > time.Minute {
			t.Errorf("token %d signed at %s", i, p.Date)
		}
	}
}

type fakeEKS struct {
	endpoint string
	ca       []byte
}

func (f fakeEKS) DescribeCluster(_ context.Context, in *eks.DescribeClusterInput, _ ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return &eks.DescribeClusterOutput{Cluster: &ekstypes.Cluster{
		Name:                 in.Name,
		Endpoint:             aws.String(f.endpoint),
		CertificateAuthority: &ekstypes.Certificate{Data: aws.String("bm90LWEtcmVhbC1jYQ==")},
		Status:               ekstypes.ClusterStatusActive,
	}}, nil
}

// TestEKSDescribeClusterFromEmulator reads endpoint and CA of a cluster
// created in the emulator.
func TestEKSDescribeClusterFromEmulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := moto.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	e := eks.NewFromConfig(m.AWSConfig())
	_, err = e.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("prod"), RoleArn: aws.String("arn:aws:iam::123456789012:role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cluster.RESTConfig(ctx, cluster.Source{ClusterName: "prod"}, e, sts.NewFromConfig(m.AWSConfig()))
	if err != nil {
		t.Fatalf("RESTConfig from the emulator's DescribeCluster: %v", err)
	}
	if rc.Host == "" || len(rc.TLSClientConfig.CAData) == 0 {
		t.Errorf("no endpoint or CA: %+v", rc)
	}
	if _, err := cluster.RESTConfig(ctx, cluster.Source{ClusterName: "missing"}, e, sts.NewFromConfig(m.AWSConfig())); err == nil {
		t.Errorf("a missing cluster gave no error")
	}
}

// TestLoadKubeconfigFile reads a kubeconfig file; none configured is nil.
func TestLoadKubeconfigFile(t *testing.T) {
	path := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := cluster.LoadKubeconfig(context.Background(), path, "", "", nil, nil)
	if err != nil || len(b) == 0 {
		t.Fatalf("%q %v", b, err)
	}
	if b, err := cluster.LoadKubeconfig(context.Background(), "", "", "", nil, nil); b != nil || err != nil {
		t.Errorf("nothing configured: %q %v", b, err)
	}
	if _, err := cluster.LoadKubeconfig(context.Background(), path+".missing", "", "", nil, nil); err == nil {
		t.Errorf("missing file: no error")
	}
}

// TestLoadKubeconfigFromStores reads a kubeconfig stored in SSM Parameter
// Store (SecureString) and in Secrets Manager, both in the emulator, and
// turns it into a client configuration.
func TestLoadKubeconfigFromStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := moto.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t0k3n}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	ssmc, sm := ssm.NewFromConfig(m.AWSConfig()), secretsmanager.NewFromConfig(m.AWSConfig())
	if _, err := ssmc.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String("/node-drainer/kubeconfig"), Value: aws.String(kubeconfig), Type: ssmtypes.ParameterTypeSecureString}); err != nil {
		t.Fatal(err)
	}
	if _, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("node-drainer-kubeconfig"), SecretString: aws.String(kubeconfig)}); err != nil {
		t.Fatal(err)
	}
	for name, load := range map[string]func() ([]byte, error){
		"ssm": func() ([]byte, error) {
			return cluster.LoadKubeconfig(ctx, "", "/node-drainer/kubeconfig", "", ssmc, sm)
		},
		"secret": func() ([]byte, error) {
			return cluster.LoadKubeconfig(ctx, "", "", "node-drainer-kubeconfig", ssmc, sm)
		},
	} {
		b, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rc, err := cluster.RESTConfig(ctx, cluster.Source{Kubeconfig: b, QPS: 10, Burst: 20}, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rc.Host != "https://10.0.0.1:6443" || rc.BearerToken != "t0k3n" || rc.QPS != 10 {
			t.Errorf("%s: host %s token %q qps %v", name, rc.Host, rc.BearerToken, rc.QPS)
		}
	}
	if _, err := cluster.LoadKubeconfig(ctx, "", "/missing", "", ssmc, sm); err == nil {
		t.Errorf("missing parameter: no error")
	}
	if _, err := cluster.LoadKubeconfig(ctx, "", "", "missing", ssmc, sm); err == nil {
		t.Errorf("missing secret: no error")
	}
}
