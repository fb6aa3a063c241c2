package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Policy is what may be set per node group (GROUP_POLICY_TAGS: by the
// group's own tags, PolicyTags) and the load balancer's wait.
type Policy struct {
	// GroupTags: a group's node-drainer.io/ tags override REBALANCE_ACTION,
	// SCHEDULED_CHANGE_ACTION and DRAIN_TIMEOUT for its instances; off, no
	// group is read for them.
	GroupTags bool
	// LBDrainWait is how long after the node is excluded from load
	// balancers its evictions begin (0: at once).
	LBDrainWait time.Duration
}

// The tags of a group that override the function's settings for its
// instances (GROUP_POLICY_TAGS).
const (
	TagRebalanceAction       = "node-drainer.io/rebalance-action"        // as REBALANCE_ACTION
	TagScheduledChangeAction = "node-drainer.io/scheduled-change-action" // as SCHEDULED_CHANGE_ACTION
	TagDrainTimeout          = "node-drainer.io/drain-timeout"           // as DRAIN_TIMEOUT, at most MaxDrainTimeout
)

// PolicyTagPrefix starts every policy tag.
const PolicyTagPrefix = "node-drainer.io/"

// policyVars are the variables of Policy, documented with the others (Vars).
var policyVars = []Var{
	{"GROUP_POLICY_TAGS", "false", "Read each group's own tags node-drainer.io/rebalance-action, node-drainer.io/scheduled-change-action (ignore, cordon or drain) and node-drainer.io/drain-timeout (a Go duration, at most 100 heartbeat timeouts and 48h): they override REBALANCE_ACTION, SCHEDULED_CHANGE_ACTION and DRAIN_TIMEOUT for its instances. At most one autoscaling:DescribeAutoScalingGroups per event (none where the event already read the group), each group's tags kept 60 s; a bad value is logged, counted (GroupPolicyDefaulted) and the setting's own value used."},
	{"LB_DRAIN_WAIT", "0", "How long after the node is excluded from external load balancers (node.kubernetes.io/exclude-from-external-load-balancers, set with the cordon) its evictions begin: the target group's deregistration delay, plus its health check's interval (docs/operations.md); spent from the drain's time (keep it well below DRAIN_TIMEOUT) and never past its deadline, the hook heartbeated meanwhile; 0: at once."},
}

func init() { Vars = append(Vars, policyVars...) }

// readPolicy reads the group policy's switch and the load balancer's wait.
func (e *envReader) readPolicy(c *Config) {
	c.GroupTags = e.boolean("GROUP_POLICY_TAGS")
	raw := e.get("LB_DRAIN_WAIT")
	d, err := time.ParseDuration(raw)
	// not bounded here (the templates' patterns say what is accepted): the
	// wait never outlasts the drain's deadline (handler's waitLB)
	if err != nil || d < 0 {
		e.fail(fmt.Errorf("LB_DRAIN_WAIT=%q: want 0 or a positive duration such as 45s or 5m", raw))
	}
	c.LBDrainWait = d
}

// MaxDrainTimeout is the longest drain a group's node-drainer.io/drain-timeout
// may ask for: what a lifecycle hook lets an action wait, heartbeated (100
// heartbeat timeouts, at most 48 hours), and never less than DRAIN_TIMEOUT.
func (c Config) MaxDrainTimeout() time.Duration {
	limit := min(100*c.HeartbeatTimeout, 48*time.Hour)
	return max(limit, c.DrainTimeout)
}

// GroupOverrides are the settings a group's tags set for its instances; a
// zero field is the function's own.
type GroupOverrides struct {
	RebalanceAction       Action
	ScheduledChangeAction Action
	DrainTimeout          time.Duration
	// Refused says of each tag whose value was refused why ("tag=value:
	// want ..."): its setting's own value applies.
	Refused []string
}

// Any says whether a tag set anything, or was refused.
func (o GroupOverrides) Any() bool {
	return o.RebalanceAction != "" || o.ScheduledChangeAction != "" || o.DrainTimeout != 0 || len(o.Refused) > 0
}

// GroupPolicy reads a group's policy tags (tags: the group's, any others
// among them ignored). A value refused is said in Refused, never an error:
// an event is never failed for a tag.
func (c Config) GroupPolicy(tags map[string]string) GroupOverrides {
	var o GroupOverrides
	action := func(key string) Action {
		v, ok := tags[key]
		if !ok {
			return ""
		}
		a := Action(strings.ToLower(strings.TrimSpace(v)))
		if slices.Contains([]Action{ActionIgnore, ActionCordon, ActionDrain}, a) {
			return a
		}
		o.Refused = append(o.Refused, fmt.Sprintf("%s=%q: want ignore, cordon or drain", key, v))
		return ""
	}
	o.RebalanceAction = action(TagRebalanceAction)
	o.ScheduledChangeAction = action(TagScheduledChangeAction)
	if v, ok := tags[TagDrainTimeout]; ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if limit := c.MaxDrainTimeout(); err != nil || d <= 0 || d > limit {
			o.Refused = append(o.Refused, fmt.Sprintf("%s=%q: want a positive duration of at most %s (the hook's limit)", TagDrainTimeout, v, limit))
		} else {
			o.DrainTimeout = d
		}
	}
	return o
}
