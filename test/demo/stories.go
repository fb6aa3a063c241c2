package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/test/harness"
)

// scaleIn: an ASG scales in; the terminate hook's event drains the node.
func scaleIn(ctx context.Context, d *demo) error {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	s, err := d.newScene(ctx, "scale-in", 3)
	if err != nil {
		return err
	}
	target := s.insts[0]
	old := target.PrivateDNSName
	web := s.workload("web", 4)
	d.scene = s
	var pv string
	err = d.onlyOn(ctx, s, target, func() error {
		if _, err := d.env.Deployment(ctx, web, false); err != nil {
			return err
		}
		if _, err := d.env.PDB(ctx, web, 1, 0); err != nil {
			return err
		}
		if pv, err = d.env.StatefulSet(ctx, s.workload("db", 1), harness.Zone); err != nil {
			return err
		}
		d.pv = pv
		if _, err := d.env.DaemonSet(ctx, s.workload("agent", 0)); err != nil {
			return err
		}
		d.tl.printf("created Deployment web (4 replicas), its PDB, StatefulSet db (RWO volume), DaemonSet agent; other nodes cordoned")
		if _, err := d.env.WaitPodsRunning(ctx, s.name, "app=web", 4, time.Minute); err != nil {
			return err
		}
		_, err := d.env.WaitPodsRunning(ctx, s.name, "app=db", 1, time.Minute)
		return err
	})
	if err != nil {
		return fmt.Errorf("building the scene: %w", err)
	}
	if _, err := d.env.WaitPodsRunning(ctx, s.name, "app=agent", len(s.insts), time.Minute); err != nil {
		return fmt.Errorf("building the scene: %w", err)
	}
	if err := d.placement(ctx, s, target, pv); err != nil {
		return err
	}
	d.tl.printf("PodDisruptionBudget web: maxUnavailable 1 (of 4 replicas)")

	o, err := observe(ctx, d.env.Client, d.tl, s.name, s.nodes(), []string{pv}, "web", 4)
	if err != nil {
		return err
	}
	defer o.stop()
	rt, err := d.function(ctx)
	if err != nil {
		return err
	}
	defer rt.Stop()
	token := newToken()
	payload, err := d.env.StartTerminating(ctx, s.name, target, token)
	if err != nil {
		return err
	}
	d.tl.printf("moto: ASG %s put %s in Terminating:Wait (hook %s, token %s)", s.name, target.ID, harness.TerminateHook, token)
	flushCalls := d.printLifecycleCalls(ctx, target.ID)
	sent := time.Now()
	d.tl.printf("hook event sent: EC2 Instance-terminate Lifecycle Action for %s", target.ID)
	out, err := harness.Invoke(ctx, rt, payload)
	flushCalls() // moto's record up to now, before the function's answer
	if err != nil {
		d.failf("the function returned an error: %v", err)
	} else {
		d.tl.printf("function returned: %s", describe(out))
		if out.Action != handler.ActionDrained || out.Node != old {
			d.failf("the function did not drain %s: %s", old, describe(out))
		}
	}
	moved, _, err := d.waitMoved(ctx, s.name, "db-0", pv, old, time.Minute)
	if err != nil {
		d.failf("%v", err)
	} else {
		d.tl.printf("db-0 running on %s with its volume attached", short(moved))
	}
	flushCalls()

	// the PDB's guarantee, as observed
	low := o.minimum()
	d.tl.printf("web: at least %d of 4 pods ready at every moment of the drain (PDB allows 3)", low)
	d.note = fmt.Sprintf("min web ready %d/4", low)
	if low < 3 {
		d.failf("PDB violated: only %d web pods ready at one point (maxUnavailable 1 of 4)", low)
	}
	// the lifecycle action, from moto's record
	calls, err := d.env.AWS.LifecycleCalls(ctx)
	if err != nil {
		return errors.Join(append(d.failures, fmt.Errorf("reading moto's record: %w", err))...)
	}
	var done []string
	for _, c := range calls {
		if c.Operation == "CompleteLifecycleAction" && c.Params["InstanceId"] == target.ID && c.OK() {
			done = append(done, c.Params["LifecycleActionResult"])
			d.note = fmt.Sprintf("event → hook completed %.1fs, %s", c.Time.Sub(sent).Seconds(), d.note)
			if c.Params["LifecycleActionToken"] != token {
				d.failf("lifecycle action completed with token %s, the event's was %s", c.Params["LifecycleActionToken"], token)
			}
			if gone, ok := o.detachedAt(old, pv); !ok || gone.After(c.Time) {
				d.failf("lifecycle action completed before the VolumeAttachment of %s on %s was gone", pv, short(old))
			}
		}
	}
	switch {
	case len(done) == 0:
		d.failf("lifecycle action not completed: moto recorded no successful CompleteLifecycleAction for %s", target.ID)
	case len(done) > 1 || done[0] != "CONTINUE":
		d.failf("lifecycle action completed %d times with %v, want once with CONTINUE", len(done), done)
	}
	// what stays on the node
	left, err := d.podsOn(ctx, s.name, old)
	if err != nil {
		return err
	}
	d.tl.printf("left on %s: %s", short(old), strings.Join(left, ", "))
	if stayed := slices.DeleteFunc(left, func(p string) bool { return strings.HasPrefix(p, "agent-") }); len(stayed) > 0 {
		d.failf("not drained: %s still on %s", strings.Join(stayed, ", "), short(old))
	}
	return errors.Join(d.failures...)
}

