package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// identity is a static-token user of the test apiserver (components and the
// admin); the drainer itself authenticates through the token webhook instead.
type identity struct {
	name, user, token string
	groups            []string
}

func newIdentity(name, user string, groups ...string) identity {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return identity{name: name, user: user, token: hex.EncodeToString(b), groups: groups}
}

// writeTokenFile writes the apiserver's --token-auth-file.
func writeTokenFile(path string, ids []identity) error {
	var sb strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&sb, "%s,%s,%s,%q\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

// kubeconfig is a kubeconfig for id against server.
func kubeconfig(server string, caPEM []byte, id identity) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[id.name] = &clientcmdapi.AuthInfo{Token: id.token}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: id.name}
	cfg.CurrentContext = "testenv"
	return cfg
}

// writeKubeconfig writes a kubeconfig for id against server.
func writeKubeconfig(path, server string, caPEM []byte, id identity) error {
	return clientcmd.WriteToFile(*kubeconfig(server, caPEM, id), path)
}

// DrainerKubeconfig is a kubeconfig for a user of the drainer's Kubernetes
// group (node-drainer, bound by rbac.yaml) with a static token: what an
// operator of a self-managed cluster stores in a file, an SSM parameter or a
// Secrets Manager secret (KUBECONFIG_PATH, KUBECONFIG_SSM_PARAMETER,
// KUBECONFIG_SECRET_ID) instead of STS authentication.
func (e *Env) DrainerKubeconfig() ([]byte, error) {
	return clientcmd.Write(*kubeconfig(e.Server, e.pki.caPEM, e.kubeconfigUser))
}

// startEtcd starts etcd on two free ports. A port found free may be taken
// by another process before etcd binds it (the tiers start harnesses side
// by side): etcd then exits with "address already in use", and it is
// started again on other ports, three times at most.
func (e *Env) startEtcd(ctx context.Context) (string, error) {
	for attempt := 1; ; attempt++ {
		client, err := e.startEtcdOn(ctx)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return client, err
		}
		if err := os.RemoveAll(filepath.Join(e.Dir, "etcd")); err != nil {
			return "", err
		}
	}
}

func (e *Env) startEtcdOn(ctx context.Context) (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	p, err := e.start("etcd", e.bins.path("etcd"), []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testenv=" + peer,
		"--unsafe-no-fsync", "--log-level=warn",
	}, nil)
	if err != nil {
		return "", err
	}
	return client, p.waitHealthy(ctx, client+"/health", componentStartWait, nil)
}

func (e *Env) startAPIServer(ctx context.Context, etcd string, ids []identity, webhookConfig string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	tokens := filepath.Join(e.Dir, "tokens.csv")
	if err := writeTokenFile(tokens, ids); err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + etcd,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// nothing in the harness reaches the apiserver through the default
		// kubernetes Service, and 1.37 refuses a loopback address for its
		// endpoints
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(e.Dir, "apiserver-certs"),
		"--tls-cert-file=" + e.pki.certFile, "--tls-private-key-file=" + e.pki.keyFile,
		"--client-ca-file=" + e.pki.caFile,
		"--token-auth-file=" + tokens,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + e.pki.saPubFile,
		"--service-account-signing-key-file=" + e.pki.saKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--v=1",
	}
	if webhookConfig != "" {
		args = append(args,
			"--authentication-token-webhook-config-file="+webhookConfig,
			"--authentication-token-webhook-version=v1",
			// short, so a rejected or expired token is re-checked soon
			"--authentication-token-webhook-cache-ttl=10s",
		)
	}
	p, err := e.start("kube-apiserver", e.bins.path("kube-apiserver"), args, nil)
	if err != nil {
		return err
	}
	e.Server = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	return p.waitHealthy(ctx, e.Server+"/readyz", componentStartWait, http.Header{"Authorization": {"Bearer " + ids[0].token}})
}

// clientRateFlags are the controller-manager's and scheduler's client rate
// flags (Options.ControllerQPS).
func (e *Env) clientRateFlags() []string {
	if e.controllerQPS == 0 {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.Itoa(e.controllerQPS), "--kube-api-burst=" + strconv.Itoa(2*e.controllerQPS)}
}

func (e *Env) startControllerManager(ctx context.Context, id identity) error {
	kc := filepath.Join(e.Dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kc, e.Server, e.pki.caPEM, id); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	p, err := e.start("kube-controller-manager", e.bins.path("kube-controller-manager"), append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(e.Dir, "controller-manager-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--controllers=*",
		"--service-account-private-key-file=" + e.pki.saKeyFile,
		"--root-ca-file=" + e.pki.caFile,
		// a dead kubelet is noticed in seconds, not the default 40 s
		"--node-monitor-grace-period=" + e.nodeMonitorGrace.String(), "--node-monitor-period=2s",
		"--v=1",
	}, e.clientRateFlags()...), nil)
	if err != nil {
		return err
	}
	e.ControllerManager = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	return p.waitHealthy(ctx, e.ControllerManager+"/healthz", componentStartWait, nil)
}

// ControllerManagerMetrics reads kube-controller-manager's /metrics (its
// controllers' work queues: depth, time waited, time worked) as the admin,
// over a loopbackClient (its serving certificate is its own).
func (e *Env) ControllerManagerMetrics(ctx context.Context) ([]byte, error) {
	return e.adminGet(ctx, "the controller-manager's /metrics", e.ControllerManager+"/metrics", 30*time.Second)
}

// CPUProfile records a CPU profile of kube-apiserver ("apiserver") or
// kube-controller-manager ("controller-manager") over d (whole seconds, at
// least one), from its /debug/pprof/profile (both serve it: --profiling is
// on by default), for `go tool pprof`.
func (e *Env) CPUProfile(ctx context.Context, component string, d time.Duration) ([]byte, error) {
	base := map[string]string{"apiserver": e.Server, "controller-manager": e.ControllerManager}[component]
	if base == "" {
		return nil, fmt.Errorf("no CPU profile for %q: apiserver or controller-manager", component)
	}
	if d < time.Second {
		// pprof counts whole seconds and takes 0 for its default, 30 s
		return nil, fmt.Errorf("a CPU profile of %s: want at least 1s", d)
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds()))
	return e.adminGet(ctx, "the "+component+"'s CPU profile", url, d+30*time.Second)
}

// adminGet GETs url as the admin over a loopbackClient; what names it in
// errors.
func (e *Env) adminGet(ctx context.Context, what, url string, timeout time.Duration) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.Admin.BearerToken)
	resp, err := loopbackClient(timeout).Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %s: %.200s", what, resp.Status, body)
	}
	return body, nil
}

func (e *Env) startScheduler(ctx context.Context, id identity) error {
	kc := filepath.Join(e.Dir, "scheduler.kubeconfig")
	if err := writeKubeconfig(kc, e.Server, e.pki.caPEM, id); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	p, err := e.start("kube-scheduler", e.bins.path("kube-scheduler"), append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[0]),
		"--leader-elect=false",
		"--v=1",
	}, e.clientRateFlags()...), nil)
	if err != nil {
		return err
	}
	return p.waitHealthy(ctx, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", componentStartWait, nil)
}
