package soak

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-drainer/node-drainer/test/harness"
	"github.com/node-drainer/node-drainer/test/harness/moto"
	"github.com/node-drainer/node-drainer/test/sim"
)

// The world's side of a day, as test/sim's World.happen plays it, on the
// real harness: Auto Scaling's transitions and their lifecycle actions,
// EC2's states (moto's, set by the soak) and their EventBridge events,
// kubelets stopping and starting (kwok), EventBridge's deliveries.

func (d *day) setEC2(id, state, reason string) {
	d.mu.Lock()
	d.ec2[id] = append(d.ec2[id], stamp{time.Now(), state, reason})
	d.mu.Unlock()
}

func (d *day) setKubelet(node string, up bool) {
	d.mu.Lock()
	d.kubelet[node] = append(d.kubelet[node], stamp{at: time.Now(), state: map[bool]string{true: "up", false: "down"}[up]})
	d.mu.Unlock()
}

// at is the stamp of stamps in force at t, and when it began.
func at(stamps []stamp, t time.Time) (stamp, bool) {
	var s stamp
	ok := false
	for _, x := range stamps {
		if x.at.After(t) {
			break
		}
		s, ok = x, true
	}
	return s, ok
}

func (d *day) ec2State(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, _ := at(d.ec2[id], time.Now())
	return s.state
}

// happen plays one event of the plan.
func (d *day) happen(h sim.Happening) {
	in, ok := d.inst(h.Node)
	if !ok {
		d.count(d.events, "not-played:"+h.What)
		return
	}
	id, name := in.ID, in.PrivateDNSName
	d.tracef("world: %s (%s, %s)", h, id, name)
	d.mu.Lock()
	member := d.member[id]
	d.mu.Unlock()
	if member == "Gone" || ((h.What == "stop" || h.What == "hibernate") && (member != "InService" || d.ec2State(id) != "running")) {
		d.count(d.events, "no-op:"+h.What) // its instance is gone, or not one a user stops
		return
	}
	switch h.What {
	case "scale-in", "duplicate-scale-in":
		d.transition(id)
		if h.What == "duplicate-scale-in" { // an instance refresh and a scale-in pick the same instance
			d.after(scaled(time.Duration(1+d.roll("again/"+id)*20)*time.Second), func() { d.transition(id) })
		}
	case "bind":
		d.transition(id)
		d.after(scaled(h.For), func() { d.bind(name) })
	case "stop", "hibernate":
		d.stop(id, name, h)
	case "crash":
		d.crash(id)
	case "kubelet-death":
		d.kubeletDown(name)
		if h.For > 0 {
			d.after(scaled(h.For), func() {
				if d.ec2State(id) == "running" {
					d.kubeletUp(id, name)
				}
			})
		}
	case "unready": // the kubelet runs, its runtime does not: NotReady with a fresh Lease, then scaled in
		d.runtimeDown(name, scaled(h.For))
		d.after(scaled(time.Duration(45+d.roll("unready-scale-in/"+id)*60)*time.Second), func() { d.transition(id) })
	case "launch":
		d.launch()
	default:
		d.count(d.events, "not-played:"+h.What)
		return
	}
	d.count(d.events, h.What)
}

// transition has Auto Scaling start terminating id: an action per
// terminate hook of its group (Terminating:Wait), each event delivered.
// Another tool completes its own hook, most of the time, within two
// minutes (compressed).
func (d *day) transition(id string) {
	d.mu.Lock()
	if d.member[id] != "InService" {
		d.mu.Unlock()
		return
	}
	d.member[id] = "Terminating"
	d.mu.Unlock()
	in := d.instance(id)
	group := d.groupOf(id)
	for _, hook := range d.terminateHooks(id) {
		tok := token()
		ac := &action{token: tok, hook: hook, id: id, group: group, terminate: true, ours: d.ours(hook), start: time.Now()}
		if err := d.env.AWS.RegisterLifecycleAction(d.ctx, moto.LifecycleAction{ASG: group, Hook: hook, InstanceID: id, Token: tok}); err != nil {
			d.tracef("harness: registering %s's action of %s: %v", hook, id, err)
			continue
		}
		d.mu.Lock()
		d.actions = append(d.actions, ac)
		d.mu.Unlock()
		ev, err := harness.EventFile("asg-terminate.json", map[string]string{
			"AutoScalingGroupName": group, "LifecycleHookName": hook, "EC2InstanceId": in.ID, "LifecycleActionToken": tok})
		if err == nil {
			d.emit("hook/"+tok, ev)
		}
		if hook == otherHook && d.roll("other/"+tok) < 0.8 {
			d.after(scaled(time.Duration(5+d.roll("other-when/"+tok)*115)*time.Second), func() { d.completeAs(ac, "CONTINUE", "another tool") })
		}
	}
	d.tracef("world: ASG %s: %s Terminating:Wait", group, id)
}

