package soak

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/node-drainer/node-drainer/internal/node"
	fp "github.com/node-drainer/node-drainer/test/harness/faultproxy"
	"github.com/node-drainer/node-drainer/test/harness/lambdart"
	"github.com/node-drainer/node-drainer/test/harness/moto"
)

// The invariants (test/sim/invariants.go), checked from outside:
//   I1 at each completion of a terminate hook of ours (moto's record): the
//      node's pods, as the watch saw them, all gone by then — unless its
//      kubelet was stopped, the Node gone, DRAIN_TIMEOUT passed, or the node
//      is the skipped owner's (as the simulation's I1);
//   I2 every lifecycle call Auto Scaling received from the function names
//      a hook of ours, and no action is completed twice;
//   I3 no action of ours times out (the soak plays the timeout from the
//      heartbeats moto received) once an invocation about it began;
//   I4 no forced step (a pod deleted with grace 0, a VolumeAttachment or a
//      Node deleted: the proxy's record; the out-of-service taint: the
//      Nodes' watch) while EC2 says running, the kubelet runs, or the
//      instance is hibernated (the states the soak set);
//   I5 no pod of a PDB deleted (not evicted) on a live node beyond its
//      budget (the proxy's record, the pods' watch);
//   I7 at the day's end, no mark on a Node whose instance runs in service
//      with its kubelet;
//   I8 at most 10 invocations about one instance within a minute (the
//      platform's record);
//   I9 no request of the function outside its invocations (the proxies'
//      records, the platform's);
//   I10 a terminated instance's VolumeAttachments gone within releaseBound.
// I6, I11 and I12 are not checked here (docs/testing.md says why).

// releaseBound is I10's bound on the soak's clock: the sweep comes every
// 50 s, the function's timeouts are divided by Compress.
const releaseBound = 3 * time.Minute

// consistency: a step within it of a change is no evidence of a stale read.
const consistency = 2 * time.Second

// poll looks at what happened since the last poll: the lifecycle calls,
// the actions' timeouts, the function's requests, the checks now due.
func (d *day) poll() {
	d.lifecycleCalls()
	d.expire()
	d.requests()
	now := time.Now()
	d.mu.Lock()
	var run []func()
	keep := d.due[:0]
	for _, c := range d.due {
		if c.at.Before(now) {
			run = append(run, c.f)
		} else {
			keep = append(keep, c)
		}
	}
	d.due = keep
	d.mu.Unlock()
	for _, f := range run {
		f()
	}
}

func (d *day) dueAt(t time.Time, f func()) {
	d.mu.Lock()
	d.due = append(d.due, dueCheck{t, f})
	d.mu.Unlock()
}

func (d *day) findAction(c moto.LifecycleCall) *action {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ac := range d.actions {
		if ac.hook != c.Params["LifecycleHookName"] {
			continue
		}
		if tok := c.Params["LifecycleActionToken"]; tok != "" && ac.token == tok {
			return ac
		}
		if tok := c.Params["LifecycleActionToken"]; tok == "" && ac.id == c.Params["InstanceId"] && !ac.done {
			return ac
		}
	}
	return nil
}

// lifecycleCalls checks the function's lifecycle calls (I2) and plays
// their effect: a completed action ends, a heartbeat extends it.
func (d *day) lifecycleCalls() {
	calls, err := d.env.AWS.LifecycleCalls(d.ctx)
	if err != nil {
		return
	}
	for i := d.seenCalls; i < len(calls); i++ {
		c := calls[i]
		d.mu.Lock()
		mine := d.mine[i]
		d.mu.Unlock()
		if g := c.Params["AutoScalingGroupName"]; (g != d.name && g != d.skippedGroup()) || mine {
			continue
		}
		hook := c.Params["LifecycleHookName"]
		d.check(2)
		if !d.ours(hook) {
			d.violate(2, "%s of %s's hook %s of %s (%s)", c.Operation, "another tool", hook, c.Params["InstanceId"], c.Outcome)
		}
		ac := d.findAction(c)
		if !c.OK() || ac == nil {
			continue
		}
		if c.Operation == "RecordLifecycleActionHeartbeat" {
			continue // the emulator restarts the action's timeout (expire)
		}
		d.mu.Lock()
		again := ac.done && ac.result != "instance gone" && ac.result != "abandoned"
		d.mu.Unlock()
		if again {
			d.violate(2, "%s of %s completed again", hook, ac.id)
			continue
		}
		result := c.Params["LifecycleActionResult"]
		d.tracef("function completes %s of %s with %s", hook, ac.id, result)
		d.actionDone(ac, result)
		if ac.terminate && ac.ours {
			d.dueAt(c.Time.Add(3*time.Second), func() { d.completedTerminate(ac, c.Time, result) })
		}
	}
	d.seenCalls = max(d.seenCalls, len(calls))
}

