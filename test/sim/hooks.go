package sim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// The hooks' whole life, as Auto Scaling plays it (its API reference):
// PutLifecycleHook creates a hook or changes the one of that name;
// DeleteLifecycleHook deletes it and completes every action pending under
// it (CONTINUE for a terminating instance, ABANDON for a launching one);
// an action ends at its hook's heartbeat timeout with the hook's default
// result, a heartbeat restarting the timeout; a hook's
// NotificationMetadata is at most 1,023 characters, its heartbeat timeout
// 30 to 7,200 s, and a group has at most 50 hooks (a put past a limit is
// refused, ValidationError, and is an H6 violation); a throttle or a 5xx
// may answer any call (hookFault). And the function's own tags, on which
// an uninstall marks its removal (internal/hooks/removal.go).

// hookDef is a lifecycle hook of a group, as Auto Scaling keeps it.
type hookDef struct {
	name, transition string
	heartbeat        int32  // seconds (0: the plan's)
	result           string // DefaultResult ("": the plan's)
	meta             string // NotificationMetadata
	// by is who made the hook: "stack" (a deployment, before the day), a
	// deployment's function name (put by it), "other" (another tool), or
	// "hand" (an operator: a HOOK_NAMES sibling, or a hook of our name).
	// H2: a hook not put by a deployment keeps every byte.
	by    string
	ours  bool // by the function's configuration: it completes its actions
	other bool // another tool's: it completes its actions
}

// The hooks' limits (Auto Scaling's quotas and API reference).
const (
	maxHooksPerGroup = 50
	groupTagKey      = "node-drainer.io/enabled"
)

// hooks are the hooks a group starts the day with: the template's (none
// on a day of deployments: the deployment's Create puts them), the
// operator's HOOK_NAMES sibling, another tool's.
func (a *asgWorld) hooks() []hookDef {
	p := a.w.Plan
	var hs []hookDef
	if p.Deploy == nil {
		// a hook the operator made and named in HOOK_NAMES stands for the
		// template's on some days (ExtraOwnedHook); on others one stands
		// beside it on the same transition (Plan.Sibling: the drain
		// heartbeats and completes both, C2)
		terminate := "node-drainer-terminate"
		if p.ExtraOwnedHook {
			terminate = "drain-extra"
		}
		hs = append(hs,
			hookDef{name: terminate, transition: discovery.Terminating, ours: true, by: "stack", meta: discovery.Mark("node-drainer")},
			hookDef{name: "node-drainer-launch", transition: discovery.Launching, ours: true, by: "stack", meta: discovery.Mark("node-drainer")})
	}
	if p.Sibling != "" {
		hs = append(hs, hookDef{name: siblingHook, transition: discovery.Terminating, ours: true, by: "hand", result: p.Sibling, heartbeat: p.SiblingSecs})
	}
	if p.OtherHook {
		hs = append(hs, hookDef{name: "app-flush", transition: discovery.Terminating, other: true, by: "other", meta: p.OtherMeta})
	}
	return hs
}

// siblingHook is the operator's hook named by HOOK_NAMES beside the
// template's terminate hook (Plan.Sibling): two actions of ours on one
// transition.
const siblingHook = "drain-sibling"

func (a *asgWorld) addGroup(name string, warm bool) {
	a.mu.Lock()
	tags := map[string]string{clusterTag: "owned"}
	if d := a.w.Plan.Deploy; d != nil && (name != "nodes" || !d.Listed) {
		tags[groupTagKey] = "true"
	}
	a.groups[name] = &group{name: name, hooks: a.hooks(), tags: tags, members: map[string]*member{}, warm: warm, everTagged: tags[groupTagKey] != ""}
	a.mu.Unlock()
}

// settled is h with the plan's settings where it has none.
func (a *asgWorld) settled(h hookDef) hookDef {
	if h.heartbeat == 0 {
		h.heartbeat = a.w.Plan.HeartbeatSecs
	}
	if h.result == "" {
		h.result = a.w.Plan.DefaultResult
	}
	h.ours = h.ours || a.w.lambda.owns(h.name)
	return h
}

