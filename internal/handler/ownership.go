package handler

import (
	"context"
	"fmt"
	"strings"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
	"github.com/node-drainer/node-drainer/internal/instance"
	"github.com/node-drainer/node-drainer/internal/lifecycle"
	"github.com/node-drainer/node-drainer/internal/node"
)

// Whose is a lifecycle action? One pure function decides (whoseHook), from
// what is known of it (hookFacts); the readings it needs are made one at a
// time, only when it asks for them (readHookFacts), in the order it asks.

// hookFacts is what the ownership of a lifecycle action is decided on: the
// event, the attempt, and the readings made so far.
type hookFacts struct {
	kind      event.Kind // event.KindTerminate or event.KindLaunch
	act       lifecycle.Action
	attempt   int
	fromSweep bool
	// canReadTags: there is an Auto Scaling client to read the group's tags
	canReadTags bool
	tags        tagReading
	ec2         ec2Reading
	node        nodeReading
}

// tagReading is the reading of whether the group carries ASG_TAG_KEY.
type tagReading struct {
	read    bool
	carries bool
	// elsewhere: the group carries the tag but names another cluster, by
	// this tag of its own (discovery.Tag.Elsewhere)
	elsewhere string
	err       error
}

// ec2Reading is the reading of the instance (handler.ours): this cluster's
// or not, or unreadable.
type ec2Reading struct {
	read bool
	inst instance.Instance
	ours bool
	err  error
}

// nodeReading is the lookup of the instance's node by its providerID alone
// (EC2 unreadable): err nil means found.
type nodeReading struct {
	read bool
	err  error
}

// need is a reading whoseHook asks for before it can decide.
type need int

const (
	needNothing need = iota
	needGroupTags
	needEC2
	needNode
)

// verdict is what to do with a lifecycle action.
type verdict int

const (
	_ verdict = iota // the zero value: undecided, a reading is needed first (ownership.need)
	// verdictNotOurs: not ours (rules 4, 14); nothing is done. why says
	// so, or is empty when the EC2 reading said it (the instance is not
	// the cluster's).
	verdictNotOurs
	// verdictUnreadable: whether a launch hook is ours cannot be read (the
	// group's tags, or EC2); nothing is done, the error is returned and a
	// retry reads again.
	verdictUnreadable
	// verdictHeartbeatRetry: the terminate hook is ours by name but the
	// group's tags or EC2 are unreadable and nothing else says the group
	// is ours: heartbeated, so that Lambda's retry finds it alive, and the
	// error returned.
	verdictHeartbeatRetry
	// verdictNoNodeRetry: EC2 unreadable, the group ours by its tag alone,
	// and no node of the instance found in this cluster: it may be another
	// cluster's; heartbeated, left for a retry.
	verdictNoNodeRetry
	// verdictOthers: the instance is another cluster's, in a group ours by
	// its tag alone: another deployment's action, left to it (rule 14).
	verdictOthers
	// verdictCompleteOnly: the group is ours by configuration, the
	// instance not the cluster's: completed with CONTINUE, nothing else.
	verdictCompleteOnly
	// verdictOurs: ours; the path goes on (drain, or wait for the node).
	verdictOurs
	// verdictOursBlind: ours, EC2 unreadable: a terminate drains gracefully
	// without EC2's view (the zero reading is never "down").
	verdictOursBlind
)

// ownership is whoseHook's answer.
type ownership struct {
	need    need
	verdict verdict
	// tagged: the group is ours by its tag (read, or as a continuation's
	// first invocation found it), not by ASG_NAMES
	tagged bool
	why    string // what the outcome says (see each verdict)
	err    error  // verdictUnreadable, verdictHeartbeatRetry, verdictNoNodeRetry
}

