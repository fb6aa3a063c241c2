package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
)

const (
	nodeName = "ip-10-0-1-23.ec2.internal"
	instID   = "i-0123456789abcdef0"
)

// nodeOpt changes a test node.
type nodeOpt func(*corev1.Node)

func newNode(name, providerID string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "general"}},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func tainted(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "someone-else", Effect: effect})
	}
}

func labelled(k, v string) nodeOpt {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func annotated(k, v string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

func get(t *testing.T, c *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writes counts update and patch calls on nodes.
func writes(c *fake.Clientset) int {
	w := 0
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "nodes" && (a.GetVerb() == "update" || a.GetVerb() == "patch") {
			w++
		}
	}
	return w
}

func taintKeys(n *corev1.Node) []string {
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return keys
}

func TestProviderInstanceID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"},
		{"aws:///eu-west-3c/i-4f8c2a1e", "i-4f8c2a1e"},
		{"aws://us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"},
		{"", ""},
		{"gce://project/zone/i-0123", ""},
		{"kwok://node-1", ""},
		{"aws:///us-east-1a/", ""},
		{"aws:///us-east-1a/fargate-ip-10-0-0-1", ""},
		{"i-0123456789abcdef0", ""},
	} {
		if got := ProviderInstanceID(tc.in); got != tc.want {
			t.Errorf("ProviderInstanceID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFind(t *testing.T) {
	pid := "aws:///us-east-1a/" + instID
	for _, tc := range []struct {
		name       string
		nodes      []runtime.Object
		privateDNS string
		want       string // node name; "" means ErrNotFound
	}{
		{"by name", []runtime.Object{newNode(nodeName, pid)}, nodeName, nodeName},
		{"by name, no providerID yet", []runtime.Object{newNode(nodeName, "")}, nodeName, nodeName},
		{"by providerID when named otherwise", []runtime.Object{newNode("worker-1", pid), newNode("worker-2", "aws:///us-east-1a/i-0fedcba9876543210")}, nodeName, "worker-1"},
		{"by providerID without a DNS name", []runtime.Object{newNode("worker-1", pid)}, "", "worker-1"},
		{"name reused by another instance: providerID decides", []runtime.Object{newNode(nodeName, "aws:///us-east-1a/i-0fedcba9876543210"), newNode("worker-9", pid)}, nodeName, "worker-9"},
		{"name reused by another instance, ours absent", []runtime.Object{newNode(nodeName, "aws:///us-east-1a/i-0fedcba9876543210")}, nodeName, ""},
		{"no node", nil, nodeName, ""},
		{"other nodes only", []runtime.Object{newNode("worker-2", "aws:///us-east-1a/i-0fedcba9876543210"), newNode("kwok-1", "kwok://kwok-1")}, nodeName, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.nodes...)
			n, err := Find(context.Background(), c, tc.privateDNS, instID)
			if tc.want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("want ErrNotFound, got %v, %v", n, err)
				}
				if !strings.Contains(err.Error(), instID) {
					t.Errorf("error %q does not name the instance", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Name != tc.want {
				t.Errorf("found %s, want %s", n.Name, tc.want)
			}
		})
	}
}

// Find looks for a node by providerID page by page, as a consistent read:
// it stops at the page that has the node (the pager has fetched one more), reads every page before
// ErrNotFound, and an error on any page is an error, never absence.
func TestFindPagesConsistently(t *testing.T) {
	pid := "aws:///us-east-1a/" + instID
	nodes := func(at int) []runtime.Object {
		var objs []runtime.Object
		for i := range 1000 {
			p := fmt.Sprintf("aws:///us-east-1a/i-%017x", i)
			if i == at {
				p = pid
			}
			objs = append(objs, newNode(fmt.Sprintf("worker-%03d", i), p))
		}
		return objs
	}
	for _, tc := range []struct {
		name  string
		at    int    // the instance's node's index (-1: none)
		fail  string // the continue token whose page fails
		want  string // node name; "" means ErrNotFound; "error" an error that is not
		pages int
	}{
		// the pager fetches the next page while one is looked at: one page
		// past the match at most
		{"on the second page: the fourth is not read", 300, "-", "worker-300", 3},
		{"on the first page", 3, "-", "worker-003", 2},
		{"absent: every page read, then not found", -1, "-", "", 4},
		{"a page fails: an error, not absence", -1, "250", "error", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(nodes(tc.at)...)
			lists := clustertest.Paginate(c, corev1.SchemeGroupVersion.WithResource("nodes"), nil)
			c.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.(k8stesting.ListActionImpl).ListOptions.Continue == tc.fail {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("denied"))
				}
				return false, nil, nil
			})
			n, err := Find(context.Background(), c, nodeName, instID)
			switch tc.want {
			case "error":
				if err == nil || errors.Is(err, ErrNotFound) {
					t.Fatalf("Find = %v, %v: want an error that is not ErrNotFound", n, err)
				}
				return
			case "":
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Find = %v, %v: want ErrNotFound", n, err)
				}
			default:
				if err != nil || n.Name != tc.want {
					t.Fatalf("Find = %v, %v: want %s", n, err, tc.want)
				}
			}
			reqs := lists.All()
			if len(reqs) > tc.pages || tc.want == "" && len(reqs) != tc.pages {
				t.Errorf("%d list requests %+v, want %d at most", len(reqs), reqs, tc.pages)
			}
			for _, r := range reqs {
				if r.ResourceVersion != "" || r.Limit != PageSize {
					t.Errorf("request %+v: want a consistent read (resourceVersion \"\") of %d a page", r, PageSize)
				}
			}
		})
	}
}

