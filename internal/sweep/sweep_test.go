package sweep

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/node"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var cfg = Config{ClusterTagKey: "kubernetes.io/cluster/c", LeaseNamespace: "node-drainer", HookNames: []string{"term", "ours"},
	ZombieAfter: 10 * time.Minute, ZombieMaxPerSweep: 1, ZombieMaxASGShare: 0.1}

func nodeOf(id string, ready bool, since time.Time) corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-0-" + id[2:] + ".ec2.internal"},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}},
	}
}

// marked returns n with a node-drainer mark of cause, as node.ApplyTo writes it.
func marked(t *testing.T, n corev1.Node, cause node.Cause, expires time.Time) corev1.Node {
	t.Helper()
	c := fake.NewClientset(&n)
	if _, err := node.ApplyTo(context.Background(), c, &n, node.Mark{Cause: cause, Cordon: true, Expires: expires}, now.Add(-2*time.Hour), false); err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *got
}

func running(id string) instance.Instance {
	return instance.Instance{ID: id, Found: true, State: instance.StateRunning, SeenAt: now,
		Tags: map[string]string{cfg.ClusterTagKey: "owned"}}
}

func inState(id string, s instance.State) instance.Instance {
	i := running(id)
	i.State = s
	return i
}

func heldLease(id string, renewed time.Time) coordinationv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-drainer-" + id, Namespace: "node-drainer"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("req-1"), RenewTime: &t, LeaseDurationSeconds: ptr.To(int32(60))}}
}

func advisoryLease(id string, renewed time.Time) coordinationv1.Lease {
	l := heldLease(id, renewed)
	l.Name = lease.AdvisoryName(string(event.KindSpotInterruption), id)
	return l
}

func freeLease(id string, renewed time.Time) coordinationv1.Lease {
	l := heldLease(id, renewed)
	l.Spec.HolderIdentity = nil
	return l
}

func groupOf(name string, hooks []string, insts ...astypes.Instance) Group {
	g := Group{Name: name, Instances: insts}
	for _, h := range hooks {
		g.Hooks = append(g.Hooks, astypes.LifecycleHook{LifecycleHookName: aws.String(h), LifecycleTransition: aws.String(string(event.TransitionTerminating))})
	}
	return g
}

func asgInstance(id, state, health string) astypes.Instance {
	return astypes.Instance{InstanceId: aws.String(id), LifecycleState: astypes.LifecycleState(state), HealthStatus: aws.String(health)}
}

func va(name, nodeName string) storagev1.VolumeAttachment {
	return storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.VolumeAttachmentSpec{NodeName: nodeName}}
}

