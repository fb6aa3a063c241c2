package harness_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/aws-iam-authenticator/pkg/token"

	"github.com/node-drainer/node-drainer/test/harness"
)

// TestHarnessIsReal proves the harness's components behave like a cluster's:
// PDBs refuse evictions, kwok runs pods and finishes graceful evictions, a
// node whose kubelet stops goes NotReady, the attach/detach controller
// creates VolumeAttachments and the out-of-service taint releases them, and
// authentication and RBAC are enforced for the drainer's identity.
func TestHarnessIsReal(t *testing.T) {
	env := harness.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := env.Client

	insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: "harness", Size: 2, Hooks: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range insts {
		if err := env.AddNodeFor(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "harness"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	t.Run("the Kubernetes release asked for", func(t *testing.T) {
		// make test-matrix sets NODE_DRAINER_K8S_VERSION; the default is the
		// tools module's release
		want := os.Getenv("NODE_DRAINER_K8S_VERSION")
		if want == "" {
			want = defaultK8sVersion(t)
		}
		if env.Version != want {
			t.Errorf("the apiserver is %s, want %s", env.Version, want)
		}
	})

	t.Run("PDB refuses an eviction with 429, allows one within budget", func(t *testing.T) {
		w := harness.Workload{Namespace: ns, Name: "web", Replicas: 2}
		if _, err := env.Deployment(ctx, w, false); err != nil {
			t.Fatal(err)
		}
		if _, err := env.PDB(ctx, w, 1, 0); err != nil {
			t.Fatal(err)
		}
		pods, err := env.WaitPodsRunning(ctx, ns, "app=web", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		waitPDBAllowed(t, ctx, c, ns, "web", 1)
		evict := func(p corev1.Pod) error {
			return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name}})
		}
		if err := evict(pods[0]); err != nil {
			t.Fatalf("first eviction within the budget: %v", err)
		}
		// kwok makes the replacement Ready at once, so the budget comes back
		// within a second: tighten the PDB to minAvailable 2 of 2 instead
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			two := intstr.FromInt32(2)
			pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable = nil, &two
			_, err = c.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		waitPDBAllowed(t, ctx, c, ns, "web", 0)
		err = evict(pods[1])
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction with no disruption allowed: want 429 from the PDB, got %v", err)
		}
		// the graceful eviction completes: kwok finishes the pod's deletion
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).Get(ctx, pods[0].Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("evicted pod %s never went away: %v", pods[0].Name, err)
		}
	})

	t.Run("VolumeAttachment created, released by the out-of-service taint of a dead node", func(t *testing.T) {
		w := harness.Workload{Namespace: ns, Name: "db"}
		pv, err := env.StatefulSet(ctx, w, harness.Zone)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := env.WaitPodsRunning(ctx, ns, "app=db", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		nodeName := pods[0].Spec.NodeName
		// attached as the attach/detach controller sees it (its operation finished)
		if _, err := env.WaitPodVolumeAttached(ctx, ns, pods[0].Name, pv, time.Minute); err != nil {
			t.Fatal(err)
		}
		va := waitAttachment(t, ctx, c, nodeName, pv, true)
		if !va.Status.Attached {
			t.Fatalf("attachment %s not attached", va.Name)
		}
		if err := env.StopKubelet(ctx, nodeName); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := env.WaitNodeReady(ctx, nodeName, false, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s NotReady %s after its kubelet stopped", nodeName, time.Since(begin).Round(time.Second))
		// a dead kubelet never finishes a graceful deletion: the pod stays
		// Terminating (it has the API's default 30 s grace period; kwok
		// would remove it at once on a live node)
		if err := c.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pods[0].UID))}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		p, err := c.CoreV1().Pods(ns).Get(ctx, pods[0].Name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Fatalf("pod %s of the stopped kubelet: %v; want it still Terminating", pods[0].Name, err)
		case p.UID != pods[0].UID || p.DeletionTimestamp == nil:
			t.Fatalf("pod %s of the stopped kubelet: uid %s, deletionTimestamp %v; want the same pod Terminating", p.Name, p.UID, p.DeletionTimestamp)
		}
		// (the controller-manager taints it too: TaintNode retries on a conflict)
		err = env.TaintNode(ctx, nodeName, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		if err != nil {
			t.Fatal(err)
		}
		begin = time.Now()
		waitAttachment(t, ctx, c, nodeName, pv, false)
		t.Logf("attachment on the dead node gone %s after the out-of-service taint", time.Since(begin).Round(time.Second))
	})

	// readyNode is the Ready node of a new one-instance group of its own
	readyNode := func(t *testing.T, group string) string {
		t.Helper()
		insts, err := env.CreateASG(ctx, harness.ASGSpec{Name: group, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.AddNodeFor(ctx, insts[0], nil); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitNodeReady(ctx, insts[0].PrivateDNSName, true, time.Minute); err != nil {
			t.Fatal(err)
		}
		return insts[0].PrivateDNSName
	}

	t.Run("a kubelet whose runtime is down: NotReady with its Lease renewed, tainted not-ready, Ready again once back", func(t *testing.T) {
		name := readyNode(t, "harness-runtime")
		if err := env.RuntimeDown(ctx, name); err != nil {
			t.Fatal(err)
		}
		lease, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// the node lifecycle controller's not-ready taint, while the
		// condition stays the kubelet's False (not the controller's Unknown)
		// and the Lease is renewed (kwok renews it every 10 s)
		err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if st := harness.NodeReadyStatus(n); st != corev1.ConditionFalse {
				return false, fmt.Errorf("node %s Ready=%s, want False (the kubelet's report kept)", name, st)
			}
			for _, tn := range n.Spec.Taints {
				if tn.Key == corev1.TaintNodeNotReady && tn.Effect == corev1.TaintEffectNoExecute {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the not-ready taint on %s: %v", name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			again, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if st := harness.NodeReadyStatus(n); st != corev1.ConditionFalse {
				return false, fmt.Errorf("node %s Ready=%s while its Lease is renewed, want False", name, st)
			}
			return again.Spec.RenewTime.After(lease.Spec.RenewTime.Time), nil
		})
		if err != nil {
			t.Errorf("the Lease of %s renewed while its runtime is down: %v", name, err)
		}
		if err := env.RuntimeUp(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitNodeReady(ctx, name, true, time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a pod that stops within its grace: gone within it, not at once", func(t *testing.T) {
		node := readyNode(t, "harness-grace")
		// six pods with 6 s of grace: each gone within it; at once (kwok's
		// fast stage) all six would be gone within a second, which a
		// uniform draw over 6 s makes (1/6)^6 likely
		const n, grace = 6, 6
		pod := func(name string) {
			t.Helper()
			g := int64(grace)
			w := harness.Workload{Namespace: ns, Name: name, GracePeriod: &g, StopWithinGrace: true}
			if _, err := env.BarePod(ctx, w, node); err != nil {
				t.Fatal(err)
			}
			if _, err := env.WaitPodsRunning(ctx, ns, "app="+name, 1, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			pod(fmt.Sprintf("stops-%d", i))
		}
		deleted := time.Now()
		for i := range n {
			if err := c.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("stops-%d", i), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		gone := map[int]time.Duration{}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, (grace+5)*time.Second, true, func(ctx context.Context) (bool, error) {
			for i := range n {
				if _, ok := gone[i]; ok {
					continue
				}
				if _, err := c.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("stops-%d", i), metav1.GetOptions{}); apierrors.IsNotFound(err) {
					gone[i] = time.Since(deleted)
				}
			}
			return len(gone) == n, nil
		})
		if err != nil {
			t.Fatalf("pods with %d s of grace still there %v after their deletion (gone after %v): %v", grace, time.Since(deleted), gone, err)
		}
		if slices.Max(slices.Collect(maps.Values(gone))) < time.Second {
			t.Errorf("all %d pods gone within a second of their deletion (%v): kwok finished them at once, not within their grace", n, gone)
		}
	})

	t.Run("token webhook: malformed, expired and non-GetCallerIdentity tokens get 401", func(t *testing.T) {
		creds, err := env.DrainerCredentials(ctx, "harness")
		if err != nil {
			t.Fatal(err)
		}
		stsc := stsClient(env, creds)
		expired := presignedToken(t, ctx, stsc, time.Now().Add(-16*time.Minute), false)
		notGCI := presignedToken(t, ctx, stsc, time.Now(), true)
		for name, tok := range map[string]string{
			"malformed":    "k8s-aws-v1.not~base64",
			"expired":      expired,
			"assume-role":  notGCI,
			"not-a-prefix": "Bearer-ish",
		} {
			status := rawStatus(t, ctx, env, tok, "/api/v1/nodes")
			if status != http.StatusUnauthorized {
				t.Errorf("%s token: status %d, want 401", name, status)
			}
		}
	})

	t.Run("drainer identity: allowed what the ClusterRole grants, 403 otherwise", func(t *testing.T) {
		creds, err := env.DrainerCredentials(ctx, "harness")
		if err != nil {
			t.Fatal(err)
		}
		gen, err := token.NewGenerator(false, false)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := gen.GetWithSTS(harness.ClusterName, stsClient(env, creds))
		if err != nil {
			t.Fatal(err)
		}
		dc := kubernetes.NewForConfigOrDie(&rest.Config{Host: env.Server, BearerToken: tok.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.CAData}})
		if _, err := dc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("listing nodes as the drainer: %v", err)
		}
		if _, err := dc.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing secrets as the drainer: want 403, got %v", err)
		}
		if _, err := dc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("creating a namespace as the drainer: want 403, got %v", err)
		}
		if err := dc.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("deleting a collection of pods as the drainer: want 403, got %v", err)
		}
		reviews := env.Auth.Reviews()
		found := false
		for _, r := range reviews {
			if r.Authenticated && strings.HasPrefix(r.Username, "node-drainer:") {
				found = true
			}
		}
		if !found {
			t.Errorf("the webhook never authenticated the drainer: %+v", reviews)
		}
	})
}