func TestFindListError(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver down")
	})
	_, err := Find(context.Background(), c, nodeName, instID)
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("an unreadable cluster must not read as node not found: %v", err)
	}
}

var now = time.Date(2026, 11, 18, 14, 2, 38, 0, time.UTC)

var drainMark = Mark{Cause: CauseTerminate, Cordon: true, ExcludeLB: true, Draining: true}

func TestRecorder(t *testing.T) {
	n := newNode(nodeName, "")
	n.UID = "uid-1"
	ctx := context.Background()

	c := fake.NewClientset()
	generateNames(c)
	long := strings.Repeat("x", 1500)
	if err := (Recorder{Client: c}).Record(ctx, n, Event{ReasonOutOfService, true, "evidence: " + long}); err != nil {
		t.Fatal(err)
	}
	list, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("want one event, got %d", len(list.Items))
	}
	e := list.Items[0]
	if Reason(e.Reason) != ReasonOutOfService || e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Node" ||
		e.InvolvedObject.Name != nodeName || e.InvolvedObject.UID != "uid-1" || e.Source.Component != "node-drainer" {
		t.Errorf("event %+v", e)
	}
	if len(e.Message) > 1000 || !strings.HasPrefix(e.Message, "evidence: xxx") || !strings.HasSuffix(e.Message, "...") {
		t.Errorf("message not cut to 1000 characters: %d %q...", len(e.Message), e.Message[:20])
	}

	if err := (Recorder{Client: c}).Record(ctx, n, EventCordonedOn("x")); err != nil {
		t.Fatal(err)
	}
	list, _ = c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Fatalf("want two events, got %d", len(list.Items))
	}

	quiet := fake.NewClientset()
	if err := (Recorder{Client: quiet, DryRun: true}).Record(ctx, n, Event{ReasonOutOfService, true, "x"}); err != nil {
		t.Fatal(err)
	}
	if err := (Recorder{Client: quiet}).Record(ctx, nil, Event{ReasonOutOfService, true, "x"}); err != nil {
		t.Fatal(err)
	}
	if len(quiet.Actions()) != 0 {
		t.Errorf("dry run or nil node wrote: %v", quiet.Actions())
	}
}

func errConflict() error {
	return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, nodeName, errors.New("the object has been modified"))
}

// generateNames gives created Events a name, as the apiserver does for
// GenerateName (the fake clientset does not).
func generateNames(c *fake.Clientset) {
	seq := 0
	c.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Name == "" {
			seq++
			e.Name = fmt.Sprintf("%s%d", e.GenerateName, seq)
		}
		return false, nil, nil
	})
}

func ready(status corev1.ConditionStatus) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	}
}

// WaitReady lists then watches: a node that joins, or turns Ready, while it
// waits ends the wait; a watch the apiserver refuses is an error at once.
func TestWaitReady(t *testing.T) {
	pid := "aws:///us-east-1a/" + instID
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("rbac"))
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		later   func(*fake.Clientset) // once the watch is open
		watch   error                 // the watch's answer
		want    string                // the node returned
		timeout bool
		forbid  bool
	}{
		{name: "already Ready", objs: []runtime.Object{newNode(nodeName, pid, ready(corev1.ConditionTrue))}, want: nodeName},
		{name: "joins, then Ready", later: func(c *fake.Clientset) {
			n, _ := c.CoreV1().Nodes().Create(context.Background(), newNode(nodeName, pid, ready(corev1.ConditionFalse)), metav1.CreateOptions{})
			n.Status.Conditions[0].Status = corev1.ConditionTrue
			_, _ = c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		}, want: nodeName},
		{name: "another name, found by providerID", later: func(c *fake.Clientset) {
			_, _ = c.CoreV1().Nodes().Create(context.Background(), newNode("worker-7", pid, ready(corev1.ConditionTrue)), metav1.CreateOptions{})
		}, want: "worker-7"},
		{name: "the name is another instance's: not it", objs: []runtime.Object{newNode(nodeName, "aws:///us-east-1a/i-0fedcba9876543210", ready(corev1.ConditionTrue))},
			timeout: true},
		{name: "never Ready", objs: []runtime.Object{newNode(nodeName, pid, ready(corev1.ConditionFalse))}, want: nodeName, timeout: true},
		{name: "watch forbidden", watch: forbidden, forbid: true},
	} {
		// in a synctest bubble: the 300 ms deadline is the bubble's, so the
		// list is read before it however loaded the machine (a list read
		// after it would leave "never Ready" without its node)
		t.Run(tc.name, func(t *testing.T) {
			clustertest.Bubble(t, func(t *testing.T) {
				c := fake.NewClientset(tc.objs...)
				opened := make(chan struct{}, 10)
				c.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
					opened <- struct{}{}
					return tc.watch != nil, nil, tc.watch
				})
				if tc.later != nil {
					go func() { <-opened; tc.later(c) }()
				}
				limit := 5 * time.Second
				if tc.timeout {
					limit = 300 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(t.Context(), limit)
				defer cancel()
				n, err := WaitReady(ctx, c, nodeName, instID)
				if errors.Is(err, cluster.ErrWaitTimeout) != tc.timeout || apierrors.IsForbidden(err) != tc.forbid {
					t.Fatalf("err %v: want timeout %v, forbidden %v", err, tc.timeout, tc.forbid)
				}
				got := ""
				if n != nil {
					got = n.Name
				}
				if got != tc.want {
					t.Errorf("node %q, want %q", got, tc.want)
				}
			})
		})
	}
}