// tagList is the group's tags as a describe gives them.
func (g *group) tagList() []astypes.TagDescription {
	keys := make([]string, 0, len(g.tags))
	for k := range g.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]astypes.TagDescription, 0, len(keys))
	for _, k := range keys {
		out = append(out, astypes.TagDescription{Key: aws.String(k), Value: aws.String(g.tags[k]), ResourceId: aws.String(g.name),
			ResourceType: aws.String("auto-scaling-group")})
	}
	return out
}

// selected reports whether the group passes a describe's filters (tag:<key>).
func (g *group) selected(filters []astypes.Filter) bool {
	for _, f := range filters {
		if aws.ToString(f.Name) == "tag-key" {
			if !slices.ContainsFunc(f.Values, func(k string) bool { _, has := g.tags[k]; return has }) {
				return false
			}
			continue
		}
		key, ok := strings.CutPrefix(aws.ToString(f.Name), "tag:")
		if !ok {
			panic("sim: Auto Scaling filter not simulated: " + aws.ToString(f.Name))
		}
		if v, has := g.tags[key]; !has || !slices.Contains(f.Values, v) {
			return false
		}
	}
	return true
}

// due is when ac times out, and with what, its hook read as the group has
// it now (a put that changes the timeout or the default result applies to
// the actions in flight, as motoext plays it); a hook the group no longer
// has never times out. Call with the lock held.
func (a *asgWorld) due(ac *action) (time.Duration, string) {
	g := a.groups[ac.group]
	i := -1
	if g != nil {
		i = slices.IndexFunc(g.hooks, func(h hookDef) bool { return h.name == ac.hook.name })
	}
	if i < 0 {
		return 100 * 365 * 24 * time.Hour, ac.hook.result
	}
	h := a.settled(g.hooks[i])
	hb := time.Duration(h.heartbeat) * time.Second
	return min(ac.last+hb, ac.start+min(100*hb, 48*time.Hour)), h.result
}

// rearm watches again the actions pending under hook name of g, whose
// timeout a put may have shortened. Call without the lock.
func (a *asgWorld) rearm(g *group, name string) {
	a.mu.Lock()
	var pending []*action
	for _, m := range g.members {
		for _, ac := range m.actions {
			if !ac.done && ac.hook.name == name {
				pending = append(pending, ac)
			}
		}
	}
	a.mu.Unlock()
	for _, ac := range pending {
		a.watchExpiry(ac)
	}
}

// hookFault is a throttle or a 5xx answered to a call about hooks or the
// function's tags, after the SDK's retries gave up.
func (w *World) hookFault(inv *invocation, op string) error {
	x := w.roll(inv.id + "/hooks/" + op)
	if x >= w.Plan.APIFault/5 || w.calm.Load() {
		return nil
	}
	w.hooksFaulted(inv, op)
	if x < w.Plan.APIFault/10 {
		return &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded (retries exhausted)"}
	}
	return &smithy.GenericAPIError{Code: "InternalFailure", Message: "An internal error occurred (retries exhausted)", Fault: smithy.FaultServer}
}

func (c asgClient) DescribeLifecycleHooks(_ context.Context, in *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling DescribeLifecycleHooks"); err != nil {
		return nil, err
	}
	if err := c.w.awsFault(c.inv, "DescribeLifecycleHooks"); err != nil {
		return nil, err
	}
	if c.inv.about == "deploy" || c.inv.about == "sweep-b" { // a drain's reads fault as before (awsFault)
		if err := c.w.hookFault(c.inv, "DescribeLifecycleHooks"); err != nil {
			return nil, err
		}
	}
	a := c.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.groups[aws.ToString(in.AutoScalingGroupName)]
	if g == nil {
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "Group not found"}
	}
	var out []astypes.LifecycleHook
	for _, h := range g.hooks {
		if len(in.LifecycleHookNames) > 0 && !slices.Contains(in.LifecycleHookNames, h.name) {
			continue
		}
		h = a.settled(h)
		lh := astypes.LifecycleHook{AutoScalingGroupName: aws.String(g.name), LifecycleHookName: aws.String(h.name),
			LifecycleTransition: aws.String(h.transition), HeartbeatTimeout: aws.Int32(h.heartbeat), GlobalTimeout: aws.Int32(min(100*h.heartbeat, 172800)),
			DefaultResult: aws.String(h.result)}
		if h.meta != "" {
			lh.NotificationMetadata = aws.String(h.meta)
		}
		out = append(out, lh)
	}
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: out}, nil
}

