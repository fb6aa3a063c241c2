package faults

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/test/harness"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// nthScenarios: docs/migrating-from-nth.md's move from
// aws-node-termination-handler (NTH), played with the real NTH v1.25.6 in
// queue mode beside the real function.
func nthScenarios() []scenario {
	return []scenario{{"nth-beside-node-drainer", nthBeside}}
}

const (
	// nthHook is NTH's terminate hook on the groups it handles.
	nthHook = "nth-terminate"
	// moveKey is the CLUSTER_TAG_KEY of the move, the doc's example.
	moveKey = "node-drainer.io/managed"
	toolNTH = "NTH"
	toolND  = "node-drainer"
)

// The EventBridge rules each tool is deployed with, matched by the
// emulator's own matcher (TestEventPattern) to play EventBridge's routing.
// node-drainer's are template.yaml's own (templateRules); NTH's are its
// v1.25.6 README's (queue processor): every terminate lifecycle action of
// the account, and every spot warning.
var (
	nthRules = []string{
		`{"source":["aws.autoscaling"],"detail-type":["EC2 Instance-terminate Lifecycle Action"]}`,
		`{"source": ["aws.ec2"],"detail-type": ["EC2 Spot Instance Interruption Warning"]}`,
	}
	evictedPod = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods/([^/]+)/eviction$`)
	nodeWrite  = regexp.MustCompile(`^/api/v1/nodes/([^/]+)(/status)?$`)
)

// nthGroup is one node group of the scene: instance 0 is scaled in,
// instance 1 gets a spot interruption warning, instance 2 stays (its
// node takes the evicted pods' replacements).
type nthGroup struct {
	name  string
	owner string // toolNTH or toolND, after the move
	short string // its workloads' name prefix
	insts []harness.Instance
	hook  string // the owner's terminate hook
	token string // the scale-in's lifecycle action token
}

// nthBeside: one cluster, two node groups, both NTH's at first (its hook,
// its managed tag on the group and on each instance, NTH with its shipped
// defaults: CHECK_TAG_BEFORE_DRAINING on). node-drainer is deployed as the
// doc's "Before the first group" says (CLUSTER_TAG_KEY a key no instance
// carries, no group chosen), and one group is moved to it by the doc's five
// steps, the hook put by the sweep (the tag way). Then both groups are
// scaled in and get a spot warning at once, each event routed to each tool
// whose rules match it, as EventBridge does. From the apiserver's requests
// (a recording proxy in front of each tool) and the emulator's record of
// lifecycle calls (who signed each): every node drained by exactly one
// tool, its group's owner; no pod evicted twice; each lifecycle action
// completed once, by its owner; no write of a tool to the other's nodes.
func nthBeside(x *X) {
	bin, err := harness.NTHBinary(x.ctx)
	x.must(err)
	groups := []*nthGroup{
		{name: x.name + "-nth", owner: toolNTH, short: "nth", hook: nthHook},
		{name: x.name + "-moved", owner: toolND, short: "nd", hook: harness.TerminateHook},
	}
	for _, g := range groups {
		x.nthGroupScene(g)
	}
	x.must(env.Namespace(x.ctx, x.ns))
	x.nthWorkloads(groups)

	ndAPI, ndEnv := x.apiProxy(fp.Options{})
	nthAPI, _ := x.apiProxy(fp.Options{})
	peer, err := env.StartNTH(x.ctx, harness.NTHOptions{Binary: bin, Name: x.name, Server: nthAPI.URL})
	x.must(err)
	x.t.Cleanup(func() {
		if x.t.Failed() {
			x.t.Logf("aws-node-termination-handler log (last 60 lines):\n%s", peer.Tail(60))
		}
		peer.Stop()
	})
	// this scene's own ASG_TAG_KEY: the suite's other scenes share the
	// emulator, and their groups carry the templates' default
	// node-drainer.io/enabled
	groupTag := "node-drainer.io/" + x.name
	cfg := []string{ndEnv, "CLUSTER_TAG_KEY=" + moveKey, "ASG_TAG_KEY=" + groupTag}
	rt := x.function(60*time.Second, cfg...)
	if out, ok := x.sweep(rt); ok {
		x.expect(len(out.Sweep.HooksPut) == 0, "before the first group, the sweep put hooks %v: want none", out.Sweep.HooksPut)
	}
	x.moveGroup(rt, groups[1], groupTag)
	x.expect(slices.Equal(x.hookNames(groups[0].name), []string{nthHook}), "NTH's group's hooks after the move: %v, want NTH's %s alone", x.hookNames(groups[0].name), nthHook)

	ndRules := x.templateRules("TerminateLifecycleAction", "SpotInterruption")
	x.began = time.Now()
	x.target = groups[1].insts[0]
	x.nthStorm(groups, peer, ndRules, rt, cfg)
	x.nthCheck(groups, map[string]*fp.Proxy{toolND: ndAPI, toolNTH: nthAPI})
}

// nthGroupScene creates a group as NTH's: its hook, its managed tag on the
// group (propagated at launch) and on each running instance; a kwok node per
// instance labelled pool=<group>.
func (x *X) nthGroupScene(g *nthGroup) {
	insts, err := env.CreateASG(x.ctx, harness.ASGSpec{Name: g.name, Size: 3})
	x.must(err)
	g.insts = insts
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	_, err = asc.PutLifecycleHook(x.ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(g.name), LifecycleHookName: aws.String(nthHook),
		LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_TERMINATING"), HeartbeatTimeout: aws.Int32(300), DefaultResult: aws.String("CONTINUE"),
	})
	x.must(err)
	x.must(groupTags(x.ctx, g.name, map[string]string{harness.PeerManagedTag: ""}))
	x.must(env.TagManaged(x.ctx, instanceIDs(insts)))
	for _, in := range insts {
		x.must(env.AddNodeFor(x.ctx, in, map[string]string{"pool": g.name}))
	}
}

// nthWorkloads puts a Deployment of two pods on each node that will be
// drained, its replacements allowed on the group's node that stays.
func (x *X) nthWorkloads(groups []*nthGroup) {
	for _, g := range groups {
		x.must(env.SetUnschedulable(x.ctx, g.insts[2].PrivateDNSName, true))
	}
	zero := int64(0)
	for _, g := range groups {
		for i := range 2 {
			w := harness.Workload{Namespace: x.ns, Name: fmt.Sprintf("%s%d", g.short, i), Replicas: 2, GracePeriod: &zero,
				NodeSelector: map[string]string{"pool": g.name}, Nodes: []string{g.insts[i].PrivateDNSName, g.insts[2].PrivateDNSName}}
			_, err := env.Deployment(x.ctx, w, false)
			x.must(err)
			_, err = env.WaitPodsRunning(x.ctx, x.ns, "app="+w.Name, 2, time.Minute)
			x.must(err)
		}
	}
	for _, g := range groups {
		x.must(env.SetUnschedulable(x.ctx, g.insts[2].PrivateDNSName, false))
	}
}

// moveGroup moves g from NTH to node-drainer by the doc's "Moving one node
// group", step by step. The function's environment saw no event of g's
// instances before step 2, so it remembers none of them untagged and step
// 5's wait has nothing to wait out (TestMovedInstanceRememberedUntagged
// holds that memory).
func (x *X) moveGroup(rt *lambdart.Runtime, g *nthGroup, groupTag string) {
	asc := autoscaling.NewFromConfig(env.AWS.AWSConfig())
	ec2c := ec2.NewFromConfig(env.AWS.AWSConfig())
	// 1. stop the group's scale-ins during the switch
	_, err := asc.SuspendProcesses(x.ctx, &autoscaling.SuspendProcessesInput{AutoScalingGroupName: aws.String(g.name), ScalingProcesses: []string{"Terminate"}})
	x.must(err)
	// 2. move the tags, NTH's off first: on the group, then on each instance
	_, err = asc.DeleteTags(x.ctx, &autoscaling.DeleteTagsInput{Tags: []astypes.Tag{{Key: aws.String(harness.PeerManagedTag),
		ResourceId: aws.String(g.name), ResourceType: aws.String("auto-scaling-group")}}})
	x.must(err)
	x.must(groupTags(x.ctx, g.name, map[string]string{moveKey: ""}))
	ids := instanceIDs(g.insts)
	_, err = ec2c.DeleteTags(x.ctx, &ec2.DeleteTagsInput{Resources: ids, Tags: []ec2types.Tag{{Key: aws.String(harness.PeerManagedTag)}}})
	x.must(err)
	_, err = ec2c.CreateTags(x.ctx, &ec2.CreateTagsInput{Resources: ids, Tags: []ec2types.Tag{{Key: aws.String(moveKey), Value: aws.String("")}}})
	x.must(err)
	// 3. node-drainer's hook on the group: the group tagged, the next sweep puts it
	_, err = asc.CreateOrUpdateTags(x.ctx, &autoscaling.CreateOrUpdateTagsInput{Tags: []astypes.Tag{{Key: aws.String(groupTag), Value: aws.String("true"),
		PropagateAtLaunch: aws.Bool(false), ResourceId: aws.String(g.name), ResourceType: aws.String("auto-scaling-group")}}})
	x.must(err)
	if out, ok := x.sweep(rt); ok {
		x.t.Logf("step 3's sweep: hooks put %v", out.Sweep.HooksPut)
	}
	x.expect(slices.Equal(x.hookNames(g.name), []string{harness.TerminateHook, nthHook}), "after step 3 the group's hooks are %v: want node-drainer's %s beside NTH's", x.hookNames(g.name), harness.TerminateHook)
	// 4. delete NTH's hook from the group
	_, err = asc.DeleteLifecycleHook(x.ctx, &autoscaling.DeleteLifecycleHookInput{AutoScalingGroupName: aws.String(g.name), LifecycleHookName: aws.String(nthHook)})
	x.must(err)
	// 5. resume scale-ins
	_, err = asc.ResumeProcesses(x.ctx, &autoscaling.ResumeProcessesInput{AutoScalingGroupName: aws.String(g.name), ScalingProcesses: []string{"Terminate"}})
	x.must(err)
}

// nthStorm scales in instance 0 of each group and sends a spot warning for
// instance 1 of each, all at once: each event goes to every tool whose rules
// match it (NTH's queue; a function environment of its own for each of
// node-drainer's), then waits until node-drainer's invocations have
// answered and NTH's queue is empty (NTH deletes a message when its event
// is done, dropped or drained and completed).
func (x *X) nthStorm(groups []*nthGroup, peer *harness.NTH, ndRules []string, warm *lambdart.Runtime, cfg []string) {
	var events [][]byte
	for _, g := range groups {
		g.token = uuid()
		x.must(env.AWS.RegisterLifecycleAction(x.ctx, moto.LifecycleAction{ASG: g.name, Hook: g.hook, InstanceID: g.insts[0].ID, Token: g.token}))
		term, err := harness.EventFile("asg-terminate.json", map[string]string{"AutoScalingGroupName": g.name,
			"LifecycleHookName": g.hook, "EC2InstanceId": g.insts[0].ID, "LifecycleActionToken": g.token})
		x.must(err)
		spot, err := harness.EventFile("spot-interruption.json", map[string]string{"instance-id": g.insts[1].ID})
		x.must(err)
		events = append(events, term, spot)
	}
	// the routes first, and a function environment ready for each of
	// node-drainer's events (the warm one that swept, then fresh ones),
	// so that every event is delivered at once
	toNTH := make([]bool, len(events))
	toND := make([]*lambdart.Runtime, len(events))
	sent, invoked := 0, 0
	for i, ev := range events {
		toNTH[i] = x.matches(ev, nthRules)
		if x.matches(ev, ndRules) {
			toND[i] = warm
			if invoked > 0 {
				toND[i] = x.function(60*time.Second, cfg...)
			}
			invoked++
		}
	}
	var wg sync.WaitGroup
	for i, ev := range events {
		if toNTH[i] {
			x.must(peer.Send(x.ctx, ev))
			sent++
		}
		if rt := toND[i]; rt != nil {
			wg.Go(func() {
				_, err := x.invoke(rt, ev)
				x.expect(err == nil, "node-drainer's invocation failed: %v", err)
			})
		}
	}
	x.t.Logf("events: %d sent to NTH's queue, %d invocations of node-drainer", sent, invoked)
	wg.Wait()
	err := wait.PollUntilContextTimeout(x.ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := peer.Running(); err != nil {
			return false, err
		}
		n, err := peer.InFlight(ctx)
		return err == nil && n == 0, nil
	})
	x.expect(err == nil, "NTH did not finish its events (its queue not empty): %v", err)
}

// templateRules returns the patterns of the named events of template.yaml's
// function, as CloudFormation renders them for this deployment: groups
// chosen by tag (the !If of SelectsByTag takes its first branch) and the
// hooks' default names (!Ref TerminateHookName). Any other intrinsic fails
// the scene: the scene would not know its value.
func (x *X) templateRules(events ...string) []string {
	root, err := harness.RepoRoot()
	x.must(err)
	b, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	x.must(err)
	var doc yaml.Node
	x.must(yaml.Unmarshal(b, &doc))
	var rules []string
	for _, name := range events {
		n := yamlPath(doc.Content[0], "Resources", "NodeDrainerFunction", "Properties", "Events", name, "Properties", "Pattern")
		if n == nil {
			x.must(fmt.Errorf("template.yaml has no Pattern for the function's event %s", name))
		}
		v, err := rendered(n)
		x.must(err)
		j, err := json.Marshal(v)
		x.must(err)
		rules = append(rules, string(j))
	}
	x.t.Logf("node-drainer's rules (template.yaml, groups by tag): %s", rules)
	return rules
}

// yamlPath follows mapping keys down from n; nil when one is missing.
func yamlPath(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// rendered is a template node's value with the intrinsics templateRules
// knows resolved.
func rendered(n *yaml.Node) (any, error) {
	switch {
	case n.Tag == "!Ref" && n.Value == "TerminateHookName":
		return harness.TerminateHook, nil
	case n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3 && n.Content[0].Value == "SelectsByTag":
		return rendered(n.Content[1])
	case strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!"): // an intrinsic, not YAML's own !!map, !!str...
		return nil, fmt.Errorf("template.yaml line %d: %s %s is not rendered by the scene", n.Line, n.Tag, n.Value)
	case n.Kind == yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := rendered(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case n.Kind == yaml.SequenceNode:
		var l []any
		for _, c := range n.Content {
			v, err := rendered(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	return n.Value, nil
}

// matches reports whether any of rules matches the event (EventBridge's
// TestEventPattern, on the emulator).
func (x *X) matches(ev []byte, rules []string) bool {
	eb := eventbridge.NewFromConfig(env.AWS.AWSConfig())
	for _, r := range rules {
		out, err := eb.TestEventPattern(x.ctx, &eventbridge.TestEventPatternInput{Event: aws.String(string(ev)), EventPattern: aws.String(r)})
		x.must(err)
		if out.Result {
			return true
		}
	}
	return false
}

// nthCheck holds the records to the coexistence rules.
func (x *X) nthCheck(groups []*nthGroup, proxies map[string]*fp.Proxy) {
	evicted := map[string]map[string]int{} // tool -> pod -> evictions the apiserver accepted
	wrote := map[string]map[string]int{}   // tool -> node -> writes the apiserver accepted
	for tool, p := range proxies {
		evicted[tool], wrote[tool] = map[string]int{}, map[string]int{}
		for _, r := range p.Requests() {
			if r.Status < 200 || r.Status > 299 {
				continue
			}
			if m := evictedPod.FindStringSubmatch(r.Path); m != nil && r.Method == "POST" {
				evicted[tool][m[1]]++
			}
			if m := nodeWrite.FindStringSubmatch(r.Path); m != nil && (r.Method == "PATCH" || r.Method == "PUT") {
				wrote[tool][m[1]]++
			}
		}
	}
	x.t.Logf("evictions %v; node writes %v", evicted, wrote)
	for tool, pods := range evicted {
		for pod, n := range pods {
			x.expect(n == 1, "pod %s evicted %d times by %s", pod, n, tool)
			for other := range evicted {
				if other != tool && evicted[other][pod] > 0 {
					x.violate("pod %s evicted by both tools (%s %d, %s %d)", pod, tool, n, other, evicted[other][pod])
				}
			}
		}
	}
	x.drained = "yes"
	for _, g := range groups {
		for i, in := range g.insts {
			x.nthCheckNode(g, i, in, evicted, wrote)
		}
		x.nthCheckHook(g)
	}
}

// nthCheckNode: the node of instance i was drained by its group's owner
// alone (i < 2), or by nobody (i == 2); the other tool neither wrote to
// it nor evicted its pods, and the node carries no mark of the other tool.
func (x *X) nthCheckNode(g *nthGroup, i int, in harness.Instance, evicted, wrote map[string]map[string]int) {
	name := in.PrivateDNSName
	by := func(tool string) (writes, evictions int) {
		for pod, n := range evicted[tool] {
			if strings.HasPrefix(pod, podPrefix(g, i)) {
				evictions += n
			}
		}
		return wrote[tool][name], evictions
	}
	var drainers []string
	for _, tool := range []string{toolNTH, toolND} {
		w, e := by(tool)
		if w > 0 || e > 0 {
			drainers = append(drainers, fmt.Sprintf("%s (%d node writes, %d evictions)", tool, w, e))
		}
		if tool != g.owner && (w > 0 || e > 0) {
			x.violate("node %s of %s's group %s was written to or drained by %s: %d node writes, %d evictions", name, g.owner, g.name, tool, w, e)
		}
	}
	if i < 2 {
		w, e := by(g.owner)
		x.expect(w > 0 && e == 2, "node %s (%s) not drained by its owner %s: %d node writes, %d of its 2 pods evicted", name, []string{"scale-in", "spot warning"}[i], g.owner, w, e)
		if left := x.drainPodsOn(name); len(left) > 0 {
			x.drained = "no"
			x.expect(false, "node %s still runs %v", name, left)
		}
	}
	x.t.Logf("node %s (group %s, instance %d): drained by %v", name, g.name, i, drainers)
	n := x.getNode(name)
	if g.owner == toolNTH {
		_, changes := n.Annotations[node.AnnotationOwned]
		x.expect(len(ourMarks(n)) == 0 && !changes, "NTH's node %s carries node-drainer's marks %v (changes recorded: %v)", name, ourMarks(n), changes)
	}
	// the apiserver's own record of who wrote the node: its managers
	managers := map[string]bool{}
	for _, f := range n.ManagedFields {
		managers[f.Manager] = true
	}
	mine, theirs := map[string]string{toolNTH: "node-termination-handler", toolND: "node-drainer"}[g.owner], map[string]string{toolNTH: "node-drainer", toolND: "node-termination-handler"}[g.owner]
	x.expect(!managers[theirs], "node %s of %s's group: the apiserver records %s among its managers %v", name, g.owner, theirs, keys(managers))
	if i < 2 {
		x.expect(managers[mine], "node %s: the apiserver does not record its owner %s (%s) among its managers %v", name, g.owner, mine, keys(managers))
	}
}

// nthCheckHook: the group's scale-in was completed once, with CONTINUE,
// by its owner (by the key that signed the call: the emulator's for NTH, the
// drainer role's session for node-drainer), and no other lifecycle call
// was made on it.
func (x *X) nthCheckHook(g *nthGroup) {
	id := g.insts[0].ID
	all, err := env.AWS.LifecycleCalls(x.ctx)
	x.must(err)
	var calls []string
	completed := 0
	for _, c := range all {
		if c.Params["InstanceId"] != id && c.Params["LifecycleActionToken"] != g.token {
			continue
		}
		who := caller(c)
		calls = append(calls, fmt.Sprintf("%s %s %s by %s: %s", c.Operation, c.Params["LifecycleHookName"], c.Params["LifecycleActionResult"], who, c.Outcome))
		if who != g.owner {
			x.violate("%s called %s on the lifecycle action of %s's group %s (%s)", who, c.Operation, g.owner, g.name, c.Outcome)
		}
		if c.Operation == "CompleteLifecycleAction" && c.OK() {
			completed++
			x.expect(c.Params["LifecycleActionResult"] == "CONTINUE" && c.Params["LifecycleHookName"] == g.hook, "%s's completion: %s of hook %s, want CONTINUE of %s", g.name, c.Params["LifecycleActionResult"], c.Params["LifecycleHookName"], g.hook)
		}
	}
	x.t.Logf("lifecycle calls on %s's scale-in (%s): %v", g.name, id, calls)
	if completed > 1 {
		x.violate("the lifecycle action of %s's scale-in was completed %d times", g.name, completed)
	}
	x.expect(completed == 1, "the lifecycle action of %s's scale-in (%s) was completed %d times, want once by %s: %v", g.name, id, completed, g.owner, calls)
	ended, err := env.AWS.EndedActions(x.ctx)
	x.must(err)
	for _, e := range ended {
		if e.InstanceID == id && e.Token == g.token {
			x.expect(e.Cause == "CompleteLifecycleAction" && e.Result == "CONTINUE", "%s's scale-in ended by %s with %s", g.name, e.Cause, e.Result)
		}
	}
}

// caller names who signed a lifecycle call: NTH signs with the emulator's
// key, the function with a session's of the drainer role (ASIA...).
func caller(c moto.LifecycleCall) string {
	switch {
	case c.Caller == moto.AccessKeyID:
		return toolNTH
	case strings.HasPrefix(c.Caller, "ASIA"):
		return toolND
	}
	return "unknown signer " + strconv.Quote(c.Caller)
}

// podPrefix is the name prefix of the pods placed on instance i of g.
func podPrefix(g *nthGroup, i int) string { return fmt.Sprintf("%s%d-", g.short, i) }

// drainPodsOn lists the pods still on the node but DaemonSet and mirror pods.
func (x *X) drainPodsOn(name string) []string {
	var left []string
	for _, p := range x.podsOn(name) {
		if !harness.StaysOnNode(&p) && p.DeletionTimestamp == nil {
			left = append(left, p.Name)
		}
	}
	return left
}

func (x *X) hookNames(asg string) []string {
	out, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).DescribeLifecycleHooks(x.ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(asg)})
	x.must(err)
	var names []string
	for _, h := range out.LifecycleHooks {
		names = append(names, aws.ToString(h.LifecycleHookName))
	}
	slices.Sort(names)
	return names
}

// groupTags puts tags on a group, propagated at launch.
func groupTags(ctx context.Context, asg string, tags map[string]string) error {
	var ts []astypes.Tag
	for k, v := range tags {
		ts = append(ts, astypes.Tag{Key: aws.String(k), Value: aws.String(v), PropagateAtLaunch: aws.Bool(true),
			ResourceId: aws.String(asg), ResourceType: aws.String("auto-scaling-group")})
	}
	_, err := autoscaling.NewFromConfig(env.AWS.AWSConfig()).CreateOrUpdateTags(ctx, &autoscaling.CreateOrUpdateTagsInput{Tags: ts})
	if err != nil {
		return fmt.Errorf("tagging group %s: %w", asg, err)
	}
	return nil
}

func instanceIDs(insts []harness.Instance) []string {
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.ID
	}
	return ids
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// uuid is a lifecycle action token as Auto Scaling gives one: NTH's SDK
// refuses a token shorter than 36 characters when it completes the action.
func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