// whoseHook decides whether a lifecycle action is ours to complete, and what
// to do when it is not, or cannot be told:
//
//   - by its group and its hook's name (rule 14): the group is allowed by
//     ASG_NAMES or carries ASG_TAG_KEY=ASG_TAG_VALUE, and the hook is one of
//     ours by name (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES; the
//     EventBridge rule filters the names too, the code does not rely on it).
//     The tag is read at the moment of acting (rule 11) — except on a
//     continuation, whose first invocation found the group ours: a drain
//     begun is finished, whatever became of the tag since;
//   - by its instance (rule 4): this cluster's by EC2's tags. A group listed
//     in ASG_NAMES, or found carrying the tag, makes the hook ours whatever
//     the instance is: nobody else completes it. A group ours by its tag
//     alone may hold another cluster's instances (two deployments that
//     select groups by the same tag and hook names receive each other's
//     events): those are left to their own node-drainer;
//   - when EC2 cannot be read: a terminate hook known to be ours (its group
//     configured, a continuation, or taken by the sweep) is drained without
//     EC2's view, so that it is still heartbeated and completed in time —
//     but in a group ours by its tag alone only once a node of it is found
//     in this cluster; otherwise it is heartbeated and left for a retry. A
//     launch hook waits for the retry;
//   - when the group's tags cannot be read (Auto Scaling throttling): the
//     same, a terminate hook heartbeated and left for a retry, a launch
//     hook waiting for it.
func whoseHook(cfg config.Config, f hookFacts) ownership {
	tagged, stop := byGroup(cfg, f)
	switch {
	case stop != nil:
		return *stop
	case !f.ec2.read:
		return ownership{need: needEC2, tagged: tagged}
	case f.ec2.err != nil:
		return withoutEC2(cfg, f, tagged)
	case f.ec2.ours:
		return ownership{verdict: verdictOurs, tagged: tagged}
	}
	asg := f.act.ASG
	if other := otherCluster(cfg, f.ec2.inst); tagged && !cfg.ListsASG(asg) && other != "" {
		why := fmt.Sprintf("instance %s carries %s: another cluster's, in group %s which carries %s=%s here too; its lifecycle action is left to that cluster's node-drainer (give each deployment its own ASG_TAG_VALUE, or tag each group with its cluster's kubernetes.io/cluster/<name>)",
			f.ec2.inst.ID, other, asg, cfg.ASGTagKey, cfg.ASGTagValue)
		return ownership{verdict: verdictOthers, tagged: tagged, why: why}
	}
	if !cfg.ListsASG(asg) && !tagged {
		return ownership{verdict: verdictNotOurs} // EC2's reading says why
	}
	how, what := "in ASG_NAMES", "nothing drained"
	if tagged {
		how = "tagged " + cfg.ASGTagKey + "=" + cfg.ASGTagValue
	}
	if f.kind == event.KindLaunch {
		what = "no node waited for"
	}
	return ownership{verdict: verdictCompleteOnly, tagged: tagged, why: "; its ASG is " + how + ": lifecycle action completed, " + what}
}

