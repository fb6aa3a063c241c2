package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/node"
)

// The invariants: what must never happen, whatever the day.
const (
	I1 = iota + 1
	I2
	I3
	I4
	I5
	I6
	I7
	I8
	I9
	I10
	I11
	I12
	H1
	H2
	H3
	H4
	H5
	H6
	P1
	P2
	P3
	P4
	P5
	numInvariants = P5
)

// Names names each invariant.
var Names = [numInvariants + 1]string{"",
	"I1 a terminate hook is completed only with no pod left running on the node, the node absent, or DRAIN_TIMEOUT passed",
	"I2 only hooks that are ours are completed or heartbeated, each at most once",
	"I3 no hook of ours times out once an invocation about it began",
	"I4 nothing forced while EC2 says running, the kubelet runs, or the instance hibernated",
	"I5 no pod of a PDB deleted (not evicted) on a live node beyond its budget",
	"I6 no node of a skipped owner touched",
	"I7 every mark is lifted from a node whose instance keeps running",
	"I8 invocations about one instance bounded (no loop without a wait)",
	"I9 no call after the invocation's deadline",
	"I10 a terminated instance's ReadWriteOnce volumes released within 15 minutes",
	"I11 no invocation waits on a node's pods that are all gone: it completes the terminate hook or ends within VOLUME_DETACH_TIMEOUT + 2 minutes",
	"I12 no pod is given up on after an eviction's 409 while it is still there: once its PDB allows a disruption for a minute, it is evicted again before its node's terminate hook is completed",
	"H1 no hook of ours deleted or rewritten (its transition, default result or owner), and no action of ours completed by a deletion, while an instance waits under it undrained; an uninstall's deletion only if it reports each drain it cut",
	"H2 another tool's hook, and every hook no deployment put, keeps its settings and NotificationMetadata byte for byte",
	"H3 once deployments and tags are still, within one sweep every tagged group of this cluster carries exactly its hooks, and no group never selected carries one of ours",
	"H4 after the last deployment is removed, no hook of ours, nor a mark naming a removed deployment, remains",
	"H5 every action of ours pending on a transition is heartbeated until it is completed, siblings included: none times out while the function holds the instance",
	"H6 no put that Auto Scaling would refuse for its limits (metadata over 1,023 characters, heartbeat timeout outside 30-7,200 s, 50 hooks a group)",
	"P1 with POD_POLICY=honor, no pod that asks not to be disrupted is evicted on a voluntary drain (its instance in service, no terminate action of ours pending)",
	"P2 with POD_POLICY=honor, a forced drain evicts such a pod of a live node no earlier than its deadline (DRAIN_TIMEOUT or the group's, from the terminate action's start) less its grace period and 3 s",
	"P3 the drain's Node conditions are written only with NODE_CONDITIONS, and none is left on a node whose marks were lifted",
	"P4 with LB_DRAIN_WAIT, no pod of a live node is evicted before the wait from its exclusion from load balancers ends, unless the drain's deadline comes first",
	"P5 a group policy tag with a bad value never fails an event",
}

// releaseBound is I10's bound: events may be lost (the sweep, every 5
// minutes, finds what they missed), late, or fail and be retried.
const releaseBound = 15 * time.Minute

// Violation is one invariant broken.
type Violation struct {
	Inv  int
	At   time.Duration
	What string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %.3fs: %s", strings.SplitN(Names[v.Inv], " ", 2)[0], v.At.Seconds(), v.What)
}

// Invariants checks a world's invariants and counts the checks.
type Invariants struct {
	w          *World
	mu         sync.Mutex
	Checks     [numInvariants + 1]uint64
	Violations []Violation
	starts     map[string][]time.Duration
	looped     map[string]bool
}

func newInvariants() *Invariants {
	return &Invariants{starts: map[string][]time.Duration{}, looped: map[string]bool{}}
}

func (v *Invariants) check(i int) {
	v.mu.Lock()
	v.Checks[i]++
	v.mu.Unlock()
}

