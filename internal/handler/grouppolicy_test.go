package handler

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/metrics"
)

// policyGroup is the group asgName with the tags given.
func policyGroup(tags map[string]string) astypes.AutoScalingGroup {
	g := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(asgName)}
	for k, v := range tags {
		g.Tags = append(g.Tags, astypes.TagDescription{Key: aws.String(k), Value: aws.String(v), ResourceId: aws.String(asgName)})
	}
	return g
}

// A terminate hook under GROUP_POLICY_TAGS: the group's drain-timeout is
// the drain's (a timeout already spent: completed with the failure result
// at once); a bad value, or a group that cannot be read, leaves
// DRAIN_TIMEOUT, with a warning and the GroupPolicyDefaulted metric, and
// never fails the event. Off, the group is not read at all.
func TestGroupPolicyDrainTimeout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		on        bool
		tags      map[string]string
		readErr   error
		result    lifecycle.Result
		describes int
		policy    *GroupPolicy
		defaulted bool
	}{
		{"off: not read, DRAIN_TIMEOUT", false, map[string]string{config.TagDrainTimeout: "1ms"}, nil, lifecycle.Continue, 0, nil, false},
		{"the group's timeout, spent: the failure result", true, map[string]string{config.TagDrainTimeout: "1ms"}, nil, lifecycle.Abandon, 1,
			&GroupPolicy{Group: asgName, DrainTimeout: "1ms"}, false},
		{"no policy tag: DRAIN_TIMEOUT", true, map[string]string{"team": "web"}, nil, lifecycle.Continue, 1, nil, false},
		{"a bad value: DRAIN_TIMEOUT, said and counted", true, map[string]string{config.TagDrainTimeout: "soon"}, nil, lifecycle.Continue, 1,
			&GroupPolicy{Group: asgName, Refused: []string{`node-drainer.io/drain-timeout="soon": want a positive duration of at most 8h20m0s (the hook's limit)`}}, true},
		{"past the hook's limit: DRAIN_TIMEOUT", true, map[string]string{config.TagDrainTimeout: "9h"}, nil, lifecycle.Continue, 1, nil, true},
		{"the group unreadable: DRAIN_TIMEOUT, the event not failed", true, nil, errors.New("throttled"), lifecycle.Continue, 1, nil, true},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(aNode()...)
			e.cfg.GroupTags, e.cfg.HeartbeatTimeout = tc.on, 300*time.Second
			e.ec2.readings[idA] = []reading{running}
			e.asg.groups, e.asg.describeErr = []astypes.AutoScalingGroup{policyGroup(tc.tags)}, tc.readErr
			if tc.result == lifecycle.Abandon {
				e.blocked = []string{"db-0"} // the drain cannot end before the group's 1 ms
			}
			var buf bytes.Buffer
			e.metrics = &buf
			out, err := e.handle(t, terminateEvent(idA), 3*time.Second)
			if err != nil {
				t.Fatalf("error %v (outcome %+v): a group's policy never fails an event", err, out)
			}
			if got := e.asg.results(); !reflect.DeepEqual(got, []lifecycle.Result{tc.result}) {
				t.Errorf("completions %v, want %v (%s: %s)", got, tc.result, out.Action, out.Detail)
			}
			if e.asg.describes != tc.describes {
				t.Errorf("%d DescribeAutoScalingGroups, want %d", e.asg.describes, tc.describes)
			}
			if tc.policy != nil && !reflect.DeepEqual(out.GroupPolicy, tc.policy) {
				t.Errorf("outcome's group policy %+v, want %+v", out.GroupPolicy, tc.policy)
			}
			if tc.readErr != nil && (out.GroupPolicy == nil || !strings.Contains(out.GroupPolicy.Unread, "throttled")) {
				t.Errorf("outcome's group policy %+v: want the read's failure said", out.GroupPolicy)
			}
			if got := strings.Contains(buf.String(), `"`+metrics.GroupPolicyDefaulted+`":1`); got != tc.defaulted {
				t.Errorf("metric %s written: %v, want %v\n%s", metrics.GroupPolicyDefaulted, got, tc.defaulted, buf.String())
			}
			if err := metrics.CheckCatalog(bytes.TrimSpace(buf.Bytes())); err != nil {
				t.Error(err)
			}
		}))
	}
}

