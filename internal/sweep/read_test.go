package sweep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// ec2Calls answers DescribeInstances by filter from states, and records the
// filters of every call.
type ec2Calls struct {
	mu     sync.Mutex
	states map[string]instance.State
	calls  [][]ec2types.Filter
	err    error
}

func (f *ec2Calls) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in.Filters)
	if f.err != nil {
		return nil, f.err
	}
	var out []ec2types.Instance
	for id, st := range f.states {
		match := true
		for _, fl := range in.Filters {
			switch aws.ToString(fl.Name) {
			case "instance-id":
				match = match && slices.Contains(fl.Values, id)
			case "instance-state-name":
				match = match && slices.Contains(fl.Values, string(st))
			case "private-dns-name":
				match = false
			}
		}
		if match {
			out = append(out, ec2types.Instance{InstanceId: aws.String(id), State: &ec2types.InstanceState{Name: ec2types.InstanceStateName(st)},
				Tags: []ec2types.Tag{{Key: aws.String(cfg.ClusterTagKey), Value: aws.String("owned")}}})
		}
	}
	return &ec2.DescribeInstancesOutput{Reservations: []ec2types.Reservation{{Instances: out}}}, nil
}

type asgCalls struct{ groups, hooks int }

func (f *asgCalls) DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.groups++
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: []astypes.AutoScalingGroup{{AutoScalingGroupName: aws.String("asg"),
		Instances: []astypes.Instance{{InstanceId: aws.String("i-1"), LifecycleState: astypes.LifecycleStateInService}}}}}, nil
}

func (f *asgCalls) DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	f.hooks++
	return &autoscaling.DescribeLifecycleHooksOutput{}, nil
}

// TestReadAsksOnlyWhatMayBeWrong: a quiet cluster costs one node list, one
// attachment list, one lease list, one group page and one EC2 call; nothing
// per node. A node NotReady adds one EC2 call for it; a stopped instance a
// pod list for its node.
func TestReadAsksOnlyWhatMayBeWrong(t *testing.T) {
	objs := []runtime.Object{}
	for _, id := range []string{"i-1", "i-2", "i-3", "i-4"} {
		n := nodeOf(id, id != "i-3", now.Add(-time.Hour))
		objs = append(objs, &n)
	}
	kube := fake.NewClientset(objs...)
	ec := &ec2Calls{states: map[string]instance.State{"i-1": instance.StateRunning, "i-2": instance.StateStopped, "i-3": instance.StateRunning, "i-4": instance.StateRunning}}
	as := &asgCalls{}
	r, err := Read(context.Background(), kube, ec, as, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	lists := map[string]int{}
	for _, a := range kube.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("reading made a %s", a.GetVerb())
		}
		lists[a.GetResource().Resource]++
	}
	// i-2 is stopped: its pods are counted; nothing else is listed per node
	if lists["nodes"] != 1 || lists["volumeattachments"] != 1 || lists["leases"] != 1 || lists["pods"] != 1 {
		t.Errorf("lists %v: want one each of nodes, volumeattachments, leases, and pods for the one stopped node", lists)
	}
	if as.groups != 1 || as.hooks != 0 {
		t.Errorf("autoscaling calls: %d group pages, %d hook reads; want 1 and 0 (no instance waits)", as.groups, as.hooks)
	}
	// one call for the cluster's instances not running, one by id for the NotReady node i-3
	if len(ec.calls) != 2 || !slices.ContainsFunc(ec.calls[1], func(f ec2types.Filter) bool {
		return aws.ToString(f.Name) == "instance-id" && slices.Equal(f.Values, []string{"i-3"})
	}) {
		t.Errorf("EC2 calls %v: want the not-running filter, then instance-id [i-3]", ec.calls)
	}
	if r.Instances["i-2"].State != instance.StateStopped || r.Instances["i-3"].State != instance.StateRunning {
		t.Errorf("instances %v", r.Instances)
	}
	if _, asked := r.Instances["i-1"]; asked {
		t.Error("a Ready node's running instance was described")
	}
}

