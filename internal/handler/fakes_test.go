package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

const (
	clusterTag = "kubernetes.io/cluster/prod"
	asgName    = "prod-nodes"
	token      = "token-1"
	idA        = "i-0123456789abcdef0"
	idB        = "i-0fedcba9876543210"
)

// nodeName is the node of an instance (EKS names nodes after the private DNS name).
func nodeName(id string) string { return "ip-" + id[2:8] + ".ec2.internal" }

// reading is one answer of EC2 about an instance.
type reading struct {
	state  instance.State
	tagged bool   // carries the cluster tag
	group  string // Auto Scaling's aws:autoscaling:groupName tag ("": none)
	tags   map[string]string
	err    error  // DescribeInstances fails
	cr     string // the Capacity Reservation it runs in ("": none)
}

// fakeEC2 answers DescribeInstances from readings per instance, in turn (the
// last one repeats); an instance without readings is unknown to EC2.
type fakeEC2 struct {
	mu       sync.Mutex
	readings map[string][]reading
	calls    int
}

func (f *fakeEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(in.InstanceIds) == 0 {
		return f.filtered(in.Filters)
	}
	id := in.InstanceIds[0]
	rs := f.readings[id]
	if len(rs) == 0 {
		return nil, &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + id + "' does not exist"}
	}
	r := rs[0]
	if len(rs) > 1 {
		f.readings[id] = rs[1:]
	}
	if r.err != nil {
		return nil, r.err
	}
	tags := []types.Tag{{Key: aws.String("Name"), Value: aws.String("node")}}
	if r.tagged {
		tags = append(tags, types.Tag{Key: aws.String(clusterTag), Value: aws.String("owned")})
	}
	if r.group != "" {
		tags = append(tags, types.Tag{Key: aws.String(instance.TagGroupName), Value: aws.String(r.group)})
	}
	for k, v := range r.tags {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	return &ec2.DescribeInstancesOutput{Reservations: []types.Reservation{{Instances: []types.Instance{{
		InstanceId:            aws.String(id),
		State:                 &types.InstanceState{Name: types.InstanceStateName(r.state)},
		PrivateDnsName:        aws.String(nodeName(id)),
		Placement:             &types.Placement{AvailabilityZone: aws.String("us-east-1a")},
		Tags:                  tags,
		CapacityReservationId: optional(r.cr),
	}}}}}, nil
}

// filtered answers a DescribeInstances by filters (the sweep's), from the
// last reading of each instance; a failing reading fails the call.
func (f *fakeEC2) filtered(filters []types.Filter) (*ec2.DescribeInstancesOutput, error) {
	var out []types.Instance
	for id, rs := range f.readings {
		r := rs[len(rs)-1]
		if r.err != nil {
			return nil, r.err
		}
		match := true
		for _, fl := range filters {
			switch aws.ToString(fl.Name) {
			case "instance-id":
				match = match && slices.Contains(fl.Values, id)
			case "private-dns-name":
				match = match && slices.Contains(fl.Values, nodeName(id))
			case "tag-key":
				match = match && r.tagged && slices.Contains(fl.Values, clusterTag)
			case "instance-state-name":
				match = match && slices.Contains(fl.Values, string(r.state))
			case "capacity-reservation-id":
				match = match && slices.Contains(fl.Values, r.cr)
			}
		}
		if !match {
			continue
		}
		tags := []types.Tag{{Key: aws.String("Name"), Value: aws.String("node")}}
		if r.tagged {
			tags = append(tags, types.Tag{Key: aws.String(clusterTag), Value: aws.String("owned")})
		}
		out = append(out, types.Instance{InstanceId: aws.String(id), State: &types.InstanceState{Name: types.InstanceStateName(r.state)},
			PrivateDnsName: aws.String(nodeName(id)), Tags: tags, CapacityReservationId: optional(r.cr)})
	}
	return &ec2.DescribeInstancesOutput{Reservations: []types.Reservation{{Instances: out}}}, nil
}

