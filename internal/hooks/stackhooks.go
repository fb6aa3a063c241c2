package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/node-drainer/node-drainer/internal/discovery"
)

// hookProperties are the Custom::LifecycleHooks resource's properties (as
// CloudFormation sends them: every scalar a string).
type hookProperties struct {
	AsgNames            []string `json:"AsgNames"`
	TerminateHookName   string   `json:"TerminateHookName"`
	LaunchHookName      string   `json:"LaunchHookName"`
	CreateTerminateHook string   `json:"CreateTerminateHook"`
	CreateLaunchHook    string   `json:"CreateLaunchHook"`
	HeartbeatTimeout    string   `json:"HeartbeatTimeout"`
	AsgTagKey           string   `json:"AsgTagKey"`
	AsgTagValue         string   `json:"AsgTagValue"`
	// SweepSchedule is the sweep rule's schedule ("": none), which the
	// hooks' HeartbeatTimeout must outlast (checkSweepOutlasted).
	SweepSchedule string `json:"SweepSchedule"`
	// Owner is the deployment's name in its hooks' marks (its function's;
	// empty: the function serving the request).
	Owner string `json:"Owner"`
	// Release "true": the resource that frees, on an update, the groups
	// leaving the deployment, before their grants change (template.yaml's
	// LifecycleHooksRelease, terraform's release invocation); nothing else.
	Release string `json:"Release"`
	// ServiceTimeout is CloudFormation's own bound on the request
	// (seconds), which a removal's wait fits in (drainWaitBound).
	ServiceTimeout seconds `json:"ServiceTimeout"`
}

// serveHooks does what a request asks; it returns what it changed
// ("put <group>/<hook>", "removed <group>/<hook>").
//
//	Create  the hooks on every listed group and every tagged group of
//	        this cluster, marked the deployment's;
//	Update  the same with the new properties, on the listed and the tagged
//	        groups, and then, of what the old properties' deployment had,
//	        what the new one does not have removed (dropStale): a group
//	        still listed or tagged keeps its hook, a renamed hook is put
//	        under its new name before the old name goes;
//	Delete  the removal marked on the function first (no sweep puts a hook
//	        back), then the deployment's hooks removed from the listed and
//	        the tagged groups: those its mark names, no other.
func (k *Keeper) serveHooks(ctx context.Context, req cfn.Event) ([]string, error) {
	if k.c.Hooks == nil {
		return nil, errors.New("no Auto Scaling client to put lifecycle hooks with")
	}
	props, err := decodeHookProperties(req.ResourceProperties)
	if err != nil {
		return nil, err
	}
	s := &hooksServed{k: k, owner: k.owner(props), tagged: map[discovery.Tag][]string{}, start: time.Now()}
	release := props.Release == "true"
	switch req.RequestType {
	case cfn.RequestCreate, cfn.RequestUpdate:
		if err := props.check(); err != nil {
			return nil, err // refused before anything changes, the release step too
		}
		if !release {
			s.unmarkRemoval(ctx, props)
		}
		old, err := decodeHookProperties(req.OldResourceProperties)
		if req.RequestType == cfn.RequestCreate || err != nil {
			if !release {
				err = s.put(ctx, props, nil)
			}
		} else {
			err = s.update(ctx, old, props, release)
		}
		if err != nil {
			return nil, err
		}
	case cfn.RequestDelete:
		if !release {
			s.removeAll(ctx, props)
		}
	default:
		return nil, fmt.Errorf("request type %q is not one CloudFormation sends", req.RequestType)
	}
	if len(s.failed) > 0 {
		return s.did, fmt.Errorf("lifecycle hooks: %s", strings.Join(s.failed, "; "))
	}
	return s.did, nil
}

// owner is the name of the properties' deployment in its hooks' marks.
func (k *Keeper) owner(p hookProperties) string {
	if p.Owner != "" {
		return p.Owner
	}
	return k.cfg.FunctionName
}

// hooksServed is what a hooks request changed (did) and what it could not
// (failed). The hooks are the stack's, as terraform's hook resources are:
// put and removed in a dry run too (DRY_RUN concerns nodes and instances;
// a dry run with no hooks would see no scale-in).
type hooksServed struct {
	k           *Keeper
	owner       string
	replaces    string // the old properties' owner, on an update
	did, failed []string
	tagged      map[discovery.Tag][]string // the groups carrying each tag, as read
	start       time.Time                  // when the request began (the real clock: a removal's wait is timed by it)
}

// hooksDryRun: the stack's hooks are never a dry run's (hooksServed).
const hooksDryRun = false