// byGroup is whoseHook's first half, rule 14: the group and the hook's
// name. It says whether the group is ours by its tag, or (stop) what was
// decided, or the reading it needs, before the instance is looked at.
func byGroup(cfg config.Config, f hookFacts) (tagged bool, stop *ownership) {
	asg, hook := f.act.ASG, f.act.Hook
	var own ownership
	switch {
	case !cfg.AllowsASG(asg) && !cfg.SelectsByTag():
		own = notOurs("ASG " + asg + " is not in ASG_NAMES")
	case !cfg.OwnsHook(hook):
		own = notOurs("hook " + hook + " is not node-drainer's (TERMINATE_HOOK_NAME, LAUNCH_HOOK_NAME, HOOK_NAMES: " + strings.Join(cfg.OwnedHooks(), ", ") + ")")
	case cfg.AllowsASG(asg):
		return false, nil
	case f.attempt > 1:
		return true, nil
	case !f.canReadTags:
		own = notOurs("ASG " + asg + " is not in ASG_NAMES, and there is no Auto Scaling client to read its tags")
	case !f.tags.read:
		own = ownership{need: needGroupTags}
	case f.tags.err != nil && f.kind == event.KindLaunch:
		own = ownership{verdict: verdictUnreadable, err: f.tags.err}
	case f.tags.err != nil:
		// a terminate hook ours by name in a group that cannot be told
		// (Auto Scaling throttling): heartbeated for Lambda's retry, as
		// when EC2 is unreadable (withoutEC2)
		own = ownership{verdict: verdictHeartbeatRetry, err: f.tags.err}
	case f.tags.carries:
		return true, nil
	case f.tags.elsewhere != "":
		own = notOurs("ASG " + asg + " carries the tag " + groupTag(cfg).String() + " but names another cluster (" + f.tags.elsewhere +
			"): another deployment's group, its lifecycle actions left to it")
	default:
		own = notOurs("ASG " + asg + " is not in ASG_NAMES and does not carry the tag " + groupTag(cfg).String())
	}
	return false, &own
}

// withoutEC2 is whoseHook's verdict when EC2 cannot be read.
func withoutEC2(cfg config.Config, f hookFacts, tagged bool) ownership {
	err := f.ec2.err
	known := cfg.ListsASG(f.act.ASG) || tagged || f.attempt > 1 || f.fromSweep
	byTagAlone := tagged && !cfg.ListsASG(f.act.ASG) && f.attempt == 1
	switch {
	case f.kind == event.KindLaunch:
		return ownership{verdict: verdictUnreadable, tagged: tagged, err: err}
	case !known:
		return ownership{verdict: verdictHeartbeatRetry, tagged: tagged, err: err}
	case byTagAlone && !f.node.read:
		return ownership{need: needNode, tagged: tagged}
	case byTagAlone && f.node.err != nil:
		why := fmt.Sprintf("EC2 unreadable and no node of %s in this cluster (%v): in a group ours by its tag alone it may be another cluster's; left for a retry", f.act.InstanceID, f.node.err)
		return ownership{verdict: verdictNoNodeRetry, tagged: tagged, why: why, err: fmt.Errorf("%s: %w", why, err)}
	}
	return ownership{verdict: verdictOursBlind, tagged: tagged}
}

func notOurs(why string) ownership { return ownership{verdict: verdictNotOurs, why: why} }

// groupTag is the tag that makes a group ours (ASG_TAG_KEY=ASG_TAG_VALUE),
// unless the group names another cluster than this one (discovery.Tag).
func groupTag(cfg config.Config) discovery.Tag {
	return discovery.Tag{Key: cfg.ASGTagKey, Value: cfg.ASGTagValue, ClusterTagKey: cfg.ClusterTagKey, ClusterName: cfg.ClusterName}
}

// otherCluster names the tag by which an instance is another cluster's
// ("" when none says so): kubernetes.io/cluster/<name> other than
// CLUSTER_TAG_KEY, or EKS's eks:cluster-name naming another cluster.
func otherCluster(cfg config.Config, inst instance.Instance) string {
	return discovery.OtherCluster(inst.Tags, cfg.ClusterTagKey, cfg.ClusterName)
}

// The tags that name an instance's cluster (discovery's).
const (
	clusterTagPrefix  = discovery.ClusterTagPrefix
	eksClusterNameTag = discovery.EKSClusterNameTag
)

// actionOf is the lifecycle action an event (or the sweep) names.
func actionOf(la event.LifecycleAction) lifecycle.Action {
	return lifecycle.Action{ASG: la.AutoScalingGroupName, Hook: la.HookName, Token: la.Token, InstanceID: la.InstanceID}
}