func (d *day) instance(id string) harness.Instance {
	for _, in := range d.instances() {
		if in.ID == id {
			return in
		}
	}
	return harness.Instance{ID: id}
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// completeAs completes ac as someone other than the function (another
// tool, or Auto Scaling's timeout): the call is marked as the soak's own.
func (d *day) completeAs(ac *action, result, who string) {
	d.mu.Lock()
	done := ac.done
	d.mu.Unlock()
	if done {
		return
	}
	before, err := d.env.AWS.LifecycleCalls(d.ctx)
	if err != nil {
		return
	}
	asc := autoscaling.NewFromConfig(d.env.AWS.AWSConfig())
	_, err = asc.CompleteLifecycleAction(d.ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String(ac.group),
		LifecycleHookName: aws.String(ac.hook), LifecycleActionToken: aws.String(ac.token), LifecycleActionResult: aws.String(result)})
	after, _ := d.env.AWS.LifecycleCalls(d.ctx)
	for i := len(before); i < len(after); i++ {
		c := after[i]
		if c.Params["LifecycleActionToken"] == ac.token && c.Operation == "CompleteLifecycleAction" {
			d.mu.Lock()
			d.mine[i] = true
			d.mu.Unlock()
			break
		}
	}
	d.tracef("world: %s completes %s of %s with %s: %v", who, ac.hook, ac.id, result, err)
	if err == nil {
		d.actionDone(ac, result)
	}
}

// actionDone: ac ended (an ABANDON ends the instance's other actions
// with it); once every action of its instance has, Auto Scaling
// terminates it.
func (d *day) actionDone(ac *action, result string) {
	d.mu.Lock()
	ac.done, ac.doneAt, ac.result = true, time.Now(), result
	all := true
	for _, o := range d.actions {
		if o.id == ac.id && o.terminate == ac.terminate && !o.done && result == "ABANDON" {
			// "ABANDON stops any remaining actions, such as other lifecycle
			// hooks": moto (motoext) ends them too
			o.done, o.doneAt, o.result = true, time.Now(), "abandoned"
		}
		if o.id == ac.id && !o.done {
			all = false
		}
	}
	d.mu.Unlock()
	if !ac.terminate {
		if result == "ABANDON" {
			d.shutDown(ac.id)
		} else {
			d.mu.Lock()
			d.member[ac.id] = "InService"
			d.mu.Unlock()
		}
		return
	}
	if all || result == "ABANDON" {
		d.shutDown(ac.id)
	}
}

// shutDown terminates an instance: its kubelet stops at once, EC2 says
// terminated seconds later; a cloud controller (Plan.ControllerUp) deletes
// its Node after that.
func (d *day) shutDown(id string) {
	d.mu.Lock()
	if d.member[id] == "Gone" {
		d.mu.Unlock()
		return
	}
	d.member[id] = "Gone"
	d.mu.Unlock()
	in := d.instance(id)
	d.kubeletDown(in.PrivateDNSName)
	d.stateEvent(id, "shutting-down")
	d.after(scaled(time.Duration(10+d.roll("terminated/"+id)*30)*time.Second), func() {
		if err := d.env.SetInstanceState(d.ctx, id, "terminated"); err != nil {
			d.tracef("harness: %v", err)
			return
		}
		d.setEC2(id, "terminated", "")
		d.stateEvent(id, "terminated")
		d.terminated(in.PrivateDNSName)
		if d.plan.ControllerUp {
			d.after(5*time.Second, func() {
				err := d.env.Client.CoreV1().Nodes().Delete(d.ctx, in.PrivateDNSName, metav1.DeleteOptions{})
				d.tracef("world: cloud controller deletes Node %s: %v", in.PrivateDNSName, err)
			})
		}
	})
}

// crash: the instance is gone at once (its actions end with it).
func (d *day) crash(id string) {
	d.mu.Lock()
	for _, ac := range d.actions {
		if ac.id == id && !ac.done {
			ac.done, ac.doneAt, ac.result = true, time.Now(), "instance gone"
		}
	}
	d.mu.Unlock()
	d.shutDown(id)
}

