package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/sweep"
	"github.com/node-drainer/node-drainer/internal/volume"
	"github.com/node-drainer/node-drainer/test/harness"
)

// requests records the query of every request to the apiserver, by path.
type requests struct {
	mu   sync.Mutex
	seen []*url.URL
}

func (r *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		r.seen = append(r.seen, req.URL)
		r.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// to returns the requests made to path since mark, and the new mark.
func (r *requests) to(path string, mark int) ([]url.Values, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []url.Values
	for _, u := range r.seen[mark:] {
		if u.Path == path {
			out = append(out, u.Query())
		}
	}
	return out, len(r.seen)
}

// TestSizedReads: on a real apiserver (600 Nodes, 700 VolumeAttachments),
// the reads the function makes are the node's size or one page at a time:
// the node found by providerID with Limit=node.PageSize pages, stopping at
// its page; a node's attachments with the spec.nodeName selector tried once
// (Kubernetes 1.35 answers 400) then Limit=volume.PageSize pages, only the
// node's kept; a wait for detachment that sees the delete; WaitReady
// watching one node by metadata.name and finding a node registered under
// another name by providerID; the sweep's reading in pages.
func TestSizedReads(t *testing.T) {
	env := harness.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fast := rest.CopyConfig(env.Admin)
	fast.QPS, fast.Burst = 1000, 2000
	admin := kubernetes.NewForConfigOrDie(fast)
	id := func(i int) string { return fmt.Sprintf("i-%017x", 0xabc000+i) }
	for i := range 600 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ip-10-9-%d-%d.ec2.internal", i/250, i%250)},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id(i)}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	target := "ip-10-9-1-0.ec2.internal" // node 250
	for i := range 700 {
		nodeName := fmt.Sprintf("ip-10-9-%d-%d.ec2.internal", (i%600)/250, (i%600)%250)
		if i < 30 {
			nodeName = target
		}
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("csi-%04d", i)},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: nodeName,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(fmt.Sprintf("pv-%04d", i))}}}
		if _, err := admin.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var reqs requests
	cfg := rest.CopyConfig(fast)
	cfg.WrapTransport = reqs.wrap
	c := kubernetes.NewForConfigOrDie(cfg)
	mark := 0

	t.Run("Find by providerID: pages of node.PageSize, consistent, stops at the match", func(t *testing.T) {
		n, err := node.Find(ctx, c, "", id(260))
		if err != nil || n.Name != "ip-10-9-1-10.ec2.internal" {
			t.Fatalf("Find = %v, %v", n, err)
		}
		var lists []url.Values
		lists, mark = reqs.to("/api/v1/nodes", mark)
		if len(lists) < 2 || len(lists) > 3 {
			t.Errorf("%d node lists, want 2 (its page is the second) or 3 (the pager's prefetch)", len(lists))
		}
		for _, q := range lists {
			if q.Get("limit") != fmt.Sprint(node.PageSize) || q.Get("resourceVersion") != "" {
				t.Errorf("node list %v: want limit=%d and a consistent read", q, node.PageSize)
			}
		}
	})

	t.Run("a node's attachments: selector refused once, then pages", func(t *testing.T) {
		volume.ForgetSelectorSupport()
		vas, err := volume.Attachments(ctx, c, target, nil)
		if err != nil || len(vas) != 31 { // csi-0000…0029, and csi-0250 by the modulo
			t.Fatalf("Attachments = %d, %v: want the node's 31", len(vas), err)
		}
		var lists []url.Values
		lists, mark = reqs.to("/apis/storage.k8s.io/v1/volumeattachments", mark)
		if len(lists) != 3 || lists[0].Get("fieldSelector") != "spec.nodeName="+target {
			t.Fatalf("lists %v: want the selector tried, then 2 pages", lists)
		}
		for _, q := range lists[1:] {
			if q.Get("fieldSelector") != "" || q.Get("limit") != fmt.Sprint(volume.PageSize) {
				t.Errorf("attachment list %v: want limit=%d, no selector", q, volume.PageSize)
			}
		}
		// learnt: the next read asks no selector
		if _, err := volume.Attachments(ctx, c, target, nil); err != nil {
			t.Fatal(err)
		}
		lists, mark = reqs.to("/apis/storage.k8s.io/v1/volumeattachments", mark)
		if len(lists) != 2 || lists[0].Get("fieldSelector") != "" {
			t.Errorf("second read %v: want 2 pages, no selector tried", lists)
		}
	})

	t.Run("WaitDetached sees the node's attachment go", func(t *testing.T) {
		go func() {
			time.Sleep(500 * time.Millisecond)
			_ = admin.StorageV1().VolumeAttachments().Delete(ctx, "csi-0003", metav1.DeleteOptions{})
		}()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		left, err := volume.WaitDetached(wctx, c, target, []string{"pv-0003"})
		if err != nil || len(left) != 0 {
			t.Fatalf("WaitDetached = %v, %v", left, err)
		}
	})

	t.Run("WaitReady: one node by name; another name found by providerID", func(t *testing.T) {
		node.LookAside = time.Second
		defer func() { node.LookAside = 2 * time.Minute }()
		other := id(9999)
		go func() {
			time.Sleep(300 * time.Millisecond)
			if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-renamed"},
				Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + other}}, metav1.CreateOptions{}); err != nil {
				return
			}
			// the controller-manager annotates a new node: read it again on a conflict
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := admin.CoreV1().Nodes().Get(ctx, "worker-renamed", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
				_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			})
		}()
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		n, err := node.WaitReady(wctx, c, "ip-10-99-0-1.ec2.internal", other)
		var lists []url.Values
		lists, mark = reqs.to("/api/v1/nodes", mark)
		if err != nil || n.Name != "worker-renamed" {
			t.Fatalf("WaitReady = %v, %v", n, err)
		}
		named := 0
		for _, q := range lists {
			switch {
			case strings.HasPrefix(q.Get("fieldSelector"), "metadata.name="):
				named++
			case q.Get("limit") != fmt.Sprint(node.PageSize):
				t.Errorf("node request %v: neither one node by name nor a page", q)
			}
		}
		if named == 0 {
			t.Error("no request named the node: the wait read every Node")
		}
	})

	t.Run("the sweep reads in pages", func(t *testing.T) {
		r, err := sweep.Read(ctx, c, ec2.NewFromConfig(env.AWS.AWSConfig()), nil, sweep.Config{ClusterTagKey: "kubernetes.io/cluster/prod", LeaseNamespace: "default"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Nodes) != 601 {
			t.Errorf("%d nodes read, want 601", len(r.Nodes))
		}
		var lists []url.Values
		lists, mark = reqs.to("/api/v1/nodes", mark)
		if len(lists) != 3 {
			t.Errorf("%d node lists, want 3 pages of %d", len(lists), node.PageSize)
		}
	})

	t.Run("the sweep in shards: the apiserver's continue tokens, each node in one shard", func(t *testing.T) {
		// a shard of one page: 601 Nodes are 3 shards (250, 250, 101);
		// the next shards read in clients of their own, as other
		// invocations do, from the tokens the first noted
		cfg := sweep.Config{ClusterTagKey: "kubernetes.io/cluster/prod", LeaseNamespace: "default", ShardNodes: int(node.PageSize)}
		ec2c := ec2.NewFromConfig(env.AWS.AWSConfig())
		r0, err := sweep.Read(ctx, c, ec2c, nil, cfg, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(r0.Shards) != 2 || len(r0.Nodes) != int(node.PageSize) || r0.Elsewhere != 601-int(node.PageSize) {
			t.Fatalf("shard 0: %d next shards, %d own nodes, %d elsewhere; want 2, %d, %d", len(r0.Shards), len(r0.Nodes), r0.Elsewhere, node.PageSize, 601-node.PageSize)
		}
		// a node registered after the pass began belongs to the next pass:
		// the shards read the snapshot of the first page
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-9-9-9.ec2.internal"},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id(9998)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		owners := map[string]int{}
		for _, n := range r0.Nodes {
			owners[n.Name]++
		}
		for i, tok := range r0.Shards {
			other := kubernetes.NewForConfigOrDie(rest.CopyConfig(fast))
			sc := cfg
			sc.Shard = &event.SweepShard{Pass: "pass-1", Index: i + 1, Of: 3, Continue: tok, StartedAt: time.Now()}
			ri, err := sweep.Read(ctx, other, ec2c, nil, sc, time.Now())
			if err != nil {
				t.Fatalf("shard %d: %v", i+1, err)
			}
			if len(ri.Shards) != 0 || ri.Elsewhere != 0 {
				t.Errorf("shard %d noted %d shards and %d nodes elsewhere: a shard reads its own pages alone", i+1, len(ri.Shards), ri.Elsewhere)
			}
			for _, n := range ri.Nodes {
				owners[n.Name]++
			}
		}
		all, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all.Items {
			switch got := owners[n.Name]; {
			case n.Name == "ip-10-9-9-9.ec2.internal" && got != 0:
				t.Errorf("%s, registered after the pass began, read by %d shards: want the next pass's", n.Name, got)
			case n.Name != "ip-10-9-9-9.ec2.internal" && got != 1:
				t.Errorf("node %s read by %d shards, want exactly 1", n.Name, got)
			}
		}
	})
}
