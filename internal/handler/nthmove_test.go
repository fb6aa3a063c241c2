package handler

import (
	"slices"
	"strings"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
)

// What docs/migrating-from-nth.md's move from aws-node-termination-handler
// rests on: with CLUSTER_TAG_KEY a tag of the operator's own, an instance
// without it (one of a node group NTH still drains, which carries the
// cluster's kubernetes.io/cluster/<name> all the same) is left alone on every
// event, and one with it is drained.

// moveTag is the CLUSTER_TAG_KEY of the move (the doc's example).
const moveTag = "node-drainer.io/managed"

var (
	// nthInstance: a node group NTH still drains; the cluster's own tag only
	nthInstance = reading{state: instance.StateRunning, tagged: true}
	// movedInstance: its tags moved to node-drainer's
	movedInstance = reading{state: instance.StateRunning, tagged: true, tags: map[string]string{moveTag: ""}}
)

func TestMoveFromNTHByClusterTagKey(t *testing.T) {
	listed := func(e *env) { e.cfg.ASGNames = []string{asgName} }
	byTag := func(e *env) {
		tagMode(e)
		e.asg.groups = []astypes.AutoScalingGroup{taggedGroup(asgName, "true")}
	}
	rebalanceDrains := func(e *env) { e.cfg.RebalanceAction = config.ActionDrain }
	for _, tc := range []struct {
		name    string
		setup   func(*env)
		ec2     reading
		payload []byte
		action  Action
		results []lifecycle.Result
		drained bool // the node was written to (cordon, evictions)
	}{
		{"spot warning, NTH's instance: ignored", nil, nthInstance, spotEvent(idA, time.Now()), ActionIgnored, nil, false},
		{"rebalance with drain, NTH's instance: ignored", rebalanceDrains, nthInstance, rebalanceEvent(idA), ActionIgnored, nil, false},
		{"stopped, NTH's stopped instance: ignored, nothing released", nil, reading{state: instance.StateStopped, tagged: true}, stateEvent(idA, "stopped", time.Now()), ActionIgnored, nil, false},
		{"our hook, listed group, NTH's instance: completed CONTINUE, nothing drained", listed, nthInstance, terminateEvent(idA), "", []lifecycle.Result{lifecycle.Continue}, false},
		{"our hook, group by tag, NTH's instance: left to its timeout", byTag, nthInstance, terminateEvent(idA), "", nil, false},
		{"spot warning, moved instance: drained", nil, movedInstance, spotEvent(idA, time.Now()), ActionDrained, nil, true},
		{"our hook, listed group, moved instance: drained, CONTINUE", listed, movedInstance, terminateEvent(idA), ActionDrained, []lifecycle.Result{lifecycle.Continue}, true},
		{"our hook, group by tag, moved instance: drained, CONTINUE", byTag, movedInstance, terminateEvent(idA), ActionDrained, []lifecycle.Result{lifecycle.Continue}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(aNode()...)
			e.cfg.ClusterTagKey = moveTag
			if tc.setup != nil {
				tc.setup(e)
			}
			e.ec2.readings[idA] = []reading{tc.ec2}
			out, err := e.handle(t, tc.payload, 5*time.Second)
			if err != nil {
				t.Fatalf("error %v (outcome %+v)", err, out)
			}
			if tc.action != "" && out.Action != tc.action {
				t.Errorf("action %q, want %q (detail %q)", out.Action, tc.action, out.Detail)
			}
			if got := e.asg.results(); !slices.Equal(got, tc.results) {
				t.Errorf("lifecycle results %v, want %v (detail %q)", got, tc.results, out.Detail)
			}
			if drained := nodeWritten(e.writes()); drained != tc.drained {
				t.Errorf("node written to %v, want %v: %v", drained, tc.drained, e.writes())
			}
		})
	}
}

// The memory of an instance found without CLUSTER_TAG_KEY (foreignTTL) is
// why the doc waits before it resumes scale-ins: a warm function still
// ignores an instance tagged meanwhile, on an advisory event and on a hook
// (completed, nothing drained, in a listed group); a new execution
// environment, or the memory's end, sees the tag.
func TestMovedInstanceRememberedUntagged(t *testing.T) {
	e := newEnv(aNode()...)
	e.cfg.ClusterTagKey = moveTag
	e.cfg.ASGNames = []string{asgName}
	e.ec2.readings[idA] = []reading{nthInstance}
	warm := e.handler()
	if out, err := e.handleWith(warm, rebalanceEvent(idA), 5*time.Second); err != nil || out.Action != ActionIgnored {
		t.Fatalf("before the move: %s (%s), %v; want ignored", out.Action, out.Detail, err)
	}
	e.ec2.readings[idA] = []reading{movedInstance} // the tags moved

	out, err := e.handleWith(warm, spotEvent(idA, e.now), 5*time.Second)
	if err != nil || out.Action != ActionIgnored || !strings.Contains(out.Detail, "as EC2 said at") {
		t.Errorf("warm, just after the move: %s (%s), %v; want ignored from memory", out.Action, out.Detail, err)
	}
	if out, err := e.handleWith(warm, terminateEvent(idA), 5*time.Second); err != nil || !slices.Equal(e.asg.results(), []lifecycle.Result{lifecycle.Continue}) || nodeWritten(e.writes()) {
		t.Errorf("warm, our hook just after the move: %s (%s), %v, results %v, writes %v; want completed, nothing drained", out.Action, out.Detail, err, e.asg.results(), e.writes())
	}

	fresh := newEnv(aNode()...)
	fresh.cfg = e.cfg
	fresh.ec2.readings[idA] = []reading{movedInstance}
	if out, err := fresh.handle(t, spotEvent(idA, fresh.now), 5*time.Second); err != nil || out.Action != ActionDrained {
		t.Errorf("a new execution environment: %s (%s), %v; want drained", out.Action, out.Detail, err)
	}

	e.now = e.now.Add(foreignTTL + time.Second)
	if out, err := e.handleWith(warm, spotEvent(idA, e.now), 5*time.Second); err != nil || out.Action != ActionDrained {
		t.Errorf("warm, %s after: %s (%s), %v; want drained", foreignTTL+time.Second, out.Action, out.Detail, err)
	}
}

// nodeWritten says whether writes hold a change to a Node or an eviction
// (the Leases and Events the function writes for itself aside).
func nodeWritten(writes []string) bool {
	return slices.ContainsFunc(writes, func(w string) bool {
		return strings.HasPrefix(w, "update nodes/") || strings.HasPrefix(w, "patch nodes/") || w == "create pods/eviction"
	})
}