// stop stops (or hibernates) a running, in-service instance as its user
// does; Auto Scaling's health check replaces it while stopped, through its
// terminate hooks; with For it is started again.
func (d *day) stop(id, name string, h sim.Happening) {
	d.mu.Lock()
	inService := d.member[id] == "InService"
	d.mu.Unlock()
	if d.ec2State(id) != "running" || !inService {
		return
	}
	reason, err := "Client.UserInitiatedShutdown", error(nil)
	if h.What == "hibernate" {
		reason, err = harness.HibernateReasonCode, d.env.Hibernate(d.ctx, id)
	} else {
		err = d.env.SetInstanceState(d.ctx, id, "stopped")
	}
	if err != nil {
		d.tracef("harness: %v", err)
		return
	}
	d.setEC2(id, "stopped", reason)
	d.kubeletDown(name)
	d.stateEvent(id, "stopping")
	d.after(scaled(time.Duration(10+d.roll("stopped/"+id)*30)*time.Second), func() {
		d.stateEvent(id, "stopped")
		d.after(scaled(time.Duration(30+d.roll("health/"+id)*60)*time.Second), func() {
			if d.ec2State(id) == "stopped" {
				d.tracef("world: ASG health check: %s stopped, replaced", id)
				d.transition(id)
			}
		})
		if h.For > 0 {
			d.after(scaled(h.For), func() { d.start(id, name) })
		}
	})
}

// start starts a stopped instance again; its kubelet comes back.
func (d *day) start(id, name string) {
	if d.ec2State(id) != "stopped" || d.gone(id) {
		return
	}
	if err := d.env.SetInstanceState(d.ctx, id, "running"); err != nil {
		d.tracef("harness: %v", err)
		return
	}
	d.setEC2(id, "running", "")
	d.stateEvent(id, "pending")
	d.after(scaled(10*time.Second), func() {
		d.stateEvent(id, "running")
		if d.ec2State(id) == "running" {
			d.kubeletUp(id, name)
		}
	})
}

// gone says that Auto Scaling terminates id (shutDown): no kubelet of it
// comes back, whatever was due.
func (d *day) gone(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.member[id] == "Gone"
}

func (d *day) kubeletDown(name string) {
	if name == "" {
		return
	}
	d.mu.Lock()
	s, _ := at(d.kubelet[name], time.Now())
	d.mu.Unlock()
	if s.state != "up" {
		return
	}
	if err := d.env.StopKubelet(d.ctx, name); err != nil {
		d.tracef("harness: %v", err)
		return
	}
	d.setKubelet(name, false)
	d.tracef("world: kubelet of %s stops", name)
}

// kubeletUp has the kubelet of instance id's node name run again, unless
// Auto Scaling terminates the instance (before or meanwhile: then it is
// stopped again, and the checks never see it up).
func (d *day) kubeletUp(id, name string) {
	if _, err := d.env.Client.CoreV1().Nodes().Get(d.ctx, name, metav1.GetOptions{}); err != nil || d.gone(id) {
		return
	}
	if err := d.env.StartKubelet(d.ctx, name); err != nil {
		d.tracef("harness: %v", err)
		return
	}
	d.mu.Lock()
	gone := d.member[id] == "Gone"
	if !gone {
		d.kubelet[name] = append(d.kubelet[name], stamp{at: time.Now(), state: "up"})
	}
	d.mu.Unlock()
	if gone {
		_ = d.env.StopKubelet(d.ctx, name)
		return
	}
	d.tracef("world: kubelet of %s back", name)
}

// runtimeDown has the kubelet of node name report NotReady while it runs
// and renews its Lease (its container runtime down), for wait: the kubelet is
// up all along, for the checks.
func (d *day) runtimeDown(name string, wait time.Duration) {
	if err := d.env.RuntimeDown(d.ctx, name); err != nil {
		d.tracef("harness: %v", err)
		return
	}
	d.tracef("world: %s reports NotReady (its container runtime down), its Lease renewed", name)
	d.after(wait, func() {
		if err := d.env.RuntimeUp(d.ctx, name); err == nil {
			d.tracef("world: %s's container runtime back", name)
		}
	})
}

// bind binds a pod to the node (a controller's or a user's, mid-drain).
func (d *day) bind(name string) {
	if _, err := d.env.Client.CoreV1().Nodes().Get(d.ctx, name, metav1.GetOptions{}); err != nil {
		return
	}
	n := fmt.Sprintf("late-%d", int(d.roll("late-name")*1e6))
	_, err := d.env.BarePod(d.ctx, harness.Workload{Namespace: d.name, Name: n, GracePeriod: &podGrace, StopWithinGrace: true}, name)
	d.tracef("world: pod %s bound to %s: %v", n, name, err)
}