// wantChain: h is asked of Auto Scaling (Hook.Ask), its hooks in turn as
// names, all of one instance and transition.
func wantChain(t *testing.T, h Hook, names ...string) {
	t.Helper()
	if !h.Ask {
		t.Errorf("hook %+v: want it asked (an action may be under one of them alone)", h)
	}
	var got []string
	for c := &h; c != nil; c = c.Else {
		got = append(got, c.Action.HookName)
		if c.Kind != h.Kind || c.Action.InstanceID != h.Action.InstanceID || c.Action.Transition != h.Action.Transition {
			t.Errorf("hook %+v in the chain of %+v: want the same instance and transition", c, h)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("hooks asked %v, want %v", got, names)
	}
}

func TestPlan(t *testing.T) {
	cases := map[string]struct {
		r    Readings
		cfg  func(*Config)
		want func(t *testing.T, p Plan)
	}{
		"a hook left waiting is handled as if its event had come": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"term"}, asgInstance("i-1", "Terminating:Wait", "Healthy"), asgInstance("i-2", "InService", "Healthy"))},
				Nodes: []corev1.Node{nodeOf("i-1", true, now), nodeOf("i-2", true, now)}, Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || p.Hooks[0].Action.InstanceID != "i-1" || p.Hooks[0].Action.HookName != "term" || p.Hooks[0].Kind != event.KindTerminate {
					t.Errorf("hooks %+v, want i-1's terminate hook", p.Hooks)
				}
			},
		},
		"a hook an invocation holds is left to it": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"term"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Leases: []coordinationv1.Lease{heldLease("i-1", now.Add(-10*time.Second))}, Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 0 || !slices.Equal(p.Held, []string{"i-1"}) {
					t.Errorf("hooks %+v held %v: want none handled, i-1 held", p.Hooks, p.Held)
				}
			},
		},
		"a spot warning's drain does not hold the hook waiting behind it": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"term"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Leases: []coordinationv1.Lease{advisoryLease("i-1", now.Add(-10*time.Second))}, Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || len(p.Held) != 0 {
					t.Errorf("hooks %+v held %v: want i-1's hook handled", p.Hooks, p.Held)
				}
			},
		},
		"a stale lease does not hold a hook": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"term"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Leases: []coordinationv1.Lease{heldLease("i-1", now.Add(-2*time.Minute))}, Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 {
					t.Errorf("hooks %+v: want i-1's", p.Hooks)
				}
			},
		},
		"two terminate hooks, both ours: drained under the configured one, the other asked next": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"alpha", "term", "theirs"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			cfg: func(c *Config) { c.HookNames, c.TerminateHook = []string{"alpha", "term"}, "term" },
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || len(p.Notes) != 0 {
					t.Fatalf("hooks %+v notes %v: want i-1 taken", p.Hooks, p.Notes)
				}
				wantChain(t, p.Hooks[0], "term", "alpha")
			},
		},
		"two terminate hooks, both ours, neither configured: the first by name, the other asked next": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"zeta", "alpha"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			cfg: func(c *Config) { c.HookNames, c.TerminateHook = []string{"zeta", "alpha"}, "term" },
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || len(p.Notes) != 0 {
					t.Fatalf("hooks %+v notes %v: want i-1 taken", p.Hooks, p.Notes)
				}
				wantChain(t, p.Hooks[0], "alpha", "zeta")
			},
		},
		"two launch hooks, both ours: under the configured launch hook": {
			r: func() Readings {
				g := groupOf("asg", nil, asgInstance("i-1", "Pending:Wait", "Healthy"))
				for _, name := range []string{"a-launch", "ours"} {
					g.Hooks = append(g.Hooks, astypes.LifecycleHook{LifecycleHookName: aws.String(name), LifecycleTransition: aws.String(string(event.TransitionLaunching))})
				}
				return Readings{Groups: []Group{g}, Instances: map[string]instance.Instance{"i-1": running("i-1")}}
			}(),
			cfg: func(c *Config) { c.HookNames, c.LaunchHook = []string{"a-launch", "ours"}, "ours" },
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || p.Hooks[0].Kind != event.KindLaunch {
					t.Fatalf("hooks %+v: want i-1's launch", p.Hooks)
				}
				wantChain(t, p.Hooks[0], "ours", "a-launch")
			},
		},
		"another tool's hook alone is left to it": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"flush-logs"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 0 || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "left to its owner") {
					t.Errorf("hooks %+v notes %v: want none taken, a note saying it is left to its owner", p.Hooks, p.Notes)
				}
			},
		},
		"only our hook of two is taken": {
			r: Readings{Groups: []Group{groupOf("asg", []string{"ours", "theirs"}, asgInstance("i-1", "Terminating:Wait", "Healthy"))},
				Instances: map[string]instance.Instance{"i-1": running("i-1")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 1 || p.Hooks[0].Action.HookName != "ours" {
					t.Errorf("hooks %+v: want hook ours", p.Hooks)
				}
			},
		},
		"dead nodes with pods or attachments are released; an empty one is not": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", false, now), nodeOf("i-2", false, now), nodeOf("i-3", false, now), nodeOf("i-4", false, now)},
				Instances: map[string]instance.Instance{"i-1": inState("i-1", instance.StateStopped), "i-2": instance.Gone("i-2", now),
					"i-3": inState("i-3", instance.StateTerminated), "i-4": inState("i-4", instance.StateShuttingDown)},
				PodsOn:      map[string]int{"ip-10-0-0-1.ec2.internal": 2, "ip-10-0-0-4.ec2.internal": 1},
				Attachments: []storagev1.VolumeAttachment{va("csi-2", "ip-10-0-0-2.ec2.internal")}},
			want: func(t *testing.T, p Plan) {
				if !slices.Equal(p.Dead, []string{"i-1", "i-2", "i-4"}) {
					t.Errorf("dead %v, want i-1 (pods), i-2 (attachment), i-4 (pods, shutting down)", p.Dead)
				}
			},
		},
		"a running node's lapsed or out-of-service marks are lifted; live ones and an operator's cordon stay": {
			r: Readings{Nodes: []corev1.Node{
				marked(t, nodeOf("i-1", true, now), node.CauseRebalance, now.Add(-time.Minute)),
				marked(t, nodeOf("i-2", true, now), node.CauseRebalance, now.Add(time.Hour)),
				marked(t, nodeOf("i-3", true, now), node.CauseOutOfService, time.Time{}),
				func() corev1.Node { n := nodeOf("i-4", true, now); n.Spec.Unschedulable = true; return n }(),
			}, Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2"), "i-3": running("i-3"), "i-4": running("i-4")}},
			want: func(t *testing.T, p Plan) {
				if !slices.Equal(p.Unmark, []string{"i-1", "i-3"}) {
					t.Errorf("unmark %v, want i-1 (expired) and i-3 (out of service, running again)", p.Unmark)
				}
			},
		},
		"an instance entering a warm pool is taken by the one transition its group's hooks are for, or asked of Auto Scaling": {
			r: func() Readings {
				launchOnly := groupOf("launch-only", nil, asgInstance("i-2", "Warmed:Pending:Wait", "Healthy"))
				launchOnly.Hooks = []astypes.LifecycleHook{{LifecycleHookName: aws.String("ours"), LifecycleTransition: aws.String(string(event.TransitionLaunching))}}
				both := groupOf("both", []string{"term"}, asgInstance("i-3", "Warmed:Pending:Wait", "Healthy"))
				both.Hooks = append(both.Hooks, astypes.LifecycleHook{LifecycleHookName: aws.String("ours"), LifecycleTransition: aws.String(string(event.TransitionLaunching))})
				// another tool's launch hook beside our terminate hook
				theirs := groupOf("theirs", []string{"term"}, asgInstance("i-4", "Warmed:Pending:Wait", "Healthy"))
				theirs.Hooks = append(theirs.Hooks, astypes.LifecycleHook{LifecycleHookName: aws.String("karpenter-launch"), LifecycleTransition: aws.String(string(event.TransitionLaunching))})
				// another tool's terminate hook beside our launch hook
				theirsT := groupOf("theirs-terminate", []string{"karpenter-terminate"}, asgInstance("i-5", "Warmed:Pending:Wait", "Healthy"))
				theirsT.Hooks = append(theirsT.Hooks, astypes.LifecycleHook{LifecycleHookName: aws.String("ours"), LifecycleTransition: aws.String(string(event.TransitionLaunching))})
				groups := []Group{groupOf("terminate-only", []string{"term"}, asgInstance("i-1", "Warmed:Pending:Wait", "Healthy")), launchOnly, both, theirs, theirsT}
				for i := range groups { // Auto Scaling lists them in the pool, apart
					groups[i].Pool, groups[i].Instances = groups[i].Instances, nil
				}
				return Readings{Groups: groups, Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2"), "i-3": running("i-3"),
					"i-4": running("i-4"), "i-5": running("i-5")}}
			}(),
			want: func(t *testing.T, p Plan) {
				if len(p.Hooks) != 5 || len(p.Notes) != 0 {
					t.Fatalf("hooks %+v, notes %v: want every instance's action, none left", p.Hooks, p.Notes)
				}
				for i, want := range []struct {
					id       string
					kind     event.Kind
					hook     string
					ask      bool
					elseHook string
				}{{"i-1", event.KindTerminate, "term", false, ""}, {"i-2", event.KindLaunch, "ours", false, ""},
					{"i-3", event.KindTerminate, "term", true, "ours"}, {"i-4", event.KindTerminate, "term", true, ""},
					{"i-5", event.KindLaunch, "ours", true, ""}} {
					h := p.Hooks[i]
					if h.Action.InstanceID != want.id || h.Kind != want.kind || h.Action.HookName != want.hook || h.Action.Destination != event.LocationWarmPool || h.Ask != want.ask {
						t.Errorf("hook %d: %+v, want %s's %s on %s into the warm pool, asked %v", i, h, want.id, want.kind, want.hook, want.ask)
					}
					elseHook := ""
					if h.Else != nil {
						elseHook = h.Else.Action.HookName
						if h.Else.Kind != event.KindLaunch || h.Else.Action.InstanceID != want.id || h.Else.Action.Destination != event.LocationWarmPool {
							t.Errorf("hook %d: else %+v, want %s's launch into the warm pool", i, h.Else, want.id)
						}
					}
					if elseHook != want.elseHook {
						t.Errorf("hook %d: else %q, want %q", i, elseHook, want.elseHook)
					}
				}
			},
		},
		"a terminate hold is lifted once the group has the instance in service again (back from a warm pool), not before": {
			r: Readings{Groups: []Group{groupOf("asg", nil,
				asgInstance("i-1", "InService", "Healthy"), asgInstance("i-2", "Pending:Wait", "Healthy"),
				asgInstance("i-3", "Warmed:Running", "Healthy"), asgInstance("i-4", "Terminating:Proceed", "Healthy"))},
				Nodes: []corev1.Node{
					marked(t, nodeOf("i-1", true, now), node.CauseTerminate, time.Time{}),
					marked(t, nodeOf("i-2", true, now), node.CauseTerminate, time.Time{}),
					marked(t, nodeOf("i-3", true, now), node.CauseTerminate, time.Time{}),
					marked(t, nodeOf("i-4", true, now), node.CauseTerminate, time.Time{}),
					marked(t, nodeOf("i-5", true, now), node.CauseTerminate, time.Time{}), // in no group
				}, Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2"), "i-3": running("i-3"), "i-4": running("i-4"), "i-5": running("i-5")}},
			want: func(t *testing.T, p Plan) {
				if !slices.Equal(p.Unmark, []string{"i-1", "i-2"}) {
					t.Errorf("unmark %v, want i-1 (InService) and i-2 (Pending:Wait)", p.Unmark)
				}
			},
		},
		"a batch cordon (BATCH_CORDON) is lifted once the group has the instance in service again, or once it expired; kept while it waits to leave": {
			r: Readings{Groups: []Group{groupOf("asg", nil,
				asgInstance("i-1", "InService", "Healthy"), asgInstance("i-2", "Terminating:Proceed", "Healthy"),
				asgInstance("i-3", "Terminating:Proceed", "Healthy"))},
				Nodes: []corev1.Node{
					marked(t, nodeOf("i-1", true, now), node.CauseBatch, now.Add(time.Hour)),
					marked(t, nodeOf("i-2", true, now), node.CauseBatch, now.Add(time.Hour)),
					marked(t, nodeOf("i-3", true, now), node.CauseBatch, now.Add(-time.Minute)),
				}, Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2"), "i-3": running("i-3")}},
			want: func(t *testing.T, p Plan) {
				if !slices.Equal(p.Unmark, []string{"i-1", "i-3"}) {
					t.Errorf("unmark %v, want i-1 (in service again) and i-3 (expired)", p.Unmark)
				}
			},
		},
		"an attachment to a node that is gone, whose instance EC2 does not run, is orphaned": {
			r: Readings{Attachments: []storagev1.VolumeAttachment{va("a", "ip-10-9-9-1.ec2.internal"), va("b", "ip-10-9-9-2.ec2.internal"), va("c", "ip-10-9-9-3.ec2.internal"), va("d", "worker-7")},
				ByDNSName: map[string][]instance.Instance{
					"ip-10-9-9-2.ec2.internal": {running("i-9")},
					"ip-10-9-9-3.ec2.internal": {inState("i-8", instance.StateTerminated)}}},
			want: func(t *testing.T, p Plan) {
				var got []string
				for _, o := range p.Orphans {
					got = append(got, o.Attachment.Name)
				}
				if !slices.Equal(got, []string{"a", "c"}) || len(p.Notes) != 2 {
					t.Errorf("orphans %v notes %v: want a and c; b (instance running) and d (not an EC2 name) kept, with notes", got, p.Notes)
				}
			},
		},
		"a hibernated instance's node is left as it is, with a note": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", false, now.Add(-time.Hour))},
				Attachments: []storagev1.VolumeAttachment{va("a", "ip-10-0-0-1.ec2.internal")},
				Instances: map[string]instance.Instance{"i-1": func() instance.Instance {
					i := inState("i-1", instance.StateStopped)
					i.StateReason, i.Hibernated = instance.ReasonUserHibernate, true
					return i
				}()},
				PodsOn: map[string]int{"ip-10-0-0-1.ec2.internal": 1}},
			want: func(t *testing.T, p Plan) {
				if len(p.Dead) != 0 || len(p.Orphans) != 0 || len(p.Zombies) != 0 {
					t.Errorf("plan %+v: a hibernated instance resumes with its RAM: nothing may be forced", p)
				}
				if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "hibernated") {
					t.Errorf("notes %q: want one saying the node is hibernated", p.Notes)
				}
			},
		},
		"a zombie is reported by default": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", false, now.Add(-11*time.Minute)), nodeOf("i-2", false, now.Add(-5*time.Minute))},
				Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2")}},
			want: func(t *testing.T, p Plan) {
				if len(p.Zombies) != 1 || p.Zombies[0].InstanceID != "i-1" || p.Zombies[0].Replace {
					t.Errorf("zombies %+v: want i-1 reported only (i-2 is NotReady for 5 min only)", p.Zombies)
				}
			},
		},
		"replace: at most ZOMBIE_MAX_PER_SWEEP, and never past the group's share": {
			r: Readings{
				Nodes: []corev1.Node{nodeOf("i-1", false, now.Add(-time.Hour)), nodeOf("i-2", false, now.Add(-time.Hour)), nodeOf("i-3", false, now.Add(-time.Hour))},
				Groups: []Group{
					groupOf("a", nil, asgInstance("i-1", "InService", "Healthy"), asgInstance("i-2", "InService", "Healthy")),
					groupOf("b", nil, asgInstance("i-3", "InService", "Healthy"), asgInstance("i-4", "InService", "Unhealthy")),
				},
				Instances: map[string]instance.Instance{"i-1": running("i-1"), "i-2": running("i-2"), "i-3": running("i-3"), "i-4": running("i-4")}},
			cfg: func(c *Config) { c.ZombieReplace, c.ZombieMaxPerSweep = true, 5 },
			want: func(t *testing.T, p Plan) {
				var replaced []string
				for _, z := range p.Zombies {
					if z.Replace {
						replaced = append(replaced, z.InstanceID)
					}
				}
				// group a (2 instances, 10 %): one at once; group b has one unhealthy already
				if !slices.Equal(replaced, []string{"i-1"}) || len(p.Zombies) != 3 {
					t.Errorf("zombies %+v: want i-1 replaced, i-2 and i-3 reported", p.Zombies)
				}
			},
		},
		"a lease idle for an hour whose instance has no node is deleted": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", true, now)}, Instances: map[string]instance.Instance{"i-1": running("i-1")},
				Leases: []coordinationv1.Lease{freeLease("i-1", now.Add(-2*time.Hour)), freeLease("i-2", now.Add(-2*time.Hour)), freeLease("i-3", now.Add(-time.Minute))}},
			want: func(t *testing.T, p Plan) {
				if len(p.Leases) != 1 || p.Leases[0].Name != "node-drainer-i-2" {
					t.Errorf("leases %v: want only i-2's (i-1 has a node, i-3's is recent)", p.Leases)
				}
			},
		},
		"another cluster's instance is left alone": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", false, now.Add(-time.Hour))},
				Instances: map[string]instance.Instance{"i-1": {ID: "i-1", Found: true, State: instance.StateStopped, SeenAt: now}},
				PodsOn:    map[string]int{"ip-10-0-0-1.ec2.internal": 1}},
			want: func(t *testing.T, p Plan) {
				if !p.Empty() {
					t.Errorf("plan %+v, want empty: the instance lacks the cluster tag", p)
				}
			},
		},
		"nothing wrong: nothing planned": {
			r: Readings{Nodes: []corev1.Node{nodeOf("i-1", true, now)}, Instances: map[string]instance.Instance{"i-1": running("i-1")},
				Groups: []Group{groupOf("a", []string{"term"}, asgInstance("i-1", "InService", "Healthy"))}},
			want: func(t *testing.T, p Plan) {
				if !p.Empty() {
					t.Errorf("plan %+v, want empty", p)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			tc.r.Now = now
			tc.want(t, tc.r.Plan(c))
		})
	}
}