func (v *Invariants) violate(i int, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	v.mu.Lock()
	v.Violations = append(v.Violations, Violation{i, v.w.now(), what})
	v.mu.Unlock()
	v.w.tracef("VIOLATION %s: %s", strings.SplitN(Names[i], " ", 2)[0], what)
}

// started: an invocation began (I8; I3's "an invocation about it began").
func (v *Invariants) started(inv *invocation) {
	if inv.about == "sweep" || inv.about == "sweep-b" || inv.about == "deploy" {
		return
	}
	v.check(I8)
	now := v.w.now()
	v.mu.Lock()
	recent := []time.Duration{now}
	for _, t := range v.starts[inv.about] {
		if now-t < time.Minute {
			recent = append(recent, t)
		}
	}
	v.starts[inv.about] = recent
	loop := len(recent) > 10 && !v.looped[inv.about]
	if loop {
		v.looped[inv.about] = true
	}
	v.mu.Unlock()
	if loop {
		v.violate(I8, "%d invocations about %s within a minute", len(recent), inv.about)
	}
}

// touch marks the active actions an invocation is about (its event's, a
// continuation or a retry of it) as taken by the function, once it wrote
// something (it claimed the instance or marked its node).
func (v *Invariants) touch(inv *invocation) {
	a := v.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, m := a.find(inv.about); m != nil {
		for _, ac := range m.actions {
			if !ac.done && strings.HasPrefix(inv.id, "ev:hook/"+ac.token+"#") {
				ac.touched = true
			}
		}
	}
}

// continued: an invocation handed its work over.
func (v *Invariants) continued(_ *invocation, next string) {
	v.check(I8)
	if n := strings.Count(next, ">c"); n > v.w.lambda.cfg.MaxContinuations+1 {
		v.violate(I8, "%s is continuation %d of one drain (MAX_CONTINUATIONS %d)", next, n, v.w.lambda.cfg.MaxContinuations)
	}
}

// lookedFresh is how old the function's last list of a node's pods may be
// when it first tries to complete the node's terminate hook (I1).
const lookedFresh = time.Second

// completing: the function completes ac with result (I1, I2).
func (v *Invariants) completing(inv *invocation, ac *action, result string) {
	v.check(I2)
	if !ac.hook.ours {
		v.violate(I2, "%s completed %s's hook %s of %s", inv.id, "another tool", ac.hook.name, ac.instance)
		return
	}
	if ac.hook.transition != "autoscaling:EC2_INSTANCE_TERMINATING" {
		return
	}
	v.givenUp(inv, ac)
	v.check(I1)
	n := v.w.kube.nodeByID(ac.instance)
	if n == nil || n.skipped || v.w.kube.getNode(n.name) == nil || !n.alive {
		return // no node, another owner's, gone, or nothing runs there
	}
	if v.w.now()-ac.start >= v.w.groupTimeout(ac.group)-time.Second { // (its deadline counts from the event's time; a group's tag may set it)
		return
	}
	if _, c, err := event.ParseInvocation(inv.payload); err == nil && c != nil && c.Attempt > v.w.lambda.cfg.MaxContinuations {
		return // the drain's last invocation: MAX_CONTINUATIONS ends it before DRAIN_TIMEOUT
	}
	// a pod bound after the invocation last listed the node's pods, that
	// list made within lookedFresh of its first try to complete, is one no
	// function could have seen: rule 15 asks for the list at the moment of
	// completing, not for the impossible
	looked, ok := inv.lastLooked(n.name)
	fresh := ok && inv.firstCompletion()-looked <= lookedFresh
	left := slices.DeleteFunc(v.w.kube.drained(n.name), func(key string) bool {
		return fresh && v.w.kube.boundWhen(key) > looked
	})
	if len(left) > 0 {
		v.violate(I1, "%s completed %s of %s with %s after %s, pods still on %s: %s", inv.id, ac.hook.name, ac.instance, result,
			(v.w.now() - ac.start).Round(time.Millisecond), n.name, strings.Join(left, ", "))
	}
}

