package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// The hooks' invariants, H1-H6 (issue 54): the protocol by which
// deployments install, share and remove hooks never cuts a drain, never
// touches a hook that is not theirs, converges, leaves nothing behind,
// keeps every action of ours alive, and stays within Auto Scaling's limits.

// deployed reports whether a hook was put by a deployment (its template's
// before the day, or a function's put).
func deployed(h hookDef) bool {
	return h.by == "stack" || strings.HasPrefix(h.by, "node-drainer")
}

// undrained lists the instances waiting under hook name of g whose action
// a deletion would end with a drain not done: a terminating instance whose
// node still runs pods to drain, a launching one (its launch abandoned).
// Call with the group's lock held.
func (v *Invariants) undrained(g *group, name string) []string {
	var out []string
	for _, m := range g.members {
		for _, ac := range m.actions {
			if ac.done || ac.hook.name != name {
				continue
			}
			if ac.hook.transition == discovery.Launching {
				out = append(out, m.id+" (launching)")
				continue
			}
			if strings.HasPrefix(m.state, "Warmed:") {
				out = append(out, m.id+" (into the warm pool)")
				continue
			}
			n := v.w.kube.nodeByID(m.id)
			if n != nil && n.alive && v.w.kube.getNode(n.name) != nil && len(v.w.kube.drained(n.name)) > 0 {
				out = append(out, m.id)
			}
		}
	}
	return out
}

// begunAfterRead are the instances whose action under hook name of g began
// after inv last read g's instances, within 2 s of it; g's lock is held.
func (v *Invariants) begunAfterRead(inv *invocation, g *group, name string) []string {
	read, ok := inv.readSince(g.name)
	if !ok {
		return nil
	}
	var out []string
	for _, m := range g.members {
		for _, ac := range m.actions {
			// within a moment of the read: a removal that read long before
			// it deleted could have read again, and is held to it
			if !ac.done && ac.hook.name == name && ac.start > read && ac.start-read < 2*time.Second {
				out = append(out, m.id)
			}
		}
	}
	return out
}

// hookWrite checks a put (now) or a deletion (now nil) of the hook was on
// g by inv (H1, H2); g's lock is held.
func (v *Invariants) hookWrite(inv *invocation, g *group, was, now *hookDef) {
	if now != nil {
		v.check(H6)
	}
	if was == nil {
		return
	}
	who := "world"
	if inv != nil {
		who = inv.id
	}
	v.check(H2)
	if !deployed(*was) {
		switch a := v.w.asg.settled(*was); {
		case now == nil:
			v.violate(H2, "%s deleted %s/%s, a hook no deployment put (%s's, metadata %q)", who, g.name, was.name, was.by, was.meta)
		case now.transition != a.transition || now.heartbeat != a.heartbeat || now.result != a.result || now.meta != a.meta:
			v.violate(H2, "%s rewrote %s/%s, a hook no deployment put (%s's): %s %ds %s %q, was %s %ds %s %q", who, g.name, was.name, was.by,
				now.transition, now.heartbeat, now.result, now.meta, a.transition, a.heartbeat, a.result, a.meta)
		}
		return
	}
	v.check(H1)
	if now != nil && now.transition == was.transition && now.result == v.w.asg.settled(*was).result && !dropsOwner(was.meta, now.meta) {
		return // its heartbeat timeout or its owner's name changed: no action under it ends
	}
	cut := v.undrained(g, was.name)
	if len(cut) == 0 {
		return
	}
	what := "deleted"
	if now != nil {
		what = "rewritten (" + now.transition + " " + now.result + " " + now.meta + ")"
	}
	if inv != nil && now == nil && v.w.deploys.isUninstall(inv) {
		// an action begun after the uninstall's last read of the group
		// (while its deletion was on its way) is one no read it makes can
		// see: counted, not held against its report
		if unseen := v.begunAfterRead(inv, g, was.name); len(unseen) > 0 {
			cut = slices.DeleteFunc(cut, func(c string) bool { return slices.Contains(unseen, strings.Fields(c)[0]) })
			v.w.deploys.count("uninstall_cut_begun_after_its_last_read")
			if len(cut) == 0 {
				return
			}
		}
		v.w.deploys.mu.Lock()
		key := g.name + "/" + was.name
		if slices.ContainsFunc(cut, func(c string) bool { return strings.HasSuffix(c, "(into the warm pool)") }) {
			key += "|warm"
		}
		v.w.deploys.uninstalls[inv.id] = append(v.w.deploys.uninstalls[inv.id], key)
		v.w.deploys.mu.Unlock()
		return
	}
	v.violate(H1, "%s: hook %s/%s %s while %s waited under it undrained", who, g.name, was.name, what, strings.Join(cut, ", "))
}

