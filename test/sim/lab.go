package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-drainer/node-drainer/internal/config"
)

// Lab is a calm world for the conformance suite (test/conformance), which
// holds the world to the real control plane and the AWS emulator: the
// world's apiserver, kubelets and controllers, EC2 and Auto Scaling, with
// no fault drawn and no function running (no event reaches one). Make it
// inside a synctest bubble, and Stop it before the bubble ends: its clock
// is the bubble's, so a test sleeps through the world's minutes at once.
type Lab struct {
	w   *World
	inv *invocation
	cs  kubernetes.Interface
}

// LabGroup is the Auto Scaling group of a Lab's nodes; its hooks are the
// template's (node-drainer-terminate and node-drainer-launch, 300 s).
const LabGroup = "lab"

// NewLab starts a world of nodes nodes (their kubelets running, a
// DaemonSet's pod on each), their instances running in LabGroup.
func NewLab(nodes int) *Lab {
	inv := newInvariants()
	w := &World{Seed: 1, t0: time.Now(), counts: map[string]uint64{}, inv: inv, quiet: true}
	inv.w = w
	w.Plan = Plan{
		Env:           map[string]string{"CLUSTER_NAME": "lab"},
		LambdaTimeout: 15 * time.Minute, Concurrency: 50, HeartbeatSecs: 360, DefaultResult: "CONTINUE",
		SweepEvery: 5 * time.Minute, Nodes: nodes,
	}
	cfg, err := config.FromEnv(func(k string) string { return w.Plan.Env[k] })
	if err != nil {
		panic(err)
	}
	w.kube = newKube(w)
	w.ec2 = &ec2World{w: w, insts: map[string]*ec2Inst{}}
	w.asg = &asgWorld{w: w, groups: map[string]*group{}}
	w.lambda = &lambdaWorld{w: w, cfg: cfg, seq: map[string]int{}, log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	w.bridge = bridge{w}
	w.asg.addGroup(LabGroup, false)
	for i := range nodes {
		w.ec2.add(instanceID(i), nodeName(i), LabGroup, i == 0, "running")
		w.asg.addMember(LabGroup, instanceID(i), "InService")
		w.kube.join(i, LabGroup, false)
	}
	w.kube.add(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "ds", UID: "uid-ds"}})
	w.kube.start()
	l := &Lab{w: w, inv: &invocation{id: "lab", about: "lab", deadline: time.Now().Add(24 * 365 * time.Hour)}}
	l.cs = w.kube.clientset(l.inv)
	return l
}

// Stop ends the world's timers.
func (l *Lab) Stop() { l.w.stop() }

// Kube is a client of the world's apiserver.
func (l *Lab) Kube() kubernetes.Interface { return l.cs }

// Nodes are the names of the Lab's nodes.
func (l *Lab) Nodes() []string {
	var out []string
	for i := range l.w.Plan.Nodes {
		out = append(out, nodeName(i))
	}
	return out
}

// InstanceID is the instance of node i.
func (l *Lab) InstanceID(i int) string { return instanceID(i) }

