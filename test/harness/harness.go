// Package harness is node-drainer's real local harness: it starts etcd,
// kube-apiserver (RBAC on, its own CA), kube-controller-manager, kube-scheduler
// and kwok (playing kubelets and a CSI attacher) on 127.0.0.1, plus the AWS
// emulator (moto with our lifecycle-action extension) and an EKS-like token
// webhook, and stops them all again. Integration tests and `make demo` use it.
//
// Nothing is mocked that a user has for real: evictions meet real
// PodDisruptionBudgets, the attach/detach controller creates real
// VolumeAttachments, and the drainer talks to the apiserver as an
// aws-iam-authenticator identity bound to the project's own ClusterRole.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/node-drainer/node-drainer/test/harness/authwebhook"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// Env is a running harness.
type Env struct {
	Dir        string               // working files and component logs
	Server     string               // kube-apiserver URL
	CAData     []byte               // PEM of the apiserver's CA
	Admin      *rest.Config         // cluster-admin access for tests
	Client     kubernetes.Interface // cluster-admin client
	Kubeconfig string               // admin kubeconfig file, for kubectl while debugging
	Version    string               // the apiserver's version (NODE_DRAINER_K8S_VERSION picks it)
	AWS        *moto.Server         // the AWS emulator
	Auth       *authwebhook.Server  // the apiserver's token webhook (EKS-like authentication)
	// Etcd is etcd's client URL (the conformance suite compacts it).
	Etcd string
	// ControllerManager is kube-controller-manager's URL (see
	// ControllerManagerMetrics).
	ControllerManager string

	bins             Binaries
	pki              *pki
	controllerQPS    int
	kubeconfigUser   identity // the drainer's group with a static token (DrainerKubeconfig)
	peerUser         identity // the peer the bench measures (StartNTH), in its own group
	kwokUser         identity // kwok's, for StartScaleKwok too
	scaleKwok        bool     // StartScaleKwok ran
	nodeMonitorGrace time.Duration
	peerRBAC         bool // the peer's ClusterRole and FlowSchema applied
	log              io.Writer
	mu               sync.Mutex
	procs            []*process
	keep             bool
}

// Options tune Start.
type Options struct {
	// Log receives progress lines (component started, timings); nil discards.
	Log io.Writer
	// Dir is the working directory; empty means a new temporary one, removed
	// by Stop unless NODE_DRAINER_KEEP_HARNESS=1.
	Dir string
	// ControllerQPS, when not 0, is the client rate limit of the
	// controller-manager's and the scheduler's API clients
	// (--kube-api-qps, with a burst of twice that). 0 keeps the upstream
	// defaults: 20 (burst 30) for each controller, 50 (burst 100) for the
	// scheduler, which bound a storm of many nodes by the controllers' own
	// writes (replacement pods, ReplicaSet and PDB status).
	ControllerQPS int
	// NodeMonitorGrace is the controller-manager's
	// --node-monitor-grace-period: how long a node's heartbeats may stop
	// before it is marked NotReady (default 20 s). The scale nodes' Leases
	// (StartScaleKwok) are renewed inside it.
	NodeMonitorGrace time.Duration
}

