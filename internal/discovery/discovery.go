// Package discovery finds the Auto Scaling groups chosen by a tag and puts
// node-drainer's lifecycle hooks on those that lack them, so that a node
// group created (or tagged) after the deployment is handled with no
// redeploy. It owns the hooks' settings: the same as the templates give the
// hooks they create on listed groups.
//
// A group is touched only while it carries the tag: the groups come from a
// tag-filtered describe and each is checked again for the tag (a filter is
// the server's reading, the check is ours); the role's IAM grant of
// autoscaling:PutLifecycleHook is conditioned on the same tag. A hook that
// exists with the right settings is left as it is; another tool's hook is
// never read for more than its name, never changed; a hook of our name is
// written only when its mark names this deployment alone (marks.go: one
// owner per hook).
//
// The groups a SAM deployment lists get their hooks the same way, from the
// stack's Custom::LifecycleHooks resource (EnsureNamed), which also removes
// them, and those of tagged groups, when the stack is deleted (Remove): a
// template with no Fn::ForEach, the same on every SAM CLI version.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// API is the part of Auto Scaling discovery uses.
type API interface {
	autoscaling.DescribeAutoScalingGroupsAPIClient
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
	PutLifecycleHook(ctx context.Context, in *autoscaling.PutLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error)
	DeleteLifecycleHook(ctx context.Context, in *autoscaling.DeleteLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error)
	// DescribeWarmPool lists the instances of a group's warm pool, which
	// DescribeAutoScalingGroups does not (Waiting).
	DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error)
	// RecordLifecycleActionHeartbeat keeps the actions waiting under a
	// hook whose timeout a put shortens (beatBeforeShortening).
	RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, opts ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
}

// Tag is the tag that selects groups, and the cluster whose groups it
// selects. Two deployments may share the tag (two clusters in one account
// and region): a group carrying it that names another cluster in its own
// tags, and not this one, is that cluster's, and is not selected — else
// each deployment would put its hooks on the other's groups, where no one
// owns them when their names differ, and every scale-in would wait out
// their timeout.
type Tag struct {
	Key, Value string
	// ClusterTagKey (kubernetes.io/cluster/<name>) and ClusterName (EKS's
	// eks:cluster-name) name this cluster; both empty: not looked at.
	ClusterTagKey, ClusterName string
}

func (t Tag) String() string { return t.Key + "=" + t.Value }

// On reports whether g carries the tag with its value and is not another
// cluster's (Elsewhere).
func (t Tag) On(g astypes.AutoScalingGroup) bool {
	return t.Carried(g) && t.Elsewhere(g) == ""
}

// Carried reports whether g carries the tag with its value.
func (t Tag) Carried(g astypes.AutoScalingGroup) bool {
	return t.Key != "" && slices.ContainsFunc(g.Tags, func(tag astypes.TagDescription) bool {
		return aws.ToString(tag.Key) == t.Key && aws.ToString(tag.Value) == t.Value
	})
}

// Elsewhere names the tag by which g is another cluster's ("" when none
// says so, or when g names this cluster too).
func (t Tag) Elsewhere(g astypes.AutoScalingGroup) string {
	if t.ClusterTagKey == "" && t.ClusterName == "" {
		return ""
	}
	tags := make(map[string]string, len(g.Tags))
	for _, tag := range g.Tags {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	for _, k := range []string{t.ClusterTagKey, ClusterTagPrefix + t.ClusterName} {
		if _, ours := tags[k]; ours && k != "" && k != ClusterTagPrefix {
			return ""
		}
	}
	if v, ok := tags[EKSClusterNameTag]; ok && t.ClusterName != "" && v == t.ClusterName {
		return ""
	}
	return OtherCluster(tags, t.ClusterTagKey, t.ClusterName)
}

// The tags that name a cluster on an instance or a group: Kubernetes' (EKS,
// kops, kubeadm with the AWS cloud provider; terraform-aws-eks puts it on
// its groups), and EKS managed node groups'.
const (
	ClusterTagPrefix  = "kubernetes.io/cluster/"
	EKSClusterNameTag = "eks:cluster-name"
)

// OtherCluster names the tag among tags by which they are another
// cluster's than the one clusterTagKey and clusterName name ("" when none
// says so): kubernetes.io/cluster/<name> other than clusterTagKey, or
// eks:cluster-name naming another cluster.
func OtherCluster(tags map[string]string, clusterTagKey, clusterName string) string {
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		switch {
		case strings.HasPrefix(k, ClusterTagPrefix) && k != clusterTagKey:
			return k
		case k == EKSClusterNameTag && clusterName != "" && v != clusterName:
			return k + "=" + v
		}
	}
	return ""
}

