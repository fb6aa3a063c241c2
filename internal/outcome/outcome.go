// Package outcome tells the people on call what happened to a node: one
// EventBridge event per outcome worth a person's attention (a node drained,
// a drain failed or blocked, volumes force-released, a lifecycle action
// completed), put on a bus the operator names, from which their own rules
// route it to SNS, chat, a pager or a ticket.
//
// Putting an event never delays or endangers a drain: the handler puts its
// events after the drain's steps, each call bounded by a few seconds and by
// the invocation's deadline, and a failure is logged and counted, never
// retried past that bound.
package outcome

import (
	"errors"
	"fmt"
	"time"
)

// Source is every event's source: a rule matches it with
// {"source": ["node-drainer"]}.
const Source = "node-drainer"

// SchemaVersion is the detail's version; a field is only ever added within
// a version.
const SchemaVersion = "1"

// DetailType names what happened; a rule matches it with
// {"detail-type": [...]}.
type DetailType string

// The outcomes put on the bus.
const (
	// NodeDrainStarted: a drain's first eviction was accepted; sent once
	// per drain, by the invocation that marked the node (cordon, taint),
	// while the drain goes on.
	NodeDrainStarted DetailType = "Node Drain Started"
	// NodeDrained: the node's pods were evicted and gone, its volumes
	// detached (a drain that ended well); a dead kubelet's: its pods
	// evicted, not waited for past DEAD_NODE_EVICTION_WINDOW.
	NodeDrained DetailType = "Node Drained"
	// NodeDrainFailed: a drain gave up (its time ran out, or it could not
	// go on): the pods left and what holds them are in the detail.
	NodeDrainFailed DetailType = "Node Drain Failed"
	// NodeDrainBlocked: a drain is not finished after the configured
	// time (OUTCOME_BLOCKED_AFTER), whatever holds it (pods that will not
	// go, the apiserver failing, a hand-over that failed); sent once per
	// drain, by the invocation in which that time passes; at once for a
	// voluntary drain that left a pod for its pod policy (POD_POLICY).
	NodeDrainBlocked DetailType = "Node Drain Blocked"
	// NodeReleased: an instance EC2 reports down had its pods
	// force-deleted or its VolumeAttachments deleted (the evidence is in
	// the detail).
	NodeReleased DetailType = "Node Released"
	// LifecycleActionCompleted: the function completed an Auto Scaling
	// lifecycle action, with its result and why.
	LifecycleActionCompleted DetailType = "Lifecycle Action Completed"
)

// DetailTypes lists every detail-type, in the order the docs give them.
var DetailTypes = []DetailType{NodeDrainStarted, NodeDrained, NodeDrainFailed, NodeDrainBlocked, NodeReleased, LifecycleActionCompleted}

// Step is one step of the invocation's timeline, counted from its start.
type Step struct {
	AtMS   int64  `json:"atMs"`
	Step   string `json:"step"`
	Detail string `json:"detail,omitempty"`
}

// Held is a pod a drain left and what holds it (a PodDisruptionBudget, an
// admission refusal, a pod still terminating).
type Held struct {
	Pod    string `json:"pod"`
	HeldBy string `json:"heldBy,omitempty"`
}

// Detail is every event's detail. Fields that do not apply to an outcome
// are left out.
type Detail struct {
	SchemaVersion string `json:"schemaVersion"`
	// Cluster is the cluster's name (CLUSTER_NAME).
	Cluster string `json:"cluster"`
	// Function is the Lambda function that acted (two deployments apart).
	Function string `json:"function,omitempty"`
	Instance string `json:"instance"`
	Node     string `json:"node,omitempty"`
	// AutoScalingGroup and LifecycleHook name the lifecycle action, when
	// there is one.
	AutoScalingGroup string `json:"autoScalingGroup,omitempty"`
	LifecycleHook    string `json:"lifecycleHook,omitempty"`
	// Event is the kind of event that started it (terminate, spot, …).
	Event string `json:"event"`
	// Result is the outcome's action (drained, failed, released, …);
	// LifecycleResult the result an action was completed with (CONTINUE,
	// ABANDON); Reason why.
	Result          string `json:"result"`
	LifecycleResult string `json:"lifecycleResult,omitempty"`
	Reason          string `json:"reason,omitempty"`
	// Attempt counts the invocations of a drain that went on in a fresh
	// one (1: the first).
	Attempt int  `json:"attempt,omitempty"`
	DryRun  bool `json:"dryRun"`
	// DrainSeconds is how long the drain took, from its first invocation;
	// BlockedSeconds how long it waited on the pods left.
	DrainSeconds   float64 `json:"drainSeconds,omitempty"`
	BlockedSeconds float64 `json:"blockedSeconds,omitempty"`
	// Evicted, Remaining: the pods evicted, and those left with what holds
	// them; PodsDeleted and AttachmentsDeleted: what a release forced.
	Evicted            []string `json:"evicted,omitempty"`
	Remaining          []Held   `json:"remaining,omitempty"`
	PodsDeleted        []string `json:"podsDeleted,omitempty"`
	AttachmentsDeleted []string `json:"attachmentsDeleted,omitempty"`
	// Evidence is what EC2 said of the instance before a release forced
	// anything (rule 6).
	Evidence string `json:"evidence,omitempty"`
	// Omitted counts list entries left out to keep the event within
	// EventBridge's size.
	Omitted  int    `json:"omitted,omitempty"`
	Timeline []Step `json:"timeline,omitempty"`
	Version  string `json:"version,omitempty"`
	// Time is when the function saw it happen.
	Time time.Time `json:"time"`
}

// Event is one outcome to put.
type Event struct {
	Type   DetailType
	Detail Detail
}

// Validate checks a detail against the schema of its detail-type: the
// fields every event carries, and those its type promises. The samples in
// events/outcomes and every event the handler builds in its tests are held
// to it.
func Validate(t DetailType, d Detail) error {
	var errs []error
	need := func(ok bool, field string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s is required", t, field))
		}
	}
	known := false
	for _, k := range DetailTypes {
		known = known || k == t
	}
	if !known {
		return fmt.Errorf("unknown detail-type %q", t)
	}
	need(d.SchemaVersion == SchemaVersion, "schemaVersion "+SchemaVersion)
	need(d.Cluster != "", "cluster")
	need(d.Instance != "", "instance")
	need(d.Event != "", "event")
	need(d.Result != "", "result")
	need(!d.Time.IsZero(), "time")
	switch t {
	case NodeDrainStarted, NodeDrained:
		need(d.Node != "", "node")
	case NodeDrainFailed:
		need(d.Reason != "", "reason")
	case NodeDrainBlocked:
		// node and remaining when known: not when the apiserver failed
		// before the node's pods were listed
		need(d.Reason != "", "reason")
		need(d.BlockedSeconds > 0, "blockedSeconds")
	case NodeReleased:
		need(d.Evidence != "", "evidence")
		need(len(d.PodsDeleted)+len(d.AttachmentsDeleted) > 0, "podsDeleted or attachmentsDeleted")
	case LifecycleActionCompleted:
		need(d.AutoScalingGroup != "", "autoScalingGroup")
		need(d.LifecycleHook != "", "lifecycleHook")
		need(d.LifecycleResult != "", "lifecycleResult")
		need(d.Reason != "", "reason")
	}
	return errors.Join(errs...)
}