func waitPDBAllowed(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, name string, want int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed == want, nil
	})
	if err != nil {
		t.Fatalf("PDB %s never allowed %d disruptions: %v", name, want, err)
	}
}

func waitAttachment(t *testing.T, ctx context.Context, c kubernetes.Interface, nodeName, pv string, present bool) *storagev1.VolumeAttachment {
	t.Helper()
	var found *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		found = nil
		for i := range list.Items {
			va := &list.Items[i]
			if va.Spec.NodeName == nodeName && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
				found = va
			}
		}
		if present {
			return found != nil && found.Status.Attached, nil
		}
		return found == nil, nil
	})
	if err != nil {
		t.Fatalf("VolumeAttachment of %s on %s present=%v: %v", pv, nodeName, present, err)
	}
	return found
}

func stsClient(env *harness.Env, creds aws.Credentials) *sts.Client {
	cfg := env.AWS.AWSConfig()
	cfg.Credentials = credentials.StaticCredentialsProvider{Value: creds}
	return sts.NewFromConfig(cfg)
}

// presignedToken builds a token the way aws-iam-authenticator does, but
// signed at a chosen time, or for AssumeRole instead of GetCallerIdentity.
func presignedToken(t *testing.T, ctx context.Context, c *sts.Client, at time.Time, assumeRole bool) string {
	t.Helper()
	pc := sts.NewPresignClient(c, func(o *sts.PresignOptions) {
		o.Presigner = fixedTime{v4.NewSigner(), at}
		o.ClientOptions = append(o.ClientOptions, func(so *sts.Options) {
			so.APIOptions = append(so.APIOptions, smithyhttp.SetHeaderValue("x-k8s-aws-id", harness.ClusterName))
		})
	})
	var url string
	if assumeRole {
		req, err := pc.PresignAssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::123456789012:role/x"), RoleSessionName: aws.String("x")})
		if err != nil {
			t.Fatal(err)
		}
		url = req.URL
	} else {
		req, err := pc.PresignGetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			t.Fatal(err)
		}
		url = req.URL
	}
	return "k8s-aws-v1." + base64.RawURLEncoding.EncodeToString([]byte(url))
}

type fixedTime struct {
	s  *v4.Signer
	at time.Time
}

func (f fixedTime) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, opts ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return f.s.PresignHTTP(ctx, creds, r, payloadHash, service, region, f.at, opts...)
}

func rawStatus(t *testing.T, ctx context.Context, env *harness.Env, tok, path string) int {
	t.Helper()
	cfg := &rest.Config{Host: env.Server, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: env.CAData}}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.Server+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// defaultK8sVersion is the Kubernetes release of the harness's tools module.
func defaultK8sVersion(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	cmd.Env = append(cmd.Environ(), "GOWORK=off") // its own module, not the workspace
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