// update serves an Update: the new deployment's hooks put (not by the
// release step), then what the old one had that the new one does not
// removed.
func (s *hooksServed) update(ctx context.Context, old, props hookProperties, release bool) error {
	s.replaces = s.k.owner(old)
	oldGroups, oldErr := s.groups(ctx, old)
	if !release {
		if err := s.put(ctx, props, oldGroups); err != nil {
			return err
		}
	}
	newGroups, newErr := s.groups(ctx, props)
	if err := errors.Join(oldErr, newErr); err != nil {
		if release { // which groups leave is unknown: the update fails before their grants change
			s.failed = append(s.failed, "the groups leaving the deployment unread, none released ("+releaseFailed+"): "+err.Error())
			return nil
		}
		// a group not listed may still carry the tag: none is taken as leaving
		s.left(ctx, "the tagged groups' hooks", err)
		oldGroups = slices.DeleteFunc(oldGroups, func(g string) bool { return !slices.Contains(props.AsgNames, g) })
	}
	s.dropStale(ctx, old, props, oldGroups, newGroups, release)
	return nil
}

// groups are the groups the properties' deployment has: listed, and
// carrying its tag (read now; the error is the tag's reading), whatever
// cluster they name: a removal takes only the hooks its mark names, and
// may find one on any group carrying the tag.
func (s *hooksServed) groups(ctx context.Context, p hookProperties) ([]string, error) {
	tagged, err := s.taggedGroups(ctx, discovery.Tag{Key: p.AsgTagKey, Value: p.AsgTagValue})
	all := append(slices.Clone(p.AsgNames), tagged...)
	slices.Sort(all)
	return slices.Compact(all), err
}

// putTag is the tag of the groups the properties' hooks are put on: theirs,
// less the groups that name another cluster than the function's, as the
// sweep chooses them (groupTag). A hook put on another cluster's group is
// left by this deployment (notOurs), and every scale-in there waits out
// its timeout.
func (s *hooksServed) putTag(p hookProperties) discovery.Tag {
	return discovery.Tag{Key: p.AsgTagKey, Value: p.AsgTagValue, ClusterTagKey: s.k.cfg.ClusterTagKey, ClusterName: s.k.cfg.ClusterName}
}

// taggedGroups are the groups tag selects, read once a request.
func (s *hooksServed) taggedGroups(ctx context.Context, tag discovery.Tag) ([]string, error) {
	if names, ok := s.tagged[tag]; ok {
		return names, nil
	}
	groups, err := discovery.Tagged(ctx, s.k.c.Hooks, tag)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, g := range groups {
		names = append(names, aws.ToString(g.AutoScalingGroupName))
	}
	s.tagged[tag] = names
	return names, nil
}

// put puts the hooks the properties ask for, marked the deployment's, on
// every listed group (a name that is no group fails the request) and on
// the tagged groups of this cluster (putTag): at a create too, so that a
// deployment with no sweep hooks them (its first sweep would, else none
// until an update), and at an update (had: the groups the old properties'
// deployment had) a hook renamed is there before its old name goes. A
// hook of our name the deployment does not own alone is left as it is
// (discovery's marks.go): on a listed group it did not have, another
// deployment's or none's fails the request naming it; the others are said.
func (s *hooksServed) put(ctx context.Context, props hookProperties, had []string) error {
	hooks, err := props.hooks()
	if err != nil {
		return err
	}
	for i := range hooks {
		hooks[i].Owner = s.owner
		if s.replaces != s.owner {
			hooks[i].Replaces = s.replaces // the function renamed: its mark taken over
		}
	}
	refuse := func(g string) bool { return !slices.Contains(had, g) }
	res, err := discovery.EnsureNamed(ctx, s.k.c.Hooks, props.AsgNames, hooks, refuse, hooksDryRun)
	if err != nil {
		return err
	}
	tagged, err := s.taggedGroups(ctx, s.putTag(props))
	if err != nil {
		s.left(ctx, "the tagged groups without the new hooks", err)
	}
	only := slices.DeleteFunc(slices.Clone(tagged), func(g string) bool { return slices.Contains(props.AsgNames, g) })
	more := discovery.EnsureOn(ctx, s.k.c.Hooks, only, hooks, hooksDryRun)
	res.Put, res.Failed = append(res.Put, more.Put...), append(res.Failed, more.Failed...)
	for _, p := range res.Put {
		s.did = append(s.did, "put "+p)
	}
	for _, n := range append(res.NotOurs, more.NotOurs...) {
		s.did = append(s.did, "left "+n)
	}
	s.failed = append(s.failed, res.Failed...)
	return nil
}

