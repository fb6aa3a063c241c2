package sim

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/node-drainer/node-drainer/internal/config"
)

// Day is how long a simulated day lasts: the world's events happen in its
// first 20 minutes (and their sequels up to 15 minutes later); the rest lets
// every drain, retry and sweep end before the last invariants are checked.
const Day = 50 * time.Minute

// Result is what one seed's day came to.
type Result struct {
	Seed       int64
	Steps      int
	Checks     [numInvariants + 1]uint64
	Violations []Violation
	Plan       Plan
	Trace      []string
	// WatchesFrom counts the watches started at a resourceVersion (a
	// list's, or an informer's last event's); Replayed the writes made
	// between such a read and its watch, delivered on the watch.
	WatchesFrom, Replayed int
	// Lambda's event queue: events run twice, throttled tries, events
	// dropped past the maximum event age
	Duplicates, Throttled, Dropped int
	// NewUnseen counts EC2's NotFound answers for a just-launched instance
	NewUnseen int
	// Deploys counts what the day's deployments played: days, each kind
	// of change, the faults answered to calls about hooks (by call)
	Deploys map[string]int
	// Policies counts what the day's policies played (policy.go)
	Policies map[string]int
}

// Run plays one seed's day. Call it inside a synctest bubble: it sleeps
// through the day in simulated time.
func Run(seed int64, log *slog.Logger) Result {
	inv := newInvariants()
	w := newWorld(seed, inv)
	inv.w = w
	cfg, err := config.FromEnv(func(k string) string { return w.Plan.Env[k] })
	if err != nil {
		panic(fmt.Sprintf("sim: plan of seed %d has a bad configuration: %v", seed, err))
	}
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	w.kube = newKube(w)
	w.ec2 = &ec2World{w: w, insts: map[string]*ec2Inst{}}
	w.asg = &asgWorld{w: w, groups: map[string]*group{}}
	w.lambda = &lambdaWorld{w: w, cfg: cfg, seq: map[string]int{}, log: log}
	w.bridge = bridge{w}
	w.deploys = &deploys{w: w, uninstalls: map[string][]string{}, counts: map[string]int{}}

	w.asg.addGroup("nodes", w.Plan.WarmPool)
	w.tagGroup()
	w.policyDay()
	for i := range w.Plan.Nodes {
		w.ec2.add(instanceID(i), nodeName(i), "nodes", i == 0, "running")
		w.asg.addMember("nodes", instanceID(i), "InService")
		w.kube.join(i, "nodes", false)
	}
	if w.Plan.SkippedGroup {
		i := w.Plan.Nodes
		w.asg.addGroup("managed", false)
		w.ec2.add(instanceID(i), nodeName(i), "managed", false, "running")
		w.asg.addMember("managed", instanceID(i), "InService")
		w.kube.join(i, "managed", true)
	}
	w.kube.seed(w.Plan)
	w.kube.start()
	w.startDeploys()
	sweeps := 0
	w.every(w.Plan.SweepEvery, w.Plan.SweepEvery, func() {
		sweeps++
		w.lambda.async(fmt.Sprintf("sweep-%d", sweeps), sweepEvent(), "sweep", 0)
		if d := w.Plan.Deploy; d != nil && d.Two { // the second deployment's sweep, at the same moment
			w.lambda.async(fmt.Sprintf("sweep-b-%d", sweeps), sweepEvent(), "sweep-b", 0)
		}
	})
	nextIdx := w.Plan.Nodes + 1
	for _, h := range w.Plan.Events {
		if h.What == "launch" {
			h.Node = nextIdx
			nextIdx++
		}
		w.after(h.At+w.jitter("happen/"+h.String()), func() { w.happen(h) })
	}

	time.Sleep(Day)
	inv.final()
	w.stop()
	// the invocations still running end by their deadlines
	time.Sleep(w.Plan.LambdaTimeout + time.Second)
	w.deploys.wg.Wait() // an operation tried again past the day's end gives up
	w.lambda.mu.Lock()
	dups, throttled, dropped := w.lambda.dups, w.lambda.throttled, w.lambda.dropped
	for _, i := range w.lambda.all {
		i.mu.Lock()
		if !i.ended && !i.dead {
			inv.violate(I9, "%s still running after the day", i.id)
		}
		i.mu.Unlock()
	}
	w.lambda.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	inv.mu.Lock()
	defer inv.mu.Unlock()
	from, replayed := w.kube.tracker.counts()
	w.ec2.mu.Lock()
	newUnseen := w.ec2.newUnseen
	w.ec2.mu.Unlock()
	w.deploys.mu.Lock()
	deploys := w.deploys.counts
	w.deploys.mu.Unlock()
	return Result{Deploys: deploys, Policies: w.policies, Seed: seed, Steps: w.steps, Checks: inv.Checks, Violations: inv.Violations, Plan: w.Plan, Trace: w.trace,
		WatchesFrom: from, Replayed: replayed, Duplicates: dups, Throttled: throttled, Dropped: dropped, NewUnseen: newUnseen}
}

