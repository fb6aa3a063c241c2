package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

var drainMark = Mark{Reason: "terminate", Cordon: true, ExcludeLB: true, Draining: true}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		mark   Mark
		made   Changes // without Reason and Since
		owned  Changes // recorded, without Reason and Since; zero: no annotation
		taints []string
	}{
		{
			name:   "clean node, drain",
			node:   newNode(nodeName, ""),
			mark:   drainMark,
			made:   Changes{Cordoned: true, Labeled: true, Draining: true},
			owned:  Changes{Cordoned: true, Labeled: true, Draining: true},
			taints: []string{TaintDraining + "=terminate:NoSchedule"},
		},
		{
			name:  "clean node, cordon only",
			node:  newNode(nodeName, ""),
			mark:  Mark{Reason: "cordon", Cordon: true},
			made:  Changes{Cordoned: true},
			owned: Changes{Cordoned: true},
		},
		{
			name:   "clean node, out of service",
			node:   newNode(nodeName, ""),
			mark:   Mark{Reason: "out-of-service", Cordon: true, OutOfService: true},
			made:   Changes{Cordoned: true, OutOfService: true},
			owned:  Changes{Cordoned: true, OutOfService: true},
			taints: []string{TaintOutOfService + "=nodeshutdown:NoExecute"},
		},
		{
			name:   "someone else's cordon and label are not ours",
			node:   newNode(nodeName, "", cordoned, labelled(LabelExcludeLB, "false"), tainted("example.com/maintenance", corev1.TaintEffectNoSchedule)),
			mark:   drainMark,
			made:   Changes{Draining: true},
			owned:  Changes{Draining: true},
			taints: []string{"example.com/maintenance=someone-else:NoSchedule", TaintDraining + "=terminate:NoSchedule"},
		},
		{
			name:   "everything already set by someone else: no write",
			node:   newNode(nodeName, "", cordoned, labelled(LabelExcludeLB, "true"), tainted(TaintDraining, corev1.TaintEffectNoSchedule)),
			mark:   drainMark,
			taints: []string{TaintDraining + "=someone-else:NoSchedule"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.node)
			made, err := Apply(context.Background(), c, nodeName, tc.mark, now, false)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.made
			want.Reason, want.Since = tc.mark.Reason, now
			if made != want {
				t.Errorf("made %+v, want %+v", made, want)
			}
			n := get(t, c, nodeName)
			owned, ok := Owned(n)
			if tc.owned == (Changes{}) {
				if ok {
					t.Errorf("recorded %+v though nothing was changed", owned)
				}
				if w := writes(c); w != 0 {
					t.Errorf("%d writes to a node that needed nothing", w)
				}
			} else {
				wantOwned := tc.owned
				wantOwned.Reason, wantOwned.Since = tc.mark.Reason, now
				if !ok || !owned.Since.Equal(now) {
					t.Errorf("recorded %+v (ok=%v), want %+v", owned, ok, wantOwned)
				}
				owned.Since = now
				if owned != wantOwned {
					t.Errorf("recorded %+v, want %+v", owned, wantOwned)
				}
			}
			if tc.mark.Cordon && !n.Spec.Unschedulable {
				t.Error("not cordoned")
			}
			if tc.mark.ExcludeLB {
				if _, ok := n.Labels[LabelExcludeLB]; !ok {
					t.Error("not excluded from load balancers")
				}
			}
			if got := taintKeys(n); !reflect.DeepEqual(got, tc.taints) {
				t.Errorf("taints %v, want %v", got, tc.taints)
			}
			if n.Labels["pool"] != "general" {
				t.Errorf("other labels lost: %v", n.Labels)
			}

			// idempotent: the same mark again changes nothing and writes nothing
			before := writes(c)
			again, err := Apply(context.Background(), c, nodeName, tc.mark, now.Add(time.Minute), false)
			if err != nil {
				t.Fatal(err)
			}
			if again != (Changes{Reason: tc.mark.Reason, Since: now.Add(time.Minute)}) {
				t.Errorf("second Apply made %+v, want nothing", again)
			}
			if w := writes(c) - before; w != 0 {
				t.Errorf("second Apply wrote the node %d times", w)
			}
			if n2 := get(t, c, nodeName); !reflect.DeepEqual(n2.Spec, n.Spec) || !reflect.DeepEqual(n2.Annotations, n.Annotations) {
				t.Errorf("second Apply changed the node:\n%+v\n%+v", n.Spec, n2.Spec)
			}
		})
	}
}