// dropStale removes, of the hooks the old properties' deployment had on
// its groups, those the new one does not have: from a group it no longer
// lists nor tags, every old name; from a group it keeps, the old name of a
// hook renamed (its new name put already). A hook turned off keeps its
// name and is not removed from a group kept (its operator may manage it
// from now on). Only hooks the deployment's mark names are removed.
// release: only the groups leaving.
//
// In the release step a hook that cannot be removed fails the update
// (SAM's answer FAILED, terraform's invocation an error): the grants on
// its group have not changed yet, so the stack rolls back, or the apply
// stops, with the old grants, and the next update tries again; a success
// would narrow the grant over a hook the function could then never remove,
// and every scale-in there would wait out its timeout. In the main step
// one does not (a rollback would not remove it either: the grant on a
// group no longer listed may be gone); it is said, with what removes it.
func (s *hooksServed) dropStale(ctx context.Context, old, props hookProperties, oldGroups, newGroups []string, release bool) {
	kept := []string{props.TerminateHookName, props.LaunchHookName}
	take := map[string][]string{}
	for _, g := range oldGroups {
		drop := old.names()
		if slices.Contains(newGroups, g) {
			if release {
				continue
			}
			drop = slices.DeleteFunc(drop, func(n string) bool { return slices.Contains(kept, n) })
		}
		if len(drop) > 0 {
			take[g] = drop
		}
	}
	// the drains in flight under the hooks removed waited for first,
	// bounded, as an uninstall's (rule 17): a scale-in begun under a
	// renamed hook's old name is not completed by its deletion
	for _, f := range s.removeAfterDrains(ctx, old, take, s.k.owner(old)) {
		if release {
			s.failed = append(s.failed, f+": "+releaseFailed)
			continue
		}
		s.left(ctx, f, errors.New("remove it by hand (aws autoscaling delete-lifecycle-hook)"))
	}
}

// releaseFailed is what a failed release step says: what the operator does
// (terraform keeps an update's new input in its state even when the
// invocation fails, so it does not run the release step again).
const releaseFailed = "the update stops before the grants change; mend the cause and update again " +
	"(terraform does not run this step again for the same input: delete the leaving groups' hooks by hand once no instance waits under them, " +
	"aws autoscaling delete-lifecycle-hook, then apply again)"

// left says a hook left that the deployment no longer wants; the update
// goes on.
func (s *hooksServed) left(ctx context.Context, what string, why error) {
	s.did = append(s.did, "left "+what+": "+why.Error())
	s.k.log.ErrorContext(ctx, "a hook the deployment no longer wants may be left", "what", what, "error", why)
}

// removeAll removes the deployment's hooks from the listed groups, from
// the groups carrying the tag, which the sweep put there, and from the
// groups that carried it and no longer do (untaggedSince): an uninstalled
// node-drainer leaves no hook that would hold every scale-in for its
// heartbeat timeout. The removal is marked on the function first, so that
// no sweep puts a hook back (removal.go). Only the hooks the deployment's
// mark names go: another deployment's, another tool's, one put by hand
// stay (rule 18).
//
// This is the uninstall, the one path that deletes a hook of ours while an
// instance may wait under it (rule 17): the deletion completes the action
// (CONTINUE, or ABANDON for a launch), and the drain in flight is cut. So
// the removal first waits, bounded, for the drains in flight under the
// hooks it deletes (drainwait.go), and then says each one it cut (the
// groups read just before the deletions).
func (s *hooksServed) removeAll(ctx context.Context, props hookProperties) {
	if props.AsgTagKey != "" { // else no sweep puts hooks: no mark (nor its grant)
		if err := s.k.markRemoval(ctx, true); err != nil {
			s.left(ctx, "the removal unmarked, a sweep may put a hook back", err)
		}
	}
	groups, err := s.groups(ctx, props)
	if err != nil {
		s.failed = append(s.failed, err.Error())
	}
	groups = append(groups, s.untaggedSince(ctx, props, groups)...)
	take := map[string][]string{}
	for _, g := range groups {
		take[g] = props.names()
	}
	s.failed = append(s.failed, s.removeAfterDrains(ctx, props, take, s.owner)...)
}