// dropsOwner reports whether a put's metadata names fewer deployments
// than the hook's did (a hook of ours made another's, or none's).
func dropsOwner(was, now string) bool {
	for _, o := range []string{mainOwner, secondOwner} {
		if strings.Contains(was, `"`+o+`"`) && !strings.Contains(now, `"`+o+`"`) {
			return true
		}
	}
	return false
}

// isUninstall reports whether inv serves a deployment's Delete.
func (ds *deploys) isUninstall(inv *invocation) bool {
	return inv.about == "deploy" && (strings.Contains(inv.id, ":delete-") || strings.HasSuffix(inv.id, ":failed-destroy"))
}

// uninstalled: an uninstall's request ended with detail: each hook it
// deleted under an instance waiting undrained must be reported cut (H1).
func (v *Invariants) uninstalled(inv *invocation, detail string) {
	if inv == nil {
		return
	}
	ds := v.w.deploys
	ds.mu.Lock()
	cut := ds.uninstalls[inv.id]
	delete(ds.uninstalls, inv.id)
	ds.mu.Unlock()
	for _, c := range cut {
		v.check(H1)
		ds.count("uninstall_cut_drains")
		c, warm := strings.CutSuffix(c, "|warm")
		if warm { // a drain into the warm pool: reported as any (discovery.Waiting reads the pool)
			ds.count("uninstall_cut_warm_pool")
		}
		if strings.Contains(detail, "cut "+c+":") || strings.Contains(detail, "waiting under the hooks removed unread") {
			ds.count("uninstall_cut_reported")
			continue
		}
		v.violate(H1, "%s, an uninstall, deleted %s under an instance waiting undrained and did not report it cut (its outcome: %q)", inv.id, c, detail)
	}
}

// limitPut: a put Auto Scaling refused for its limits (H6).
func (v *Invariants) limitPut(inv *invocation, group, name, why string) {
	v.check(H6)
	v.violate(H6, "%s put %s/%s, which Auto Scaling refuses: %s", inv.id, group, name, why)
}

// hooksFaulted counts a fault answered to a call about hooks.
func (w *World) hooksFaulted(inv *invocation, op string) {
	inv.mu.Lock()
	inv.hookFaults++
	inv.mu.Unlock()
	if w.deploys != nil {
		w.deploys.count("fault_" + op)
	}
}

// siblingExpired: ac, an action of ours no invocation took, timed out
// while the function held another action of ours on the instance's
// transition (H5: its drain owes it heartbeats too).
func (v *Invariants) siblingExpired(ac *action) {
	if !ac.hook.ours || ac.touched {
		return
	}
	a := v.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.groups[ac.group]
	if g == nil || g.members[ac.instance] == nil {
		return
	}
	v.check(H5)
	for _, o := range g.members[ac.instance].actions {
		if o != ac && o.hook.ours && o.touched && o.hook.transition == ac.hook.transition && (!o.done || o.result == "") {
			v.violate(H5, "hook %s of %s timed out (%s) while the function held its action under %s", ac.hook.name, ac.instance, ac.hook.result, o.hook.name)
			return
		}
	}
}