// writeLatency is how long a hook's put or delete takes: two writes of
// one hook at one moment (two uninstalls) interleave as they do in AWS.
func (w *World) writeLatency(inv *invocation, op string) {
	time.Sleep(time.Duration(20+w.roll(inv.id+"/latency/"+op)*280) * time.Millisecond)
}

func (c asgClient) PutLifecycleHook(_ context.Context, in *autoscaling.PutLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling PutLifecycleHook"); err != nil {
		return nil, err
	}
	if err := c.w.hookFault(c.inv, "PutLifecycleHook"); err != nil {
		return nil, err
	}
	c.w.writeLatency(c.inv, "put")
	name, group := aws.ToString(in.LifecycleHookName), aws.ToString(in.AutoScalingGroupName)
	h := hookDef{name: name, transition: aws.ToString(in.LifecycleTransition), heartbeat: aws.ToInt32(in.HeartbeatTimeout),
		result: aws.ToString(in.DefaultResult), meta: aws.ToString(in.NotificationMetadata), by: c.w.lambda.owner(c.inv)}
	if h.heartbeat == 0 {
		h.heartbeat = 3600 // Auto Scaling's default
	}
	if h.result == "" {
		h.result = "ABANDON" // Auto Scaling's default
	}
	a := c.w.asg
	a.mu.Lock()
	g := a.groups[group]
	if g == nil {
		a.mu.Unlock()
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "Group " + group + " not found"}
	}
	i := slices.IndexFunc(g.hooks, func(x hookDef) bool { return x.name == name })
	var was *hookDef
	if i >= 0 {
		cur := g.hooks[i]
		was = &cur
	}
	if why := refused(h, g, was); why != "" {
		a.mu.Unlock()
		c.w.inv.limitPut(c.inv, group, name, why)
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: why}
	}
	c.w.inv.hookWrite(c.inv, g, was, &h)
	if was != nil {
		h.ours, h.other = was.ours, was.other
		if was.by != "stack" && !strings.HasPrefix(was.by, "node-drainer") {
			h.by = was.by // a hook not ours stays not ours (H2 found it written)
		}
		g.hooks[i] = h
	} else {
		g.hooks = append(g.hooks, h)
	}
	a.mu.Unlock()
	c.w.tracef("%s: PutLifecycleHook %s/%s %s %ds %s %q", c.inv.id, group, name, h.transition, h.heartbeat, h.result, h.meta)
	if was != nil {
		a.rearm(g, name)
	}
	return &autoscaling.PutLifecycleHookOutput{}, nil
}

// refused is why Auto Scaling refuses to put h on g over was ("": it
// does not).
func refused(h hookDef, g *group, was *hookDef) string {
	switch n := utf8.RuneCountInString(h.meta); {
	case n > discovery.MaxMetadata:
		return fmt.Sprintf("NotificationMetadata of %d characters: at most 1023", n)
	case h.heartbeat < 30 || h.heartbeat > 7200:
		return fmt.Sprintf("HeartbeatTimeout %d: from 30 to 7200", h.heartbeat)
	case h.result != "CONTINUE" && h.result != "ABANDON":
		return "DefaultResult " + h.result + ": CONTINUE or ABANDON"
	case h.transition != discovery.Terminating && h.transition != discovery.Launching:
		return "LifecycleTransition " + h.transition + " not valid"
	case was == nil && len(g.hooks) >= maxHooksPerGroup:
		return "the group has 50 lifecycle hooks already"
	}
	return ""
}

