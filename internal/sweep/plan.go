package sweep

import (
	"fmt"
	"slices"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lease"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// Plan decides from the readings alone.
func (r *Readings) Plan(cfg Config) Plan {
	var p Plan
	held, taken := r.leaseHolds()
	busy := map[string]bool{} // instances the plan acts on already
	r.planHooks(cfg, &p, held, taken, busy)
	groupOf := r.groupOf()
	attached := map[string]bool{}
	for _, va := range r.Attachments {
		attached[va.Spec.NodeName] = true
	}
	budget := zombieBudget{byASG: map[string]int{}}
	for _, n := range r.Nodes {
		id := node.ProviderInstanceID(n.Spec.ProviderID)
		i, ok := r.Instances[id]
		if id == "" || !ok || busy[id] || (i.Found && !i.HasTag(cfg.ClusterTagKey)) {
			continue // no instance, handled above, or not this cluster's
		}
		if held[id] {
			p.Held = append(p.Held, id)
			continue
		}
		marks, mine := node.Marks(&n)
		switch {
		case i.Down() || i.GoingDown():
			if r.PodsOn[n.Name] > 0 || attached[n.Name] {
				p.Dead = append(p.Dead, id)
			}
		case i.Hibernated:
			// its processes resume with their RAM: nothing is forced
			p.Notes = append(p.Notes, fmt.Sprintf("node %s left as it is: %s", n.Name, i))
		case i.Found && i.State == instance.StateRunning:
			_, down := marks.Causes[node.CauseOutOfService]
			// a terminate hold on an instance its group has in service again
			// (back from a warm pool): its action is over
			_, terminating := marks.Causes[node.CauseTerminate]
			if _, batch := marks.Causes[node.CauseBatch]; batch {
				terminating = true // a batch cordon (BATCH_CORDON) is over with it
			}
			back := terminating && lifecycle.InService(astypes.LifecycleState(groupOf[id].state))
			if mine && (down || back ||
				slices.ContainsFunc(marks.CauseList(), func(c node.Cause) bool { return marks.Causes[c].Expired(r.Now) })) {
				p.Unmark = append(p.Unmark, id)
				continue
			}
			since, notReady := notReadySince(n)
			if !notReady || r.Now.Sub(since) < cfg.ZombieAfter {
				continue
			}
			p.Zombies = append(p.Zombies, r.zombie(cfg, Zombie{Node: n.Name, InstanceID: id, ASG: groupOf[id].name, Since: since}, groupOf[id].state, &budget))
		}
	}
	r.planOrphans(cfg, &p)
	r.planLeases(cfg, &p, held)
	return p
}

// zombieBudget counts the zombies a plan replaces: in all, and per group.
type zombieBudget struct {
	n     int
	byASG map[string]int
}

// zombie decides whether the zombie z (its instance state in its group
// state) is replaced, within the sweep's and its group's budgets, or only
// reported, and why.
func (r *Readings) zombie(cfg Config, z Zombie, state string, b *zombieBudget) Zombie {
	switch {
	case !cfg.ZombieReplace:
		z.Why = "report only (ZOMBIE_ACTION=report)"
	case cfg.ZombiesElsewhere != "":
		z.Why = cfg.ZombiesElsewhere
	case z.ASG == "":
		z.Why = "not in an Auto Scaling group of this cluster: report only"
	case state != stateInService:
		z.Why = "its group has it " + state + ": report only"
	case b.n >= cfg.ZombieMaxPerSweep:
		z.Why = fmt.Sprintf("ZOMBIE_MAX_PER_SWEEP=%d reached: next sweep", cfg.ZombieMaxPerSweep)
	case r.leaving(z.ASG)+b.byASG[z.ASG]+1 > shareOf(cfg.ZombieMaxASGShare, r.size(z.ASG)):
		z.Why = fmt.Sprintf("%s has %d instance(s) leaving already, the most ZOMBIE_MAX_ASG_SHARE allows: next sweep", z.ASG, r.leaving(z.ASG)+b.byASG[z.ASG])
	default:
		z.Replace = true
		b.n++
		b.byASG[z.ASG]++
	}
	return z
}

// planOrphans plans the release of the VolumeAttachments to nodes that are
// gone, with the instances that had their names; shard 0's alone.
func (r *Readings) planOrphans(cfg Config, p *Plan) {
	for _, va := range r.Attachments {
		if cfg.Shard != nil || r.hasNode(va.Spec.NodeName) {
			continue // a shard ≥ 1 knows only its own nodes: orphans are shard 0's
		}
		if why := r.orphanEvidence(va.Spec.NodeName); why != "" {
			p.Notes = append(p.Notes, fmt.Sprintf("attachment %s to missing node %s kept: %s", va.Name, va.Spec.NodeName, why))
			continue
		}
		o := Orphan{Attachment: va}
		for _, i := range r.ByDNSName[va.Spec.NodeName] {
			o.Instances = append(o.Instances, i.ID)
		}
		p.Orphans = append(p.Orphans, o)
	}
}

// planLeases plans the removal of our Leases idle past leaseIdle whose
// instance has no node and no hold; shard 0's alone.
func (r *Readings) planLeases(cfg Config, p *Plan, held map[string]bool) {
	if cfg.Shard != nil {
		return // shard 0's: a shard ≥ 1 knows only its own nodes
	}
	nodeIDs := r.ids
	if nodeIDs == nil { // readings made by hand (tests)
		nodeIDs = map[string]bool{}
		for _, n := range r.Nodes {
			nodeIDs[node.ProviderInstanceID(n.Spec.ProviderID)] = true
		}
	}
	for _, l := range r.Leases {
		id := lease.InstanceID(l.Name)
		if id == "" || held[id] || l.Spec.RenewTime == nil || r.Now.Sub(l.Spec.RenewTime.Time) < leaseIdle {
			continue
		}
		if nodeIDs[id] {
			continue
		}
		p.Leases = append(p.Leases, l)
	}
}