// givenUp checks, as the function completes the terminate hook ac, that no
// pod still on its node had its last eviction answered 409 by a PDB's
// contention (the pod there all along) and was not asked again though its
// PDB allowed a disruption for a minute since (I12).
func (v *Invariants) givenUp(inv *invocation, ac *action) {
	n := v.w.kube.nodeByID(ac.instance)
	if n == nil {
		return
	}
	v.check(I12)
	for _, p := range v.w.kube.pods() {
		if p.Spec.NodeName != n.name || p.DeletionTimestamp != nil {
			continue
		}
		if at, ok := v.w.kube.contendedAt(p.UID); ok {
			v.violate(I12, "%s completed %s of %s with %s: %s/%s still on %s, not evicted again since its eviction's 409 at %.3fs, though its PDB allowed it",
				inv.id, ac.hook.name, ac.instance, "its hook", p.Namespace, p.Name, n.name, at.Seconds())
		}
	}
}

// heartbeat: the function records a heartbeat of ac (I2).
func (v *Invariants) heartbeat(inv *invocation, ac *action) {
	v.check(I2)
	ac.touched = true // the function has it (the sweep's hooks too)
	if !ac.hook.ours {
		v.violate(I2, "%s heartbeated %s's hook %s of %s", inv.id, "another tool", ac.hook.name, ac.instance)
	}
}

// expired: ac timed out (I3, H5).
func (v *Invariants) expired(ac *action) {
	if v.w.lambda.gone(mainOwner) {
		return // uninstalled: the drains it cut end with their hooks (H1), an operator's sibling outlives it
	}
	if ac.hook.ours && ac.touched {
		v.violate(I3, "hook %s of %s timed out (started %s ago) though the function took it", ac.hook.name, ac.instance, (v.w.now() - ac.start).Round(time.Second))
	}
	v.siblingExpired(ac)
}

// afterDeadline: a call of a killed invocation (I9).
func (v *Invariants) afterDeadline(inv *invocation, what string) {
	v.check(I9)
	v.violate(I9, "%s called %s after its deadline", inv.id, what)
}

// evicted: the function's eviction of p was accepted (I6; I5 holds by the
// Eviction API, which spends the PDB's budget: counted as checked).
func (v *Invariants) evicted(inv *invocation, p *corev1.Pod) {
	v.check(I5)
	v.check(I6)
	if n := v.w.kube.node(p.Spec.NodeName); n != nil && n.skipped {
		v.violate(I6, "%s evicted %s from %s, a skipped owner's node", inv.id, p.Name, n.name)
	}
	v.policyEvicted(inv, p)
}

// releasable: a managed node group's node whose instance is down is
// released as any node is (docs/operations.md, "Nodes another tool owns").
func (v *Invariants) releasable(n *simNode) bool {
	s := v.w.ec2.truth(n.id)
	return v.w.Plan.SkippedOwner == "managed-nodegroup" && s != "running" && s != "pending"
}

// unmarking: an update of a node that carries the function's marks (a
// managed node group's node released while down, running again).
func (v *Invariants) unmarking(a k8stesting.Action, before runtime.Object) bool {
	n, ok := before.(*corev1.Node)
	if !ok || a.GetVerb() != "update" || v.w.Plan.SkippedOwner != "managed-nodegroup" {
		return false
	}
	_, marked := node.Marks(n)
	return marked
}

// nodeOf is the node a write concerns ("": none).
func nodeOf(a k8stesting.Action, before runtime.Object) string {
	switch o := before.(type) {
	case *corev1.Pod:
		return o.Spec.NodeName
	case *storagev1.VolumeAttachment:
		return o.Spec.NodeName
	case *corev1.Node:
		return o.Name
	}
	if a.GetResource().Resource == "nodes" {
		if u, ok := a.(k8stesting.UpdateAction); ok {
			if n, ok := u.GetObject().(*corev1.Node); ok {
				return n.Name
			}
		}
	}
	return ""
}

