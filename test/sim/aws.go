package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/instance"
)

const clusterTag = "kubernetes.io/cluster/sim"

// EC2.

type stateAt struct {
	at            time.Duration
	state, reason string
}

type ec2Inst struct {
	id, dns   string
	group     string // the Auto Scaling group that launched it (its aws:autoscaling:groupName tag)
	hibernate bool   // configured for hibernation
	hist      []stateAt
}

type ec2World struct {
	w     *World
	mu    sync.Mutex
	insts map[string]*ec2Inst
	// newUnseen counts the describes of a just-launched instance answered
	// NotFound
	newUnseen int
}

func (e *ec2World) add(id, dns, group string, hibernate bool, state string) {
	e.mu.Lock()
	e.insts[id] = &ec2Inst{id: id, dns: dns, group: group, hibernate: hibernate, hist: []stateAt{{e.w.now(), state, ""}}}
	e.mu.Unlock()
}

// set changes an instance's state and sends its state-change notification.
func (e *ec2World) set(id, state, reason string) {
	e.mu.Lock()
	i := e.insts[id]
	i.hist = append(i.hist, stateAt{e.w.now(), state, reason})
	e.mu.Unlock()
	e.w.tracef("world: EC2 %s %s %s", id, state, reason)
	e.w.bridge.emit("state/"+id+"/"+state, stateEvent(id, state), id)
	if state == "terminated" {
		e.w.inv.terminated(id)
		e.w.after(30*time.Second+e.w.jitter("cloud/"+id), e.w.kube.bump) // the cloud controller's turn
	}
}

func (e *ec2World) current(id string) stateAt {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := e.insts[id]
	if i == nil {
		return stateAt{}
	}
	return i.hist[len(i.hist)-1]
}

// truth is the instance's state now.
func (e *ec2World) truth(id string) string { return e.current(id).state }

// since is when the instance entered its state.
func (e *ec2World) since(id string) time.Duration { return e.current(id).at }

// hibernated: stopping or stopped by a hibernation.
func (e *ec2World) hibernated(id string) bool {
	c := e.current(id)
	return c.reason == "Client.UserInitiatedHibernate" && (c.state == "stopping" || c.state == "stopped")
}

// seen is the instance as a describe shows it: sometimes from before its
// last change (EC2's reads are eventually consistent), and, in its first
// seconds, not at all: a describe right after a launch may answer
// InvalidInstanceID.NotFound (EC2's API reference, "Eventual consistency").
func (e *ec2World) seen(inv *invocation, id string) (ec2types.Instance, bool) {
	lag := e.w.roll(inv.id+"/ec2lag/"+id) < e.w.Plan.EC2Lag
	e.mu.Lock()
	defer e.mu.Unlock()
	i := e.insts[id]
	if i == nil {
		return ec2types.Instance{}, false
	}
	if lag && len(i.hist) == 1 && i.hist[0].state == "pending" && e.w.now()-i.hist[0].at < 5*time.Second {
		e.newUnseen++
		return ec2types.Instance{}, false
	}
	s := i.hist[len(i.hist)-1]
	if lag && len(i.hist) > 1 && e.w.now()-s.at < 5*time.Second {
		s = i.hist[len(i.hist)-2]
	}
	out := ec2types.Instance{
		InstanceId:         aws.String(id),
		State:              &ec2types.InstanceState{Name: ec2types.InstanceStateName(s.state)},
		PrivateDnsName:     aws.String(i.dns),
		Placement:          &ec2types.Placement{AvailabilityZone: aws.String("us-east-1a")},
		Tags:               []ec2types.Tag{{Key: aws.String(clusterTag), Value: aws.String("owned")}},
		HibernationOptions: &ec2types.HibernationOptions{Configured: aws.Bool(i.hibernate)},
	}
	if i.group != "" {
		out.Tags = append(out.Tags, ec2types.Tag{Key: aws.String(instance.TagGroupName), Value: aws.String(i.group)})
	}
	if s.reason != "" {
		out.StateReason = &ec2types.StateReason{Code: aws.String(s.reason)}
	}
	return out, true
}

type ec2Client struct {
	w   *World
	inv *invocation
}