func (c asgClient) DeleteLifecycleHook(_ context.Context, in *autoscaling.DeleteLifecycleHookInput, _ ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling DeleteLifecycleHook"); err != nil {
		return nil, err
	}
	if err := c.w.hookFault(c.inv, "DeleteLifecycleHook"); err != nil {
		return nil, err
	}
	if c.w.deploys.failsDelete(c.inv) {
		return nil, &smithy.GenericAPIError{Code: "InternalFailure", Message: "An internal error occurred (the destroy that fails half-way)", Fault: smithy.FaultServer}
	}
	c.w.writeLatency(c.inv, "delete")
	name, group := aws.ToString(in.LifecycleHookName), aws.ToString(in.AutoScalingGroupName)
	if !c.w.asg.deleteHook(c.inv, group, name) {
		return nil, noHook(group, name)
	}
	return &autoscaling.DeleteLifecycleHookOutput{}, nil
}

// deleteHook deletes a group's hook and completes the actions pending
// under it, as DeleteLifecycleHook does: CONTINUE for a terminating
// instance, ABANDON for a launching one. false: no such hook.
func (a *asgWorld) deleteHook(inv *invocation, group, name string) bool {
	a.mu.Lock()
	g := a.groups[group]
	i := -1
	if g != nil {
		i = slices.IndexFunc(g.hooks, func(x hookDef) bool { return x.name == name })
	}
	if i < 0 {
		a.mu.Unlock()
		return false
	}
	was := g.hooks[i]
	a.w.inv.hookWrite(inv, g, &was, nil)
	g.hooks = slices.Delete(g.hooks, i, i+1)
	var ended []*action
	for _, m := range g.members {
		for _, ac := range m.actions {
			if !ac.done && ac.hook.name == name {
				ended = append(ended, ac)
			}
		}
	}
	a.mu.Unlock()
	who := "world"
	if inv != nil {
		who = inv.id
	}
	a.w.tracef("%s: DeleteLifecycleHook %s/%s (%d actions pending under it)", who, group, name, len(ended))
	for _, ac := range ended {
		result := "CONTINUE"
		if ac.hook.transition == discovery.Launching {
			result = "ABANDON"
		}
		a.w.tracef("world: ASG: the deletion of hook %s ends %s's action with %s", name, ac.instance, result)
		a.finish(ac, result)
	}
	return true
}

// The function's own tags (Lambda's ListTags, TagResource, UntagResource):
// an uninstall marks its removal there (internal/hooks/removal.go).

// functionARN is the ARN of the function a deployment's owner names.
func functionARN(owner string) string {
	return "arn:aws:lambda:us-east-1:123456789012:function:" + owner
}

func (c lambdaClient) self(op string, arn *string) (string, error) {
	if err := c.w.lambda.gate(c.inv, "lambda "+op); err != nil {
		return "", err
	}
	if err := c.w.hookFault(c.inv, op); err != nil {
		return "", err
	}
	owner, _ := strings.CutPrefix(aws.ToString(arn), functionARN(""))
	if c.w.lambda.gone(owner) {
		return "", &lambdatypes.ResourceNotFoundException{Message: aws.String("Function not found: " + aws.ToString(arn))}
	}
	return owner, nil
}

func (c lambdaClient) ListTags(_ context.Context, in *lambda.ListTagsInput, _ ...func(*lambda.Options)) (*lambda.ListTagsOutput, error) {
	owner, err := c.self("ListTags", in.Resource)
	if err != nil {
		return nil, err
	}
	return &lambda.ListTagsOutput{Tags: c.w.lambda.tagsOf(owner)}, nil
}

func (c lambdaClient) TagResource(_ context.Context, in *lambda.TagResourceInput, _ ...func(*lambda.Options)) (*lambda.TagResourceOutput, error) {
	owner, err := c.self("TagResource", in.Resource)
	if err != nil {
		return nil, err
	}
	c.w.lambda.retag(owner, in.Tags, nil)
	c.w.tracef("%s: TagResource %s %v", c.inv.id, owner, in.Tags)
	return &lambda.TagResourceOutput{}, nil
}

func (c lambdaClient) UntagResource(_ context.Context, in *lambda.UntagResourceInput, _ ...func(*lambda.Options)) (*lambda.UntagResourceOutput, error) {
	owner, err := c.self("UntagResource", in.Resource)
	if err != nil {
		return nil, err
	}
	c.w.lambda.retag(owner, nil, in.TagKeys)
	c.w.tracef("%s: UntagResource %s %v", c.inv.id, owner, in.TagKeys)
	return &lambda.UntagResourceOutput{}, nil
}