// completedTerminate checks I1 for a terminate hook of ours the function
// completed at t.
func (d *day) completedTerminate(ac *action, t time.Time, result string) {
	in := d.instance(ac.id)
	d.mu.Lock()
	k, _ := at(d.kubelet[in.PrivateDNSName], t)
	d.mu.Unlock()
	if d.groupOf(ac.id) != d.name {
		return // the skipped owner's node: not the function's to drain (I6 watches it)
	}
	d.check(1)
	if k.state != "up" || t.Sub(ac.start) >= d.cfg.DrainTimeout-time.Second {
		return
	}
	if d.obs.node(in.PrivateDNSName) == nil {
		return
	}
	// a pod bound within a second of the completion is one no list could
	// have seen (the simulation's lookedFresh); the watch is given 2 s
	left := d.obs.left(in.PrivateDNSName, t.Add(-time.Second), t.Add(2*time.Second))
	if len(left) > 0 {
		sort.Strings(left)
		d.violate(1, "the function completed %s of %s with %s after %s, pods still on %s: %s", ac.hook, ac.id, result,
			t.Sub(ac.start).Round(100*time.Millisecond), in.PrivateDNSName, strings.Join(left, ", "))
	}
}

// expire plays what Auto Scaling's heartbeat timeout did to the actions
// still waiting (I3 when the function had taken one): the emulator ends an
// action at its hook's timeout from its start or its last heartbeat, with
// the hook's default result (moto.EndedActions), as Auto Scaling does.
func (d *day) expire() {
	ended, err := d.env.AWS.EndedActions(d.ctx)
	if err != nil {
		return
	}
	now := time.Now()
	type expiry struct {
		ac     *action
		result string
	}
	var due []expiry
	d.mu.Lock()
	for _, e := range ended {
		if e.Cause != moto.EndTimeout && e.Cause != moto.EndGlobalTimeout {
			continue
		}
		for _, ac := range d.actions {
			if ac.token == e.Token && !ac.done && !ac.expired {
				ac.expired = true
				due = append(due, expiry{ac, e.Result})
			}
		}
	}
	d.mu.Unlock()
	for _, x := range due {
		ac := x.ac
		if ac.ours {
			d.check(3)
			if inv, ok := d.invocationAbout(ac.token, ac.start); ok {
				d.violate(3, "%s of %s timed out (started %s ago) though invocation %s about it began at %.1fs", ac.hook, ac.id,
					now.Sub(ac.start).Round(time.Second), inv.RequestID, d.since(inv.Start).Seconds())
			}
		}
		d.tracef("world: Auto Scaling's timeout ends %s of %s with %s", ac.hook, ac.id, x.result)
		d.actionDone(ac, x.result)
	}
}

// invocationAbout is the first invocation that began after from whose
// payload names what.
func (d *day) invocationAbout(what string, from time.Time) (lambdart.Invocation, bool) {
	for _, inv := range d.rt.Invocations() {
		if !inv.Start.IsZero() && inv.Start.After(from) && strings.Contains(string(inv.Payload), what) {
			return inv, true
		}
	}
	return lambdart.Invocation{}, false
}