// TestReadAllOrNothing: a failure of any source is the reading's error.
func TestReadAllOrNothing(t *testing.T) {
	n := nodeOf("i-1", true, now)
	for name, fail := range map[string]func(*fake.Clientset, *ec2Calls){
		"nodes": func(k *fake.Clientset, _ *ec2Calls) {
			k.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, errors.New("boom") })
		},
		"volumeattachments": func(k *fake.Clientset, _ *ec2Calls) {
			k.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, errors.New("boom") })
		},
		"ec2": func(_ *fake.Clientset, e *ec2Calls) { e.err = errors.New("throttled") },
	} {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset(&n, &corev1.Namespace{})
			ec := &ec2Calls{states: map[string]instance.State{"i-1": instance.StateRunning}}
			fail(kube, ec)
			if r, err := Read(context.Background(), kube, ec, &asgCalls{}, cfg, now); err == nil || r != nil {
				t.Errorf("got %v, %v: want no readings and an error", r, err)
			}
		})
	}
}

// groupsByInput answers DescribeAutoScalingGroups by its input: the listed
// names, or the groups a tag filter picks; it records each input.
type groupsByInput struct {
	groups []astypes.AutoScalingGroup
	inputs []autoscaling.DescribeAutoScalingGroupsInput
}

func (f *groupsByInput) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.inputs = append(f.inputs, *in)
	var out []astypes.AutoScalingGroup
	for _, g := range f.groups {
		keep := len(in.AutoScalingGroupNames) == 0 || slices.Contains(in.AutoScalingGroupNames, aws.ToString(g.AutoScalingGroupName))
		for _, fl := range in.Filters {
			key, ok := strings.CutPrefix(aws.ToString(fl.Name), "tag:")
			keep = keep && ok && slices.ContainsFunc(g.Tags, func(t astypes.TagDescription) bool {
				return aws.ToString(t.Key) == key && slices.Contains(fl.Values, aws.ToString(t.Value))
			})
		}
		if keep {
			out = append(out, g)
		}
	}
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: out}, nil
}

func (f *groupsByInput) DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	return &autoscaling.DescribeLifecycleHooksOutput{}, nil
}

// TestReadGroupsListedAndTagged: the sweep reads the listed groups and the
// tagged ones, each once; by tag alone, only the tagged ones.
func TestReadGroupsListedAndTagged(t *testing.T) {
	tagged := func(name string) astypes.AutoScalingGroup {
		return astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(name),
			Tags: []astypes.TagDescription{{Key: aws.String("node-drainer.io/enabled"), Value: aws.String("true")}}}
	}
	all := []astypes.AutoScalingGroup{tagged("t1"), {AutoScalingGroupName: aws.String("listed")}, tagged("both"), {AutoScalingGroupName: aws.String("neither")}}
	for _, tc := range []struct {
		names []string
		want  []string
	}{
		{[]string{"listed", "both"}, []string{"listed", "both", "t1"}},
		{nil, []string{"t1", "both"}},
	} {
		c := cfg
		c.ASGNames = tc.names
		c.GroupTag = discovery.Tag{Key: "node-drainer.io/enabled", Value: "true"}
		api := &groupsByInput{groups: all}
		r, err := Read(context.Background(), fake.NewClientset(), &ec2Calls{}, api, c, now)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range r.Groups {
			got = append(got, g.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ASG_NAMES %v and the tag: read %v, want %v", tc.names, got, tc.want)
		}
	}
}

