package handler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
	"github.com/node-drainer/node-drainer/internal/volume"
)

// terminate handles the ASG terminate hook: drain, release volumes, complete.
// From the moment the hook is known to be ours it is completed on every path.
func (r *run) terminate(ctx context.Context) error {
	la := r.ev.Lifecycle
	act := lifecycle.Action{ASG: la.AutoScalingGroupName, Hook: la.HookName, Token: la.Token, InstanceID: la.InstanceID}
	r.log = r.log.With("asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID)
	if !r.h.cfg.AllowsASG(act.ASG) {
		r.out.Action, r.out.Detail = ActionIgnored, "ASG "+act.ASG+" is not in ASG_NAMES"
		return nil
	}
	inst, ours, err := r.ours(ctx, act.InstanceID)
	switch {
	case err != nil && len(r.h.cfg.ASGNames) == 0:
		return err // cannot tell whether it is ours: nothing done, a retry may read EC2
	case err != nil:
		// the ASG is ours by configuration: drain without EC2's view (the
		// node is found by providerID), so the hook is still completed in
		// time; the zero reading is never "down", so nothing is forced
		r.log.WarnContext(ctx, "EC2 unreadable; ASG is configured: draining gracefully", "error", err)
		inst = instance.Instance{ID: act.InstanceID}
	case !ours:
		return nil
	}
	n, err := r.findNode(ctx, inst)
	switch {
	case err != nil:
		r.out.Action, r.out.Detail = ActionFailed, err.Error()
		return r.complete(ctx, act, r.h.onFailure(), nil)
	case n == nil:
		return r.complete(ctx, act, lifecycle.Continue, nil)
	}
	if inst.Down() {
		// the instance is already gone: nothing can be evicted gracefully
		if err := r.release(ctx, n, inst); err != nil {
			r.out.Action, r.out.Detail = ActionFailed, err.Error()
			return r.complete(ctx, act, r.h.onFailure(), n)
		}
		return r.complete(ctx, act, lifecycle.Continue, n)
	}

	stop := r.keepAlive(ctx, act)
	deadline := r.started.Add(r.h.cfg.DrainTimeout)
	done, err := r.drainNode(ctx, n, "terminate", deadline)
	stop()
	switch {
	case err != nil:
		r.out.Action, r.out.Detail = ActionFailed, err.Error()
		r.record(ctx, n, true, node.ReasonDrainFailed, "drain failed: %v", err)
		return r.complete(ctx, act, r.h.onFailure(), n)
	case done:
		return r.complete(ctx, act, lifecycle.Continue, n)
	case r.canContinue(deadline):
		if err := r.continueLater(ctx, act, n); err == nil {
			return nil
		} else {
			r.out.Detail = "could not continue: " + err.Error()
		}
	}
	r.record(ctx, n, true, node.ReasonDrainBlocked, "drain not finished after %s; pods still on the node: %s",
		r.h.now().Sub(r.started).Round(time.Second), strings.Join(r.out.Remaining, "; "))
	r.out.Action = ActionFailed
	if r.out.Detail == "" {
		r.out.Detail = "drain timed out; lifecycle action completed with " + r.h.cfg.LifecycleResultOnFailure
	}
	return r.complete(ctx, act, r.h.onFailure(), n)
}

// advisory handles spot warnings, rebalance recommendations and scheduled
// changes: cordon or drain the node, as configured; no hook to complete.
func (r *run) advisory(ctx context.Context, id string, action config.Action, timeout time.Duration) error {
	r.log = r.log.With("instance", id)
	if action == config.ActionIgnore {
		r.out.Action, r.out.Detail = ActionIgnored, "configured to ignore "+string(r.ev.Kind)
		return nil
	}
	inst, ours, err := r.ours(ctx, id)
	if err != nil || !ours {
		return err
	}
	n, err := r.findNode(ctx, inst)
	if n == nil || err != nil {
		return err
	}
	if inst.Down() {
		return r.release(ctx, n, inst)
	}
	if action == config.ActionCordon {
		made, err := node.Apply(ctx, r.h.c.Kube, n.Name, node.Mark{Reason: "cordon", Cordon: true}, r.h.now(), r.h.cfg.DryRun)
		if err != nil {
			return err
		}
		r.out.Action = ActionCordoned
		if made.Cordoned {
			r.record(ctx, n, false, node.ReasonCordoned, "cordoned on %s", r.ev.DetailType)
		}
		return nil
	}
	start := r.started
	if r.ev.Kind == event.KindSpotInterruption && !r.ev.Time.IsZero() && r.ev.Time.Before(start) {
		start = r.ev.Time // the 2-minute notice runs from the warning, not from our start
	}
	done, err := r.drainNode(ctx, n, string(r.ev.Kind), start.Add(timeout))
	if err != nil || done {
		return err
	}
	r.record(ctx, n, true, node.ReasonDrainBlocked, "drain not finished; pods still on the node: %s", strings.Join(r.out.Remaining, "; "))
	return nil
}

// drainNode marks the node, evicts its pods until deadline (or this
// invocation's budget) and waits for their volumes to be detached. It reports
// whether the node is fully drained; what remains is in r.out.Remaining.
func (r *run) drainNode(ctx context.Context, n *corev1.Node, reason string, deadline time.Time) (bool, error) {
	made, err := node.Apply(ctx, r.h.c.Kube, n.Name, node.Mark{Reason: reason, Cordon: true, ExcludeLB: true, Draining: true}, r.h.now(), r.h.cfg.DryRun)
	if err != nil {
		return false, err
	}
	if made != (node.Changes{Reason: reason, Since: made.Since}) {
		r.record(ctx, n, false, node.ReasonDrainStarted, "draining on %s (cordoned, NoSchedule taint %s, excluded from load balancers)", r.ev.DetailType, node.TaintDraining)
	}
	if budget := r.budget(ctx); budget.Before(deadline) {
		deadline = budget
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	res, err := r.drainer().Drain(dctx, n.Name)
	for _, p := range res.Evicted {
		r.out.Evicted = append(r.out.Evicted, p.String())
	}
	for _, p := range res.Remaining {
		r.out.Remaining = append(r.out.Remaining, p.String()+": "+p.Reason)
	}
	if err != nil {
		return false, fmt.Errorf("draining node %s: %w", n.Name, err)
	}
	r.out.Action = ActionDrained
	if r.h.cfg.DryRun {
		r.out.Detail = "dry run: would evict the pods listed as remaining"
		return true, nil
	}
	if !res.Done() {
		return false, nil
	}
	if len(res.Evicted) > 0 {
		r.record(ctx, n, false, node.ReasonDrainCompleted, "evicted %d pods: %s", len(res.Evicted), strings.Join(r.out.Evicted, ", "))
	}
	return true, r.waitVolumes(ctx, n, res.Claims, deadline)
}

// waitVolumes waits (bounded) until the VolumeAttachments of the drained
// pods' volumes are deleted, and those of any other volume on the node but
// the ones of pods that stay (DaemonSets, mirror pods): a continuation does
// not know the pods an earlier attempt evicted. Then the next node attaches
// the volumes at once.
func (r *run) waitVolumes(ctx context.Context, n *corev1.Node, claims []string, deadline time.Time) error {
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	if err != nil {
		return err
	}
	vas, err := volume.Attachments(ctx, r.h.c.Kube, n.Name, nil)
	if err != nil {
		return err
	}
	keep, err := r.claimsStaying(ctx, n.Name)
	if err != nil {
		return err
	}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && !keep[*pv] && !slices.Contains(pvs, *pv) {
			pvs = append(pvs, *pv)
		}
	}
	if len(pvs) == 0 {
		return nil
	}
	if limit := r.h.now().Add(r.h.cfg.VolumeDetachTimeout); limit.Before(deadline) {
		deadline = limit
	}
	if budget := r.budget(ctx); budget.Before(deadline) {
		deadline = budget
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	begin := r.h.now()
	left, err := volume.WaitDetached(wctx, r.h.c.Kube, n.Name, pvs)
	if err != nil {
		r.record(ctx, n, true, node.ReasonVolumesReleased, "volumes not detached in time: %s", strings.Join(left, ", "))
		return nil // the pods are gone; the attacher finishes on its own
	}
	r.record(ctx, n, false, node.ReasonVolumesReleased, "volumes detached (waited %s): %s", r.h.now().Sub(begin).Round(time.Millisecond), strings.Join(pvs, ", "))
	return nil
}

// claimsStaying returns the PVs used by pods that stay on the node.
func (r *run) claimsStaying(ctx context.Context, nodeName string) (map[string]bool, error) {
	var pods *corev1.PodList
	err := cluster.Retry(func() (err error) {
		pods, err = r.h.c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods of node %s: %w", nodeName, err)
	}
	var claims []string
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	pvs, err := volume.PersistentVolumes(ctx, r.h.c.Kube, claims)
	keep := map[string]bool{}
	for _, pv := range pvs {
		keep[pv] = true
	}
	return keep, err
}

// keepAlive heartbeats the hook while the drain runs, at half the hook's
// heartbeat timeout (read in the background: nothing waits for it).
func (r *run) keepAlive(ctx context.Context, act lifecycle.Action) (stop func()) {
	if r.h.cfg.DryRun {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan func(), 1)
	go func() {
		interval := lifecycle.HeartbeatInterval(ctx, r.h.c.ASG, act, time.Minute)
		stopped <- lifecycle.KeepAlive(ctx, r.h.c.ASG, act, interval, func(err error) {
			r.log.WarnContext(ctx, "heartbeat failed", "error", err)
		})
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			(<-stopped)()
		})
	}
}

// canContinue says whether a drain cut short by this invocation's deadline
// may go on in a fresh invocation.
func (r *run) canContinue(deadline time.Time) bool {
	return r.h.cfg.ContinueLongDrains && r.h.c.Lambda != nil && r.h.cfg.FunctionName != "" &&
		!r.h.cfg.DryRun && r.h.now().Before(deadline.Add(-time.Second))
}

// continueLater heartbeats the hook and invokes the function again,
// asynchronously, with the original event, the drain's start and the next
// attempt number. Should the continuation be lost, the hook's heartbeat
// timeout and default result are the backstop.
func (r *run) continueLater(ctx context.Context, act lifecycle.Action, n *corev1.Node) error {
	if err := lifecycle.Heartbeat(ctx, r.h.c.ASG, act); err != nil {
		if lifecycle.IsNotActive(err) {
			r.out.Action, r.out.Detail = ActionCompleted, "lifecycle action no longer active"
			return nil
		}
		return err
	}
	payload, err := event.NewContinuation(r.raw, r.started, r.attempt+1)
	if err != nil {
		return err
	}
	_, err = r.h.c.Lambda.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(r.h.cfg.FunctionName),
		InvocationType: types.InvocationTypeEvent,
		Payload:        payload,
	})
	if err != nil {
		return fmt.Errorf("invoking %s to continue: %w", r.h.cfg.FunctionName, err)
	}
	r.out.Action = ActionContinued
	r.out.Detail = fmt.Sprintf("drain continues in attempt %d", r.attempt+1)
	r.record(ctx, n, false, node.ReasonContinued, "drain running for %s continues in a new invocation (attempt %d); still on the node: %s",
		r.h.now().Sub(r.started).Round(time.Second), r.attempt+1, strings.Join(r.out.Remaining, "; "))
	return nil
}