func TestApplyDryRun(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	made, err := Apply(context.Background(), c, nodeName, drainMark, now, true)
	if err != nil {
		t.Fatal(err)
	}
	if !made.Cordoned || !made.Labeled || !made.Draining {
		t.Errorf("dry run should say what it would change, got %+v", made)
	}
	if w := writes(c); w != 0 {
		t.Errorf("dry run wrote the node %d times", w)
	}
	n := get(t, c, nodeName)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Annotations[AnnotationOwned] != "" {
		t.Errorf("dry run changed the node: %+v %v", n.Spec, n.Annotations)
	}
}

func TestApplyMergesWithEarlierChanges(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := Apply(ctx, c, nodeName, Mark{Reason: "cordon", Cordon: true}, now, false); err != nil {
		t.Fatal(err)
	}
	later := now.Add(5 * time.Minute)
	made, err := Apply(ctx, c, nodeName, drainMark, later, false)
	if err != nil {
		t.Fatal(err)
	}
	if made.Cordoned || !made.Labeled || !made.Draining {
		t.Errorf("made %+v: the cordon was already there", made)
	}
	owned, ok := Owned(get(t, c, nodeName))
	if !ok || !owned.Cordoned || !owned.Labeled || !owned.Draining || owned.Reason != "terminate" || !owned.Since.Equal(now) {
		t.Errorf("recorded %+v: want the first cordon kept, the drain added, since the first change", owned)
	}
	// Revert undoes both
	undone, err := Revert(ctx, c, nodeName, false)
	if err != nil {
		t.Fatal(err)
	}
	if !undone.Cordoned || !undone.Labeled || !undone.Draining {
		t.Errorf("undone %+v", undone)
	}
	n := get(t, c, nodeName)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Labels[LabelExcludeLB] != "" {
		t.Errorf("not reverted: %+v %v", n.Spec, n.Labels)
	}
}

func TestApplyNodeGone(t *testing.T) {
	c := fake.NewClientset()
	if _, err := Apply(context.Background(), c, nodeName, drainMark, now, false); err == nil {
		t.Fatal("want an error for a missing node")
	}
}

func TestApplyRetriesConflicts(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	conflicts := 2
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, errConflict()
		}
		return false, nil, nil
	})
	if _, err := Apply(context.Background(), c, nodeName, drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	if !get(t, c, nodeName).Spec.Unschedulable {
		t.Error("not cordoned after conflicts")
	}
}

func TestRevert(t *testing.T) {
	for _, tc := range []struct {
		name         string
		node         *corev1.Node
		mark         *Mark // applied first, unless nil
		thenByOthers nodeOpt
		wantCordon   bool
		wantLabel    bool
		wantTaints   []string
	}{
		{
			name: "undoes what we did",
			node: newNode(nodeName, ""),
			mark: &Mark{Reason: "out-of-service", Cordon: true, ExcludeLB: true, Draining: true, OutOfService: true},
		},
		{
			name:       "someone else's cordon stays",
			node:       newNode(nodeName, "", cordoned),
			mark:       &Mark{Reason: "out-of-service", Cordon: true, OutOfService: true},
			wantCordon: true,
		},
		{
			name:       "someone else's taints stay, ours go",
			node:       newNode(nodeName, "", tainted("example.com/maintenance", corev1.TaintEffectNoSchedule)),
			mark:       &Mark{Reason: "out-of-service", Cordon: true, OutOfService: true},
			wantTaints: []string{"example.com/maintenance=someone-else:NoSchedule"},
		},
		{
			name:       "someone else's out-of-service taint stays",
			node:       newNode(nodeName, "", tainted(TaintOutOfService, corev1.TaintEffectNoExecute)),
			mark:       &Mark{Reason: "out-of-service", Cordon: true, OutOfService: true},
			wantTaints: []string{TaintOutOfService + "=someone-else:NoExecute"},
		},
		{
			name: "taint added by someone else after us stays",
			node: newNode(nodeName, ""),
			mark: &Mark{Reason: "terminate", Cordon: true, Draining: true},
			thenByOthers: func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/later", Effect: corev1.TaintEffectNoExecute})
			},
			wantTaints: []string{"example.com/later=:NoExecute"},
		},
		{
			name:       "someone else's label stays",
			node:       newNode(nodeName, "", labelled(LabelExcludeLB, "true")),
			mark:       &drainMark,
			wantLabel:  true,
			wantTaints: nil,
		},
		{
			name:       "nothing of ours: untouched",
			node:       newNode(nodeName, "", cordoned, tainted(TaintDraining, corev1.TaintEffectNoSchedule)),
			wantCordon: true,
			wantTaints: []string{TaintDraining + "=someone-else:NoSchedule"},
		},
		{
			name:       "unreadable record: untouched",
			node:       newNode(nodeName, "", cordoned, annotated(AnnotationOwned, "{not json")),
			wantCordon: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.node)
			ctx := context.Background()
			if tc.mark != nil {
				if _, err := Apply(ctx, c, nodeName, *tc.mark, now, false); err != nil {
					t.Fatal(err)
				}
			}
			if tc.thenByOthers != nil {
				n := get(t, c, nodeName)
				tc.thenByOthers(n)
				if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := writes(c)
			undone, err := Revert(ctx, c, nodeName, false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mark == nil {
				if undone != (Changes{}) || writes(c) != before {
					t.Errorf("nothing of ours, yet undone %+v with %d writes", undone, writes(c)-before)
				}
			}
			n := get(t, c, nodeName)
			if n.Spec.Unschedulable != tc.wantCordon {
				t.Errorf("unschedulable %v, want %v", n.Spec.Unschedulable, tc.wantCordon)
			}
			if _, ok := n.Labels[LabelExcludeLB]; ok != tc.wantLabel {
				t.Errorf("exclude-LB label present %v, want %v", ok, tc.wantLabel)
			}
			if got := taintKeys(n); !reflect.DeepEqual(got, tc.wantTaints) {
				t.Errorf("taints %v, want %v", got, tc.wantTaints)
			}
			if tc.mark != nil {
				if _, ok := n.Annotations[AnnotationOwned]; ok {
					t.Error("record of our changes left on the node")
				}
			}
			if n.Labels["pool"] != "general" {
				t.Errorf("other labels lost: %v", n.Labels)
			}

			// idempotent: again is a no-op
			before = writes(c)
			again, err := Revert(ctx, c, nodeName, false)
			if err != nil {
				t.Fatal(err)
			}
			if again != (Changes{}) || writes(c) != before {
				t.Errorf("second Revert undid %+v with %d writes", again, writes(c)-before)
			}
			if n2 := get(t, c, nodeName); !reflect.DeepEqual(n2.Spec, n.Spec) || !reflect.DeepEqual(n2.Labels, n.Labels) {
				t.Errorf("second Revert changed the node")
			}
		})
	}
}