// swept: a sweep of the main function ended without an error (H3).
func (v *Invariants) swept(inv *invocation) {
	ds := v.w.deploys
	if ds == nil || v.w.Plan.Deploy == nil || strings.Contains(inv.id, ">") {
		return // a continuation of the sweep's (a drain it handed over) puts no hook
	}
	inv.mu.Lock()
	faults := inv.hookFaults
	inv.mu.Unlock()
	ds.mu.Lock()
	still := ds.busy == 0 && ds.changed < inv.begun && len(ds.all) > 0 && ds.all[0].installed && ds.all[0].settled
	var hb int32
	if still {
		hb = ds.all[0].heartbeat
	}
	ds.mu.Unlock()
	if !still || faults > 0 || v.w.lambda.removing(mainOwner) || v.w.lambda.gone(mainOwner) {
		return
	}
	v.check(H3)
	v.converged(inv, hb)
}

// converged checks H3 at the end of sweep inv: each tagged group of this
// cluster carries the deployment's hooks (hb its heartbeat timeout),
// where no hook of that name is another's; no group never selected
// carries one of ours.
func (v *Invariants) converged(inv *invocation, hb int32) {
	a := v.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	wanted := []hookDef{{name: "node-drainer-terminate", transition: discovery.Terminating}, {name: "node-drainer-launch", transition: discovery.Launching}}
	for _, g := range a.groups {
		_, far := g.tags[farCluster]
		tagged := g.tags[groupTagKey] == "true" && !far
		for _, w := range wanted {
			i := slices.IndexFunc(g.hooks, func(h hookDef) bool { return h.name == w.name })
			switch {
			case tagged && i < 0:
				v.violate(H3, "after %s, still: tagged group %s lacks hook %s", inv.id, g.name, w.name)
			case tagged && g.hooks[i].by == mainOwner || tagged && g.hooks[i].by == "stack":
				h := a.settled(g.hooks[i])
				if h.heartbeat != hb || h.result != "CONTINUE" || h.transition != w.transition || h.meta != discovery.Mark(mainOwner) {
					v.violate(H3, "after %s, still: %s/%s is %s %ds %s %q, not the deployment's (%ds CONTINUE, marked %s)", inv.id, g.name, w.name,
						h.transition, h.heartbeat, h.result, h.meta, hb, mainOwner)
				}
			case !tagged && (far || !g.everTagged) && !slices.Contains(v.w.lambda.config(mainOwner).ASGNames, g.name) && i >= 0 && strings.Contains(g.hooks[i].meta, `"`+mainOwner+`"`):
				v.violate(H3, "after %s, still: %s/%s is ours on a group this deployment never selected", inv.id, g.name, w.name)
			}
		}
	}
}

// finalHooks checks, at the end of the day, that no hook of a removed
// deployment remains once the last one is removed (H4).
func (v *Invariants) finalHooks() {
	ds := v.w.deploys
	if ds == nil || v.w.Plan.Deploy == nil {
		return
	}
	ds.mu.Lock()
	all := slices.Clone(ds.all)
	last := len(all) > 0
	for _, d := range all {
		last = last && d.removed
	}
	ds.mu.Unlock()
	if !last {
		return
	}
	v.check(H4)
	ds.count("all_removed")
	a := v.w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.groups {
		if g.untagged {
			ds.count("h4_untagged_group_checked") // its hooks held as any: the uninstall finds ours by their mark
		}
		for _, h := range g.hooks {
			for _, d := range all {
				if h.by == d.owner || strings.Contains(h.meta, `"`+d.owner+`"`) {
					v.violate(H4, "%s/%s (%s, metadata %q) remains after every deployment was removed", g.name, h.name, h.by, h.meta)
					break
				}
			}
		}
	}
	_ = time.Second
}
