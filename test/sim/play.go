package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// The operator's day: the groups a day of deployments has besides the
// node group, the deployments' Create before the day's events, the
// changes, and the uninstall.

// The groups of a day of deployments.
const (
	spareGroup  = "spare"   // tagged, no instances: untagged and tagged again
	joinGroup   = "listed2" // joins AsgNames (its tag for terraform) and leaves
	farGroup    = "far"     // another cluster's, carrying the same tag
	handGroup   = "hand"    // tagged, with a hook of our terminate name made by hand
	sharedGroup = "common"  // the tag and no cluster's: both deployments select it (first by name: both uninstalls reach it at one moment)
	farCluster  = "kubernetes.io/cluster/other"
)

// startDeploys sets up a day of deployments (none: nothing) and plays it.
func (w *World) startDeploys() {
	p := w.Plan.Deploy
	if p == nil {
		return
	}
	installCFN()
	ds := w.deploys
	ds.count("days")
	ds.count("tool_" + p.Tool)
	a := w.asg
	add := func(name string, tags map[string]string, hs ...hookDef) {
		a.mu.Lock()
		a.groups[name] = &group{name: name, tags: tags, hooks: hs, members: map[string]*member{}, everTagged: tags[groupTagKey] != ""}
		a.mu.Unlock()
	}
	add(spareGroup, map[string]string{clusterTag: "owned", groupTagKey: "true"})
	add(joinGroup, map[string]string{clusterTag: "owned"})
	if p.Far {
		ds.count("far_group")
		add(farGroup, map[string]string{farCluster: "owned", groupTagKey: "true"})
	}
	if p.Hand != "" {
		ds.count("hand_hook_" + p.Hand)
		meta := `{"team":"payments","note":"drain by hand"}`
		if p.Hand == "text" {
			meta = "drained by the payments team's script"
		}
		add(handGroup, map[string]string{clusterTag: "owned", groupTagKey: "true"},
			hookDef{name: "node-drainer-terminate", transition: discovery.Terminating, heartbeat: 900, result: "ABANDON", meta: meta, by: "hand"})
	}
	mk := func(owner string) *deployment {
		d := &deployment{owner: owner, heartbeat: w.Plan.HeartbeatSecs, op: make(chan struct{}, 1)}
		if p.Listed && owner == mainOwner {
			d.listed = []string{"nodes"}
		}
		ds.all = append(ds.all, d)
		return d
	}
	main := mk(mainOwner)
	var second *deployment
	if p.Two {
		ds.count("two_deployments")
		add(sharedGroup, map[string]string{groupTagKey: "true"})
		second = mk(secondOwner)
		w.lambda.addFunction(secondOwner, map[string]string{"CLUSTER_NAME": "sim-b", "AWS_LAMBDA_FUNCTION_NAME": secondOwner,
			"ASG_TAG_KEY": groupTagKey, "ASG_TAG_VALUE": "true", "CREATE_LAUNCH_HOOK": "true", "HEARTBEAT_TIMEOUT": "360"})
		second.heartbeat = 360
	}
	// the installation, before the day's events: calm (it went through)
	ds.spawn(func() {
		for _, d := range ds.all {
			ds.install(d)
		}
		w.tracef("world: the deployments installed")
	})
	for _, c := range p.Changes {
		w.after(c.At, func() { ds.spawn(func() { ds.change(main, c) }) })
	}
	if p.FailedDestroy > 0 {
		w.after(p.FailedDestroy, func() { ds.spawn(func() { ds.failedDestroy(main) }) })
	}
	w.after(p.RemoveAt, func() {
		ds.spawn(func() { ds.uninstall(main) })
		if second != nil {
			ds.spawn(func() { ds.uninstall(second) })
		}
	})
}

// spawn runs an operation of the operator's (Run waits for them all).
func (ds *deploys) spawn(f func()) {
	ds.wg.Add(1)
	go func() {
		defer ds.wg.Done()
		f()
	}()
}

// pause waits d before an operation is tried again; false: the day is
// over meanwhile.
func (ds *deploys) pause(d time.Duration) bool {
	time.Sleep(d)
	return !ds.w.isStopped()
}

// install is d's Create: the main resource's (and SAM's release
// resource's, which does nothing on a create).
func (ds *deploys) install(d *deployment) {
	ds.w.calm.Store(true)
	defer ds.w.calm.Store(false)
	ok, _ := ds.serve(d, "create", cfn.RequestCreate, false, nil)
	if ds.w.Plan.Deploy.Tool == "sam" {
		ds.serve(d, "create-release", cfn.RequestCreate, true, nil)
	}
	d.physical = "node-drainer-lifecycle-hooks"
	d.installed, d.settled = ok, ok
}