// beforeWrite checks a write of the function before it is done (I4, I5, I6).
func (v *Invariants) beforeWrite(inv *invocation, a k8stesting.Action, before runtime.Object) error {
	res := a.GetResource().Resource
	if res == "events" || res == "leases" {
		return nil
	}
	on := nodeOf(a, before)
	n := v.w.kube.node(on)
	v.check(I6)
	if n != nil && n.skipped && !v.releasable(n) && !v.unmarking(a, before) {
		v.violate(I6, "%s: %s on %s, a skipped owner's node", inv.id, describeAction(a), on)
	}
	if a.GetVerb() != "delete" {
		return nil
	}
	forced := res == "volumeattachments" || res == "nodes"
	if res == "pods" {
		d := a.(k8stesting.DeleteActionImpl)
		forced = d.DeleteOptions.GracePeriodSeconds != nil && *d.DeleteOptions.GracePeriodSeconds == 0
		v.check(I5)
		if p, ok := before.(*corev1.Pod); ok && n != nil && n.alive && healthy(*p) {
			app := p.Labels["app"]
			if least, covered := v.w.kube.pdbMin[app]; covered {
				var up int32
				for _, q := range v.w.kube.pods() {
					if q.Labels["app"] == app && healthy(q) {
						up++
					}
				}
				if up-1 < least {
					v.violate(I5, "%s deleted %s (not an eviction) on live %s: %d of %s healthy, at least %d wanted", inv.id, p.Name, on, up-1, app, least)
				}
			}
		}
	}
	if forced && n != nil {
		v.forcing(inv, describeAction(a), n)
	}
	return nil
}

// consistency is how long a change takes to be seen: EC2's reads and the
// function's re-reads before a forced step are that far behind at best, so
// a step within it of the change is no evidence of a missing re-read.
const consistency = 2 * time.Second

// forcing checks a forced step on node n (I4).
func (v *Invariants) forcing(inv *invocation, what string, n *simNode) {
	v.check(I4)
	state, now := v.w.ec2.truth(n.id), v.w.now()
	switch {
	case (state == "running" || state == "pending") && now-v.w.ec2.since(n.id) >= consistency:
		v.violate(I4, "%s: %s while EC2 says %s is %s", inv.id, what, n.id, state)
	case n.alive && now-n.bornAt >= consistency:
		v.violate(I4, "%s: %s while the kubelet of %s runs", inv.id, what, n.name)
	case v.w.ec2.hibernated(n.id):
		v.violate(I4, "%s: %s while %s is hibernated (%s)", inv.id, what, n.id, state)
	}
}