// A group chosen by its tag (ASG_TAG_KEY) is read once for its selection:
// that reading serves its policy too, no second call.
func TestGroupPolicyReusesTheSelectionsRead(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		tagMode(e)
		e.cfg.GroupTags = true
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"db-0"} // the drain cannot end before the group's 1 ms
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{groupTagKey: "true", config.TagDrainTimeout: "1ms"})}
		out, err := e.handle(t, terminateEvent(idA), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if e.asg.describes != 1 {
			t.Errorf("%d DescribeAutoScalingGroups, want 1: the selection's reading serves the policy", e.asg.describes)
		}
		if got := e.asg.results(); !reflect.DeepEqual(got, []lifecycle.Result{lifecycle.Abandon}) || out.GroupPolicy == nil || out.GroupPolicy.DrainTimeout != "1ms" {
			t.Errorf("completions %v, group policy %+v: want the group's timeout taken", got, out.GroupPolicy)
		}
	})
}

// Rebalance recommendations and scheduled changes take the group's action
// over the setting's; a warm function reads each group once per
// groupTagsTTL, however many events.
func TestGroupPolicyAdvisoryActions(t *testing.T) {
	t.Run("rebalance: the group says drain, REBALANCE_ACTION cordon", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.GroupTags = true
		e.ec2.readings[idA] = []reading{{state: running.state, tagged: true, group: asgName}}
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagRebalanceAction: "drain"})}
		h := e.handler()
		out, err := e.handleWith(h, rebalanceEvent(idA), 3*time.Second)
		if err != nil || out.Action != ActionDrained || len(out.Evicted) != 2 {
			t.Fatalf("outcome %s (%s), evicted %v, %v: want drained", out.Action, out.Detail, out.Evicted, err)
		}
		if out.GroupPolicy == nil || out.GroupPolicy.RebalanceAction != "drain" {
			t.Errorf("group policy %+v: want the group's action said", out.GroupPolicy)
		}
		if out, _ := e.handleWith(h, rebalanceEvent(idA), 3*time.Second); out.GroupPolicy == nil || e.asg.describes != 1 {
			t.Errorf("second event: group policy %+v, %d DescribeAutoScalingGroups: want the group's tags kept, read once", out.GroupPolicy, e.asg.describes)
		}
		time.Sleep(groupTagsTTL + time.Second) // the bubble's time
		if out, _ := e.handleWith(h, rebalanceEvent(idA), 3*time.Second); out.GroupPolicy == nil || e.asg.describes != 2 {
			t.Errorf("past groupTagsTTL: group policy %+v, %d DescribeAutoScalingGroups: want the group read again", out.GroupPolicy, e.asg.describes)
		}
	}))
	t.Run("rebalance: the group says cordon, REBALANCE_ACTION ignore", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.GroupTags, e.cfg.RebalanceAction = true, config.ActionIgnore
		e.ec2.readings[idA] = []reading{{state: running.state, tagged: true, group: asgName}}
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagRebalanceAction: "cordon"})}
		out, err := e.handle(t, rebalanceEvent(idA), 3*time.Second)
		if err != nil || out.Action != ActionCordoned || !e.node(t, idA).Spec.Unschedulable {
			t.Fatalf("outcome %s (%s), %v: want cordoned", out.Action, out.Detail, err)
		}
	}))
	t.Run("rebalance: no tag, ignore as configured, and off: neither EC2 nor the group read", clustertest.InBubble(func(t *testing.T) {
		for _, on := range []bool{true, false} {
			e := newEnv(aNode()...)
			e.cfg.GroupTags, e.cfg.RebalanceAction = on, config.ActionIgnore
			e.ec2.readings[idA] = []reading{{state: running.state, tagged: true, group: asgName}}
			e.asg.groups = []astypes.AutoScalingGroup{policyGroup(nil)}
			out, err := e.handle(t, rebalanceEvent(idA), 3*time.Second)
			if err != nil || out.Action != ActionIgnored || len(e.writes()) != 0 {
				t.Fatalf("on=%v: outcome %s (%s), writes %v, %v: want ignored", on, out.Action, out.Detail, e.writes(), err)
			}
			if !on && (e.asg.describes != 0 || e.ec2.calls != 0) {
				t.Errorf("off: %d group reads, %d EC2 reads; want none", e.asg.describes, e.ec2.calls)
			}
		}
	}))
	t.Run("scheduled change: the group says ignore, SCHEDULED_CHANGE_ACTION drain", clustertest.InBubble(func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.GroupTags = true
		e.ec2.readings[idA] = []reading{{state: running.state, tagged: true, group: asgName}}
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagScheduledChangeAction: "ignore"})}
		out, err := e.handle(t, scheduledEvent(idA), 3*time.Second)
		if err != nil || out.Action != ActionIgnored || len(e.writes()) != 0 {
			t.Fatalf("outcome %s (%s), writes %v, %v: want ignored, nothing written", out.Action, out.Detail, e.writes(), err)
		}
		if out.Event != event.KindScheduledChange || out.GroupPolicy == nil || out.GroupPolicy.ScheduledChangeAction != "ignore" {
			t.Errorf("group policy %+v: want the group's action said", out.GroupPolicy)
		}
	}))
}