// TestReadPagesAndKeepsWhatThePlanUses: the Nodes and VolumeAttachments are
// read page by page (node.PageSize, volume.PageSize a request), and of each
// Node only what the plan reads is kept (no labels, images, addresses).
func TestReadPagesAndKeepsWhatThePlanUses(t *testing.T) {
	objs := []runtime.Object{}
	for i := range 600 {
		n := nodeOf(fmt.Sprintf("i-%04d", i), true, now.Add(-time.Hour))
		n.Labels = map[string]string{"pool": "general"}
		n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
		objs = append(objs, &n)
	}
	for i := range 1100 {
		objs = append(objs, ptr.To(va(fmt.Sprintf("csi-%04d", i), fmt.Sprintf("node-%d", i%600))))
	}
	kube := fake.NewClientset(objs...)
	nodes := clustertest.Paginate(kube, corev1.SchemeGroupVersion.WithResource("nodes"), nil)
	vas := clustertest.Paginate(kube, storagev1.SchemeGroupVersion.WithResource("volumeattachments"), nil)
	r, err := Read(context.Background(), kube, &ec2Calls{states: map[string]instance.State{}}, &asgCalls{}, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	for what, tc := range map[string]struct {
		lists      *clustertest.Lists
		limit      int64
		pages, got int
	}{
		"nodes":             {nodes, node.PageSize, 3, len(r.Nodes)},
		"volumeattachments": {vas, volume.PageSize, 3, len(r.Attachments)},
	} {
		reqs := tc.lists.All()
		if len(reqs) != tc.pages {
			t.Errorf("%s: %d requests %+v, want %d pages", what, len(reqs), reqs, tc.pages)
		}
		for _, q := range reqs {
			if q.Limit != tc.limit || q.ResourceVersion != "" {
				t.Errorf("%s: request %+v, want limit %d, a consistent read", what, q, tc.limit)
			}
		}
		if want := map[string]int{"nodes": 600, "volumeattachments": 1100}[what]; tc.got != want {
			t.Errorf("%s: %d read, want %d", what, tc.got, want)
		}
	}
	n := r.Nodes[0]
	if n.Labels != nil || n.Status.Images != nil || n.Status.Addresses != nil || n.Spec.ProviderID == "" || len(n.Status.Conditions) != 1 {
		t.Errorf("node kept as %+v: want its name, providerID and Ready condition only", n)
	}
}

// warmGroups: group "warm" has a warm pool (two pages of it, one instance
// waiting to enter it), "cold" none.
type warmGroups struct {
	asgCalls
	pools []string // the groups whose pool was read, one entry a page
}

func (f *warmGroups) DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: []astypes.AutoScalingGroup{
		{AutoScalingGroupName: aws.String("warm"), WarmPoolConfiguration: &astypes.WarmPoolConfiguration{PoolState: astypes.WarmPoolStateStopped},
			Instances: []astypes.Instance{{InstanceId: aws.String("i-1"), LifecycleState: astypes.LifecycleStateInService}}},
		{AutoScalingGroupName: aws.String("cold"), Instances: []astypes.Instance{{InstanceId: aws.String("i-2"), LifecycleState: astypes.LifecycleStateInService}}},
	}}, nil
}

func (f *warmGroups) DescribeWarmPool(_ context.Context, in *autoscaling.DescribeWarmPoolInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	f.pools = append(f.pools, aws.ToString(in.AutoScalingGroupName))
	if in.NextToken == nil {
		return &autoscaling.DescribeWarmPoolOutput{NextToken: aws.String("page-2"),
			Instances: []astypes.Instance{{InstanceId: aws.String("i-3"), LifecycleState: astypes.LifecycleStateWarmedStopped}}}, nil
	}
	return &autoscaling.DescribeWarmPoolOutput{Instances: []astypes.Instance{{InstanceId: aws.String("i-4"), LifecycleState: astypes.LifecycleStateWarmedPendingWait}}}, nil
}

// TestReadWarmPools: a group's warm pool, which DescribeAutoScalingGroups
// does not list, is read (every page) for the groups that have one, and its
// waiting instance gets the group's hooks read.
func TestReadWarmPools(t *testing.T) {
	as := &warmGroups{}
	r, err := Read(context.Background(), fake.NewClientset(), &ec2Calls{}, as, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(as.pools, []string{"warm", "warm"}) {
		t.Errorf("pools read %v, want warm's two pages and not cold's", as.pools)
	}
	var pooled []string
	for _, g := range r.Groups {
		for _, i := range g.Pool {
			pooled = append(pooled, g.Name+"/"+aws.ToString(i.InstanceId))
		}
	}
	if !slices.Equal(pooled, []string{"warm/i-3", "warm/i-4"}) || as.hooks != 1 {
		t.Errorf("pool %v, hooks read %d times: want warm/i-3, warm/i-4, and warm's hooks read once (i-4 waits)", pooled, as.hooks)
	}
}