// Start builds (first time only) and starts every component, and returns when
// the cluster can run pods: nodes can be registered, the default
// ServiceAccount exists. On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	e := &Env{Dir: opts.Dir, log: opts.Log, keep: os.Getenv("NODE_DRAINER_KEEP_HARNESS") == "1", controllerQPS: opts.ControllerQPS, nodeMonitorGrace: opts.NodeMonitorGrace}
	if e.nodeMonitorGrace <= 0 {
		e.nodeMonitorGrace = 20 * time.Second
	}
	if e.log == nil {
		e.log = io.Discard
	}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "node-drainer-testenv-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	began := time.Now()
	if e.bins, err = EnsureBinaries(ctx); err != nil {
		return nil, err
	}
	if e.pki, err = newPKI(e.Dir); err != nil {
		return nil, fmt.Errorf("creating certificates: %w", err)
	}
	e.CAData = e.pki.caPEM
	admin := newIdentity("admin", "testenv-admin", "system:masters")
	cm := newIdentity("controller-manager", "system:kube-controller-manager")
	sched := newIdentity("scheduler", "system:kube-scheduler")
	kwok := newIdentity("kwok", "testenv-kwok", "system:masters")
	e.kubeconfigUser = newIdentity("node-drainer", "node-drainer-kubeconfig", "node-drainer")
	e.peerUser = newIdentity("nth", PeerGroup, PeerGroup)

	motoDone := make(chan error, 1)
	go func() {
		var err error
		e.AWS, err = moto.Start(ctx, e.Dir)
		motoDone <- err
	}()
	etcd, err := e.startEtcd(ctx)
	if merr := <-motoDone; merr != nil || err != nil {
		return nil, errors.Join(err, merr)
	}
	e.Etcd = etcd
	e.logf("etcd healthy, AWS emulator at %s", e.AWS.URL())
	webhook, err := e.startAuthWebhook(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.startAPIServer(ctx, etcd, []identity{admin, cm, sched, kwok, e.kubeconfigUser, e.peerUser}, webhook); err != nil {
		return nil, err
	}
	e.Admin = &rest.Config{Host: e.Server, BearerToken: admin.token, QPS: 500, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caPEM}}
	if e.Client, err = kubernetes.NewForConfig(e.Admin); err != nil {
		return nil, err
	}
	v, err := e.Client.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's version: %w", err)
	}
	e.Version = v.GitVersion
	e.logf("kube-apiserver %s ready at %s", e.Version, e.Server)
	e.Kubeconfig = filepath.Join(e.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(e.Kubeconfig, e.Server, e.pki.caPEM, admin); err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, f := range []func(context.Context) error{
		func(ctx context.Context) error { return e.startControllerManager(ctx, cm) },
		func(ctx context.Context) error { return e.startScheduler(ctx, sched) },
		func(ctx context.Context) error { return e.startKwok(ctx, kwok) },
	} {
		wg.Go(func() { errs[i] = f(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e.logf("controller-manager, scheduler and kwok healthy")
	if err := e.applyRBAC(ctx); err != nil {
		return nil, err
	}
	if err := e.waitDefaultServiceAccount(ctx); err != nil {
		return nil, err
	}
	e.logf("harness ready in %s (files in %s)", time.Since(began).Round(100*time.Millisecond), e.Dir)
	return e, nil
}

// New starts a harness for a test and stops it when the test ends. A component
// that cannot be built or started fails the test with what is missing.
func New(t testing.TB) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e, err := Start(ctx, Options{Log: testLog{t}})
	if err != nil {
		t.Fatalf("starting the harness (etcd, kube-apiserver, controller-manager, scheduler, kwok, moto): %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Stop stops every component (newest first) and removes the working files.
// It is safe to call more than once.
func (e *Env) Stop() {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	e.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop()
	}
	if e.Auth != nil {
		_ = e.Auth.Stop()
	}
	if e.AWS != nil {
		_ = e.AWS.Stop()
	}
	if !e.keep && e.Dir != "" {
		_ = os.RemoveAll(e.Dir)
	}
}

func (e *Env) start(name, bin string, args, env []string) (*process, error) {
	p, err := startProcess(e.Dir, name, bin, args, env)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "harness: "+format+"\n", args...)
}

// waitDefaultServiceAccount waits for the controller-manager to create the
// default ServiceAccount; until then the apiserver refuses pods. Its
// controllers start one by one after its /healthz answers (each with a client
// of its own, --use-service-account-credentials), 4-8 s on an idle machine
// and over a minute on two cores shared with another package's harness and a
// build, so the wait is long and a slow one is said, with the time it took.
func (e *Env) waitDefaultServiceAccount(ctx context.Context) error {
	began := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, defaultServiceAccountWait, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting %s for the controller-manager to create the default ServiceAccount: %w\n--- where its service account controller was ---\n%s",
			time.Since(began).Round(time.Second), err, e.controllerManagerProgress())
	}
	if waited := time.Since(began); waited > 20*time.Second {
		e.logf("the controller-manager created the default ServiceAccount after %s (a loaded machine)", waited.Round(100*time.Millisecond))
	}
	return nil
}

// defaultServiceAccountWait bounds waitDefaultServiceAccount.
const defaultServiceAccountWait = 5 * time.Minute

// controllerManagerProgress is what the controller-manager's log says of its
// service account controllers, and its last lines, for a start that failed.
func (e *Env) controllerManagerProgress() string {
	kcm := e.process("kube-controller-manager")
	if kcm == nil {
		return "(no controller-manager)"
	}
	if done, err := kcm.exited(); done {
		return fmt.Sprintf("kube-controller-manager exited: %v\n%s", err, kcm.tail(30))
	}
	b, _ := os.ReadFile(kcm.log)
	var said, last []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.Contains(l, `controller="serviceaccount`) || strings.Contains(l, "service account controller") {
			said = append(said, l)
		}
		// its complaint about the (unused) request-header CA, every second
		if !strings.Contains(l, "configmap_cafile_content.go") {
			last = append(last, l)
		}
	}
	if len(said) == 0 {
		said = append(said, "(no line of its service account controllers yet)")
	}
	return strings.Join(said, "\n") + "\n--- its last lines ---\n" + strings.Join(last[max(0, len(last)-15):], "\n")
}

// process is the component of that name started last (nil: none).
func (e *Env) process(name string) *process {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.procs) - 1; i >= 0; i-- {
		if e.procs[i].name == name {
			return e.procs[i]
		}
	}
	return nil
}