// change plays one change of the main deployment.
func (ds *deploys) change(d *deployment, c Change) {
	d.lock()
	defer d.unlock()
	ds.count("change_" + c.What)
	ds.w.tracef("world: deployment change %s", c)
	switch c.What {
	case "untag", "retag":
		ds.w.asg.retag(spareGroup, c.What == "retag")
		ds.mu.Lock()
		ds.changed = ds.w.now()
		ds.mu.Unlock()
		return
	}
	ds.mu.Lock()
	removed := d.removed || !d.installed
	ds.mu.Unlock()
	if removed {
		return
	}
	old := ds.props(d, false)
	next := deployment{owner: d.owner, heartbeat: d.heartbeat, listed: d.listed, physical: d.physical}
	switch c.What {
	case "heartbeat":
		next.heartbeat = 960 - d.heartbeat // 360 <-> 600
	case "join", "leave":
		if ds.w.Plan.Deploy.Tool == "terraform" { // terraform lists groups with hook resources of its own: the tag instead
			ds.w.asg.retagGroup(joinGroup, c.What == "join")
			ds.mu.Lock()
			ds.changed = ds.w.now()
			ds.mu.Unlock()
			return
		}
		next.listed = slices.DeleteFunc(slices.Clone(d.listed), func(g string) bool { return g == joinGroup })
		if c.What == "join" {
			next.listed = append(next.listed, joinGroup)
		}
	}
	ds.update(d, &next, old)
}

// update is a stack update from old to next's properties, in the
// template's order: the release step (the groups leaving freed, before
// the grants change), the function's new configuration, then the main
// step. An update that fails is made again once a minute later (the
// operator mends the cause).
func (ds *deploys) update(d, next *deployment, old map[string]any) {
	for try := range 2 {
		if try > 0 && !ds.pause(time.Minute) {
			return
		}
		ok, _ := ds.serve(next, "update-release", cfn.RequestUpdate, true, withRelease(old))
		if !ok {
			continue
		}
		ds.w.lambda.setEnv(d.owner, func(env map[string]string) {
			env["HEARTBEAT_TIMEOUT"] = strconv.Itoa(int(next.heartbeat))
			env["ASG_NAMES"] = strings.Join(next.listed, ",")
		})
		ok, _ = ds.serve(next, "update", cfn.RequestUpdate, false, old)
		ds.mu.Lock()
		d.heartbeat, d.listed, d.settled = next.heartbeat, next.listed, ok
		ds.mu.Unlock()
		if ok {
			return
		}
	}
	ds.mu.Lock()
	d.settled = false
	ds.mu.Unlock()
}

func withRelease(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	out["Release"] = "true"
	return out
}

// failedDestroy is a terraform destroy that fails half-way (a hook's
// deletion refused, after the removal was marked), then an apply: the
// unchanged invocation is not invoked again, so the mark stays.
func (ds *deploys) failedDestroy(d *deployment) {
	d.lock()
	defer d.unlock()
	ds.count("failed_destroy")
	ok, _ := ds.serve(d, "failed-destroy", cfn.RequestDelete, false, nil)
	ds.mu.Lock()
	ds.failing = ""
	if ok { // nothing to delete, or no deletion reached: it went through
		d.removed, d.installed = true, false
		ds.w.lambda.remove(d.owner)
	}
	d.settled = false
	ds.mu.Unlock()
	ds.w.tracef("world: terraform apply after the failed destroy: aws_lambda_invocation.hooks unchanged, not invoked")
}

// uninstall removes d: the hooks resource's Delete (the main one; SAM's
// release resource does nothing), then the function. A delete that fails
// is tried again twice, 2 minutes apart.
func (ds *deploys) uninstall(d *deployment) {
	d.lock()
	defer d.unlock()
	ds.mu.Lock()
	if d.removed {
		ds.mu.Unlock()
		return
	}
	ds.mu.Unlock()
	ds.count("uninstall")
	if ds.w.now() < 35*time.Minute {
		ds.count("uninstall_during_events")
	}
	for try := range 3 {
		if try > 0 && !ds.pause(2*time.Minute) {
			return
		}
		if ok, _ := ds.serve(d, fmt.Sprintf("delete-%d", try), cfn.RequestDelete, false, nil); ok {
			ds.mu.Lock()
			d.removed, d.installed, d.settled = true, false, true
			ds.mu.Unlock()
			ds.w.lambda.remove(d.owner)
			ds.w.tracef("world: %s uninstalled: its function deleted", d.owner)
			return
		}
		ds.count("uninstall_failed_try")
	}
}

// retag tags (on) or untags the group's selection tag.
func (a *asgWorld) retag(name string, on bool) { a.retagGroup(name, on) }

func (a *asgWorld) retagGroup(name string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.groups[name]
	if g == nil {
		return
	}
	if on {
		g.tags[groupTagKey] = "true"
		g.everTagged = true
	} else {
		delete(g.tags, groupTagKey)
		g.untagged = true
	}
}
