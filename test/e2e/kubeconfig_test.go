package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/node-drainer/node-drainer/test/harness"
)

// TestKubeconfigModes: the self-managed modes that read a kubeconfig instead
// of minting an STS token — from a file, an SSM SecureString parameter and a
// Secrets Manager secret — each drain a node end to end through the real
// bootstrap. The kubeconfig is a static-token user of the drainer's group,
// pointed at a recording proxy in front of the apiserver, so the test sees
// that every request the function sent carried that token and nothing else.
// (The endpoint + CA mode with STS tokens is what every other scenario runs.)
func TestKubeconfigModes(t *testing.T) {
	stores := []struct {
		mode  string
		store func(t *testing.T, ctx context.Context, name string, kubeconfig []byte) string // returns the function's setting
	}{
		{"file", func(t *testing.T, _ context.Context, _ string, kubeconfig []byte) string {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
				t.Fatal(err)
			}
			return "KUBECONFIG_PATH=" + path
		}},
		{"ssm", func(t *testing.T, ctx context.Context, name string, kubeconfig []byte) string {
			_, err := ssm.NewFromConfig(env.AWS.AWSConfig()).PutParameter(ctx, &ssm.PutParameterInput{
				Name: aws.String("/node-drainer/" + name), Type: ssmtypes.ParameterTypeSecureString, Value: aws.String(string(kubeconfig)),
			})
			if err != nil {
				t.Fatal(err)
			}
			return "KUBECONFIG_SSM_PARAMETER=/node-drainer/" + name
		}},
		{"secret", func(t *testing.T, ctx context.Context, name string, kubeconfig []byte) string {
			_, err := secretsmanager.NewFromConfig(env.AWS.AWSConfig()).CreateSecret(ctx, &secretsmanager.CreateSecretInput{
				Name: aws.String("node-drainer/" + name), SecretString: aws.String(string(kubeconfig)),
			})
			if err != nil {
				t.Fatal(err)
			}
			return "KUBECONFIG_SECRET_ID=node-drainer/" + name
		}},
	}
	for _, st := range stores {
		t.Run(st.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			name := "kc-" + st.mode
			s := newScene(t, ctx, name, 2, harness.ASGSpec{})
			target := s.insts[0]
			pods := s.grPlacePods(ctx, target, "web", 2)

			api := recordingProxy(t)
			raw, err := env.DrainerKubeconfig()
			if err != nil {
				t.Fatal(err)
			}
			kc, err := clientcmd.Load(raw)
			if err != nil {
				t.Fatal(err)
			}
			var token string
			for _, c := range kc.Clusters {
				c.Server = api.URL
			}
			for _, a := range kc.AuthInfos {
				token = a.Token
			}
			if raw, err = clientcmd.Write(*kc); err != nil {
				t.Fatal(err)
			}
			setting := st.store(t, ctx, name, raw)

			payload, err := env.StartTerminating(ctx, s.asg, target, "token-"+name)
			if err != nil {
				t.Fatal(err)
			}
			var logs harness.LogBuffer
			// no endpoint or CA: the kubeconfig is the only way to the cluster
			rt, err := env.StartFunction(ctx, harness.FunctionOptions{Bootstrap: bootstrap, Timeout: time.Minute, Log: io.MultiWriter(testWriter{t}, &logs),
				Env: []string{setting, "CLUSTER_ENDPOINT=", "CLUSTER_CA_DATA=",
					"AWS_ENDPOINT_URL_SSM=" + env.AWS.URL(), "AWS_ENDPOINT_URL_SECRETS_MANAGER=" + env.AWS.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Stop() })
			out, err := harness.Invoke(ctx, rt, payload)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("outcome: %+v", out)
			if !strings.Contains(logs.String(), `"mode":"kubeconfig"`) {
				t.Errorf("the function did not say it runs in kubeconfig mode")
			}
			if out.Action != "drained" || out.LifecycleResult != "CONTINUE" || len(out.Evicted) != len(pods) {
				t.Errorf("outcome %+v: want drained, %d pods evicted, CONTINUE", out, len(pods))
			}
			ok, failed := s.completions(ctx, target.ID)
			if len(ok) != 1 || ok[0].Params["LifecycleActionResult"] != "CONTINUE" || len(failed) != 0 {
				t.Errorf("want exactly one CONTINUE completion, got %+v (failed %+v)", ok, failed)
			}
			if n := grGetNode(t, ctx, target.PrivateDNSName); !n.Spec.Unschedulable {
				t.Errorf("node %s not cordoned", n.Name)
			}
			reqs := api.Requests()
			if len(reqs) == 0 {
				t.Fatal("the proxy saw none of the function's requests")
			}
			for _, r := range reqs {
				if got := r.Header.Get("Authorization"); got != "Bearer "+token {
					t.Errorf("%s %s sent with credentials %.20q…, not the kubeconfig's token", r.Method, r.Path, got)
					break
				}
			}
		})
	}
}