// abruptStop: an instance stops under a StatefulSet pod with an RWO volume.
func abruptStop(ctx context.Context, d *demo) error {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	s, err := d.newScene(ctx, "abrupt", 2)
	if err != nil {
		return err
	}
	target := s.insts[0]
	old := target.PrivateDNSName
	d.scene = s
	var pv string
	err = d.onlyOn(ctx, s, target, func() error {
		// not "db": the harness names the CSI volume handle vol-<name>, so a
		// second "db" would be story 1's volume, attached elsewhere
		if pv, err = d.env.StatefulSet(ctx, s.workload("pg", 1), harness.Zone); err != nil {
			return err
		}
		d.pv = pv
		d.tl.printf("created StatefulSet pg (RWO volume); other node cordoned")
		_, err := d.env.WaitPodsRunning(ctx, s.name, "app=pg", 1, time.Minute)
		return err
	})
	if err != nil {
		return fmt.Errorf("building the scene: %w", err)
	}
	if err := d.placement(ctx, s, target, pv); err != nil {
		return err
	}
	o, err := observe(ctx, d.env.Client, d.tl, s.name, s.nodes(), []string{pv}, "", 0)
	if err != nil {
		return err
	}
	defer o.stop()
	rt, err := d.function(ctx)
	if err != nil {
		return err
	}
	defer rt.Stop()

	// a real stop: the kubelet dies as the instance shuts down, and EC2
	// reports it stopped tens of seconds later, by when the kubelet's Lease
	// is stale; that is the guard's evidence, so the demo waits as EC2 would
	if err := d.env.StopKubelet(ctx, old); err != nil {
		return fmt.Errorf("stopping the kubelet of %s: %w", old, err)
	}
	d.tl.printf("kubelet of %s stopped (kwok no longer holds its Lease); the instance is shutting down", short(old))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(16 * time.Second):
	}
	if err := d.env.SetInstanceState(ctx, target.ID, "stopped"); err != nil {
		return err
	}
	state, err := d.instanceState(ctx, target.ID)
	if err != nil {
		return err
	}
	d.tl.printf("EC2 (moto): StopInstances %s; DescribeInstances says %s (the kubelet's Lease is 16 s old)", target.ID, state)
	payload, err := harness.StateChangeEvent(target.ID, "stopped")
	if err != nil {
		return err
	}
	sent := time.Now()
	d.tl.printf("state-change event sent: %s stopped", target.ID)
	out, err := harness.Invoke(ctx, rt, payload)
	if err != nil {
		d.failf("the function returned an error: %v", err)
	} else {
		d.tl.printf("function returned: %s", describe(out))
		if out.Action != handler.ActionReleased {
			d.failf("the function did not release %s: %s", short(old), describe(out))
		}
	}
	moved, at, err := d.waitMoved(ctx, s.name, "pg-0", pv, old, 2*time.Minute)
	if err != nil {
		d.failf("%v", err)
		d.note = "no failover"
	} else {
		failover := at.Sub(sent).Round(100 * time.Millisecond)
		d.tl.at(at, "pg-0 running on %s with its volume attached: failover %s after the event", short(moved), failover)
		d.note = "event → pod running with its volume " + failover.String()
	}
	return errors.Join(d.failures...)
}

