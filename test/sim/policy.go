package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The policies of issue 55, drawn per day from a stream of their own (the
// plans drawn before them stay as they were): POD_POLICY with pods that
// carry Karpenter's or the cluster autoscaler's annotation (or one of their
// values that protects nothing), GROUP_POLICY_TAGS with the node group's
// node-drainer.io/ tags (bad values among them), LB_DRAIN_WAIT,
// BATCH_CORDON, NODE_CONDITIONS, and rebalance recommendations (the
// world's one voluntary drain: REBALANCE_ACTION, or the group's tag, says
// drain or cordon). Each setting goes through the function's real
// configuration (Plan.Env, read by config.FromEnv).

// The annotations by which a pod asks not to be disrupted, as the world
// knows them (not the product's matching: the world judges it).
const (
	annDoNotDisrupt = "karpenter.sh/do-not-disrupt"
	annSafeToEvict  = "cluster-autoscaler.kubernetes.io/safe-to-evict"
)

// The group policy tags (docs/configuration.md, "Group policy by tag").
const (
	tagRebalance    = "node-drainer.io/rebalance-action"
	tagScheduled    = "node-drainer.io/scheduled-change-action"
	tagDrainTimeout = "node-drainer.io/drain-timeout"
)

// goodTimeouts are the drain-timeout tag values the world draws that are
// valid (positive, within 100 heartbeat timeouts and 48h); every other
// value it draws is bad and must leave DRAIN_TIMEOUT in force.
var goodTimeouts = map[string]time.Duration{"2m": 2 * time.Minute, "20m": 20 * time.Minute}

// drawPolicies draws the day's policies into p.
func drawPolicies(seed int64, p *Plan) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9011c1e5))
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	chance := func(f float64) bool { return r.Float64() < f }
	env := p.Env
	env["POD_POLICY"] = pick("honor", "honor", "ignore")
	env["GROUP_POLICY_TAGS"] = pick("true", "false")
	env["LB_DRAIN_WAIT"] = pick("0", "20s", "45s", "90s")
	env["BATCH_CORDON"] = pick("true", "false")
	env["NODE_CONDITIONS"] = pick("true", "false")
	env["REBALANCE_ACTION"] = pick("drain", "drain", "cordon")
	env["ADVISORY_MARK_TTL"] = "10m" // a rebalance's marks lapse within the day (I7)
	p.Protect = map[string]string{}
	for _, app := range []string{"web", "db-0", "db-1", "solo"} {
		if chance(0.35) {
			p.Protect[app] = pick(annDoNotDisrupt+"=true", annSafeToEvict+"=false", annDoNotDisrupt+"=true",
				annDoNotDisrupt+"=false", annSafeToEvict+"=true") // the last two protect nothing
		}
	}
	if chance(0.7) {
		p.GroupTags = map[string]string{}
		for k, vs := range map[string][]string{
			tagRebalance:    {"drain", "cordon", "ignore", "evict", ""},
			tagDrainTimeout: {"2m", "20m", "soon", "-5m", "0s", "999h", ""},
			tagScheduled:    {"drain", "maybe", ""},
		} {
			if v := vs[r.IntN(len(vs))]; v != "" {
				p.GroupTags[k] = v
			}
		}
	}
	if chance(0.5) {
		nodes := p.Nodes
		if p.SkippedGroup {
			nodes++
		}
		for range 1 + r.IntN(2) {
			p.Events = append(p.Events, Happening{At: time.Duration(5+r.IntN(1200)) * time.Second, What: "rebalance", Node: r.IntN(nodes)})
		}
		sort.SliceStable(p.Events, func(i, j int) bool { return p.Events[i].At < p.Events[j].At })
	}
}

// protects reports whether annotation ("key=value") asks not to disrupt.
func protects(ann string) bool {
	return ann == annDoNotDisrupt+"=true" || ann == annSafeToEvict+"=false"
}