func (c ec2Client) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	if err := c.w.lambda.gate(c.inv, "ec2 DescribeInstances"); err != nil {
		return nil, err
	}
	if err := c.w.awsFault(c.inv, "DescribeInstances"); err != nil {
		return nil, err
	}
	e := c.w.ec2
	var out []ec2types.Instance
	if len(in.InstanceIds) > 0 {
		for _, id := range in.InstanceIds {
			i, ok := e.seen(c.inv, id)
			if !ok {
				return nil, &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + id + "' does not exist"}
			}
			out = append(out, i)
		}
	} else {
		e.mu.Lock()
		ids := make([]string, 0, len(e.insts))
		for id := range e.insts {
			ids = append(ids, id)
		}
		e.mu.Unlock()
		sort.Strings(ids)
		for _, id := range ids {
			if i, ok := e.seen(c.inv, id); ok && matches(i, in.Filters) {
				out = append(out, i)
			}
		}
	}
	return &ec2.DescribeInstancesOutput{Reservations: []ec2types.Reservation{{Instances: out}}}, nil
}

func matches(i ec2types.Instance, filters []ec2types.Filter) bool {
	for _, f := range filters {
		var v []string
		switch aws.ToString(f.Name) {
		case "instance-id":
			v = []string{aws.ToString(i.InstanceId)}
		case "private-dns-name":
			v = []string{aws.ToString(i.PrivateDnsName)}
		case "instance-state-name":
			v = []string{string(i.State.Name)}
		case "tag-key":
			for _, t := range i.Tags {
				v = append(v, aws.ToString(t.Key))
			}
		default:
			panic("sim: EC2 filter not simulated: " + aws.ToString(f.Name))
		}
		if !slices.ContainsFunc(v, func(s string) bool { return slices.Contains(f.Values, s) }) {
			return false
		}
	}
	return true
}

// awsFault is a failure an AWS API answers with after the SDK's retries
// gave up (rare: the SDK retries throttling and 5xx).
func (w *World) awsFault(inv *invocation, op string) error {
	if w.calm.Load() {
		return nil
	}
	if w.roll(inv.id+"/aws/"+op) < w.Plan.APIFault/10 {
		return &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "Request limit exceeded (retries exhausted)"}
	}
	return nil
}

// Auto Scaling.

type action struct {
	group, instance string
	hook            hookDef
	token           string
	// origin and dest are the event's Origin and Destination in a group
	// with a warm pool ("" without one)
	origin, dest string
	start        time.Duration
	// last is when it began or was last heartbeated: it times out at its
	// hook's heartbeat timeout after, or its global timeout after start,
	// the hook read as it is now (due), as motoext does
	last    time.Duration
	done    bool
	result  string
	touched bool // an invocation of the function about it started
}

type member struct {
	id, state string
	actions   []*action
}

type group struct {
	name  string
	hooks []hookDef
	tags  map[string]string // the group's tags (hooks.go)
	// everTagged: it carried the selection tag once (untagged since, its
	// hooks stay: H3 does not ask them gone)
	everTagged bool
	untagged   bool // untagged once during the day
	members    map[string]*member
	// warm: the group has a warm pool of running instances that takes
	// instances back on scale-in (ReuseOnScaleIn)
	warm bool
}

type asgWorld struct {
	w      *World
	mu     sync.Mutex
	groups map[string]*group
	tokens int
}

func (a *asgWorld) addMember(groupName, id, state string) {
	a.mu.Lock()
	a.groups[groupName].members[id] = &member{id: id, state: state}
	a.mu.Unlock()
}

func (a *asgWorld) find(id string) (*group, *member) {
	for _, g := range a.groups {
		if m := g.members[id]; m != nil {
			return g, m
		}
	}
	return nil, nil
}