// TestOrphanReadAgain: at the moment of acting, EC2 is read again for the
// orphan's instances (those seen under its name, and the one its name
// carries): any that could run keeps the attachment; unreadable is an error.
func TestOrphanReadAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Orphan
		states   map[string]instance.State
		err      error
		orphaned bool
		evidence string
	}{
		{"still terminated", Orphan{Attachment: va("a", "ip-10-9-9-1.ec2.internal"), Instances: []string{"i-1"}},
			map[string]instance.State{"i-1": instance.StateTerminated}, nil, true, "i-1 terminated"},
		{"unknown to EC2 all along", Orphan{Attachment: va("a", "ip-10-9-9-1.ec2.internal")}, nil, nil, true, "no instance named"},
		{"forgotten by EC2 since", Orphan{Attachment: va("a", "ip-10-9-9-1.ec2.internal"), Instances: []string{"i-1"}}, nil, nil, true, "no instance i-1"},
		{"started again", Orphan{Attachment: va("a", "ip-10-9-9-1.ec2.internal"), Instances: []string{"i-1"}},
			map[string]instance.State{"i-1": instance.StateRunning}, nil, false, "i-1 running"},
		{"a resource name's instance is stopping", Orphan{Attachment: va("a", "i-0abc.ec2.internal")},
			map[string]instance.State{"i-0abc": instance.StateStopping}, nil, false, "i-0abc stopping"},
		{"unreadable", Orphan{Attachment: va("a", "ip-10-9-9-1.ec2.internal"), Instances: []string{"i-1"}}, nil, errors.New("throttled"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &ec2Calls{states: tc.states, err: tc.err}
			orphaned, evidence, err := tc.o.ReadAgain(context.Background(), f, nil)
			if (err != nil) != (tc.err != nil) {
				t.Fatalf("ReadAgain error %v, want %v", err, tc.err)
			}
			if orphaned != tc.orphaned || !strings.Contains(evidence, tc.evidence) {
				t.Errorf("ReadAgain = %v, %q: want %v, evidence with %q", orphaned, evidence, tc.orphaned, tc.evidence)
			}
			if len(f.calls) == 0 {
				t.Error("EC2 was not read again")
			}
		})
	}
}
