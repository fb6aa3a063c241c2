package config

import (
	"fmt"
	"strings"
)

// PodPolicy is whether drains honour the annotations by which pods ask
// not to be disrupted (karpenter.sh/do-not-disrupt: "true",
// cluster-autoscaler.kubernetes.io/safe-to-evict: "false").
type PodPolicy string

// The pod policies.
const (
	// PodPolicyIgnore: such pods are drained as any other (the default:
	// the behaviour before the setting).
	PodPolicyIgnore PodPolicy = "ignore"
	// PodPolicyHonor: a voluntary drain (a rebalance recommendation, a
	// scheduled change ahead of its start) does not evict them and is
	// reported blocked by them; a forced one (a terminate hook, a spot or
	// capacity reservation warning, a scheduled change at its start)
	// evicts them last, their grace period whole before its deadline.
	PodPolicyHonor PodPolicy = "honor"
)

func init() {
	Vars = append(Vars, Var{"POD_POLICY", string(PodPolicyIgnore), "Pods annotated karpenter.sh/do-not-disrupt: \"true\" or cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\": ignore (drained as any other) or honor (a voluntary drain does not evict them and is reported blocked by them; a forced drain evicts them last, with their grace period whole before its deadline, under their PDB)."})
}

// readPodPolicy reads POD_POLICY.
func (e *envReader) readPodPolicy(c *Config) {
	switch p := PodPolicy(strings.ToLower(e.get("POD_POLICY"))); p {
	case PodPolicyIgnore, PodPolicyHonor:
		c.PodPolicy = p
	default:
		e.fail(fmt.Errorf("POD_POLICY=%q: want ignore or honor", e.get("POD_POLICY")))
	}
}