// complete completes the lifecycle action with result (dry run: says so).
func (r *run) complete(ctx context.Context, act lifecycle.Action, result lifecycle.Result, n *corev1.Node) error {
	if r.out.Action == "" {
		r.out.Action = ActionCompleted
	}
	r.out.LifecycleResult = string(result)
	if r.h.cfg.DryRun {
		r.out.Detail = strings.TrimSpace(r.out.Detail + " (dry run: lifecycle action not completed)")
		return nil
	}
	// a context of its own: the margin kept from the deadline is for this call
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	completed, err := lifecycle.Complete(cctx, r.h.c.ASG, act, result)
	if err != nil {
		return err
	}
	if !completed {
		r.out.Detail = strings.TrimSpace(r.out.Detail + " (lifecycle action was no longer active)")
	}
	if n != nil {
		r.record(cctx, n, result != lifecycle.Continue, node.ReasonLifecycleComplete, "lifecycle action %s/%s completed with %s", act.ASG, act.Hook, result)
	}
	return nil
}

// launch completes the launch hook once the instance's node has joined and is
// Ready, or with the failure result at the deadline.
func (r *run) launch(ctx context.Context) error {
	la := r.ev.Lifecycle
	act := lifecycle.Action{ASG: la.AutoScalingGroupName, Hook: la.HookName, Token: la.Token, InstanceID: la.InstanceID}
	r.log = r.log.With("asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID)
	if !r.h.cfg.AllowsASG(act.ASG) {
		r.out.Action, r.out.Detail = ActionIgnored, "ASG "+act.ASG+" is not in ASG_NAMES"
		return nil
	}
	inst, ours, err := r.ours(ctx, act.InstanceID)
	if err != nil || !ours {
		return err
	}
	stop := r.keepAlive(ctx, act) // node registration can outlast a short heartbeat timeout
	wctx, cancel := context.WithDeadline(ctx, r.budget(ctx))
	defer cancel()
	var joined *corev1.Node
	err = wait.PollUntilContextCancel(wctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := node.Find(ctx, r.h.c.Kube, inst.PrivateDNSName, inst.ID)
		if err != nil {
			return false, nil
		}
		joined = n
		return node.Ready(n), nil
	})
	stop()
	if err != nil {
		r.out.Action, r.out.Detail = ActionFailed, "node did not become Ready before the deadline"
		return r.complete(ctx, act, r.h.onFailure(), joined)
	}
	r.out.Node = joined.Name
	r.out.Action = ActionNodeJoined
	return r.complete(ctx, act, lifecycle.Continue, joined)
}