// happen plays one event of the world.
func (w *World) happen(h Happening) {
	id, name := instanceID(h.Node), nodeName(h.Node)
	w.tracef("world: %s", h)
	switch h.What {
	case "scale-in", "duplicate-scale-in":
		w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
		if h.What == "duplicate-scale-in" { // an instance refresh and a scale-in pick the same instance
			w.after(time.Duration(1+w.roll("again/"+id)*20)*time.Second, func() {
				w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
			})
		}
	case "bind":
		w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
		w.after(h.For+w.jitter("bind/"+id), func() {
			if w.kube.getNode(name) != nil {
				w.kube.bind(name)
			}
		})
	case "stop", "hibernate":
		w.asg.mu.Lock()
		_, m := w.asg.find(id)
		inService := m != nil && m.state == "InService"
		w.asg.mu.Unlock()
		if w.ec2.truth(id) != "running" || !inService {
			return // Auto Scaling's own transitions are not interrupted by a user's stop
		}
		reason := "Client.UserInitiatedShutdown"
		if h.What == "hibernate" {
			reason = "Client.UserInitiatedHibernate"
		}
		w.ec2.set(id, "stopping", reason)
		w.kube.die(name)
		w.after(time.Duration(10+w.roll("stopped/"+id)*30)*time.Second, func() {
			w.ec2.set(id, "stopped", reason)
			// Auto Scaling's health check finds a stopped instance
			// unhealthy and replaces it, through its terminate hook
			w.after(time.Duration(30+w.roll("health/"+id)*60)*time.Second, func() {
				if w.ec2.truth(id) == "stopped" {
					w.tracef("world: ASG health check: %s stopped, replaced", id)
					w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
				}
			})
			if h.For > 0 {
				w.after(h.For, func() {
					if w.ec2.truth(id) != "stopped" {
						return
					}
					w.ec2.set(id, "pending", "")
					w.after(10*time.Second, func() {
						if w.ec2.truth(id) != "pending" {
							return // terminated meanwhile
						}
						w.ec2.set(id, "running", "")
						if w.kube.getNode(name) != nil {
							w.kube.revive(name)
						}
					})
				})
			}
		})
	case "crash":
		if s := w.ec2.truth(id); s == "terminated" || s == "shutting-down" {
			return
		}
		w.asg.mu.Lock()
		if g, m := w.asg.find(id); g != nil {
			for _, ac := range m.actions {
				ac.done, ac.result = true, "instance gone" // its actions end with it
			}
			delete(g.members, id)
		}
		w.asg.mu.Unlock()
		w.shutDown(id)
	case "unready": // the kubelet runs, its runtime does not: NotReady with a fresh Lease, then scaled in
		w.kube.unwell(name, h.For)
		w.after(time.Duration(45+w.roll("unready-scale-in/"+id)*60)*time.Second, func() {
			w.asg.transition(id, "autoscaling:EC2_INSTANCE_TERMINATING")
		})
	case "rebalance":
		w.rebalance(id)
	case "kubelet-death":
		w.kube.die(name)
		if h.For > 0 {
			w.after(h.For, func() {
				if w.ec2.truth(id) == "running" && w.kube.getNode(name) != nil {
					w.kube.revive(name)
				}
			})
		}
	case "launch":
		w.ec2.add(id, name, "nodes", false, "pending")
		w.asg.addMember("nodes", id, "Pending")
		w.asg.transition(id, "autoscaling:EC2_INSTANCE_LAUNCHING")
		w.after(15*time.Second, func() {
			if w.ec2.truth(id) == "pending" {
				w.ec2.set(id, "running", "")
			}
		})
		w.after(time.Duration(30+w.roll("join/"+id)*30)*time.Second, func() {
			if w.ec2.truth(id) == "running" {
				w.kube.join(h.Node, "nodes", false)
			}
		})
	}
}

// shutDown terminates an instance: its kubelet stops at once, EC2 says
// terminated seconds later.
func (w *World) shutDown(id string) {
	if s := w.ec2.truth(id); s == "terminated" || s == "shutting-down" {
		return
	}
	w.ec2.set(id, "shutting-down", "")
	if n := w.kube.nodeByID(id); n != nil {
		w.kube.die(n.name)
	}
	w.after(time.Duration(10+w.roll("terminated/"+id)*30)*time.Second, func() {
		w.ec2.set(id, "terminated", "")
	})
}