// describe summarises the function's response.
func describe(o handler.Outcome) string {
	s := fmt.Sprintf("action=%s node=%s", o.Action, short(o.Node))
	if o.Detail != "" {
		s += fmt.Sprintf(" detail=%q", o.Detail)
	}
	if len(o.Evicted) > 0 {
		s += fmt.Sprintf(" evicted=%d", len(o.Evicted))
	}
	if len(o.Remaining) > 0 {
		s += fmt.Sprintf(" remaining=%v", o.Remaining)
	}
	if len(o.PodsDeleted) > 0 {
		s += fmt.Sprintf(" podsDeleted=%v", o.PodsDeleted)
	}
	if len(o.AttachmentsDeleted) > 0 {
		vas := make([]string, len(o.AttachmentsDeleted))
		for i, va := range o.AttachmentsDeleted {
			vas[i] = shortVA(va)
		}
		s += fmt.Sprintf(" attachmentsDeleted=%v", vas)
	}
	if o.LifecycleResult != "" {
		s += " lifecycleResult=" + o.LifecycleResult
	}
	return s + fmt.Sprintf(" (%dms)", o.DurationMS)
}

// placement prints where the scene's pods and volume are before the event.
func (d *demo) placement(ctx context.Context, s *scene, target harness.Instance, pv string) error {
	va, err := d.waitAttached(ctx, pv, target.PrivateDNSName, time.Minute)
	if err != nil {
		return fmt.Errorf("building the scene: %w", err)
	}
	pods, err := d.podsOn(ctx, s.name, target.PrivateDNSName)
	if err != nil {
		return err
	}
	d.tl.printf("target %s (%s) runs %s", short(target.PrivateDNSName), target.ID, strings.Join(pods, ", "))
	d.tl.printf("volume %s attached to %s (VolumeAttachment %s)", pv, short(target.PrivateDNSName), shortVA(va))
	return nil
}

func (d *demo) podsOn(ctx context.Context, ns, node string) ([]string, error) {
	list, err := d.env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names, nil
}

// picture describes the scene for a failure report: nodes and their events
// (node-drainer records its actions there), pods, the volume's
// VolumeAttachments, warnings.
func (d *demo) picture(ctx context.Context) string {
	s, pv := d.scene, d.pv
	if s == nil {
		return ""
	}
	var b strings.Builder
	for _, name := range s.nodes() {
		n, err := d.env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "node %s: %v\n", short(name), err)
			continue
		}
		var taints []string
		for _, t := range n.Spec.Taints {
			taints = append(taints, taint(t))
		}
		fmt.Fprintf(&b, "node %s: Ready=%s unschedulable=%v taints=%v\n", short(name), nodeReady(n), n.Spec.Unschedulable, taints)
		evs, err := d.env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name})
		if err == nil {
			for _, e := range evs.Items {
				fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
			}
		}
	}
	if pods, err := d.env.Client.CoreV1().Pods(s.name).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			deleting := ""
			if p.DeletionTimestamp != nil {
				deleting = " deleting"
			}
			if r := disruption(&p); r != "" {
				deleting += " disruption=" + r
			}
			fmt.Fprintf(&b, "pod %s: node=%s phase=%s ready=%v%s\n", p.Name, short(p.Spec.NodeName), p.Status.Phase, harness.PodReady(&p), deleting)
		}
	}
	if vas, err := d.env.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
		for _, va := range vas.Items {
			if vaPV(&va) == pv {
				fmt.Fprintf(&b, "VolumeAttachment %s: pv=%s node=%s attached=%v deleting=%v%s\n", shortVA(va.Name), pv,
					short(va.Spec.NodeName), va.Status.Attached, va.DeletionTimestamp != nil, attachError(va.Status.AttachError))
			}
		}
	}
	if evs, err := d.env.Client.CoreV1().Events(s.name).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s/%s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

func attachError(e *storagev1.VolumeError) string {
	if e == nil {
		return ""
	}
	return " attachError=" + e.Message
}
