package handler

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/node-drainer/node-drainer/internal/cluster/clustertest"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// Nodes another lifecycle owner drains are left to it: nothing is written to
// them, and a hook sent for them is completed with CONTINUE.
func TestOtherLifecycleOwners(t *testing.T) {
	labelled := func(labels map[string]string) []runtime.Object {
		objs := aNode()
		objs[0] = newNode(idA, func(n *corev1.Node) { n.Labels = labels })
		return append(objs, attachment("csi-db", idA, "pv-db"))
	}
	karpenter := map[string]string{node.LabelKarpenterNodePool: "default"}
	autoMode := map[string]string{node.LabelEKSComputeType: "auto", node.LabelKarpenterNodePool: "general-purpose"}
	mng := map[string]string{node.LabelEKSNodeGroup: "ng-1"}
	all := slices.Clone(config.LifecycleOwners)
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		skip    []string
		payload []byte
		ec2     reading
		action  Action
		results []lifecycle.Result
	}{
		{"terminate hook, Karpenter node: left alone, CONTINUE", karpenter, all, terminateEvent(idA), running, ActionLeftAlone, []lifecycle.Result{lifecycle.Continue}},
		{"terminate hook, Auto Mode node: left alone, CONTINUE", autoMode, all, terminateEvent(idA), running, ActionLeftAlone, []lifecycle.Result{lifecycle.Continue}},
		{"terminate hook, managed node group node: left alone, CONTINUE", mng, all, terminateEvent(idA), running, ActionLeftAlone, []lifecycle.Result{lifecycle.Continue}},
		{"terminate hook, Karpenter not skipped: drained", karpenter, []string{"auto-mode"}, terminateEvent(idA), running, ActionDrained, []lifecycle.Result{lifecycle.Continue}},
		{"terminate hook, SKIP none: drained", autoMode, nil, terminateEvent(idA), running, ActionDrained, []lifecycle.Result{lifecycle.Continue}},
		{"terminate hook, Karpenter node already stopped: left alone, CONTINUE", karpenter, all, terminateEvent(idA), stopped, ActionLeftAlone, []lifecycle.Result{lifecycle.Continue}},
		{"spot warning, Auto Mode node: left alone", autoMode, all, spotEvent(idA, time.Now()), running, ActionLeftAlone, nil},
		{"rebalance, managed node group node: left alone", mng, all, rebalanceEvent(idA), running, ActionLeftAlone, nil},
		{"scheduled change, Karpenter node: left alone", karpenter, all, scheduledEvent(idA), running, ActionLeftAlone, nil},
		{"stopped, Karpenter node: left alone", karpenter, all, stateEvent(idA, "stopped", time.Now()), stopped, ActionLeftAlone, nil},
		{"stopped, Auto Mode node: left alone", autoMode, all, stateEvent(idA, "stopped", time.Now()), stopped, ActionLeftAlone, nil},
		// EKS drains its node groups on scale-in, not on an abrupt stop: the volumes are released
		{"stopped, managed node group node: released", mng, all, stateEvent(idA, "stopped", time.Now()), stopped, ActionReleased, nil},
		{"terminate hook, managed node group node already stopped: released", mng, all, terminateEvent(idA), stopped, ActionReleased, []lifecycle.Result{lifecycle.Continue}},
	} {
		t.Run(tc.name, clustertest.InBubble(func(t *testing.T) {
			e := newEnv(labelled(tc.labels)...)
			e.cfg.SkipNodesOwnedBy = tc.skip
			e.cfg.NodeLeaseStaleAfter = 0 // no kubelet Lease in the fake: the abrupt path may force
			e.ec2.readings[idA] = []reading{tc.ec2}
			out, err := e.handle(t, tc.payload, 5*time.Second)
			if err != nil {
				t.Fatalf("error %v (outcome %+v)", err, out)
			}
			if out.Action != tc.action {
				t.Errorf("action %q, want %q (detail %q)", out.Action, tc.action, out.Detail)
			}
			if got := e.asg.results(); !slices.Equal(got, tc.results) {
				t.Errorf("lifecycle results %v, want %v", got, tc.results)
			}
			if tc.action != ActionLeftAlone {
				return
			}
			// the per-instance lease is the function's own, and a completed hook
			// is recorded as an Event on the node; the node, its pods and its
			// attachments are not touched
			if w := slices.DeleteFunc(e.writes(), func(w string) bool {
				return strings.HasPrefix(w, "create leases/") || strings.HasPrefix(w, "update leases/") || w == "create events/"
			}); len(w) != 0 {
				t.Errorf("left alone, yet wrote %v", w)
			}
			for reason := range e.events(t) {
				if reason != string(node.ReasonLifecycleComplete) || tc.results == nil {
					t.Errorf("left alone, yet recorded %s", reason)
				}
			}
			if owner, _ := node.OwnerOf(e.node(t, idA)); !strings.Contains(out.Detail, string(owner)) || !strings.Contains(out.Detail, "SKIP_NODES_OWNED_BY") {
				t.Errorf("detail %q does not say which owner and why", out.Detail)
			}
		}))
	}
}

// config validates SKIP_NODES_OWNED_BY against the owners node can tell.
func TestLifecycleOwnersAgree(t *testing.T) {
	var names []string
	for _, o := range node.Owners {
		names = append(names, string(o))
	}
	if !slices.Equal(sorted(names), sorted(config.LifecycleOwners)) {
		t.Errorf("config.LifecycleOwners %v, node.Owners %v: want the same set", config.LifecycleOwners, names)
	}
}