// afterWrite checks a write once done: the out-of-service taint (I4).
func (v *Invariants) afterWrite(inv *invocation, a k8stesting.Action, before runtime.Object) {
	if a.GetResource().Resource != "nodes" || (a.GetVerb() != "update" && a.GetVerb() != "patch") {
		return
	}
	was, _ := before.(*corev1.Node)
	if was == nil {
		return
	}
	now := v.w.kube.getNode(was.Name)
	if now != nil && hasTaint(now, corev1.TaintNodeOutOfService) && !hasTaint(was, corev1.TaintNodeOutOfService) {
		if n := v.w.kube.node(was.Name); n != nil {
			v.forcing(inv, "out-of-service taint on "+was.Name, n)
		}
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// terminated: EC2 reports id terminated: its volumes must be released
// within releaseBound (I10).
func (v *Invariants) terminated(id string) {
	n := v.w.kube.nodeByID(id)
	if n == nil || n.skipped {
		return
	}
	v.w.after(releaseBound, func() { v.released(n) })
}

func (v *Invariants) released(n *simNode) {
	if v.w.lambda.gone(mainOwner) {
		return // uninstalled meanwhile: no function releases them (H1 holds the uninstall)
	}
	v.check(I10)
	for _, va := range v.w.kube.vas() {
		if va.Spec.NodeName == n.name {
			v.violate(I10, "%s of terminated %s (%s) still attached %s after", va.Name, n.id, n.name, releaseBound)
		}
	}
}

// movesOn is I11's bound past VOLUME_DETACH_TIMEOUT (the drain's last
// wait, on the volumes): the re-list of rule 15, an attachments read, the
// completion, each retried through the API's faults. A drain whose wait
// missed its pods' going (a watch bug) waits out its deadline instead:
// DRAIN_TIMEOUT or the hand-over, up to 15 minutes.
const movesOn = 2 * time.Minute

// emptied: the last pod a drain must see go left node n (I11). Every
// invocation about its instance that runs now must, within the bound, have
// ended (completed, handed over, failed) or have seen the hook completed.
func (v *Invariants) emptied(n *simNode) {
	if n.skipped {
		return
	}
	l := v.w.lambda
	var running []*invocation
	l.mu.Lock()
	for _, inv := range l.all {
		inv.mu.Lock()
		if inv.about == n.id && !inv.ended && !inv.dead {
			running = append(running, inv)
		}
		inv.mu.Unlock()
	}
	l.mu.Unlock()
	if len(running) == 0 {
		return
	}
	v.check(I11)
	at, bound := v.w.now(), v.w.kube.boundTo(n.name)
	limit := l.cfg.VolumeDetachTimeout + movesOn
	v.w.after(limit, func() { v.movedOn(n, running, at, bound, limit) })
}

// movedOn checks, limit after n emptied at at, the invocations then running.
func (v *Invariants) movedOn(n *simNode, running []*invocation, at time.Duration, bound int, limit time.Duration) {
	if v.w.kube.boundTo(n.name) != bound {
		return // a pod came since: the drain has one to evict again
	}
	now := v.w.now()
	for _, o := range v.w.Plan.Outages {
		if o.From < now && o.To > at {
			return // the apiserver was down meanwhile: every step waited on it
		}
	}
	a := v.w.asg
	a.mu.Lock()
	pending := false
	if _, m := a.find(n.id); m != nil {
		for _, ac := range m.actions {
			pending = pending || (!ac.done && ac.hook.ours && ac.hook.transition == "autoscaling:EC2_INSTANCE_TERMINATING")
		}
	}
	a.mu.Unlock()
	if !pending {
		return
	}
	for _, inv := range running {
		inv.mu.Lock()
		still := !inv.ended && !inv.dead
		inv.mu.Unlock()
		if still {
			v.violate(I11, "%s still runs %s after the last pod left %s (at %.3fs), its terminate hook not completed", inv.id, limit, n.name, at.Seconds())
		}
	}
}

// final checks what must hold once the day is over (I7).
func (v *Invariants) final() {
	v.finalHooks()
	if v.w.lambda.gone(mainOwner) {
		return // uninstalled: a node's marks outlive the function (docs/deploy.md asks the drains to end first)
	}
	v.finalConditions()
	k := v.w.kube
	for _, n := range k.alive() {
		if v.w.ec2.truth(n.id) != "running" {
			continue
		}
		v.w.asg.mu.Lock()
		_, m := v.w.asg.find(n.id)
		leaving := m == nil || m.state != "InService"
		v.w.asg.mu.Unlock()
		if leaving {
			continue
		}
		obj := k.getNode(n.name)
		if obj == nil {
			continue
		}
		v.check(I7)
		var held []string
		if s, ok := node.Marks(obj); ok {
			for c := range s.Causes {
				held = append(held, string(c))
			}
		}
		for _, t := range obj.Spec.Taints {
			if t.Key == node.TaintDraining || t.Key == node.TaintOutOfService {
				held = append(held, "taint "+t.Key)
			}
		}
		if len(held) > 0 {
			slices.Sort(held)
			v.violate(I7, "%s (%s) runs and is in service, yet marked: %s", n.name, n.id, strings.Join(held, ", "))
		}
	}
}