// ASGAPI is the part of Auto Scaling's API the conformance suite asks.
type ASGAPI interface {
	CompleteLifecycleAction(context.Context, *autoscaling.CompleteLifecycleActionInput, ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
	RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
	DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
	PutLifecycleHook(context.Context, *autoscaling.PutLifecycleHookInput, ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error)
	DeleteLifecycleHook(context.Context, *autoscaling.DeleteLifecycleHookInput, ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error)
}

// EC2API is the part of EC2's API the conformance suite asks.
type EC2API interface {
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
}

// ASG is a client of the world's Auto Scaling.
func (l *Lab) ASG() ASGAPI { return asgClient{l.w, l.inv} }

// EC2 is a client of the world's EC2.
func (l *Lab) EC2() EC2API { return ec2Client{l.w, l.inv} }

// StartTerminating has Auto Scaling start terminating node i's instance:
// its terminate hook's action waits (Terminating:Wait); the action's token.
func (l *Lab) StartTerminating(i int) (string, error) {
	id := instanceID(i)
	l.w.act.Lock()
	l.w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
	l.w.act.Unlock()
	l.w.asg.mu.Lock()
	defer l.w.asg.mu.Unlock()
	if _, m := l.w.asg.find(id); m != nil {
		for _, ac := range m.actions {
			if ac.hook.name == "node-drainer-terminate" && !ac.done {
				return ac.token, nil
			}
		}
	}
	return "", fmt.Errorf("no terminate action of %s", id)
}

// StartTerminatingTwo moves node i's instance into a group of its own with
// a second terminate hook, other (another tool's; nothing completes it),
// and has Auto Scaling start terminating it: the group, and the tokens of
// the terminate hook's action and of other's.
func (l *Lab) StartTerminatingTwo(i int, other string) (name, token, otherToken string, err error) {
	id := instanceID(i)
	name = LabGroup + "-" + id
	l.w.asg.mu.Lock()
	g := l.w.asg.groups[LabGroup]
	m := g.members[id]
	delete(g.members, id)
	two := &group{name: name, hooks: append(slices.Clone(g.hooks), hookDef{name: other, transition: "autoscaling:EC2_INSTANCE_TERMINATING"}),
		members: map[string]*member{id: m}}
	l.w.asg.groups[name] = two
	l.w.asg.mu.Unlock()
	if m == nil {
		return "", "", "", fmt.Errorf("no instance %s in the lab's group", id)
	}
	l.w.act.Lock()
	l.w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
	l.w.act.Unlock()
	l.w.asg.mu.Lock()
	defer l.w.asg.mu.Unlock()
	for _, ac := range m.actions {
		switch ac.hook.name {
		case "node-drainer-terminate":
			token = ac.token
		case other:
			otherToken = ac.token
		}
	}
	if token == "" || otherToken == "" {
		return "", "", "", fmt.Errorf("no two terminate actions of %s", id)
	}
	return name, token, otherToken, nil
}

// Stopping stops node i's instance as a user does (hibernate: as a
// hibernation): EC2 says stopping, then stopped, with its reason; the
// kubelet stops.
func (l *Lab) Stopping(i int, hibernate bool) {
	id, reason := instanceID(i), "Client.UserInitiatedShutdown"
	if hibernate {
		reason = "Client.UserInitiatedHibernate"
	}
	l.w.act.Lock()
	defer l.w.act.Unlock()
	l.w.ec2.set(id, "stopping", reason)
	l.w.kube.die(nodeName(i))
	l.w.after(10*time.Second, func() { l.w.ec2.set(id, "stopped", reason) })
}

// StopKubelet stops node i's kubelet (the machine runs on).
func (l *Lab) StopKubelet(i int) {
	l.w.act.Lock()
	defer l.w.act.Unlock()
	l.w.kube.die(nodeName(i))
}

// RuntimeDown has node i's kubelet report NotReady while it runs and
// renews its Lease (its container runtime down), for a day.
func (l *Lab) RuntimeDown(i int) {
	l.w.act.Lock()
	defer l.w.act.Unlock()
	l.w.kube.unwell(nodeName(i), 24*time.Hour)
}

// RefuseEvictions has an admission policy refuse the eviction of pods whose
// names start with prefix, with code (422, 403 or 500, as the plan's
// refusals), from now until it is lifted.
func (l *Lab) RefuseEvictions(prefix string, code int) (lift func()) {
	l.w.act.Lock()
	defer l.w.act.Unlock()
	i := len(l.w.Plan.Refusals)
	l.w.Plan.Refusals = append(l.w.Plan.Refusals, Refusal{Window{l.w.now(), 24 * 365 * time.Hour}, prefix, code})
	return func() {
		l.w.act.Lock()
		defer l.w.act.Unlock()
		l.w.Plan.Refusals[i].To = l.w.now()
	}
}

// Compact compacts the world's history up to now, as etcd's compaction:
// a watch or a list's continue token from an older resourceVersion is too
// old after it.
func (l *Lab) Compact() {
	l.w.act.Lock()
	defer l.w.act.Unlock()
	l.w.kube.tracker.compact()
	l.w.kube.tracker.compact()
}