func TestRevertDryRun(t *testing.T) {
	c := fake.NewClientset(newNode(nodeName, ""))
	ctx := context.Background()
	if _, err := Apply(ctx, c, nodeName, drainMark, now, false); err != nil {
		t.Fatal(err)
	}
	before := writes(c)
	undone, err := Revert(ctx, c, nodeName, true)
	if err != nil {
		t.Fatal(err)
	}
	if !undone.Cordoned || !undone.Draining {
		t.Errorf("dry run should say what it would undo, got %+v", undone)
	}
	if writes(c) != before {
		t.Error("dry-run Revert wrote the node")
	}
	if n := get(t, c, nodeName); !n.Spec.Unschedulable || !HasTaint(n, TaintDraining) {
		t.Error("dry-run Revert changed the node")
	}
}

func TestOwned(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		ok   bool
	}{
		{"none", nil, false},
		{"other annotations", map[string]string{"a": "b"}, false},
		{"bad JSON", map[string]string{AnnotationOwned: "cordoned"}, false},
		{"valid", map[string]string{AnnotationOwned: `{"reason":"cordon","since":"2026-11-18T14:02:38Z","cordoned":true}`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(nodeName, "")
			n.Annotations = tc.ann
			c, ok := Owned(n)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.ok, c)
			}
			if ok && (!c.Cordoned || c.Reason != "cordon" || !c.Since.Equal(now)) {
				t.Errorf("decoded %+v", c)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	n := newNode(nodeName, "")
	n.UID = "uid-1"
	ctx := context.Background()

	c := fake.NewClientset()
	generateNames(c)
	long := strings.Repeat("x", 1500)
	if err := (Recorder{Client: c}).Record(ctx, n, true, ReasonOutOfService, "%s: %s", "evidence", long); err != nil {
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

	if err := (Recorder{Client: c}).Record(ctx, n, false, ReasonCordoned, "cordoned"); err != nil {
		t.Fatal(err)
	}
	list, _ = c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Fatalf("want two events, got %d", len(list.Items))
	}

	quiet := fake.NewClientset()
	if err := (Recorder{Client: quiet, DryRun: true}).Record(ctx, n, true, ReasonOutOfService, "x"); err != nil {
		t.Fatal(err)
	}
	if err := (Recorder{Client: quiet}).Record(ctx, nil, true, ReasonOutOfService, "x"); err != nil {
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