// transition starts the lifecycle actions of an instance's hooks for
// transition (terminating or launching), or goes on at once without hooks.
func (a *asgWorld) transition(id, transition string) {
	a.mu.Lock()
	g, m := a.find(id)
	if g == nil || (transition == "autoscaling:EC2_INSTANCE_TERMINATING" && (strings.HasPrefix(m.state, "Terminating") || strings.HasPrefix(m.state, "Warmed:"))) {
		a.mu.Unlock()
		return
	}
	wait, origin, dest := "Terminating:Wait", "", ""
	switch {
	case transition == "autoscaling:EC2_INSTANCE_LAUNCHING" && m.state == "Warmed:Running":
		wait, origin, dest = "Pending:Wait", "WarmPool", "AutoScalingGroup" // back from the warm pool
	case transition == "autoscaling:EC2_INSTANCE_LAUNCHING":
		wait = "Pending:Wait"
	case g.warm:
		wait, origin, dest = "Warmed:Pending:Wait", "AutoScalingGroup", "WarmPool" // scaled in into the warm pool
	}
	for _, ac := range m.actions {
		// a launch still waiting when the instance is scaled in (an
		// unready node's replacement): its action ends with the
		// transition, and its timeout with it
		if !ac.done {
			ac.done, ac.result = true, "ended by "+transition
		}
	}
	m.state, m.actions = wait, nil
	var started []*action
	for _, h := range g.hooks {
		if h.transition != transition {
			continue
		}
		h = a.settled(h)
		a.tokens++
		ac := &action{group: g.name, instance: id, hook: h, token: fmt.Sprintf("token-%d", a.tokens), start: a.w.now(), origin: origin, dest: dest,
			last: a.w.now()}
		m.actions = append(m.actions, ac)
		started = append(started, ac)
	}
	a.mu.Unlock()
	a.w.tracef("world: ASG %s: %s %s (%d hooks)", g.name, id, wait, len(started))
	if len(started) == 0 {
		a.proceed(g.name, id, "CONTINUE")
		return
	}
	for _, ac := range started {
		a.w.bridge.emit("hook/"+ac.token, hookEvent(ac), id)
		a.watchExpiry(ac)
		if ac.hook.other {
			key := "other/" + ac.token
			if a.w.roll(key) < 0.8 {
				a.w.after(time.Duration(5+a.w.roll(key+"/when")*115)*time.Second, func() {
					_ = a.complete(nil, ac.group, ac.hook.name, id, ac.token, "CONTINUE") // another tool's: its answer is not ours to read
				})
			}
		}
	}
}

// watchExpiry applies the default result when an action times out.
func (a *asgWorld) watchExpiry(ac *action) {
	a.mu.Lock()
	at, _ := a.due(ac)
	a.mu.Unlock()
	a.w.after(at-a.w.now()+time.Millisecond, func() {
		a.mu.Lock()
		if ac.done {
			a.mu.Unlock()
			return
		}
		at, result := a.due(ac)
		if now := a.w.now(); now < at {
			a.mu.Unlock()
			a.watchExpiry(ac)
			return
		}
		ac.hook.result = result
		a.mu.Unlock()
		a.w.inv.expired(ac)
		a.w.tracef("world: ASG: hook %s of %s timed out: default result %s", ac.hook.name, ac.instance, result)
		a.finish(ac, result)
	})
}

// finish ends an action; when the instance's last one ends it goes on. An
// ABANDON ends the instance's other actions with it.
func (a *asgWorld) finish(ac *action, result string) {
	a.mu.Lock()
	if ac.done {
		a.mu.Unlock()
		return
	}
	ac.done, ac.result = true, result
	a.w.inv.check(I3) // every action's end is one: by the function, another tool, or its timeout
	g := a.groups[ac.group]
	m := g.members[ac.instance]
	if m == nil { // gone meanwhile (terminated outside the group)
		a.mu.Unlock()
		return
	}
	if result == "ABANDON" {
		// "ABANDON stops any remaining actions, such as other lifecycle
		// hooks" (AWS's user guide; conformance): the others end with it
		for _, o := range m.actions {
			if !o.done {
				o.done, o.result = true, "ABANDON"
				a.w.tracef("world: ASG: hook %s of %s ended by %s's ABANDON", o.hook.name, o.instance, ac.hook.name)
			}
		}
	}
	outcome := "CONTINUE"
	for _, o := range m.actions {
		if !o.done {
			a.mu.Unlock()
			return
		}
		if o.result == "ABANDON" {
			outcome = "ABANDON"
		}
	}
	a.mu.Unlock()
	// the instance goes on as a step of the world's own (a completion may
	// come from an invocation of the function)
	a.w.after(0, func() { a.proceed(g.name, ac.instance, outcome) })
}