var (
	podPath  = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/pods/([^/]+)$`)
	vaPath   = regexp.MustCompile(`^/apis/storage\.k8s\.io/v1/volumeattachments/([^/]+)$`)
	nodePath = regexp.MustCompile(`^/api/v1/nodes/([^/]+)$`)
)

// deleteOptions are the grace period and the UID precondition of a
// deletion or an eviction as the function sent them (JSON or protobuf).
func deleteOptions(r fp.Request) (*int64, string) {
	var o *metav1.DeleteOptions
	if obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(r.Body, nil, nil); err == nil {
		switch v := obj.(type) {
		case *metav1.DeleteOptions:
			o = v
		case *policyv1.Eviction:
			o = v.DeleteOptions
		}
	} else {
		var v metav1.DeleteOptions
		if json.Unmarshal(r.Body, &v) == nil {
			o = &v
		}
	}
	if o == nil {
		return nil, ""
	}
	uid := ""
	if o.Preconditions != nil && o.Preconditions.UID != nil {
		uid = string(*o.Preconditions.UID)
	}
	return o.GracePeriodSeconds, uid
}

// forwarded says whether the proxy let a request reach the apiserver.
func forwarded(r fp.Request) bool {
	switch r.Fault {
	case "", fp.Pass, fp.Latency:
		return r.Status < 300
	case fp.DropAfter:
		return true
	}
	return false
}

// requests checks the function's deletions as they reached the apiserver
// (I4 for the forced ones, I5 for a pod's).
func (d *day) requests() {
	reqs := d.api.Requests()
	for _, r := range reqs[d.seenAPI:] {
		if r.Method == "GET" || !forwarded(r) {
			continue
		}
		if on := d.writeNode(r); on != "" {
			d.owned(r, on)
		}
		if r.Method != "DELETE" {
			continue
		}
		if m := podPath.FindStringSubmatch(r.Path); m != nil {
			grace, uid := deleteOptions(r)
			s, ok := d.obs.podNode(m[1]+"/"+m[2], uid, r.Time)
			if !ok || s.node == "" {
				continue
			}
			if grace != nil && *grace == 0 {
				d.forced(r.Time, "pod "+s.key+" deleted with grace 0", s.node)
			}
			d.podDeleted(r.Time, s)
		} else if m := vaPath.FindStringSubmatch(r.Path); m != nil {
			if n := d.obs.vaNode(m[1]); n != "" {
				d.forced(r.Time, "VolumeAttachment "+m[1]+" deleted", n)
			}
		} else if m := nodePath.FindStringSubmatch(r.Path); m != nil {
			d.forced(r.Time, "Node deleted", m[1])
		}
	}
	d.seenAPI = len(reqs)
}

var evictionPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$`)

// writeNode is the node a write of the function concerns ("": none).
func (d *day) writeNode(r fp.Request) string {
	m := evictionPath.FindStringSubmatch(r.Path)
	if m == nil {
		m = podPath.FindStringSubmatch(r.Path)
	}
	if m != nil {
		_, uid := deleteOptions(r)
		if s, ok := d.obs.podNode(m[1]+"/"+m[2], uid, r.Time); ok {
			return s.node
		}
	} else if m := vaPath.FindStringSubmatch(r.Path); m != nil {
		return d.obs.vaNode(m[1])
	} else if m := nodePath.FindStringSubmatch(strings.TrimSuffix(r.Path, "/status")); m != nil {
		return m[1]
	}
	return ""
}

// owned checks a write on one of the day's nodes (I6): none on the
// skipped owner's, but a managed node group's node is released once its
// instance is down, and its marks lifted when it runs again.
func (d *day) owned(r fp.Request, on string) {
	id, ok := d.dayNode(on)
	if !ok {
		return
	}
	d.check(6)
	if in, ok := d.inst(d.plan.Nodes); !ok || !d.plan.SkippedGroup || in.ID != id {
		return
	}
	if d.plan.SkippedOwner == "managed-nodegroup" {
		d.mu.Lock()
		down := false
		for _, e := range d.ec2[id] {
			down = down || (!e.at.After(r.Time) && e.state != "running" && e.state != "pending")
		}
		d.mu.Unlock()
		if down {
			return
		}
	}
	d.violate(6, "%s %s on %s, a %s node", r.Method, r.Path, on, d.plan.SkippedOwner)
}

// dayNode is the instance of one of the day's nodes.
func (d *day) dayNode(name string) (string, bool) {
	for _, in := range d.instances() {
		if in.PrivateDNSName == name {
			return in.ID, true
		}
	}
	return "", false
}

// forced checks a forced step on node at t (I4).
func (d *day) forced(t time.Time, what, nodeName string) {
	id, ok := d.dayNode(nodeName)
	if !ok {
		return
	}
	d.check(4)
	d.mu.Lock()
	e, _ := at(d.ec2[id], t)
	k, _ := at(d.kubelet[nodeName], t)
	d.mu.Unlock()
	switch {
	case (e.state == "running" || e.state == "pending") && t.Sub(e.at) >= consistency:
		d.violate(4, "%s on %s while EC2 says %s is %s (since %.1fs)", what, nodeName, id, e.state, d.since(e.at).Seconds())
	case k.state == "up" && t.Sub(k.at) >= consistency:
		d.violate(4, "%s on %s while its kubelet runs (since %.1fs)", what, nodeName, d.since(k.at).Seconds())
	case e.reason == "Client.UserInitiatedHibernate" && e.state == "stopped":
		d.violate(4, "%s on %s while %s is hibernated", what, nodeName, id)
	default:
		d.tracef("forced: %s on %s (EC2 %s, kubelet %s)", what, nodeName, e.state, k.state)
	}
}