// annotate gives a pod of app its drawn annotation (a controller's
// replacement carries its template's, as this does).
func (k *kube) annotate(p *corev1.Pod, app string) {
	ann, ok := k.w.Plan.Protect[app]
	if !ok {
		return
	}
	key, val, _ := strings.Cut(ann, "=")
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = val
}

// protected reports whether pod p asks not to be disrupted, by the world's
// reading of its annotations.
func protected(p *corev1.Pod) bool {
	return p.Annotations[annDoNotDisrupt] == "true" || p.Annotations[annSafeToEvict] == "false"
}

// honors reports whether the function's configuration honours the pod
// policy.
func (w *World) honors() bool { return w.lambda.cfg.PodPolicy == "honor" }

// groupTimeout is the drain timeout of the node group's instances: its
// tag's when GROUP_POLICY_TAGS is on and the value is good, else
// DRAIN_TIMEOUT.
func (w *World) groupTimeout(group string) time.Duration {
	if group == "nodes" && w.lambda.cfg.GroupTags {
		if d, ok := goodTimeouts[w.Plan.GroupTags[tagDrainTimeout]]; ok {
			return d
		}
	}
	return w.lambda.cfg.DrainTimeout
}

// badTags lists the group's tags with a bad value that the function
// reads (none when GROUP_POLICY_TAGS is off: nothing reads them).
func (w *World) badTags() []string {
	if !w.lambda.cfg.GroupTags {
		return nil
	}
	return badTagsOf(w.Plan.GroupTags)
}

// badTagsOf lists the tags with a bad value, sorted.
func badTagsOf(tags map[string]string) []string {
	var bad []string
	for k, v := range tags {
		if k == tagDrainTimeout && goodTimeouts[v] == 0 || k != tagDrainTimeout && !slices.Contains([]string{"ignore", "cordon", "drain"}, v) {
			bad = append(bad, k+"="+v)
		}
	}
	sort.Strings(bad)
	return bad
}

// tagGroup puts the drawn policy tags on the node group.
func (w *World) tagGroup() {
	a := w.asg
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range w.Plan.GroupTags {
		a.groups["nodes"].tags[k] = v
	}
}

// rebalance plays a rebalance recommendation for instance id: EC2 sends
// it while the instance runs (a voluntary drain's event).
func (w *World) rebalance(id string) {
	if w.ec2.truth(id) != "running" {
		return
	}
	w.countPolicy("rebalance_events")
	payload := envelope("aws.ec2", "EC2 Instance Rebalance Recommendation", time.Now(), map[string]string{"instance-id": id})
	w.bridge.emit(fmt.Sprintf("rebalance/%s/%d", id, w.now().Milliseconds()), payload, id)
}

// countPolicy counts one thing the policies' day played.
func (w *World) countPolicy(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.policies == nil {
		w.policies = map[string]int{}
	}
	w.policies[what]++
}

// policyDay counts the day's draws of the policies.
func (w *World) policyDay() {
	cfg := w.lambda.cfg
	on := map[string]bool{
		"pod_policy_honor": cfg.PodPolicy == "honor", "group_policy_tags": cfg.GroupTags, "lb_drain_wait": cfg.LBDrainWait > 0,
		"batch_cordon": cfg.BatchCordon, "node_conditions": cfg.NodeConditions,
		"group_tags_bad": len(w.Plan.GroupTags) > 0 && len(badTagsOf(w.Plan.GroupTags)) > 0, "group_tags": len(w.Plan.GroupTags) > 0,
	}
	n := 0
	for k, v := range on {
		if v {
			w.countPolicy("days_" + k)
			if !strings.HasPrefix(k, "group_tags") {
				n++
			}
		}
	}
	w.countPolicy(fmt.Sprintf("days_settings_on_%d", n))
	for _, ann := range w.Plan.Protect {
		if protects(ann) {
			w.countPolicy("protected_apps")
		} else {
			w.countPolicy("annotated_unprotected_apps")
		}
	}
}