// proceed takes an instance past its transition: a terminating one
// terminates (whatever the result); a launching one goes in service, or is
// terminated when abandoned.
func (a *asgWorld) proceed(groupName, id, result string) {
	a.mu.Lock()
	g := a.groups[groupName]
	m := g.members[id]
	if m.state == "Warmed:Pending:Wait" { // into the warm pool, whatever the result: it keeps running there
		m.state = "Warmed:Running"
		a.mu.Unlock()
		a.w.tracef("world: ASG %s: %s Warmed:Running (in the warm pool, its node kept)", groupName, id)
		if back := time.Duration(60+a.w.roll("pool/"+id)*540) * time.Second; a.w.now()+back < poolReturnsUntil {
			a.w.after(back, func() { a.backFromPool(id) })
		}
		return
	}
	launching := m.state == "Pending:Wait"
	if launching && result == "CONTINUE" {
		m.state = "InService"
		a.mu.Unlock()
		a.w.tracef("world: ASG %s: %s InService", groupName, id)
		return
	}
	delete(g.members, id)
	a.mu.Unlock()
	a.w.tracef("world: ASG %s: %s terminating (%s)", groupName, id, result)
	a.w.shutDown(id)
}

// poolReturnsUntil ends the warm pool's sequels: an instance comes back
// from the pool before it, or stays there for the rest of the day (its
// hold then kept, as it should be), so that every return has its launch
// hook and a sweep before the day's last invariants are checked.
const poolReturnsUntil = 35 * time.Minute

// backFromPool takes an instance out of the warm pool into service, through
// the launch hooks (no EC2 event: it never stopped); sometimes it is scaled
// in again soon after, before a sweep may have lifted its first trip's hold.
func (a *asgWorld) backFromPool(id string) {
	a.mu.Lock()
	_, m := a.find(id)
	inPool := m != nil && m.state == "Warmed:Running"
	a.mu.Unlock()
	if !inPool || a.w.ec2.truth(id) != "running" {
		return
	}
	a.w.tracef("world: ASG: %s leaves the warm pool", id)
	a.transition(id, "autoscaling:EC2_INSTANCE_LAUNCHING")
	if a.w.roll("pool-again/"+id) < 0.5 && a.w.now() < poolReturnsUntil-10*time.Minute {
		a.w.after(time.Duration(20+a.w.roll("pool-again-when/"+id)*160)*time.Second, func() {
			a.mu.Lock()
			_, m := a.find(id)
			inService := m != nil && m.state == "InService" // a scale-in picks an instance in service
			a.mu.Unlock()
			if inService {
				a.w.tracef("world: ASG: %s scaled in again", id)
				a.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
			}
		})
	}
}

// complete is CompleteLifecycleAction.
func (a *asgWorld) complete(inv *invocation, groupName, hook, id, token, result string) error {
	a.mu.Lock()
	var found *action
	if gone := a.hookGone(groupName, hook); gone != nil {
		a.mu.Unlock()
		return gone
	}
	if g := a.groups[groupName]; g != nil {
		if m := g.members[id]; m != nil {
			for _, ac := range m.actions {
				if ac.hook.name == hook && !ac.done && (token == "" || token == ac.token) {
					found = ac
				}
			}
		}
	}
	a.mu.Unlock()
	if found == nil {
		return &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with instance ID " + id}
	}
	if inv != nil {
		a.w.inv.completing(inv, found, result)
		a.w.tracef("%s: CompleteLifecycleAction %s %s %s", inv.id, hook, id, result)
	} else {
		a.w.tracef("world: %s completed its hook %s of %s", "another tool", hook, id)
	}
	a.finish(found, result)
	return nil
}

// hookGone is Auto Scaling's answer to a completion or a heartbeat under
// a hook the group does not have (deleted: its actions ended with it),
// asked before the action is (as moto does, test/harness/moto/motoext.py,
// and as AWS answers for a hook that is not there: the conformance suite
// holds the two to it); nil: the group has it, or no such group. a.mu held.
func (a *asgWorld) hookGone(group, hook string) error {
	g := a.groups[group]
	if g == nil || slices.ContainsFunc(g.hooks, func(h hookDef) bool { return h.name == hook }) {
		return nil
	}
	return noHook(group, hook)
}

// noHook is the ValidationError Auto Scaling answers for a hook of group
// that does not exist.
func noHook(group, hook string) error {
	return &smithy.GenericAPIError{Code: "ValidationError", Message: "No Lifecycle Hook found with name " + hook + " in group " + group}
}