// launch: Auto Scaling launches one more instance into the group (its
// launch hook's action waits), which joins as a node.
func (d *day) launch() {
	asc := autoscaling.NewFromConfig(d.env.AWS.AWSConfig())
	out, err := asc.DescribeAutoScalingGroups(d.ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{d.name}})
	if err != nil || len(out.AutoScalingGroups) != 1 {
		d.tracef("harness: describing %s: %v", d.name, err)
		return
	}
	g := out.AutoScalingGroups[0]
	var before []string
	for _, i := range g.Instances {
		before = append(before, aws.ToString(i.InstanceId))
	}
	if _, err := asc.SetDesiredCapacity(d.ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(d.name),
		DesiredCapacity: aws.Int32(aws.ToInt32(g.DesiredCapacity) + 1)}); err != nil {
		d.tracef("harness: scaling out: %v", err)
		return
	}
	all, err := d.env.ASGInstances(d.ctx, d.name)
	if err != nil {
		return
	}
	for _, in := range all {
		if slices.Contains(before, in.ID) {
			continue
		}
		d.mu.Lock()
		idx := len(d.insts) + 100
		d.insts[idx] = in
		d.member[in.ID] = "Pending"
		d.mu.Unlock()
		d.setEC2(in.ID, "running", "")
		tok := token()
		ac := &action{token: tok, hook: harness.LaunchHook, id: in.ID, group: d.name, ours: true, start: time.Now()}
		if err := d.env.AWS.RegisterLifecycleAction(d.ctx, moto.LifecycleAction{ASG: d.name, Hook: harness.LaunchHook, InstanceID: in.ID, Token: tok,
			Transition: "autoscaling:EC2_INSTANCE_LAUNCHING"}); err != nil {
			d.tracef("harness: %v", err)
			return
		}
		d.mu.Lock()
		d.actions = append(d.actions, ac)
		d.mu.Unlock()
		ev, err := harness.EventFile("asg-launch.json", map[string]string{
			"AutoScalingGroupName": d.name, "LifecycleHookName": harness.LaunchHook, "EC2InstanceId": in.ID, "LifecycleActionToken": tok})
		if err == nil {
			d.emit("hook/"+tok, ev)
		}
		d.stateEvent(in.ID, "pending")
		d.after(scaled(time.Duration(30+d.roll("join/"+in.ID)*30)*time.Second), func() {
			if d.ec2State(in.ID) != "running" {
				return
			}
			err := d.env.AddNodeFor(d.ctx, in, map[string]string{"pool": d.name})
			if err == nil {
				d.setKubelet(in.PrivateDNSName, true)
			}
			d.tracef("world: %s joins as %s: %v", in.ID, in.PrivateDNSName, err)
		})
		d.tracef("world: ASG %s launches %s (Pending:Wait)", d.name, in.ID)
	}
}

// stateEvent delivers EC2's state-change notification.
func (d *day) stateEvent(id, state string) {
	ev, err := harness.StateChangeEvent(id, state)
	if err == nil {
		d.emit("state/"+id+"/"+state, ev)
	}
}

// emit delivers an event to the function as EventBridge does: usually
// within two seconds, sometimes minutes late (compressed), twice, never.
func (d *day) emit(key string, payload []byte) {
	if d.roll("lost/"+key) < d.plan.EventLoss {
		d.count(d.faults, "delivery:never")
		d.tracef("world: EventBridge lost %s", key)
		return
	}
	copies := 1
	if d.roll("dup/"+key) < d.plan.EventDup {
		copies = 2
		d.count(d.faults, "delivery:twice")
	}
	for c := range copies {
		k := fmt.Sprintf("%s#%d", key, c)
		wait := time.Duration(100+d.roll("delay/"+k)*1900) * time.Millisecond
		if d.roll("late/"+k) < d.plan.EventLate {
			wait = scaled(time.Duration(60+d.roll("late-by/"+k)*240) * time.Second)
			d.count(d.faults, "delivery:late")
		}
		d.after(wait, func() {
			if _, err := d.rt.InvokeAsync(payload); err != nil {
				d.tracef("harness: invoking: %v", err)
			}
		})
	}
}

// sweep delivers the scheduled sweep every SweepEvery (compressed).
func (d *day) sweep(stop <-chan struct{}) {
	t := time.NewTicker(scaled(d.plan.SweepEvery))
	defer t.Stop()
	ev, err := harness.EventFile("sweep.json", nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-t.C:
			d.count(d.events, "sweep")
			_, _ = d.rt.InvokeAsync(ev)
		case <-stop:
			return
		case <-d.ctx.Done():
			return
		}
	}
}