// Lifecycle transitions of the hooks.
const (
	Terminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	Launching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
)

// Hook is a lifecycle hook as node-drainer wants it on each group.
type Hook struct {
	Name             string
	Transition       string
	HeartbeatTimeout int32 // seconds
	DefaultResult    string
	// Owner is the deployment putting it, named in its mark (marks.go;
	// none: nothing is put). Replaces: a former name of that deployment
	// (its function renamed), whose mark it takes over.
	Owner, Replaces string
}

// Wanted are node-drainer's hooks as the templates make them: the
// terminate and the launch hook, each when asked for and named, with the
// heartbeat timeout given (seconds) and default result CONTINUE. The sweep's
// hooks on tagged groups and the stack's on listed groups are these.
func Wanted(terminate string, createTerminate bool, launch string, createLaunch bool, heartbeat int32) []Hook {
	var hooks []Hook
	if createTerminate && terminate != "" {
		hooks = append(hooks, Hook{Name: terminate, Transition: Terminating, HeartbeatTimeout: heartbeat, DefaultResult: "CONTINUE"})
	}
	if createLaunch && launch != "" {
		hooks = append(hooks, Hook{Name: launch, Transition: Launching, HeartbeatTimeout: heartbeat, DefaultResult: "CONTINUE"})
	}
	return hooks
}

// Tagged lists the groups carrying tag (every page of a describe filtered
// by it), each checked again for the tag, less those of another cluster
// (Tag.Elsewhere).
func Tagged(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, tag Tag) ([]astypes.AutoScalingGroup, error) {
	groups, _, err := tagged(ctx, api, tag)
	return groups, err
}

// tagged is Tagged, and says which groups carrying the tag it left as
// another cluster's ("<group>: <its tag naming the cluster>").
func tagged(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, tag Tag) (groups []astypes.AutoScalingGroup, elsewhere []string, err error) {
	if tag.Key == "" {
		return nil, nil, nil
	}
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, &autoscaling.DescribeAutoScalingGroupsInput{
		MaxRecords: aws.Int32(100),
		Filters:    []astypes.Filter{{Name: aws.String("tag:" + tag.Key), Values: []string{tag.Value}}},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("describing auto scaling groups tagged %s: %w", tag, err)
		}
		for _, g := range out.AutoScalingGroups {
			switch other := tag.Elsewhere(g); {
			case !tag.Carried(g):
			case other != "":
				elsewhere = append(elsewhere, aws.ToString(g.AutoScalingGroupName)+": "+other)
			default:
				groups = append(groups, g)
			}
		}
	}
	return groups, elsewhere, nil
}

// Carries reads the named group now and reports whether it carries tag and
// is not another cluster's (a group that does not exist does not).
func Carries(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, name string, tag Tag) (bool, error) {
	carries, _, err := Selects(ctx, api, name, tag)
	return carries, err
}

// Selects is Carries, and says, of a group carrying the tag that is another
// cluster's, by which of its tags (elsewhere; carries is false then).
func Selects(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, name string, tag Tag) (carries bool, elsewhere string, err error) {
	carries, elsewhere, _, err = SelectsGroup(ctx, api, name, tag)
	return carries, elsewhere, err
}

// SelectsGroup is Selects, and gives the group as read (its instances and
// their lifecycle states included; nil: not read, or not found), so that
// a caller needing it reads it once.
func SelectsGroup(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, name string, tag Tag) (carries bool, elsewhere string, group *astypes.AutoScalingGroup, err error) {
	if tag.Key == "" || name == "" {
		return false, "", nil, nil
	}
	out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return false, "", nil, fmt.Errorf("reading the tags of auto scaling group %s: %w", name, err)
	}
	for i, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) != name {
			continue
		}
		group = &out.AutoScalingGroups[i]
		if !tag.Carried(g) {
			continue
		}
		if other := tag.Elsewhere(g); other != "" {
			return false, other, group, nil
		}
		return true, "", group, nil
	}
	return false, "", group, nil
}

// Result is what Ensure found and did.
type Result struct {
	// Tagged are the groups carrying the tag, as described (instances
	// included): the sweep reads them from here, not again (nil: not read).
	Tagged []astypes.AutoScalingGroup
	Groups int      // tagged groups looked at
	Put    []string // "<group>/<hook>": hooks created, or corrected
	Failed []string // "<group>: <error>"
	// Elsewhere are the groups carrying the tag that name another cluster
	// ("<group>: <its tag naming it>"): another deployment's, left to it
	Elsewhere []string
	// NotOurs are the hooks of our names found that are not the
	// deployment's alone, left as they are, each with why (marks.go):
	// another deployment's, one no deployment marked, a shared mark from
	// before one owner per hook. EnsureNamed refuses a listed group with
	// the first two instead, where asked to.
	NotOurs []string
	refused []string // the first two, on a group where they refuse (ensureAll)
}