// untaggedSince are, in tag mode (else no sweep put a hook), the groups
// other than known where a hook of the properties' names carries the
// deployment's mark: put by a sweep, or by a create or update, while the
// group carried the tag, which it no longer does (taken off, or its value
// changed), or on another cluster's group before that was fixed (C3).
// Nothing else finds them: the groups carrying the tag are read now. Every
// group of the region is read for them (one DescribeLifecycleHooks each);
// a group unread fails the removal, which is made again. The deletion of
// such a hook is granted on any group (template.yaml's GroupTagPolicy,
// discovery.tf: UntaggedGroupHooks), the tag's condition no longer met.
func (s *hooksServed) untaggedSince(ctx context.Context, props hookProperties, known []string) []string {
	if props.AsgTagKey == "" {
		return nil
	}
	more, failed, err := discovery.Marked(ctx, s.k.c.Hooks, props.names(), s.owner, known)
	if err != nil {
		failed = append(failed, "the groups no longer tagged unread, their hooks left: "+err.Error())
	}
	s.failed = append(s.failed, failed...)
	return more
}

// sayCut says, of the hooks a removal deleted ("<group>/<hook>"), each
// one an instance still waited under in its transition (waiting, by group,
// read just before): its action ended by the deletion.
func (s *hooksServed) sayCut(ctx context.Context, p hookProperties, removed []string, waiting map[string][]string, werr error) {
	if werr != nil {
		s.did = append(s.did, "the instances waiting under the hooks removed unread: "+werr.Error())
		return
	}
	cut := under(p, removed, waiting)
	for _, r := range slices.Sorted(maps.Keys(cut)) {
		s.did = append(s.did, "cut "+r+": "+strings.Join(cut[r], ", ")+" waited under it")
		s.k.log.WarnContext(ctx, "a hook removed while an instance waited under it: its lifecycle action ended undrained", "hook", r, "waiting", cut[r])
	}
}

// unmarkRemoval takes off a removal's mark left by a removal that failed
// (the deployment created or updated again); one that stays is said: the
// sweep puts no hook while it is there.
func (s *hooksServed) unmarkRemoval(ctx context.Context, props hookProperties) {
	if props.AsgTagKey == "" {
		return // no sweep puts hooks: no mark (nor its grant)
	}
	if err := s.k.markRemoval(ctx, false); err != nil {
		s.did = append(s.did, "the removal's mark left: "+err.Error())
		s.k.log.ErrorContext(ctx, "the function's removal mark could not be taken off: the sweep puts no hook while it is there", "error", err)
	}
}

func decodeHookProperties(m map[string]any) (hookProperties, error) {
	var p hookProperties
	b, err := json.Marshal(m)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		return p, fmt.Errorf("the resource's properties: %w", err)
	}
	p.AsgNames = slices.DeleteFunc(p.AsgNames, func(s string) bool { return s == "" })
	return p, nil
}

// wanted are the hooks the properties create (heartbeat: the timeout they
// are put with).
func (p hookProperties) wanted(heartbeat int32) []discovery.Hook {
	return discovery.Wanted(p.TerminateHookName, p.CreateTerminateHook == "true", p.LaunchHookName, p.CreateLaunchHook == "true", heartbeat)
}

// names are the names of the hooks the properties create.
func (p hookProperties) names() []string {
	var n []string
	for _, h := range p.wanted(0) {
		n = append(n, h.Name)
	}
	return n
}

// heartbeat is the properties' HeartbeatTimeout in seconds, within Auto
// Scaling's limits.
func (p hookProperties) heartbeat() (int64, error) {
	hb, err := strconv.ParseInt(p.HeartbeatTimeout, 10, 32)
	if err != nil || hb < 30 || hb > 7200 {
		return 0, fmt.Errorf("HeartbeatTimeout %q: want whole seconds from 30 to 7200", p.HeartbeatTimeout)
	}
	return hb, nil
}

// check refuses properties a Create or an Update must not put: a bad
// HeartbeatTimeout, one the sweep's period does not fit in, a hook asked
// for without its name.
func (p hookProperties) check() error {
	hb, err := p.heartbeat()
	if err != nil {
		return err
	}
	if err := checkSweepOutlasted(hb, p.SweepSchedule); err != nil {
		return err
	}
	if p.CreateTerminateHook == "true" && p.TerminateHookName == "" {
		return errors.New("CreateTerminateHook without a TerminateHookName")
	}
	if p.CreateLaunchHook == "true" && p.LaunchHookName == "" {
		return errors.New("CreateLaunchHook without a LaunchHookName")
	}
	return nil
}

// hooks are the hooks the properties ask for, with the settings the sweep
// gives tagged groups (ensureHooks).
func (p hookProperties) hooks() ([]discovery.Hook, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	hb, _ := p.heartbeat()
	return p.wanted(int32(hb)), nil
}