// A dry run shows the group's policy in its outcome.
func TestGroupPolicyDryRun(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.GroupTags, e.cfg.DryRun, e.cfg.HeartbeatTimeout = true, true, 300*time.Second
		e.ec2.readings[idA] = []reading{running}
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagDrainTimeout: "2h"})}
		out, err := e.handle(t, terminateEvent(idA), 3*time.Second)
		if err != nil || out.GroupPolicy == nil || out.GroupPolicy.DrainTimeout != "2h0m0s" || out.Plan == nil {
			t.Fatalf("outcome %+v, %v: want the plan and the group's drain timeout", out, err)
		}
		if w := e.writes(); len(w) != 0 {
			t.Errorf("a dry run wrote %v", w)
		}
	})
}

// A continuation of a drain whose group gave it longer than DRAIN_TIMEOUT
// is taken up, and the drain has the group's time: refused with the policy
// off (older than DRAIN_TIMEOUT plus the slack), drained with it on.
func TestGroupPolicyContinuationOfALongerDrain(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		for _, on := range []bool{false, true} {
			e := newEnv(aNode()...)
			e.cfg.GroupTags, e.cfg.HeartbeatTimeout = on, 300*time.Second
			e.ec2.readings[idA] = []reading{running}
			e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagDrainTimeout: "2h"})}
			payload, err := event.NewContinuation(terminateEvent(idA), e.now.Add(-time.Hour), 2)
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.handle(t, payload, 3*time.Second)
			switch {
			case !on && (err == nil || len(e.asg.results()) != 0):
				t.Errorf("off: outcome %s, %v, completions %v: want the continuation refused", out.Action, err, e.asg.results())
			case on && (err != nil || !reflect.DeepEqual(e.asg.results(), []lifecycle.Result{lifecycle.Continue})):
				t.Errorf("on: outcome %s (%s), %v, completions %v: want drained within the group's 2h", out.Action, out.Detail, err, e.asg.results())
			}
		}
	})
}

// A drain the group gave longer than DRAIN_TIMEOUT keeps that time in its
// continuations when the group cannot be read there (found by the
// simulation's I1, seed 615: a drain-timeout of 20m, DRAIN_TIMEOUT 10m, a
// continuation 14 minutes in whose DescribeAutoScalingGroups was throttled
// completed the hook at once, a pod still running): the continuation
// carries the timeout its drain began with, and an unread group leaves it.
func TestGroupPolicyContinuationUnreadKeepsItsTimeout(t *testing.T) {
	clustertest.Bubble(t, func(t *testing.T) {
		e := newEnv(aNode()...)
		e.cfg.GroupTags, e.cfg.HeartbeatTimeout, e.cfg.DrainTimeout = true, 300*time.Second, 10*time.Minute
		e.ec2.readings[idA] = []reading{running}
		e.blocked = []string{"db-0"} // the drain cannot end
		e.asg.groups = []astypes.AutoScalingGroup{policyGroup(map[string]string{config.TagDrainTimeout: "20m"})}
		out, err := e.handle(t, terminateEvent(idA), 300*time.Millisecond)
		if err != nil || out.Action != ActionContinued || len(e.lam.invoked) != 1 {
			t.Fatalf("first attempt: %+v, %v, %d invocations: want it continued", out, err, len(e.lam.invoked))
		}
		next := e.lam.invoked[0].Payload
		e.now = e.now.Add(14 * time.Minute) // past DRAIN_TIMEOUT, within the group's 20m
		e.asg.describeErr = errors.New("throttled")
		out, err = e.handle(t, next, 300*time.Millisecond)
		if err != nil || len(e.asg.results()) != 0 || out.Action != ActionContinued {
			t.Fatalf("continuation, the group unread: %s (%s), %v, completions %v: want the drain to go on within its 20m", out.Action, out.Detail, err, e.asg.results())
		}
	})
}