// Ensure puts each of hooks on every group carrying tag that lacks it, or
// whose hook of that name has other settings; a hook with the right
// settings is not written again. With dryRun it says what it would put and
// writes nothing. One group's failure does not stop the others (Failed).
// The error is the listing's: then nothing was done.
func Ensure(ctx context.Context, api API, tag Tag, hooks []Hook, dryRun bool) (Result, error) {
	var res Result
	if tag.Key == "" || len(hooks) == 0 {
		return res, nil
	}
	groups, elsewhere, err := tagged(ctx, api, tag)
	if err != nil {
		return res, err
	}
	res.Tagged, res.Groups, res.Elsewhere = groups, len(groups), elsewhere
	if res.Tagged == nil {
		res.Tagged = []astypes.AutoScalingGroup{} // read, none tagged
	}
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = aws.ToString(g.AutoScalingGroupName)
	}
	res.ensureAll(ctx, api, names, hooks, nowhere, dryRun)
	return res, nil
}

// nowhere refuses no group (ensureAll).
func nowhere(string) bool { return false }

// ensureAll puts the hooks on each group (ensureGroup), recording what it
// put, what it left (where refuse says so of the group, a hook another
// deployment or none put is its failure) and, one group's failure not
// stopping the others, what failed.
func (res *Result) ensureAll(ctx context.Context, api API, groups []string, hooks []Hook, refuse func(group string) bool, dryRun bool) {
	for _, name := range groups {
		put, left, err := ensureGroup(ctx, api, name, hooks, dryRun)
		for _, h := range put {
			res.Put = append(res.Put, name+"/"+h)
		}
		for _, l := range left {
			if l.refuse && refuse(name) {
				res.Failed, res.refused = append(res.Failed, name+": "+l.left), append(res.refused, l.left)
			} else {
				res.NotOurs = append(res.NotOurs, l.left)
			}
		}
		if err != nil {
			res.Failed = append(res.Failed, name+": "+err.Error())
		}
	}
}

// EnsureNamed puts hooks on each named group, as Ensure does on tagged ones
// (the groups a deployment lists: SAM's Custom::LifecycleHooks). A name
// that is no group is an error naming it, and then nothing is put
// anywhere: the deployment is wrong, not one group. So is a hook of our
// name that another deployment, or none, put (marks.go) on a listed group
// refuse says so of (the groups newly listed: a group the deployment had
// already is not refused, or the rollback of a failed update would fail
// as well; its hook is left and said): the error names it, the hook is
// left as it is, and nothing is put (each group read first, in a dry run).
func EnsureNamed(ctx context.Context, api API, groups []string, hooks []Hook, refuse func(group string) bool, dryRun bool) (Result, error) {
	var res Result
	if len(groups) == 0 || len(hooks) == 0 {
		return res, nil
	}
	found, err := existing(ctx, api, groups)
	if err != nil {
		return res, err
	}
	if missing := slices.DeleteFunc(slices.Clone(groups), func(g string) bool { return slices.Contains(found, g) }); len(missing) > 0 {
		return res, fmt.Errorf("no auto scaling group named %s", strings.Join(missing, ", "))
	}
	var first Result
	if first.ensureAll(ctx, api, groups, hooks, refuse, true); len(first.refused) > 0 {
		return res, errors.New(strings.Join(first.refused, "; "))
	}
	res.Groups = len(groups)
	res.ensureAll(ctx, api, groups, hooks, refuse, dryRun)
	return res, nil
}

// EnsureOn puts hooks on each of groups, read as existing by the caller (a
// tagged group's name), as Ensure does (a hook not ours is left and said).
func EnsureOn(ctx context.Context, api API, groups []string, hooks []Hook, dryRun bool) Result {
	res := Result{Groups: len(groups)}
	if len(hooks) > 0 {
		res.ensureAll(ctx, api, groups, hooks, nowhere, dryRun)
	}
	return res
}

// existing lists which of the named groups exist.
func existing(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, names []string) ([]string, error) {
	var found []string
	err := describeNamed(ctx, api, names, func(g astypes.AutoScalingGroup) { found = append(found, aws.ToString(g.AutoScalingGroupName)) })
	return found, err
}