type asgClient struct {
	w   *World
	inv *invocation
}

func (c asgClient) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling CompleteLifecycleAction"); err != nil {
		return nil, err
	}
	c.inv.tryingToComplete(c.w.now())
	if err := c.w.awsFault(c.inv, "CompleteLifecycleAction"); err != nil {
		return nil, err
	}
	err := c.w.asg.complete(c.inv, aws.ToString(in.AutoScalingGroupName), aws.ToString(in.LifecycleHookName),
		aws.ToString(in.InstanceId), aws.ToString(in.LifecycleActionToken), aws.ToString(in.LifecycleActionResult))
	if err != nil {
		return nil, err
	}
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (c asgClient) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling RecordLifecycleActionHeartbeat"); err != nil {
		return nil, err
	}
	if err := c.w.awsFault(c.inv, "RecordLifecycleActionHeartbeat"); err != nil {
		return nil, err
	}
	a := c.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	id, hook := aws.ToString(in.InstanceId), aws.ToString(in.LifecycleHookName)
	if gone := a.hookGone(aws.ToString(in.AutoScalingGroupName), hook); gone != nil {
		return nil, gone
	}
	if g := a.groups[aws.ToString(in.AutoScalingGroupName)]; g != nil {
		if m := g.members[id]; m != nil {
			for _, ac := range m.actions {
				if ac.hook.name == hook && !ac.done {
					c.w.tracef("%s: RecordLifecycleActionHeartbeat %s %s", c.inv.id, hook, id)
					c.w.inv.heartbeat(c.inv, ac)
					ac.last = c.w.now()
					return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
				}
			}
		}
	}
	return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with instance ID " + id}
}

func (c asgClient) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling DescribeAutoScalingGroups"); err != nil {
		return nil, err
	}
	if err := c.w.awsFault(c.inv, "DescribeAutoScalingGroups"); err != nil {
		return nil, err
	}
	a := c.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.groups))
	for n := range a.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []astypes.AutoScalingGroup
	for _, n := range names {
		g := a.groups[n]
		if len(in.AutoScalingGroupNames) > 0 && !slices.Contains(in.AutoScalingGroupNames, n) || !g.selected(in.Filters) {
			continue
		}
		ag := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(n), Tags: g.tagList()}
		if g.warm {
			ag.WarmPoolConfiguration = &astypes.WarmPoolConfiguration{PoolState: astypes.WarmPoolStateRunning,
				InstanceReusePolicy: &astypes.InstanceReusePolicy{ReuseOnScaleIn: aws.Bool(true)}}
		}
		ids := make([]string, 0, len(g.members))
		for id, m := range g.members {
			if !strings.HasPrefix(m.state, "Warmed:") { // the warm pool's, listed by DescribeWarmPool
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			ag.Instances = append(ag.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: astypes.LifecycleState(g.members[id].state),
				HealthStatus: aws.String("Healthy"), AvailabilityZone: aws.String("us-east-1a")})
		}
		c.inv.readGroup(n, c.w.now())
		out = append(out, ag)
	}
	return &autoscaling.DescribeAutoScalingGroupsOutput{AutoScalingGroups: out}, nil
}

func (c asgClient) DescribeWarmPool(_ context.Context, in *autoscaling.DescribeWarmPoolInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling DescribeWarmPool"); err != nil {
		return nil, err
	}
	if err := c.w.awsFault(c.inv, "DescribeWarmPool"); err != nil {
		return nil, err
	}
	a := c.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.groups[aws.ToString(in.AutoScalingGroupName)]
	if g == nil {
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "Group not found"}
	}
	var ids []string
	for id, m := range g.members {
		if strings.HasPrefix(m.state, "Warmed:") {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	c.inv.readGroup(g.name, c.w.now())
	out := &autoscaling.DescribeWarmPoolOutput{}
	for _, id := range ids {
		out.Instances = append(out.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: astypes.LifecycleState(g.members[id].state),
			HealthStatus: aws.String("Healthy"), AvailabilityZone: aws.String("us-east-1a")})
	}
	return out, nil
}