// fakeASG records completions and heartbeats.
type fakeASG struct {
	mu           sync.Mutex
	groups       []astypes.AutoScalingGroup // the sweep's view
	hooks        []astypes.LifecycleHook    // of every group, for the sweep
	unhealthy    []string                   // SetInstanceHealth Unhealthy
	completed    []*autoscaling.CompleteLifecycleActionInput
	heartbeats   int
	beaten       []string // the instances heartbeated, in order
	beats        []beat   // every heartbeat, in order
	completeErr  error
	heartbeatErr error
	describeErr  error // DescribeAutoScalingGroups fails
	describes    int   // DescribeAutoScalingGroups calls
	hooksFail    int   // DescribeLifecycleHooks fails this many times first
	beatFail     int   // RecordLifecycleActionHeartbeat is throttled this many times first
	// completeFail: CompleteLifecycleAction of the named hook is throttled
	// this many times first
	completeFail map[string]int
	// inactive names hooks with no action holding any instance: their
	// heartbeats and completions fail as Auto Scaling's do
	inactive map[string]bool
}

func (f *fakeASG) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.completeErr != nil {
		return nil, f.completeErr
	}
	if f.inactive[aws.ToString(in.LifecycleHookName)] {
		return nil, notActive()
	}
	if n := f.completeFail[aws.ToString(in.LifecycleHookName)]; n > 0 {
		f.completeFail[aws.ToString(in.LifecycleHookName)] = n - 1
		return nil, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	}
	f.completed = append(f.completed, in)
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (f *fakeASG) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats++
	f.beaten = append(f.beaten, aws.ToString(in.InstanceId))
	f.beats = append(f.beats, beat{hook: aws.ToString(in.LifecycleHookName), byToken: in.LifecycleActionToken != nil, at: time.Now()})
	if f.inactive[aws.ToString(in.LifecycleHookName)] {
		return nil, notActive()
	}
	if f.beatFail > 0 {
		f.beatFail--
		return nil, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	}
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, f.heartbeatErr
}

func (f *fakeASG) DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	f.mu.Lock()
	fail := f.hooksFail > 0
	if fail {
		f.hooksFail--
	}
	f.mu.Unlock()
	if fail {
		return nil, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	}
	if f.hooks != nil {
		return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: f.hooks}, nil
	}
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: []astypes.LifecycleHook{{HeartbeatTimeout: aws.Int32(300)}}}, nil
}

func (f *fakeASG) DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	if f.describeErr != nil {
		return nil, f.describeErr
	}
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: f.groups}, nil
}

func (f *fakeASG) SetInstanceHealth(_ context.Context, in *autoscaling.SetInstanceHealthInput, _ ...func(*autoscaling.Options)) (*autoscaling.SetInstanceHealthOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unhealthy = append(f.unhealthy, aws.ToString(in.InstanceId))
	return &autoscaling.SetInstanceHealthOutput{}, nil
}

// beat is one heartbeat: of which hook, whether by its token (else by the
// instance), when (by the real clock: a synctest bubble's in a bubble).
type beat struct {
	hook    string
	byToken bool
	at      time.Time
}

// beatsOf are the heartbeats of hook.
func (f *fakeASG) beatsOf(hook string) []beat {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []beat
	for _, b := range f.beats {
		if b.hook == hook {
			out = append(out, b)
		}
	}
	return out
}

// results are the results the lifecycle actions were completed with.
func (f *fakeASG) results() []lifecycle.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []lifecycle.Result
	for _, in := range f.completed {
		out = append(out, lifecycle.Result(aws.ToString(in.LifecycleActionResult)))
	}
	return out
}

// fakeLambda records invocations.
type fakeLambda struct {
	mu      sync.Mutex
	invoked []*lambda.InvokeInput
	err     error
}

func (f *fakeLambda) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invoked = append(f.invoked, in)
	return &lambda.InvokeOutput{StatusCode: 202}, f.err
}

// optional is s, nil when empty (EC2 leaves out what is not there).
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func notActive() error {
	return &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with instance ID " + idA}
}

// env is one handler with fakes all around.
type env struct {
	kube    *fake.Clientset
	ec2     *fakeEC2
	asg     *fakeASG
	lam     *fakeLambda
	cfg     config.Config
	now     time.Time // the handler's clock
	mu      sync.Mutex
	blocked []string // pods whose eviction a PDB refuses
	evicted []string
	// dryRunEvictions are the server-side dry-run evictions asked for
	dryRunEvictions []string
	metrics         io.Writer // the handler's EMF output (nil: none)
}