// Waiting reads the named groups now and lists, of each, the instances
// waiting in a lifecycle action ("<instance> in <state>": Pending:Wait,
// Terminating:Wait), whatever the hook: an action pending that deleting a
// hook of the group may complete (rule 17). A group with a warm pool has
// its pool read too (DescribeWarmPool: DescribeAutoScalingGroups does not
// list it), whose instances wait in Warmed:Pending:Wait (launched into the
// pool, or scaled in into it with ReuseOnScaleIn, under the terminate
// hook) and Warmed:Terminating:Wait. A group that does not exist has none.
func Waiting(ctx context.Context, api API, groups []string) (map[string][]string, error) {
	waiting := map[string][]string{}
	var pooled []string
	add := func(name string, ins []astypes.Instance) {
		for _, in := range ins {
			if strings.HasSuffix(string(in.LifecycleState), ":Wait") {
				waiting[name] = append(waiting[name], aws.ToString(in.InstanceId)+" in "+string(in.LifecycleState))
			}
		}
	}
	err := describeNamed(ctx, api, groups, func(g astypes.AutoScalingGroup) {
		name := aws.ToString(g.AutoScalingGroupName)
		if !slices.Contains(groups, name) {
			return
		}
		add(name, g.Instances)
		if g.WarmPoolConfiguration != nil {
			pooled = append(pooled, name)
		}
	})
	for _, name := range pooled {
		if err != nil {
			break
		}
		var pool []astypes.Instance
		pool, err = warmPool(ctx, api, name)
		add(name, pool)
	}
	if err != nil {
		return nil, err
	}
	return waiting, nil
}

// warmPool lists the instances of group's warm pool, every page.
func warmPool(ctx context.Context, api API, group string) ([]astypes.Instance, error) {
	var pool []astypes.Instance
	in := &autoscaling.DescribeWarmPoolInput{AutoScalingGroupName: aws.String(group), MaxRecords: aws.Int32(50)}
	for {
		out, err := api.DescribeWarmPool(ctx, in)
		if isGone(err) {
			return pool, nil // the group, or its pool, deleted since
		}
		if err != nil {
			return nil, fmt.Errorf("describing the warm pool of %s: %w", group, err)
		}
		pool = append(pool, out.Instances...)
		if aws.ToString(out.NextToken) == "" {
			return pool, nil
		}
		in.NextToken = out.NextToken
	}
}

// describeNamed describes the named groups, every page (the describe
// takes 50 names a call), and gives each group to each.
func describeNamed(ctx context.Context, api autoscaling.DescribeAutoScalingGroupsAPIClient, names []string, each func(astypes.AutoScalingGroup)) error {
	for batch := range slices.Chunk(names, 50) {
		p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: batch})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("describing auto scaling groups %s: %w", strings.Join(batch, ", "), err)
			}
			for _, g := range out.AutoScalingGroups {
				each(g)
			}
		}
	}
	return nil
}

// ensureGroup puts the hooks group lacks, or whose settings are not the
// ones wanted, of those the deployment owns (Hook.plan); it returns their
// names, and the hooks it left (not the deployment's alone).
func ensureGroup(ctx context.Context, api API, group string, hooks []Hook, dryRun bool) (put []string, left []step, err error) {
	names := make([]string, len(hooks))
	for i, h := range hooks {
		if h.Owner == "" {
			return nil, nil, fmt.Errorf("lifecycle hook %s not put: no deployment to mark it with (the function's name unknown)", h.Name)
		}
		names[i] = h.Name
	}
	found, err := describeHooks(ctx, api, group, names)
	if err != nil {
		return nil, nil, err
	}
	for _, want := range hooks {
		var cur *astypes.LifecycleHook
		if i := slices.IndexFunc(found, func(h astypes.LifecycleHook) bool { return aws.ToString(h.LifecycleHookName) == want.Name }); i >= 0 {
			cur = &found[i]
		}
		st := want.plan(cur, group)
		if st.left != "" {
			left = append(left, st)
		}
		if st.in == nil {
			continue
		}
		if err := fits(st.in); err != nil {
			return put, left, err
		}
		if !dryRun {
			if cur != nil && aws.ToInt32(st.in.HeartbeatTimeout) < aws.ToInt32(cur.HeartbeatTimeout) {
				beatBeforeShortening(ctx, api, group, want.Name)
			}
			if _, err := api.PutLifecycleHook(ctx, st.in); err != nil {
				return put, left, fmt.Errorf("putting lifecycle hook %s: %w", want.Name, err)
			}
		}
		put = append(put, want.Name)
	}
	return put, left, nil
}

// matches reports whether an existing hook has the settings wanted.
func matches(h astypes.LifecycleHook, want Hook) bool {
	return aws.ToString(h.LifecycleTransition) == want.Transition &&
		aws.ToInt32(h.HeartbeatTimeout) == want.HeartbeatTimeout &&
		strings.EqualFold(aws.ToString(h.DefaultResult), want.DefaultResult)
}