// whose is the first step of a hook's path: the event's lifecycle action
// (the log names it from here on), whether it is ours (whoseHook, with the
// readings it asks for), and, when it is not ours or cannot be told, what
// that verdict asks done (a heartbeat, the outcome, a completion). ok says
// that the path goes on with inst (a zero reading but its ID when EC2 is
// unreadable: verdictOursBlind).
func (k *hook) whose(ctx context.Context) (inst instance.Instance, ok bool, err error) {
	k.act = actionOf(*k.ev.Lifecycle)
	act := k.act
	k.log = k.log.With("asg", act.ASG, "hook", act.Hook, "instance", act.InstanceID)
	f := hookFacts{kind: k.ev.Kind, act: act, attempt: k.attempt, fromSweep: k.fromSweep, canReadTags: k.h.c.AutoScaling != nil}
	for {
		own := whoseHook(k.h.cfg, f)
		switch own.need {
		case needGroupTags:
			// the SDK's retryer retries throttling and 5xx; a failure after
			// it is the verdict's: the event's retry, a minute later, reads
			// again
			f.tags.read = true
			read := &groupsRead{DescribeAutoScalingGroupsAPIClient: k.h.c.AutoScaling}
			// the group as read is kept: the group's policy and BATCH_CORDON
			// (its instances, batch.go) read it from there, not again
			f.tags.carries, f.tags.elsewhere, k.group, f.tags.err = discovery.SelectsGroup(ctx, read, act.ASG, groupTag(k.h.cfg))
			k.h.kept(act.ASG, read)
			continue
		case needEC2:
			f.ec2.read = true
			f.ec2.inst, f.ec2.ours, f.ec2.err = k.ours(ctx, act.InstanceID)
			continue
		case needNode:
			f.node.read = true
			lctx, cancel := context.WithTimeout(ctx, resumeLookupLimit)
			_, f.node.err = node.Find(lctx, k.h.c.Kube, "", act.InstanceID)
			cancel()
			continue
		}
		return k.apply(ctx, own, f.ec2)
	}
}

// apply does what an ownership verdict asks of a hook that is not (yet)
// ours, and says whether the path goes on.
func (k *hook) apply(ctx context.Context, own ownership, read ec2Reading) (instance.Instance, bool, error) {
	switch own.verdict {
	case verdictNotOurs:
		if own.why != "" {
			k.out.Action, k.out.Detail = ActionIgnored, own.why
		}
		return read.inst, false, nil
	case verdictUnreadable:
		return read.inst, false, own.err
	case verdictHeartbeatRetry:
		k.heartbeatForRetry(ctx)
		return read.inst, false, own.err
	case verdictNoNodeRetry:
		k.log.WarnContext(ctx, "EC2 unreadable and no node of the instance here, in a group ours by its tag alone: heartbeated, left for a retry", "error", read.err)
		k.heartbeatForRetry(ctx)
		k.out.Action, k.out.Detail = ActionIgnored, own.why
		return read.inst, false, own.err
	case verdictOthers:
		k.out.Action, k.out.Detail = ActionIgnored, own.why
		k.log.WarnContext(ctx, "lifecycle action left to another deployment", "detail", k.out.Detail)
		return read.inst, false, nil
	case verdictCompleteOnly:
		k.out.Action = ActionCompleted
		k.out.Detail += own.why
		return read.inst, false, k.complete(ctx, lifecycle.Continue, nil)
	case verdictOursBlind:
		k.log.WarnContext(ctx, "EC2 unreadable; ASG is configured: draining gracefully", "error", read.err)
		return instance.Instance{ID: k.act.InstanceID}, true, nil
	}
	return read.inst, true, nil
}

// heartbeatForRetry heartbeats a hook left for a retry: it is ours by name,
// and Lambda's retry, two minutes away at worst, must find it alive.
func (k *hook) heartbeatForRetry(ctx context.Context) {
	if err := lifecycle.Heartbeat(ctx, k.h.c.ASG, k.act); err != nil {
		k.log.WarnContext(ctx, "heartbeat for the retry failed", "error", err)
	}
}