func (c asgClient) SetInstanceHealth(_ context.Context, in *autoscaling.SetInstanceHealthInput, _ ...func(*autoscaling.Options)) (*autoscaling.SetInstanceHealthOutput, error) {
	if err := c.w.lambda.gate(c.inv, "autoscaling SetInstanceHealth"); err != nil {
		return nil, err
	}
	c.w.tracef("%s: SetInstanceHealth %s %s", c.inv.id, aws.ToString(in.InstanceId), aws.ToString(in.HealthStatus))
	if aws.ToString(in.HealthStatus) == "Unhealthy" {
		id := aws.ToString(in.InstanceId)
		c.w.after(time.Second, func() { c.w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING") })
	}
	return &autoscaling.SetInstanceHealthOutput{}, nil
}

// EventBridge.

type bridge struct{ w *World }

// emit delivers an event to the function: usually within seconds, sometimes
// minutes late, sometimes twice, sometimes never.
func (b bridge) emit(key string, payload []byte, about string) {
	w := b.w
	if w.quiet {
		return
	}
	if w.roll("lost/"+key) < w.Plan.EventLoss {
		w.tracef("world: EventBridge lost %s", key)
		return
	}
	copies := 1
	if w.roll("dup/"+key) < w.Plan.EventDup {
		copies = 2
	}
	for c := range copies {
		k := fmt.Sprintf("%s#%d", key, c)
		d := time.Duration(100+w.roll("delay/"+k)*1900) * time.Millisecond
		if w.roll("late/"+k) < w.Plan.EventLate {
			d = time.Duration(60+w.roll("late-by/"+k)*240) * time.Second
		}
		w.after(d, func() { w.lambda.async("ev:"+k, payload, about, 0) })
	}
}

func envelope(source, detailType string, at time.Time, detail any) []byte {
	b, err := json.Marshal(map[string]any{
		"version": "0", "id": fmt.Sprintf("ev-%d", at.UnixNano()), "detail-type": detailType, "source": source, "account": "123456789012",
		"time": at.UTC().Format(time.RFC3339Nano), "region": "us-east-1", "resources": []string{}, "detail": detail,
	})
	must(err)
	return b
}

func hookEvent(ac *action) []byte {
	dt := "EC2 Instance-terminate Lifecycle Action"
	if ac.hook.transition == "autoscaling:EC2_INSTANCE_LAUNCHING" {
		dt = "EC2 Instance-launch Lifecycle Action"
	}
	detail := map[string]string{
		"LifecycleActionToken": ac.token, "AutoScalingGroupName": ac.group, "LifecycleHookName": ac.hook.name,
		"EC2InstanceId": ac.instance, "LifecycleTransition": ac.hook.transition,
	}
	if ac.dest != "" {
		detail["Origin"], detail["Destination"] = ac.origin, ac.dest
	}
	return envelope("aws.autoscaling", dt, time.Now(), detail)
}

func stateEvent(id, state string) []byte {
	return envelope("aws.ec2", "EC2 Instance State-change Notification", time.Now(), map[string]string{"instance-id": id, "state": state})
}

func sweepEvent() []byte {
	return envelope("aws.events", "Scheduled Event", time.Now(), map[string]any{})
}

// Lambda.

// invocation is one run of the function.
// readGroup records that inv read group's instances at now.
func (inv *invocation) readGroup(group string, now time.Duration) {
	if inv == nil {
		return
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.groupRead == nil {
		inv.groupRead = map[string]time.Duration{}
	}
	inv.groupRead[group] = now
}

// readSince is when inv last read group's instances (false: never).
func (inv *invocation) readSince(group string) (time.Duration, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	t, ok := inv.groupRead[group]
	return t, ok
}

type invocation struct {
	id       string
	payload  []byte
	about    string // the instance it concerns ("sweep": the sweep)
	retries  int    // Lambda's asynchronous retries of it so far
	begun    time.Duration
	deadline time.Time
	mu       sync.Mutex
	dead     bool // killed at its deadline
	ended    bool
	listed   map[string]time.Duration // when it last listed each node's pods (I1)
	// groupRead is when it last read each group's instances (H1: an
	// uninstall cannot see an action begun after its last read)
	groupRead map[string]time.Duration
	// when it first called CompleteLifecycleAction (I1: what it knew
	// then is what it completed on; its retries add nothing)
	completeFrom time.Duration
	completing   bool
	fn           string            // the function it runs as ("": the plan's)
	result       chan directResult // a template's request: its result (fn.go)
	hookFaults   int               // faults answered to its calls about hooks (H3)
}

// tryingToComplete notes the invocation's first CompleteLifecycleAction.
func (inv *invocation) tryingToComplete(t time.Duration) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.completing {
		inv.completeFrom, inv.completing = t, true
	}
}

// firstCompletion is when the invocation first called
// CompleteLifecycleAction.
func (inv *invocation) firstCompletion() time.Duration {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.completeFrom
}

// looked notes that the invocation listed node on's pods at t.
func (inv *invocation) looked(on string, t time.Duration) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.listed == nil {
		inv.listed = map[string]time.Duration{}
	}
	inv.listed[on] = t
}

// lastLooked is when the invocation last listed node on's pods (ok false:
// never).
func (inv *invocation) lastLooked(on string) (time.Duration, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	t, ok := inv.listed[on]
	return t, ok
}

// requestID is the invocation's id without its retry suffix: Lambda keeps
// an asynchronous invocation's request id across its retries.
func (inv *invocation) requestID() string { return strings.SplitN(inv.id, "/retry", 2)[0] }

type lambdaWorld struct {
	w       *World
	cfg     config.Config
	mu      sync.Mutex
	running int
	all     []*invocation
	seq     map[string]int
	log     *slog.Logger
	// what the event queue did: events run twice, throttles, drops
	dups, throttled, dropped int
	fns                      map[string]*function // the account's functions (fn.go)
}

// gate is every call of the function to the world: a call after the
// invocation's deadline is one Lambda would never have let through (I9).
func (l *lambdaWorld) gate(inv *invocation, what string) error {
	l.w.step()
	l.w.inv.check(I9)
	inv.mu.Lock()
	dead := inv.dead
	inv.mu.Unlock()
	if dead || !time.Now().Before(inv.deadline) {
		l.w.inv.afterDeadline(inv, what)
		return errors.New("sim: the invocation was killed at its deadline")
	}
	return nil
}

// async is an asynchronous invocation: run now if the reserved concurrency
// allows, else throttled and tried again later, as Lambda's event queue does.
func (l *lambdaWorld) async(id string, payload []byte, about string, retries int) {
	l.enqueue(id, payload, about, retries, l.w.now())
}

// The event queue of Lambda's asynchronous invocations, as AWS documents
// it ("How Lambda handles errors and retries with asynchronous
// invocation"): a throttled event is tried again from 1 s after, the
// interval growing exponentially to 5 minutes, for up to the maximum event
// age (the templates' MaximumEventAgeSeconds, 3,600 s), then dropped; and
// the queue is eventually consistent, so an event the function ran may
// reach it again: dupRate of the events are run a second time, 5 to 60 s
// later, under another request id.
const (
	maxEventAge = time.Hour
	dupRate     = 0.02
)

// enqueue is async for an event queued at since.
func (l *lambdaWorld) enqueue(id string, payload []byte, about string, retries int, since time.Duration) {
	owner := mainOwner
	if strings.HasPrefix(id, "sweep-b-") {
		owner = secondOwner
	}
	if l.gone(owner) {
		l.w.tracef("world: %s not run: function %s deleted", id, owner)
		return
	}
	l.mu.Lock()
	if l.running >= l.w.Plan.Concurrency {
		l.seq[id]++
		n := l.seq[id]
		age := l.w.now() - since
		if age >= maxEventAge {
			l.dropped++
		} else {
			l.throttled++
		}
		l.mu.Unlock()
		if age >= maxEventAge {
			l.w.tracef("world: Lambda dropped %s: throttled for %s, past the maximum event age", id, age.Round(time.Second))
			return
		}
		d := min(time.Second<<min(n-1, 9), 5*time.Minute) + l.w.jitter(fmt.Sprintf("throttle/%s/%d", id, n))
		l.w.tracef("world: Lambda throttled %s (retry in %s)", id, d.Round(time.Second))
		l.w.after(d, func() { l.enqueue(id, payload, about, retries, since) })
		return
	}
	l.running++
	inv := &invocation{id: id, payload: payload, about: about, retries: retries, begun: l.w.now(), deadline: time.Now().Add(l.w.Plan.LambdaTimeout), fn: owner}
	if retries > 0 {
		inv.id = fmt.Sprintf("%s/retry%d", id, retries)
	}
	l.all = append(l.all, inv)
	l.mu.Unlock()
	l.w.inv.started(inv)
	l.w.tracef("%s: invoked (%s)", inv.id, about)
	go l.run(inv)
	time.AfterFunc(l.w.Plan.LambdaTimeout, func() { l.kill(inv) })
	if retries == 0 && !strings.HasSuffix(id, "/dup") && l.w.roll("dup/"+id) < dupRate {
		d := 5*time.Second + time.Duration(l.w.roll("dup-delay/"+id)*55)*time.Second
		l.mu.Lock()
		l.dups++
		l.mu.Unlock()
		l.w.tracef("world: Lambda's queue will deliver %s again in %s", id, d)
		l.w.after(d, func() { l.enqueue(id+"/dup", payload, about, 0, l.w.now()) })
	}
}

func (l *lambdaWorld) run(inv *invocation) {
	ctx, cancel := context.WithDeadline(context.Background(), inv.deadline)
	defer cancel()
	// Lambda's retry of an asynchronous invocation keeps its request id
	out, detail, err := l.serve(ctx, inv)
	inv.mu.Lock()
	dead := inv.dead
	inv.ended = true
	inv.mu.Unlock()
	if dead {
		return
	}
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	if inv.result != nil {
		inv.result <- directResult{inv: inv, detail: detail, err: err}
		return
	}
	if len(detail) > 160 {
		detail = detail[:160] + "…"
	}
	l.w.tracef("%s: returned %s %s (error: %v)", inv.id, out.Action, detail, err)
	l.w.inv.returned(inv, err)
	if s := out.Sweep; s != nil && (len(s.Held)+len(s.Notes)+len(s.Failed) > 0) {
		l.w.tracef("%s: sweep held %v; notes %q; failed %q", inv.id, s.Held, s.Notes, s.Failed)
	}
	if inv.about == "sweep" && err == nil {
		l.w.inv.swept(inv)
	}
	if err != nil {
		l.retry(inv)
	}
}

// kill ends an invocation still running at its deadline: an error, retried.
func (l *lambdaWorld) kill(inv *invocation) {
	inv.mu.Lock()
	if inv.ended {
		inv.mu.Unlock()
		return
	}
	inv.dead = true
	inv.mu.Unlock()
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	l.w.tracef("%s: killed at its deadline (Task timed out)", inv.id)
	if inv.result != nil {
		inv.result <- directResult{inv: inv, err: errKilled}
		return
	}
	l.retry(inv)
}

// retry is Lambda's retry of a failed asynchronous invocation: twice, a
// minute then two minutes later.
func (l *lambdaWorld) retry(inv *invocation) {
	if inv.retries >= 2 || l.w.isStopped() {
		return
	}
	base := inv.requestID()
	d := time.Duration(inv.retries+1)*time.Minute + l.w.jitter("retry/"+inv.id)
	l.w.after(d, func() { l.async(base, inv.payload, inv.about, inv.retries+1) })
}

type lambdaClient struct {
	w   *World
	inv *invocation
}

// Invoke is the function invoking itself (a continuation, or one instance
// of a scheduled change).
func (c lambdaClient) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	if err := c.w.lambda.gate(c.inv, "lambda Invoke"); err != nil {
		return nil, err
	}
	if c.w.roll(c.inv.id+"/invoke") < c.w.Plan.InvokeFail {
		c.w.tracef("%s: Invoke failed (TooManyRequestsException)", c.inv.id)
		return nil, &smithy.GenericAPIError{Code: "TooManyRequestsException", Message: "Rate exceeded"}
	}
	c.w.lambda.mu.Lock()
	c.w.lambda.seq[c.inv.id+"/cont"]++
	id := fmt.Sprintf("%s>c%d", c.inv.id, c.w.lambda.seq[c.inv.id+"/cont"])
	c.w.lambda.mu.Unlock()
	c.w.inv.continued(c.inv, id)
	c.w.after(time.Duration(100+c.w.roll("cont-delay/"+id)*900)*time.Millisecond, func() {
		c.w.lambda.async(id, in.Payload, c.inv.about, 0)
	})
	return &lambda.InvokeOutput{StatusCode: 202}, nil
}

var _ = io.Discard