func newEnv(objs ...runtime.Object) *env {
	e := &env{
		kube: fake.NewClientset(objs...),
		ec2:  &fakeEC2{readings: map[string][]reading{}},
		asg:  &fakeASG{},
		lam:  &fakeLambda{},
		cfg: config.Config{
			ClusterName:              "prod",
			ClusterTagKey:            clusterTag,
			DrainTimeout:             30 * time.Minute,
			SpotDrainTimeout:         100 * time.Second,
			RebalanceAction:          config.ActionCordon,
			ScheduledChangeAction:    config.ActionDrain,
			LifecycleResultOnFailure: string(lifecycle.Abandon), // not the default: a failure shows
			EvictUnmanagedPods:       true,
			VolumeDetachTimeout:      time.Second,
			StoppingWaitTimeout:      time.Second,
			OutOfServiceTaint:        true,
			DeadlineMargin:           50 * time.Millisecond,
			ContinueLongDrains:       true,
			MaxContinuations:         20,
			ScheduledChangeLeadTime:  15 * time.Minute,
			AdvisoryMarkTTL:          time.Hour,
			DeadNodeEvictionWindow:   200 * time.Millisecond,
			NodeLeaseStaleAfter:      15 * time.Second,
			LeaseNamespace:           "node-drainer",
			FunctionName:             "node-drainer",
			TerminateHookName:        "node-drainer-terminate",
			LaunchHookName:           "node-drainer-launch",
		},
		now: time.Now(),
	}
	// the apiserver names objects from generateName; the fake does not
	var generated atomic.Int32
	e.kube.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && m.GetName() == "" && m.GetGenerateName() != "" {
			m.SetName(fmt.Sprintf("%s%05d", m.GetGenerateName(), generated.Add(1)))
		}
		return false, nil, nil
	})
	// the apiserver filters pods by spec.nodeName; the fake ignores field selectors
	e.kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		obj, err := e.kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		kept := list.Items[:0]
		for _, p := range list.Items {
			if sel == nil || sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
				kept = append(kept, p)
			}
		}
		list.Items = kept
		return true, list, nil
	})
	// the fake's watches start from now, not from the list's version as the
	// apiserver's do: an evicted pod goes once the node's pods are watched,
	// or its deletion could fall between the drain's list and watch; a watch
	// opened later (another drain's, a continuation's) is told of the
	// evicted pods already gone (clustertest.PodWatches)
	pods := clustertest.WatchPods(e.kube)
	// evictions: refused with 429 for a blocked pod, as a PDB does; otherwise the pod goes
	e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		e.mu.Lock()
		defer e.mu.Unlock()
		dryRun := ev.DeleteOptions != nil && slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll)
		if dryRun {
			e.dryRunEvictions = append(e.dryRunEvictions, ev.Namespace+"/"+ev.Name)
		}
		if slices.Contains(e.blocked, ev.Name) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		if dryRun {
			return true, nil, nil // the apiserver checks and persists nothing
		}
		e.evicted = append(e.evicted, ev.Namespace+"/"+ev.Name)
		// the pod goes once it is watched (not from inside a reactor: the
		// fake holds its lock while one runs)
		go func() {
			select {
			case <-pods.Watched():
			case <-time.After(time.Second):
			}
			_ = pods.Delete(ev.Namespace, ev.Name)
		}()
		return true, nil, nil
	})
	return e
}

// fail makes verb on resource answer err.
func (e *env) fail(verb, resource string, err error) {
	e.kube.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

// handle runs one invocation with a deadline timeout away; a goroutine it
// started and left running fails t.
func (e *env) handle(t *testing.T, payload []byte, timeout time.Duration) (Outcome, error) {
	t.Helper()
	out, err, left := invoke(e.handler(), payload, timeout)
	if left != nil {
		t.Errorf("work left running after the handler returned: %v", left)
	}
	return out, err
}

// handler is a Handler on the env's fakes and clock, as one execution
// environment keeps it across invocations.
func (e *env) handler() *Handler {
	c := Clients{Kube: e.kube, EC2: e.ec2, ASG: e.asg, AutoScaling: e.asg}
	if e.lam != nil {
		c.Lambda = e.lam
	}
	opts := []Option{WithClock(newMovingClock(func() time.Time { return e.now }))}
	if e.metrics != nil {
		opts = append(opts, WithMetrics(e.metrics))
	}
	h := New(e.cfg, c, nil, opts...)
	h.StoppingPollInterval = 10 * time.Millisecond
	return h
}

// handleWith runs one invocation of h with a deadline timeout away; a
// goroutine it started and left running fails the package (TestMain).
func (e *env) handleWith(h *Handler, payload []byte, timeout time.Duration) (Outcome, error) {
	out, err, left := invoke(h, payload, timeout)
	leftRunning.add(payload, left)
	return out, err
}

// writes lists the create, update, patch and delete calls made to the
// cluster (evictions included, server-side dry-run ones not), as "verb
// resource/subresource".
func (e *env) writes() []string {
	var out []string
	for _, a := range e.kube.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetSubresource() == "eviction" {
			if ev, ok := ca.GetObject().(*policyv1.Eviction); ok && ev.DeleteOptions != nil && slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll) {
				continue
			}
		}
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return out
}