// podDeleted checks a pod deleted (not evicted) on a live node against
// its PDB (I5).
func (d *day) podDeleted(t time.Time, s *podSeen) {
	id, ok := d.dayNode(s.node)
	if !ok {
		return
	}
	d.check(5)
	d.mu.Lock()
	e, _ := at(d.ec2[id], t)
	k, _ := at(d.kubelet[s.node], t)
	d.mu.Unlock()
	least := map[bool]int{true: d.plan.Web - 1, false: 1}[s.app == "web"]
	if e.state != "running" || k.state != "up" || (s.app != "web" && !strings.HasPrefix(s.app, "db")) {
		return
	}
	if up := d.obs.healthy(s.app); up < least {
		d.violate(5, "pod %s deleted (not evicted) on live %s: %d of %s healthy, at least %d wanted", s.key, s.node, up, s.app, least)
	}
}

// outOfService is the Nodes' watch seeing the out-of-service taint put on
// one of the day's nodes (I4).
func (d *day) outOfService(old, cur *corev1.Node) {
	if node.HasTaint(cur, node.TaintOutOfService) && (old == nil || !node.HasTaint(old, node.TaintOutOfService)) {
		d.forced(time.Now(), "out-of-service taint", cur.Name)
	}
}

// terminated: I10 is due releaseBound after EC2 said terminated.
func (d *day) terminated(name string) {
	if name == "" {
		return
	}
	d.dueAt(time.Now().Add(releaseBound), func() {
		d.check(10)
		if left := d.obs.attached(name); len(left) > 0 {
			d.violate(10, "VolumeAttachments of terminated %s still there %s after: %s", name, releaseBound, strings.Join(left, ", "))
		}
	})
}

// final checks what must hold once the day is over (I7, I8, I9).
func (d *day) final() {
	for _, in := range d.instances() {
		d.mu.Lock()
		k, _ := at(d.kubelet[in.PrivateDNSName], time.Now())
		e, _ := at(d.ec2[in.ID], time.Now())
		member := d.member[in.ID]
		d.mu.Unlock()
		n := d.obs.node(in.PrivateDNSName)
		if n == nil || k.state != "up" || e.state != "running" || member != "InService" {
			continue
		}
		d.check(7)
		if m := marks(n); len(m) > 0 {
			d.violate(7, "%s (%s) runs in service, yet marked: %s", n.Name, in.ID, strings.Join(m, ", "))
		}
	}
	invs := d.rt.Invocations()
	d.bounded(invs)
	d.inInvocations(invs)
}

// bounded: at most 10 invocations about one instance within a minute (I8).
func (d *day) bounded(invs []lambdart.Invocation) {
	for _, in := range d.instances() {
		var starts []time.Time
		for _, inv := range invs {
			if !inv.Start.IsZero() && strings.Contains(string(inv.Payload), in.ID) {
				starts = append(starts, inv.Start)
			}
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		d.check(8)
		for i := range starts {
			j := i
			for j < len(starts) && starts[j].Sub(starts[i]) < time.Minute {
				j++
			}
			if j-i > 10 {
				d.violate(8, "%d invocations about %s within a minute from %.1fs", j-i, in.ID, d.since(starts[i]).Seconds())
				break
			}
		}
	}
}

// inInvocations: every request of the function came while one of its
// invocations ran (I9).
func (d *day) inInvocations(invs []lambdart.Invocation) {
	now := time.Now()
	for _, p := range []*fp.Proxy{d.api, d.aws} {
		for _, r := range p.Requests() {
			d.check(9)
			in := slices.ContainsFunc(invs, func(inv lambdart.Invocation) bool {
				end := inv.End
				if end.IsZero() {
					end = now
				}
				return !inv.Start.IsZero() && !r.Time.Before(inv.Start.Add(-50*time.Millisecond)) && !r.Time.After(end.Add(200*time.Millisecond))
			})
			if !in {
				d.violate(9, "%s %s at %.1fs, while no invocation ran", r.Method, r.Path, d.since(r.Time).Seconds())
				return
			}
		}
	}
}

// faultCounts adds the proxies' faults to the day's fault classes.
func (d *day) faultCounts() {
	for name, p := range map[string]*fp.Proxy{"api": d.api, "aws": d.aws} {
		_, counts := p.Counts()
		for f, n := range counts {
			if f == fp.Pass || f == "" || n == 0 {
				continue
			}
			d.mu.Lock()
			d.faults[fmt.Sprintf("%s:%s", name, f)] += n
			d.mu.Unlock()
		}
	}
}