// events maps the reasons of the Events recorded to their types.
func (e *env) events(t *testing.T) map[string]string {
	t.Helper()
	list, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ev := range list.Items {
		out[ev.Reason] = ev.Type
	}
	return out
}

func (e *env) node(t *testing.T, id string) *corev1.Node {
	t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), nodeName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) podExists(ns, name string) bool {
	_, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// Builders of cluster objects.

func newNode(id string, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName(id), UID: ktypes.UID("uid-" + id)},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// pod is a ReplicaSet's pod on the node of instance id, with claims.
func pod(id, ns, name string, claims ...string) *corev1.Pod {
	isController := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "uid-rs", Controller: &isController}}},
		Spec:   corev1.PodSpec{NodeName: nodeName(id)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c},
		}})
	}
	return p
}

// pdb selects every pod of its namespace and allows that many disruptions now.
func pdb(ns, name string, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

func claim(ns, name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
}

func attachment(name, id, pv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("uid-" + name)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: nodeName(id),
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
}

// Builders of events.

func envelope(source, detailType string, at time.Time, detail any) []byte {
	b, err := json.Marshal(map[string]any{
		"version": "0", "id": "ev-1", "detail-type": detailType, "source": source, "account": "123456789012",
		"time": at.UTC().Format(time.RFC3339Nano), "region": "us-east-1", "resources": []string{}, "detail": detail,
	})
	if err != nil {
		panic(err)
	}
	return b
}

func hookEvent(launch bool, asg, id string) []byte {
	detailType, transition, hook := "EC2 Instance-terminate Lifecycle Action", "autoscaling:EC2_INSTANCE_TERMINATING", "node-drainer-terminate"
	if launch {
		detailType, transition, hook = "EC2 Instance-launch Lifecycle Action", "autoscaling:EC2_INSTANCE_LAUNCHING", "node-drainer-launch"
	}
	return envelope("aws.autoscaling", detailType, time.Now(), map[string]string{
		"LifecycleActionToken": token, "AutoScalingGroupName": asg, "LifecycleHookName": hook,
		"EC2InstanceId": id, "LifecycleTransition": transition,
	})
}

func terminateEvent(id string) []byte { return hookEvent(false, asgName, id) }

func stateEvent(id, state string, at time.Time) []byte {
	return envelope("aws.ec2", "EC2 Instance State-change Notification", at, map[string]string{"instance-id": id, "state": state})
}

func spotEvent(id string, at time.Time) []byte {
	return envelope("aws.ec2", "EC2 Spot Instance Interruption Warning", at, map[string]string{"instance-id": id, "instance-action": "terminate"})
}

func rebalanceEvent(id string) []byte {
	return envelope("aws.ec2", "EC2 Instance Rebalance Recommendation", time.Now(), map[string]string{"instance-id": id})
}

func scheduledEvent(ids ...string) []byte {
	var entities []map[string]string
	for _, id := range ids {
		entities = append(entities, map[string]string{"entityValue": id})
	}
	return envelope("aws.health", "AWS Health Event", time.Now(), map[string]any{
		"service": "EC2", "eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
		"eventArn": "arn:aws:health:us-east-1::event/EC2/x/y", "statusCode": "open",
		"startTime": time.Now().UTC().Format("Mon, 2 Jan 2006 15:04:05 GMT"), "affectedEntities": entities,
	})
}
